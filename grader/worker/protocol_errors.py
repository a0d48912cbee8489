"""What crossing the boundary between the harness and a worker raises: a message that breaks the protocol,
and a value that may not cross."""

from __future__ import annotations

from grader.core.errors import ShardlabError


class ProtocolError(ShardlabError, ValueError):
    """A message that does not follow the protocol (from a worker: broken or forged)."""


class UnsupportedValue(ShardlabError, TypeError):
    """A value of a type that cannot cross the boundary."""


def need(condition: bool, what: str) -> None:
    """Raise ProtocolError(what) unless `condition` holds: how everything read from the other side is checked."""
    if not condition:
        raise ProtocolError(what)


def need_int(value, what: str, low: int = 0) -> int:
    """`value`, which must be an int (not a bool) of at least `low`."""
    need(type(value) is int and value >= low, f"{what} must be an integer >= {low}, got {value!r}")
    return value
