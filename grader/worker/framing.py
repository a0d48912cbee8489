"""The protocol's framing: length-prefixed JSON messages, each bounded before it is read and before it is
parsed.

A message's size is checked on its header, before it is read; a `Budget` bounds all the bytes one sender
may send; its JSON outside strings (the objects parsing builds) and how deep its brackets nest (counted,
not recursed into) are checked before it is parsed. Whatever fails while reading or parsing a message, a
RecursionError or MemoryError included, is a `ProtocolError`.
"""

from __future__ import annotations

import json
import math
import os
import select
import struct
import time
from dataclasses import dataclass

import numpy as np

from grader.worker.message_limits import (
    MAX_JSON_DEPTH,
    MAX_MESSAGE_BYTES,
    MAX_STRUCTURE_BYTES,
    MAX_WORKER_BYTES,
)
from grader.worker.protocol_errors import ProtocolError, need

HEADER = struct.Struct(">Q")


@dataclass
class Budget:
    """The bytes one sender may still send, its messages' headers included (one per worker: a worker that
    spends it is discarded, and the next starts with a budget of its own)."""

    total: int = MAX_WORKER_BYTES
    spent: int = 0

    def spend(self, count: int) -> None:
        self.spent += count
        if self.spent > self.total:
            raise ProtocolError(
                f"the worker sent more than the {self.total} bytes it may send in all"
            )


def send(fd: int, message: dict, deadline: float = math.inf) -> None:
    """Write one message. On a non-blocking fd, wait for room until `deadline` (a time.monotonic()), then
    raise TimeoutError: a reader that stopped reading costs the writer no more than that."""
    data = json.dumps(message, separators=(",", ":")).encode()
    data = memoryview(HEADER.pack(len(data)) + data)
    while data:
        try:
            data = data[os.write(fd, data) :]
        except BlockingIOError:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError("the other side does not read its messages") from None
            select.select([], [fd], [], min(left, 0.5))


def read_exactly(fd: int, count: int) -> bytes:
    chunks, left = [], count
    while left:
        chunk = os.read(fd, min(left, 1 << 20))
        if not chunk:
            raise EOFError("the other side closed the connection")
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


def receive(fd: int, limit: int = MAX_MESSAGE_BYTES, budget: Budget | None = None) -> dict:
    """One message, its size checked on its header before it is read (and spent from `budget`)."""
    (size,) = HEADER.unpack(read_exactly(fd, HEADER.size))
    if size > limit:
        raise ProtocolError(f"a message of {size} bytes is larger than the limit of {limit} bytes")
    if budget is not None:
        budget.spend(HEADER.size + size)
    return parse(read_exactly(fd, size))


_NOT_BRACKETS = bytes(b for b in range(256) if b not in b"[]{}")


def parse(data: bytes) -> dict:
    """A message's JSON object, checked before it is parsed: ASCII (as json.dumps writes it), with at most
    MAX_STRUCTURE_BYTES outside strings and brackets nested at most MAX_JSON_DEPTH deep, so that parsing
    builds a bounded number of objects and recurses a bounded depth. (JSON that is not valid may be
    measured wrong past its first error, where parsing stops.)"""
    need(data.isascii(), "a message is not ASCII JSON")
    # Without its escapes (pairs read left to right, as JSON reads them), every quote opens or closes a string.
    plain = data.replace(b"\\\\", b"").replace(b'\\"', b"")
    quotes = plain.count(b'"')  # a string's quotes count as its structure
    outside = b"".join(plain.split(b'"')[0::2]) if quotes <= MAX_STRUCTURE_BYTES else b""
    need(
        quotes + len(outside) <= MAX_STRUCTURE_BYTES,
        f"a message has more than {MAX_STRUCTURE_BYTES} bytes of JSON outside strings (the limit)",
    )
    brackets = np.frombuffer(outside.translate(None, _NOT_BRACKETS), np.uint8)
    steps = np.where((brackets == ord("[")) | (brackets == ord("{")), 1, -1)
    need(
        np.cumsum(steps).max(initial=0) <= MAX_JSON_DEPTH,
        f"a message is nested more than {MAX_JSON_DEPTH} levels deep",
    )
    try:
        message = json.loads(data.decode("ascii"))
    except (ValueError, RecursionError, MemoryError) as exc:
        raise ProtocolError(
            f"a message is not JSON: {type(exc).__name__}: {str(exc)[:200]}"
        ) from None
    need(isinstance(message, dict), "a message must be a JSON object")
    return message
