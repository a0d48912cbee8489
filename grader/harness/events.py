"""The line protocol by which a harness process tells the grading process what happened, test by test.

Each event is one JSON line on a pipe whose descriptor the harness finds in its environment. Only
trusted code runs in the harness (student code runs in workers, which never see this pipe), so the
lines need no signature.
"""

from __future__ import annotations

import json
import os
from typing import Any

EVENTS_FD = "SHARDLAB_EVENTS_FD"


class EventStream:
    """The harness's end. Without the environment variable (a plain pytest run) it does nothing."""

    def __init__(self, fd: int | None = None):
        self.fd = fd

    @classmethod
    def from_environment(cls) -> EventStream:
        fd = os.environ.pop(EVENTS_FD, None)
        return cls(None if fd is None else int(fd))

    @property
    def active(self) -> bool:
        return self.fd is not None

    def send(self, event: dict[str, Any]) -> None:
        if self.fd is None:
            return
        data = json.dumps(event, default=str).encode() + b"\n"
        while data:  # a pipe may take a long line in pieces
            data = data[os.write(self.fd, data) :]


def parse(raw: bytes) -> list[dict]:
    return [json.loads(line) for line in raw.split(b"\n") if line.strip()]
