"""The codec's table: each tagged kind of value once, with its tag, which values it holds, how it writes
one's tree and how it reads one back (every check on an untrusted tree is here, in its kind's reader)."""

from __future__ import annotations

import base64
import functools
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from grader.worker.codec_layouts import (
    decode_mesh,
    decode_sharding,
    decode_spec,
    device,
    encode_mesh,
    encode_sharding,
    encode_spec,
    named_fields,
)
from grader.worker.message_limits import DTYPES
from grader.worker.protocol_errors import ProtocolError, UnsupportedValue, need, need_int
from grader.worker.slots import Slot


class Coding:
    """What a kind's encoder or decoder may ask of the codec (grader.worker.codec): code a part of the
    value one level down, and send or resolve a function reference."""

    def part(self, value, *, references: bool = True):
        raise NotImplementedError

    def reference(self, value):
        """Encoding: the reference sent for a function. Decoding: the stand-in for the reference that
        value() reads from the tree (once references are known to be allowed there)."""
        raise NotImplementedError


@dataclass(frozen=True)
class Kind:
    tag: str
    holds: Callable[[Any], bool]  # whether a value is of this kind (kinds are tried in order)
    encode: Callable[[Any, Coding], dict]  # the tree's fields beside its tag
    decode: Callable[[dict, Coding], Any]  # the value, from a tree with this tag


def unsupported(value) -> UnsupportedValue:
    return UnsupportedValue(
        f"a value of type {type(value).__module__}.{type(value).__qualname__} (what can be sent: numbers, strings, "
        "bools, None, tuples, lists, dicts, slices, dtypes, PartitionSpecs, meshes, devices, NumPy and jax arrays)"
    )


# --- containers ------------------------------------------------------------------------------------


def _items(tag: str):
    def decode(tree: dict, coding: Coding):
        need(isinstance(tree.get("v"), list), f"a {tag} needs items")
        return [coding.part(v) for v in tree["v"]]

    return decode


def _decode_dict(tree: dict, coding: Coding) -> dict:
    need(
        isinstance(tree.get("v"), list)
        and all(isinstance(p, list) and len(p) == 2 for p in tree["v"]),
        "a dict needs [key, value] pairs",
    )
    out = {}
    for k, v in tree["v"]:
        key = coding.part(k)
        need(
            key is None or isinstance(key, (str, int, float, bool, tuple)),
            "a dict key must be plain data",
        )
        out[key] = coding.part(v)
    return out


def _decode_slice(tree: dict, coding: Coding) -> slice:
    need(isinstance(tree.get("v"), list) and len(tree["v"]) == 3, "a slice needs start, stop, step")
    parts = [coding.part(v) for v in tree["v"]]
    need(
        all(p is None or type(p) is int for p in parts), "a slice's parts must be integers or None"
    )
    return slice(*parts)


def _decode_float(tree: dict, coding: Coding) -> float:
    need(tree.get("v") in ("nan", "inf", "-inf"), "a bad float")
    return float(tree["v"])


def _decode_function(tree: dict, coding: Coding):
    return coding.reference(lambda: need_int(tree.get("id"), "a function reference"))


# --- dtypes and arrays -------------------------------------------------------------------------------


def _dtype(name) -> np.dtype:
    need(isinstance(name, str) and name in DTYPES, f"unknown or forbidden dtype {name!r}")
    import jax.numpy as jnp

    return np.dtype(jnp.dtype(name))


def _is_dtype(value) -> bool:
    return isinstance(value, np.dtype) or (
        isinstance(value, type) and (issubclass(value, np.generic) or hasattr(value, "dtype"))
    )


def _dtype_name(value) -> str:
    if isinstance(value, np.dtype) or issubclass(value, np.generic):
        return np.dtype(value).name
    return np.dtype(value.dtype).name  # jnp.float32 and friends


def _array_fields(value) -> dict:
    value = np.asarray(value)  # tobytes() is C order; ascontiguousarray would make a scalar 1-D
    if value.dtype.name not in DTYPES:
        raise UnsupportedValue(
            f"an array of dtype {value.dtype} (only numbers and bools can be sent)"
        )
    return {
        "dtype": value.dtype.name,
        "shape": list(value.shape),
        "data": base64.b64encode(value.tobytes()).decode(),
    }


def _array(tree: dict) -> np.ndarray:
    dtype = _dtype(tree.get("dtype"))
    shape = tree.get("shape")
    need(isinstance(shape, list) and len(shape) <= 32, "an array's shape must be a list")
    shape = tuple(need_int(d, "an array dimension") for d in shape)
    data = tree.get("data")
    need(isinstance(data, str), "an array's data must be base64 text")
    try:
        raw = base64.b64decode(data, validate=True)
    except ValueError:
        raise ProtocolError("an array's data is not valid base64") from None
    size = math.prod(shape) * dtype.itemsize
    need(
        len(raw) == size,
        f"an array of shape {shape} and dtype {dtype} needs {size} bytes, got {len(raw)}",
    )
    return np.frombuffer(raw, dtype=dtype).reshape(shape).copy()


def _decode_scalar(tree: dict, coding: Coding):
    value = _array(tree)
    need(value.shape == (), "a scalar must have shape ()")
    return value[()]


def _encode_jax_array(value, coding: Coding) -> dict:
    if not value.is_fully_addressable:
        raise UnsupportedValue("an array that is not fully addressable from this process")
    return {"sharding": encode_sharding(value.sharding), **_array_fields(np.asarray(value))}


def _decode_jax_array(tree: dict, coding: Coding):
    import jax

    value, sharding = _array(tree), decode_sharding(tree.get("sharding"))
    try:
        sharding.shard_shape(value.shape)
    except ValueError as exc:
        raise ProtocolError(
            f"an array of shape {value.shape} cannot have that sharding: {exc}"
        ) from None
    return jax.device_put(value, sharding)


def _encode_abstract(value, coding: Coding) -> dict:
    sharding = value.sharding
    return {
        "shape": [int(d) for d in value.shape],
        "dtype": np.dtype(value.dtype).name,
        "sharding": None if sharding is None else encode_sharding(sharding),
    }


def _decode_abstract(tree: dict, coding: Coding):
    import jax

    shape = tuple(need_int(d, "a dimension") for d in tree.get("shape", []))
    sharding = None if tree.get("sharding") is None else decode_sharding(tree["sharding"])
    return jax.ShapeDtypeStruct(shape, _dtype(tree.get("dtype")), sharding=sharding)


# --- the table -----------------------------------------------------------------------------------------


def _exactly(cls: type) -> Callable[[Any], bool]:
    return lambda value: type(value) is cls


@functools.cache
def kinds() -> tuple[Kind, ...]:
    """Every tagged kind, in the order encoding tries them (built on first use: it imports jax)."""
    import jax
    from jax.sharding import Mesh, NamedSharding, PartitionSpec

    return (
        Kind("float", _exactly(float), lambda v, c: {"v": repr(v)}, _decode_float),  # not finite
        Kind(
            "slot",
            lambda v: isinstance(v, Slot),
            lambda v, c: {"i": v.index},
            lambda t, c: Slot(need_int(t.get("i"), "a slot")),
        ),
        Kind(
            "tuple",
            _exactly(tuple),
            lambda v, c: {"v": [c.part(x) for x in v]},
            lambda t, c: tuple(_items("tuple")(t, c)),
        ),
        Kind("list", _exactly(list), lambda v, c: {"v": [c.part(x) for x in v]}, _items("list")),
        Kind(
            "dict",
            _exactly(dict),
            lambda v, c: {"v": [[c.part(k), c.part(x)] for k, x in v.items()]},
            _decode_dict,
        ),
        Kind(
            "slice",
            lambda v: isinstance(v, slice),  # its parts are never function references
            lambda v, c: {"v": [c.part(p, references=False) for p in (v.start, v.stop, v.step)]},
            _decode_slice,
        ),
        Kind(
            "spec",
            lambda v: isinstance(v, PartitionSpec),
            lambda v, c: encode_spec(v),
            lambda t, c: decode_spec(t),
        ),
        Kind(
            "mesh",
            lambda v: isinstance(v, Mesh),
            lambda v, c: encode_mesh(v),
            lambda t, c: decode_mesh(t),
        ),
        Kind(
            "named_sharding",
            lambda v: isinstance(v, NamedSharding),
            lambda v, c: named_fields(v),
            lambda t, c: decode_sharding(
                {"kind": "named", "mesh": t.get("mesh"), "spec": t.get("spec")}
            ),
        ),
        Kind(
            "device",
            lambda v: isinstance(v, jax.Device),
            lambda v, c: {"id": int(v.id)},
            lambda t, c: device(t.get("id")),
        ),
        Kind(
            "abstract",
            lambda v: isinstance(v, jax.ShapeDtypeStruct),
            _encode_abstract,
            _decode_abstract,
        ),
        Kind("jax", lambda v: isinstance(v, jax.Array), _encode_jax_array, _decode_jax_array),
        Kind(
            "ndarray",
            lambda v: isinstance(v, np.ndarray),
            lambda v, c: _array_fields(v),
            lambda t, c: _array(t),
        ),
        Kind(
            "scalar",
            lambda v: isinstance(v, np.generic),
            lambda v, c: _array_fields(v),
            _decode_scalar,
        ),
        Kind(
            "dtype", _is_dtype, lambda v, c: {"v": _dtype_name(v)}, lambda t, c: _dtype(t.get("v"))
        ),
        Kind(
            "function",
            lambda v: callable(v) and not isinstance(v, type),
            lambda v, c: {"id": c.reference(v)},
            _decode_function,
        ),
    )


@functools.cache
def kinds_by_tag() -> dict[str, Kind]:
    return {kind.tag: kind for kind in kinds()}
