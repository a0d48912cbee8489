"""The value codec: values as tagged JSON trees, and back.

Numbers, strings, bools and None cross as themselves; every other value as a tree {"t": its kind's tag, ...}
made and read by its kind in the table `kinds()` (grader.worker.codec_kinds): non-finite floats, tuples,
lists, dicts, slices, Slots, dtypes, PartitionSpecs, meshes, shardings, devices, abstract arrays, NumPy
arrays and scalars, jax Arrays (their global value and their layout), and references to functions.

Decoding rebuilds plain Python, NumPy and jax objects and checks everything it is given: the harness
decodes what an untrusted worker sent, so a malformed tree raises `ProtocolError` and never builds anything
else. A value nested more than MAX_DEPTH levels deep is refused either way.
"""

from __future__ import annotations

import math
from typing import Any

from grader.worker.codec_kinds import Coding, kinds, kinds_by_tag, unsupported
from grader.worker.message_limits import MAX_DEPTH
from grader.worker.protocol_errors import ProtocolError, UnsupportedValue, need


def _is_plain(value) -> bool:
    """Crosses as itself (a subclass of int or float does not: a bool is one, np.float64 another)."""
    return (
        value is None
        or isinstance(value, (bool, str))
        or type(value) is int
        or (type(value) is float and math.isfinite(value))
    )


class _Encoding(Coding):
    def __init__(self, depth: int, functions: list | None):
        self.depth, self.functions = depth, functions

    def part(self, value, *, references: bool = True):
        return encode(value, depth=self.depth + 1, functions=self.functions if references else None)

    def reference(self, function) -> int:
        if self.functions is None:
            raise unsupported(function)
        self.functions.append(function)
        return len(self.functions) - 1


def encode(value: Any, *, depth: int = 0, functions: list | None = None) -> Any:
    """A JSON-able tree for `value`; raises UnsupportedValue for anything that may not cross.

    With `functions` (a list the caller keeps), a function is sent as a reference: its index in that
    list, which the other side can only ask this side to run."""
    if depth > MAX_DEPTH:
        raise UnsupportedValue(f"a value nested more than {MAX_DEPTH} levels deep")
    if _is_plain(value):
        return value
    for kind in kinds():  # in order: the first kind a value is of encodes it
        if kind.holds(value):
            return {"t": kind.tag, **kind.encode(value, _Encoding(depth, functions))}
    raise unsupported(value)


class _Decoding(Coding):
    def __init__(self, depth: int, functions):
        self.depth, self.functions = depth, functions

    def part(self, tree, *, references: bool = True):
        return _decode(tree, depth=self.depth + 1, functions=self.functions)

    def reference(self, read_index):
        need(self.functions is not None, "a function reference where none may be")
        return self.functions(read_index())


def decode(tree: Any, *, functions=None) -> Any:
    """The value `tree` encodes; raises ProtocolError for anything malformed. `functions(i)` gives the
    stand-in for the other side's i-th function reference (without it, a reference is refused)."""
    try:
        return _decode(tree, depth=0, functions=functions)
    except ProtocolError:
        raise
    except Exception as exc:  # jax or NumPy refusing what it was handed: malformed all the same
        raise ProtocolError(
            f"a value could not be decoded: {type(exc).__name__}: {str(exc)[:300]}"
        ) from None


def _decode(tree: Any, *, depth: int, functions) -> Any:
    need(depth <= MAX_DEPTH, f"a value nested more than {MAX_DEPTH} levels deep")
    if tree is None or isinstance(tree, (bool, str, int, float)):
        return tree
    need(
        isinstance(tree, dict) and isinstance(tree.get("t"), str),
        f"not an encoded value: {str(tree)[:80]}",
    )
    kind = kinds_by_tag().get(tree["t"])
    need(kind is not None, f"unknown value tag {tree['t']!r}")
    return kind.decode(tree, _Decoding(depth, functions))
