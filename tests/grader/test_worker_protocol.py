"""What crosses between the harness and a worker: typed plain data both ways, checked on arrival, and
traced programs that the harness refuses when they could run anything but XLA's own operations."""

import base64
import os
import threading

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import AxisType, NamedSharding, PartitionSpec as P

from grader.checks import test_mesh
from grader.worker import protocol
from grader.worker.remote import UntrustedProgram, checked_program, remote_exception


def round_trip(value):
    return protocol.decode(protocol.encode(value))


def test_plain_data_round_trips():
    value = {"a": (1, 2.5, None, True, "s"), 3: [slice(1, 8, 2), slice(None)], ("t", 1): float("nan"),
             "inf": float("-inf"), "dtype": np.dtype("int16")}
    back = round_trip(value)
    assert back.keys() == value.keys()
    assert back["a"] == value["a"] and back[3] == value[3] and back["dtype"] == np.dtype("int16")
    assert np.isnan(back[("t", 1)]) and back["inf"] == float("-inf")
    assert type(back["a"]) is tuple and type(back[3]) is list


def test_jax_scalar_types_become_dtypes():
    assert round_trip(jnp.float32) == np.dtype("float32")
    assert round_trip(np.int8) == np.dtype("int8")
    assert round_trip(np.float32(2.5)) == np.float32(2.5)


def test_specs_meshes_and_devices_round_trip():
    mesh = test_mesh((2, 4), ("x", "y"), "explicit")
    back = round_trip({"mesh": mesh, "spec": P(("x", "y"), None, "x"), "device": jax.devices()[3]})
    assert back["spec"] == P(("x", "y"), None, "x")
    assert back["device"] == jax.devices()[3]
    assert back["mesh"].axis_names == ("x", "y") and dict(back["mesh"].shape) == {"x": 2, "y": 4}
    assert tuple(back["mesh"].axis_types) == (AxisType.Explicit,) * 2
    assert [d.id for d in back["mesh"].devices.flat] == [d.id for d in mesh.devices.flat]


@pytest.mark.parametrize("spec", [P("x", "y"), P(None, "y"), P()])
def test_arrays_keep_values_and_layout(spec):
    mesh = test_mesh((2, 4), ("x", "y"), "auto")
    data = np.arange(64, dtype=np.float32).reshape(8, 8)
    arr = jax.device_put(data, NamedSharding(mesh, spec))
    back = round_trip(arr)
    assert back.sharding.is_equivalent_to(arr.sharding, 2)
    np.testing.assert_array_equal(np.asarray(back), data)
    scalar = round_trip(jax.device_put(np.float32(1.5), NamedSharding(mesh, P())))
    assert scalar.shape == () and float(scalar) == 1.5
    one = round_trip(jax.device_put(np.ones(3, np.int32), jax.devices()[2]))
    assert one.devices() == {jax.devices()[2]} and one.dtype == np.int32


class Anything:
    def __eq__(self, other):
        return True


@pytest.mark.parametrize("value", [Anything(), object(), lambda: 0, np.array(["a"]), np.zeros(2, dtype=object)],
                         ids=["always-equal", "object", "function", "strings", "objects"])
def test_objects_do_not_cross(value):
    with pytest.raises(protocol.UnsupportedValue):
        protocol.encode(value)


def test_subclasses_of_plain_types_do_not_cross():
    class Sneaky(tuple):
        def __eq__(self, other):
            return True

    with pytest.raises(protocol.UnsupportedValue):
        protocol.encode(Sneaky((1,)))


ARRAY = {"t": "ndarray", "dtype": "float32", "shape": [2], "data": base64.b64encode(b"\0" * 8).decode()}
MALFORMED = {
    "unknown tag": {"t": "pickle", "v": "..."},
    "object dtype": ARRAY | {"dtype": "object"},
    "short data": ARRAY | {"shape": [3]},
    "negative dimension": ARRAY | {"shape": [-2]},
    "not base64": ARRAY | {"data": "!!!"},
    "device out of range": {"t": "device", "id": 99},
    "mesh too small": {"t": "mesh", "shape": [2, 2], "devices": [0, 1, 2], "names": ["x", "y"],
                       "types": ["Auto", "Auto"]},
    "mesh axis type": {"t": "mesh", "shape": [2], "devices": [0, 1], "names": ["x"], "types": ["Magic"]},
    "slice of strings": {"t": "slice", "v": ["a", None, None]},
    "dict key object": {"t": "dict", "v": [[{"t": "list", "v": []}, 1]]},
    "bool as int": {"t": "device", "id": True},
    "not a dict": ["a"],
}


@pytest.mark.parametrize("tree", MALFORMED.values(), ids=MALFORMED.keys())
def test_malformed_trees_are_refused(tree):
    with pytest.raises(protocol.ProtocolError):
        protocol.decode(tree)


def test_deep_nesting_is_refused():
    tree = 1
    for _ in range(protocol.MAX_DEPTH + 5):
        tree = {"t": "list", "v": [tree]}
    with pytest.raises(protocol.ProtocolError):
        protocol.decode(tree)


def test_framing_and_the_size_limit():
    read, write = os.pipe()
    sender = threading.Thread(target=lambda: (protocol.send(write, {"ok": "x" * 300_000}), os.close(write)))
    sender.start()
    assert protocol.receive(read) == {"ok": "x" * 300_000}
    sender.join(5)
    os.close(read)
    read, write = os.pipe()
    os.write(write, (10 << 30).to_bytes(8, "big"))
    with pytest.raises(protocol.ProtocolError, match="larger than the limit"):
        protocol.receive(read)
    os.close(read)
    os.close(write)


def test_student_exceptions_come_back_as_their_builtin_kind():
    exc = remote_exception({"type": "DuplicateSpecError", "base": "Exception", "message": "axis x twice",
                            "frames": [{"file": "ex02.py", "line": 3, "function": "f", "code": "raise"}]})
    assert type(exc).__name__ == "DuplicateSpecError" and not isinstance(exc, ValueError)
    assert exc.student_frames[0]["line"] == 3
    error = remote_exception({"type": "MyError", "base": "ValueError", "message": "dimension 1"})
    assert isinstance(error, ValueError) and str(error) == "dimension 1"
    stub = remote_exception({"type": "NotImplementedError", "base": "NotImplementedError", "message": "ex02: x"})
    assert isinstance(stub, NotImplementedError)
    odd = remote_exception({"type": "not a name!", "base": "BaseException", "message": 7})
    assert type(odd).__name__ == "Exception" and str(odd) == ""


def _artifact(fn, *args, **export_options) -> str:
    exported = jax.export.export(jax.jit(fn), **export_options)(*args)
    return base64.b64encode(exported.serialize()).decode()


def test_an_ordinary_program_is_accepted():
    x = jax.ShapeDtypeStruct((4,), jnp.float32)
    exported = checked_program(_artifact(lambda v: jnp.sin(v) * 2, x))
    np.testing.assert_allclose(exported.call(jnp.ones(4)), 2 * np.sin(np.ones(4)), rtol=1e-6)


def test_a_program_with_an_unknown_custom_call_is_refused():
    x = jax.ShapeDtypeStruct((3,), jnp.float32)
    forged = _artifact(lambda v: jax.ffi.ffi_call("shardlab_forged_target", x)(v), x,
                       disabled_checks=[jax.export.DisabledSafetyCheck.custom_call("shardlab_forged_target")])
    with pytest.raises(UntrustedProgram, match="shardlab_forged_target"):
        checked_program(forged)


@pytest.mark.parametrize("artifact", [base64.b64encode(b"not a program").decode(), "%%%", None],
                         ids=["garbage", "not-base64", "missing"])
def test_garbage_is_refused(artifact):
    with pytest.raises((UntrustedProgram, ValueError)):
        checked_program(artifact)
