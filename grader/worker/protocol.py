"""What crosses between the harness and a worker: typed plain data, never objects.

Messages are length-prefixed JSON. Values are encoded as tagged trees: numbers, strings, bools, None,
tuples, lists, dicts, slices, dtypes, PartitionSpecs, meshes, devices, NumPy arrays and jax Arrays
(their global value and their layout), and, in an export request, abstract arrays (shape, dtype,
sharding) that the worker traces with. Decoding rebuilds plain Python, NumPy and jax objects and
checks everything it is given: the harness decodes what an untrusted worker sent, so a malformed
tree raises `ProtocolError` and never builds anything else.

A message is bounded before it is decoded: its size (checked on its header, before it is read), its
JSON outside strings (the objects parsing builds) and how deep its brackets nest (counted, not
recursed into); a `Budget` bounds all the bytes one sender may send. Whatever fails while reading or
decoding a message, a RecursionError or MemoryError included, is a `ProtocolError`.
"""

from __future__ import annotations

import base64
import json
import math
import os
import select
import struct
import time
from dataclasses import dataclass
from typing import Any

import numpy as np

from grader.core.errors import ShardlabError

# Measured over a whole reference grading (jax 0.10.2, every exercise, both partitioners): the largest
# message either way is 32 KB, with under 1 KB of JSON outside strings, nested 16 deep; a worker sends
# 2.8 MB in all over the whole course. The bounds leave room for honest solutions that send more.
MAX_MESSAGE_BYTES = 16 << 20        # one message; a larger one is refused on its header, never read
MAX_STRUCTURE_BYTES = 1 << 20       # its JSON outside strings: bounds the objects parsing builds
MAX_DEPTH = 64                      # levels of an encoded value
MAX_JSON_DEPTH = 3 * MAX_DEPTH + 8  # brackets nested: an encoded level takes at most 3 (a dict's pairs)
MAX_WORKER_BYTES = 64 << 20         # all the messages one worker may send the harness in its life
_HEADER = struct.Struct(">Q")

# Array element types that may cross: numbers and bools (no objects, no strings, no structured types).
DTYPES = frozenset({"bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64",
                    "float16", "bfloat16", "float32", "float64", "complex64", "complex128"})


class ProtocolError(ShardlabError, ValueError):
    """A message that does not follow the protocol (from a worker: broken or forged)."""


@dataclass
class Budget:
    """The bytes one sender may still send, its messages' headers included (one per worker: a worker that
    spends it is discarded, and the next starts with a budget of its own)."""
    total: int = MAX_WORKER_BYTES
    spent: int = 0

    def spend(self, count: int) -> None:
        self.spent += count
        if self.spent > self.total:
            raise ProtocolError(f"the worker sent more than the {self.total} bytes it may send in all")


class UnsupportedValue(ShardlabError, TypeError):
    """A value of a type that cannot cross the boundary."""


@dataclass(frozen=True)
class Slot:
    """The place of the i-th array in a traced call's arguments or results."""
    index: int


def map_leaves(tree, is_leaf, replacement):
    """`tree` (tuples, lists, dicts) with each leaf for which is_leaf holds swapped by replacement(leaf)."""
    if is_leaf(tree):
        return replacement(tree)
    if type(tree) in (tuple, list):
        return type(tree)(map_leaves(v, is_leaf, replacement) for v in tree)
    if type(tree) is dict:
        return {k: map_leaves(v, is_leaf, replacement) for k, v in tree.items()}
    return tree


# --- framing -------------------------------------------------------------------------------------

def send(fd: int, message: dict, deadline: float = math.inf) -> None:
    """Write one message. On a non-blocking fd, wait for room until `deadline` (a time.monotonic()), then
    raise TimeoutError: a reader that stopped reading costs the writer no more than that."""
    data = json.dumps(message, separators=(",", ":")).encode()
    data = memoryview(_HEADER.pack(len(data)) + data)
    while data:
        try:
            data = data[os.write(fd, data):]
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
    (size,) = _HEADER.unpack(read_exactly(fd, _HEADER.size))
    if size > limit:
        raise ProtocolError(f"a message of {size} bytes is larger than the limit of {limit} bytes")
    if budget is not None:
        budget.spend(_HEADER.size + size)
    return parse(read_exactly(fd, size))


_NOT_BRACKETS = bytes(b for b in range(256) if b not in b"[]{}")


def parse(data: bytes) -> dict:
    """A message's JSON object, checked before it is parsed: ASCII (as json.dumps writes it), with at most
    MAX_STRUCTURE_BYTES outside strings and brackets nested at most MAX_JSON_DEPTH deep, so that parsing
    builds a bounded number of objects and recurses a bounded depth. (JSON that is not valid may be
    measured wrong past its first error, where parsing stops.)"""
    _need(data.isascii(), "a message is not ASCII JSON")
    # Without its escapes (pairs read left to right, as JSON reads them), every quote opens or closes a string.
    plain = data.replace(b"\\\\", b"").replace(b'\\"', b"")
    quotes = plain.count(b'"')   # a string's quotes count as its structure
    outside = b"".join(plain.split(b'"')[0::2]) if quotes <= MAX_STRUCTURE_BYTES else b""
    _need(quotes + len(outside) <= MAX_STRUCTURE_BYTES,
          f"a message has more than {MAX_STRUCTURE_BYTES} bytes of JSON outside strings (the limit)")
    brackets = np.frombuffer(outside.translate(None, _NOT_BRACKETS), np.uint8)
    steps = np.where((brackets == ord("[")) | (brackets == ord("{")), 1, -1)
    _need(np.cumsum(steps).max(initial=0) <= MAX_JSON_DEPTH,
          f"a message is nested more than {MAX_JSON_DEPTH} levels deep")
    try:
        message = json.loads(data.decode("ascii"))
    except (ValueError, RecursionError, MemoryError) as exc:
        raise ProtocolError(f"a message is not JSON: {type(exc).__name__}: {str(exc)[:200]}") from None
    _need(isinstance(message, dict), "a message must be a JSON object")
    return message


# --- encoding --------------------------------------------------------------------------------------

def _bytes(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def _float(value: float):
    return value if math.isfinite(value) else {"t": "float", "v": repr(value)}


def encode_mesh(mesh) -> dict:
    return {"t": "mesh", "shape": list(mesh.devices.shape), "devices": [int(d.id) for d in mesh.devices.flat],
            "names": [str(n) for n in mesh.axis_names], "types": [t.name for t in mesh.axis_types]}


def encode_spec(spec) -> dict:
    entries = []
    for entry in spec:
        if entry is None or isinstance(entry, str):
            entries.append(entry)
        elif isinstance(entry, tuple) and all(isinstance(e, str) for e in entry):
            entries.append(list(entry))
        else:
            raise UnsupportedValue(f"a PartitionSpec entry {entry!r} (expected None, an axis name or a tuple of them)")
    return {"t": "spec", "v": entries}


def encode_sharding(sharding) -> dict:
    from jax.sharding import NamedSharding, SingleDeviceSharding

    if isinstance(sharding, NamedSharding):
        return {"kind": "named", "mesh": encode_mesh(sharding.mesh), "spec": encode_spec(sharding.spec)}
    if isinstance(sharding, SingleDeviceSharding):
        return {"kind": "single", "device": int(next(iter(sharding.device_set)).id)}
    raise UnsupportedValue(f"an array with a {type(sharding).__name__} (expected a NamedSharding or one device)")


def _encode_array_data(value: np.ndarray) -> dict:
    value = np.asarray(value)   # tobytes() is C order; ascontiguousarray would make a scalar 1-D
    if value.dtype.name not in DTYPES:
        raise UnsupportedValue(f"an array of dtype {value.dtype} (only numbers and bools can be sent)")
    return {"dtype": value.dtype.name, "shape": list(value.shape), "data": _bytes(value.tobytes())}


def encode(value: Any, *, depth: int = 0, functions: list | None = None) -> Any:
    """A JSON-able tree for `value`; raises UnsupportedValue for anything that may not cross.

    With `functions` (a list the caller keeps), a function is sent as a reference: its index in that
    list, which the other side can only ask this side to run."""
    import jax
    from jax.sharding import Mesh, NamedSharding, PartitionSpec

    if depth > MAX_DEPTH:
        raise UnsupportedValue(f"a value nested more than {MAX_DEPTH} levels deep")
    down = depth + 1
    sub = lambda v: encode(v, depth=down, functions=functions)   # noqa: E731
    if value is None or isinstance(value, (bool, str)):
        return value
    if isinstance(value, int) and type(value) is int:
        return value
    if isinstance(value, float) and type(value) is float:
        return _float(value)
    if isinstance(value, Slot):
        return {"t": "slot", "i": value.index}
    if isinstance(value, tuple) and type(value) is tuple:
        return {"t": "tuple", "v": [sub(v) for v in value]}
    if isinstance(value, list) and type(value) is list:
        return {"t": "list", "v": [sub(v) for v in value]}
    if isinstance(value, dict) and type(value) is dict:
        return {"t": "dict", "v": [[sub(k), sub(v)] for k, v in value.items()]}
    if isinstance(value, slice):
        return {"t": "slice", "v": [encode(value.start, depth=down), encode(value.stop, depth=down),
                                    encode(value.step, depth=down)]}
    if isinstance(value, PartitionSpec):
        return encode_spec(value)
    if isinstance(value, Mesh):
        return encode_mesh(value)
    if isinstance(value, NamedSharding):
        return {"t": "named_sharding", "mesh": encode_mesh(value.mesh), "spec": encode_spec(value.spec)}
    if isinstance(value, jax.Device):
        return {"t": "device", "id": int(value.id)}
    if isinstance(value, jax.ShapeDtypeStruct):
        sharding = value.sharding
        return {"t": "abstract", "shape": [int(d) for d in value.shape], "dtype": np.dtype(value.dtype).name,
                "sharding": None if sharding is None else encode_sharding(sharding)}
    if isinstance(value, jax.Array):
        if not value.is_fully_addressable:
            raise UnsupportedValue("an array that is not fully addressable from this process")
        return {"t": "jax", "sharding": encode_sharding(value.sharding), **_encode_array_data(np.asarray(value))}
    if isinstance(value, np.ndarray):
        return {"t": "ndarray", **_encode_array_data(value)}
    if isinstance(value, np.generic):
        return {"t": "scalar", **_encode_array_data(np.asarray(value))}
    if isinstance(value, np.dtype) or (isinstance(value, type) and issubclass(value, np.generic)):
        return {"t": "dtype", "v": np.dtype(value).name}
    if hasattr(value, "dtype") and isinstance(value, type):   # jnp.float32 and friends
        return {"t": "dtype", "v": np.dtype(value.dtype).name}
    if functions is not None and callable(value) and not isinstance(value, type):
        functions.append(value)
        return {"t": "function", "id": len(functions) - 1}
    raise UnsupportedValue(
        f"a value of type {type(value).__module__}.{type(value).__qualname__} (what can be sent: numbers, strings, "
        "bools, None, tuples, lists, dicts, slices, dtypes, PartitionSpecs, meshes, devices, NumPy and jax arrays)")


# --- decoding ------------------------------------------------------------------------------------

def _need(condition: bool, what: str) -> None:
    if not condition:
        raise ProtocolError(what)


def _int(value, what: str, low: int = 0) -> int:
    _need(type(value) is int and value >= low, f"{what} must be an integer >= {low}, got {value!r}")
    return value


def _dtype(name) -> np.dtype:
    _need(isinstance(name, str) and name in DTYPES, f"unknown or forbidden dtype {name!r}")
    import jax.numpy as jnp

    return np.dtype(jnp.dtype(name))


def _array_data(tree: dict) -> np.ndarray:
    dtype = _dtype(tree.get("dtype"))
    shape = tree.get("shape")
    _need(isinstance(shape, list) and len(shape) <= 32, "an array's shape must be a list")
    shape = tuple(_int(d, "an array dimension") for d in shape)
    data = tree.get("data")
    _need(isinstance(data, str), "an array's data must be base64 text")
    try:
        raw = base64.b64decode(data, validate=True)
    except ValueError:
        raise ProtocolError("an array's data is not valid base64") from None
    size = math.prod(shape) * dtype.itemsize
    _need(len(raw) == size, f"an array of shape {shape} and dtype {dtype} needs {size} bytes, got {len(raw)}")
    return np.frombuffer(raw, dtype=dtype).reshape(shape).copy()


def decode_mesh(tree: dict):
    import jax
    from jax.sharding import AxisType, Mesh

    _need(isinstance(tree, dict) and tree.get("t") == "mesh", "expected a mesh")
    devices = jax.devices()
    shape = tuple(_int(d, "a mesh dimension", 1) for d in tree.get("shape", []))
    ids = [_int(i, "a device id") for i in tree.get("devices", [])]
    names, types = tree.get("names"), tree.get("types")
    _need(len(ids) == math.prod(shape) and len(set(ids)) == len(ids), "a mesh's devices do not fill its shape")
    _need(all(i < len(devices) for i in ids), f"a mesh names a device beyond the {len(devices)} that exist")
    _need(isinstance(names, list) and len(names) == len(shape) and all(isinstance(n, str) for n in names)
          and len(set(names)) == len(names), "a mesh needs one distinct name per axis")
    _need(isinstance(types, list) and len(types) == len(shape) and all(t in AxisType.__members__ for t in types),
          "a mesh needs one axis type per axis")
    grid = np.array([devices[i] for i in ids], dtype=object).reshape(shape)
    return Mesh(grid, tuple(names), axis_types=tuple(AxisType[t] for t in types))


def decode_spec(tree: dict):
    from jax.sharding import PartitionSpec

    _need(isinstance(tree, dict) and tree.get("t") == "spec" and isinstance(tree.get("v"), list), "expected a spec")
    entries = []
    for entry in tree["v"]:
        if entry is None or isinstance(entry, str):
            entries.append(entry)
        else:
            _need(isinstance(entry, list) and all(isinstance(e, str) for e in entry), f"a bad spec entry {entry!r}")
            entries.append(tuple(entry))
    return PartitionSpec(*entries)


def decode_sharding(tree: dict):
    import jax
    from jax.sharding import NamedSharding, SingleDeviceSharding

    _need(isinstance(tree, dict), "expected a sharding")
    if tree.get("kind") == "named":
        return NamedSharding(decode_mesh(tree.get("mesh")), decode_spec(tree.get("spec")))
    if tree.get("kind") == "single":
        device = _int(tree.get("device"), "a device id")
        _need(device < jax.device_count(), "a sharding names a device that does not exist")
        return SingleDeviceSharding(jax.devices()[device])
    raise ProtocolError(f"unknown sharding kind {tree.get('kind')!r}")


def decode(tree: Any, *, functions=None) -> Any:
    """The value `tree` encodes; raises ProtocolError for anything malformed. `functions(i)` gives the
    stand-in for the other side's i-th function reference (without it, a reference is refused)."""
    try:
        return _decode(tree, depth=0, functions=functions)
    except ProtocolError:
        raise
    except Exception as exc:   # jax or NumPy refusing what it was handed: malformed all the same
        raise ProtocolError(f"a value could not be decoded: {type(exc).__name__}: {str(exc)[:300]}") from None


def _decode(tree: Any, *, depth: int, functions) -> Any:
    import jax

    _need(depth <= MAX_DEPTH, f"a value nested more than {MAX_DEPTH} levels deep")
    down = depth + 1
    if tree is None or isinstance(tree, (bool, str, int)):
        return tree
    if isinstance(tree, float):
        return tree
    _need(isinstance(tree, dict) and isinstance(tree.get("t"), str), f"not an encoded value: {str(tree)[:80]}")
    tag = tree["t"]
    if tag == "float":
        _need(tree.get("v") in ("nan", "inf", "-inf"), "a bad float")
        return float(tree["v"])
    if tag in ("tuple", "list"):
        _need(isinstance(tree.get("v"), list), f"a {tag} needs items")
        items = [_decode(v, depth=down, functions=functions) for v in tree["v"]]
        return tuple(items) if tag == "tuple" else items
    if tag == "dict":
        _need(isinstance(tree.get("v"), list) and all(isinstance(p, list) and len(p) == 2 for p in tree["v"]),
              "a dict needs [key, value] pairs")
        out = {}
        for k, v in tree["v"]:
            key = _decode(k, depth=down, functions=functions)
            _need(key is None or isinstance(key, (str, int, float, bool, tuple)), "a dict key must be plain data")
            out[key] = _decode(v, depth=down, functions=functions)
        return out
    if tag == "slot":
        return Slot(_int(tree.get("i"), "a slot"))
    if tag == "slice":
        _need(isinstance(tree.get("v"), list) and len(tree["v"]) == 3, "a slice needs start, stop, step")
        parts = [_decode(v, depth=down, functions=functions) for v in tree["v"]]
        _need(all(p is None or type(p) is int for p in parts), "a slice's parts must be integers or None")
        return slice(*parts)
    if tag == "spec":
        return decode_spec(tree)
    if tag == "mesh":
        return decode_mesh(tree)
    if tag == "named_sharding":
        return decode_sharding({"kind": "named", "mesh": tree.get("mesh"), "spec": tree.get("spec")})
    if tag == "device":
        device = _int(tree.get("id"), "a device id")
        _need(device < jax.device_count(), "a device that does not exist")
        return jax.devices()[device]
    if tag == "dtype":
        return _dtype(tree.get("v"))
    if tag == "abstract":
        shape = tuple(_int(d, "a dimension") for d in tree.get("shape", []))
        sharding = None if tree.get("sharding") is None else decode_sharding(tree["sharding"])
        return jax.ShapeDtypeStruct(shape, _dtype(tree.get("dtype")), sharding=sharding)
    if tag == "ndarray":
        return _array_data(tree)
    if tag == "scalar":
        value = _array_data(tree)
        _need(value.shape == (), "a scalar must have shape ()")
        return value[()]
    if tag == "jax":
        value, sharding = _array_data(tree), decode_sharding(tree.get("sharding"))
        try:
            sharding.shard_shape(value.shape)
        except ValueError as exc:
            raise ProtocolError(f"an array of shape {value.shape} cannot have that sharding: {exc}") from None
        return jax.device_put(value, sharding)
    if tag == "function":
        _need(functions is not None, "a function reference where none may be")
        return functions(_int(tree.get("id"), "a function reference"))
    raise ProtocolError(f"unknown value tag {tag!r}")


# --- traced programs ---------------------------------------------------------------------------

def export_traced(fn, args, kwargs, *, functions: list | None = None, anonymous: bool = False) -> dict:
    """Trace fn on the abstract arrays (ShapeDtypeStructs) among args, the rest fixed, and export it.
    Arrays among the results become the program's outputs; everything else comes back as data, with
    a Slot where each output goes. anonymous: strip the program of every source location, scope and
    function name of the code traced (grader.worker.programs.anonymous), for a reader not to see them."""
    import jax

    from grader.worker import programs

    structs = []

    def to_slot(struct):
        structs.append(struct)
        return Slot(len(structs) - 1)

    slotted = map_leaves((args, kwargs), lambda v: isinstance(v, jax.ShapeDtypeStruct), to_slot)
    layout = {}

    def traced(*arrays):
        call_args, call_kwargs = map_leaves(slotted, lambda v: isinstance(v, Slot), lambda s: arrays[s.index])
        outputs = []

        def to_output(array):
            outputs.append(array)
            return Slot(len(outputs) - 1)

        layout["out"] = map_leaves(fn(*call_args, **call_kwargs), lambda v: isinstance(v, jax.Array), to_output)
        return tuple(outputs)

    exported = jax.export.export(jax.jit(traced))(*structs)
    if anonymous:
        exported = programs.anonymous(exported)
    return {"artifact": base64.b64encode(exported.serialize()).decode("ascii"),
            "out": encode(layout["out"], functions=functions)}


def abstract_arrays(args, kwargs, describe):
    """(args, kwargs) with each array (concrete or traced) swapped by describe(array), and the arrays."""
    import jax

    arrays = []

    def to_abstract(value):
        arrays.append(value)
        return describe(value)

    is_array = lambda v: isinstance(v, (jax.Array, np.ndarray))   # noqa: E731
    return map_leaves((tuple(args), dict(kwargs)), is_array, to_abstract), arrays


def call_exported(exported, layout, arrays):
    """Run a traced program on `arrays` and put its outputs where the layout's Slots say."""
    outputs = exported.call(*arrays)
    _need(all(s.index < len(outputs) for s in _slots(layout)), "a traced program's results do not match its layout")
    return map_leaves(layout, lambda v: isinstance(v, Slot), lambda s: outputs[s.index])


def _slots(tree):
    if isinstance(tree, Slot):
        yield tree
    elif type(tree) in (tuple, list):
        for v in tree:
            yield from _slots(v)
    elif type(tree) is dict:
        for v in tree.values():
            yield from _slots(v)


# --- errors ----------------------------------------------------------------------------------------

# Exceptions a student's code raises come back as their type name and message, and are raised again in
# the harness as a class of that name deriving from the nearest of these builtins (so `pytest.raises
# (ValueError)` works, and a stub's NotImplementedError is still "not attempted").
BUILTIN_ERRORS = {cls.__name__: cls for cls in (
    ArithmeticError, AssertionError, AttributeError, BufferError, EOFError, FloatingPointError, ImportError,
    IndexError, KeyError, LookupError, MemoryError, ModuleNotFoundError, NameError, NotImplementedError, OSError,
    OverflowError, RecursionError, RuntimeError, StopIteration, SyntaxError, SystemError, TypeError,
    UnboundLocalError, ValueError, ZeroDivisionError, Exception)}


def encode_error(exc: BaseException, frames: list[dict]) -> dict:
    base = next((c.__name__ for c in type(exc).__mro__ if c.__name__ in BUILTIN_ERRORS
                 and BUILTIN_ERRORS[c.__name__] is c), "Exception")
    try:
        message = str(exc)
    except Exception:   # a student's __str__ may raise
        message = "(the exception's message could not be read)"
    return {"type": type(exc).__name__[:100], "base": base, "message": message[:4000], "frames": frames[-5:]}
