"""The line protocol by which a harness process tells the grading process what happened, test by test.

Each event is one JSON line on a pipe whose descriptor the harness finds in its environment, and one of
the kinds below, told apart by its "e" field. Only trusted code runs in the harness (student code runs in
workers, which never see this pipe), so the lines need no signature.
"""

from __future__ import annotations

import json
import os
from typing import Any

import msgspec

EVENTS_FD = "SHARDLAB_EVENTS_FD"


class _Event(msgspec.Struct, frozen=True, forbid_unknown_fields=True, tag_field="e"):
    pass


class Collected(_Event, tag="collected"):
    """The session's tests, in the order they will run: each a TestMeta.to_dict()."""

    tests: list[dict[str, Any]]


class Started(_Event, tag="start"):
    """A test's setup begins: its clock starts."""

    nodeid: str


class Running(_Event, tag="running"):
    """The test has the timing lock: waiting for it did not count, its clock starts again."""

    nodeid: str


class Finished(_Event, tag="result"):
    """A test's result: a TestResult.to_dict()."""

    result: dict[str, Any]


class CacheCounts(_Event, tag="compile_cache"):
    """The compile cache's hits and misses so far."""

    hits: int
    misses: int


Event = Collected | Started | Running | Finished | CacheCounts


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

    def send(self, event: Event) -> None:
        if self.fd is None:
            return
        # json, not msgspec's writer, so that a result's NaN figures travel as they did (msgspec writes null).
        data = json.dumps(msgspec.to_builtins(event, enc_hook=str)).encode() + b"\n"
        while data:  # a pipe may take a long line in pieces
            data = data[os.write(self.fd, data) :]


def parse(raw: bytes) -> list[Event]:
    """The events of whole lines; one that is not an event is the grader's own bug (msgspec.ValidationError)."""
    return [msgspec.convert(json.loads(line), Event) for line in raw.split(b"\n") if line.strip()]
