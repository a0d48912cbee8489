"""The line protocol by which a grading child process tells its parent what happened, test by test.

Each event is one JSON line followed by a tab and an HMAC of the line. The key reaches the child
through a pipe that the plugin reads and closes before any student code runs, so a submission that
writes to the events file descriptor cannot make its lines pass for the grader's.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
from typing import Any

EVENTS_FD = "SHARDLAB_EVENTS_FD"
KEY_FD = "SHARDLAB_KEY_FD"


def sign(key: bytes, line: bytes) -> bytes:
    return hmac.new(key, line, hashlib.sha256).hexdigest().encode()


class EventStream:
    """The child's end. Without the environment variables (a plain pytest run) it does nothing."""

    def __init__(self, fd: int | None = None, key: bytes = b""):
        self.fd, self.key = fd, key

    @classmethod
    def from_environment(cls) -> EventStream:
        fd, key_fd = os.environ.pop(EVENTS_FD, None), os.environ.pop(KEY_FD, None)
        if fd is None or key_fd is None:
            return cls()
        with os.fdopen(int(key_fd), "rb") as pipe:
            key = pipe.read()
        return cls(int(fd), key)

    @property
    def active(self) -> bool:
        return self.fd is not None

    def send(self, event: dict[str, Any]) -> None:
        if self.fd is None:
            return
        line = json.dumps(event, default=str).encode()
        data = line + b"\t" + sign(self.key, line) + b"\n"
        while data:   # a pipe may take a long line in pieces
            data = data[os.write(self.fd, data):]


def parse(key: bytes, raw: bytes) -> tuple[list[dict], int]:
    """The verified events in `raw` and how many lines were not the grader's (forged or garbled)."""
    events, rejected = [], 0
    for line in raw.split(b"\n"):
        if not line:
            continue
        body, _, mac = line.rpartition(b"\t")
        if body and hmac.compare_digest(mac, sign(key, body)):
            events.append(json.loads(body))
        else:
            rejected += 1
    return events, rejected
