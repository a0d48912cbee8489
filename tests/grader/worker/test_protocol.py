"""What crosses between the harness and a worker: typed plain data both ways, checked on arrival and
bounded before it is parsed, traced programs that the harness refuses when they could run anything but
XLA's own operations on buffers of a sensible size, and the programs the harness sends, which name
nothing of the code it traced."""

import base64
import json
import os
import threading
import time

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax._src import config as jax_config
from jax._src.export import _export
from jax.sharding import AxisType, NamedSharding, PartitionSpec as P

from grader.checks import test_mesh
from grader.worker import codec, framing, message_limits, programs, traced_programs
from grader.worker.error_reports import remote_exception
from grader.worker.failures import UntrustedProgram
from grader.worker.programs import checked_program
from grader.worker.protocol_errors import ProtocolError, UnsupportedValue


def round_trip(value):
    return codec.decode(codec.encode(value))


def test_plain_data_round_trips():
    value = {
        "a": (1, 2.5, None, True, "s"),
        3: [slice(1, 8, 2), slice(None)],
        ("t", 1): float("nan"),
        "inf": float("-inf"),
        "dtype": np.dtype("int16"),
    }
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


@pytest.mark.parametrize(
    "value",
    [Anything(), object(), lambda: 0, np.array(["a"]), np.zeros(2, dtype=object)],
    ids=["always-equal", "object", "function", "strings", "objects"],
)
def test_objects_do_not_cross(value):
    with pytest.raises(UnsupportedValue):
        codec.encode(value)


def test_subclasses_of_plain_types_do_not_cross():
    class Sneaky(tuple):
        def __eq__(self, other):
            return True

    with pytest.raises(UnsupportedValue):
        codec.encode(Sneaky((1,)))


ARRAY = {
    "t": "ndarray",
    "dtype": "float32",
    "shape": [2],
    "data": base64.b64encode(b"\0" * 8).decode(),
}
MALFORMED = {
    "unknown tag": {"t": "pickle", "v": "..."},
    "object dtype": ARRAY | {"dtype": "object"},
    "short data": ARRAY | {"shape": [3]},
    "negative dimension": ARRAY | {"shape": [-2]},
    "not base64": ARRAY | {"data": "!!!"},
    "device out of range": {"t": "device", "id": 99},
    "mesh too small": {
        "t": "mesh",
        "shape": [2, 2],
        "devices": [0, 1, 2],
        "names": ["x", "y"],
        "types": ["Auto", "Auto"],
    },
    "mesh axis type": {
        "t": "mesh",
        "shape": [2],
        "devices": [0, 1],
        "names": ["x"],
        "types": ["Magic"],
    },
    "slice of strings": {"t": "slice", "v": ["a", None, None]},
    "dict key object": {"t": "dict", "v": [[{"t": "list", "v": []}, 1]]},
    "bool as int": {"t": "device", "id": True},
    "not a dict": ["a"],
    # Refused by jax itself, not by the decoder's own checks: a ProtocolError all the same.
    "spec names no axis of the mesh": {
        "t": "named_sharding",
        "spec": {"t": "spec", "v": ["z"]},
        "mesh": {"t": "mesh", "shape": [2], "devices": [0, 1], "names": ["x"], "types": ["Auto"]},
    },
    "spec names an axis twice": {
        "t": "named_sharding",
        "spec": {"t": "spec", "v": ["x", "x"]},
        "mesh": {"t": "mesh", "shape": [2], "devices": [0, 1], "names": ["x"], "types": ["Auto"]},
    },
}


@pytest.mark.parametrize("tree", MALFORMED.values(), ids=MALFORMED.keys())
def test_malformed_trees_are_refused(tree):
    with pytest.raises(ProtocolError):
        codec.decode(tree)


def test_deep_nesting_is_refused():
    tree = 1
    for _ in range(message_limits.MAX_DEPTH + 5):
        tree = {"t": "list", "v": [tree]}
    with pytest.raises(ProtocolError):
        codec.decode(tree)


def _framed(body: bytes) -> bytes:
    return len(body).to_bytes(8, "big") + body


N = 16 << 20
BOMBS = {  # JSON that is well framed, each within the size limit: name -> (message, what refuses it)
    "nested 200,000 deep": (b'{"ok":' + b"[" * 200_000 + b"]" * 200_000 + b"}", "nested more than"),
    "nested just too deep": (
        b'{"ok":'
        + b"[" * message_limits.MAX_JSON_DEPTH
        + b"]" * message_limits.MAX_JSON_DEPTH
        + b"}",
        "nested more than",
    ),
    "5 million empty objects": (b'{"ok":[' + b"{}," * (N // 3 - 4) + b"{}]}", "outside strings"),
    "4 million short strings": (b'{"ok":[' + b'"a",' * (N // 4 - 4) + b'"a"]}', "outside strings"),
    "16 MiB of quotes": (b'"' * N, "outside strings"),
    "an unterminated string of escaped quotes": (b'{"ok":"' + b'\\"' * (N // 2 - 8), "not JSON"),
    "not ASCII": ('{"ok":"\u00e9t\u00e9"}'.encode(), "not ASCII"),
    "not an object": (b"[1, 2]", "JSON object"),
}


@pytest.mark.parametrize("name", BOMBS)
def test_a_message_is_bounded_before_it_is_parsed(name):
    """Depth is counted, not recursed into; the JSON outside strings (what parsing turns into objects)
    is measured before anything is parsed; each bomb is refused within a second or so."""
    message, why = BOMBS[name]
    started = time.monotonic()
    with pytest.raises(ProtocolError, match=why):
        framing.parse(message)
    assert time.monotonic() - started < 3


def test_strings_are_not_structure():
    """Brackets, escaped quotes and backslashes inside strings count for nothing: an 8 MB string of them
    is an ordinary message, read exactly as JSON reads it."""
    text = '[{"\\' * 2_000_000 + "\\"
    message = {"ok": {"t": "list", "v": [text, "]", '\\"', "x" * 10]}, "depth": [[[["a"]]]]}
    assert framing.parse(json.dumps(message).encode()) == message
    nested = {"t": "list", "v": []}
    for _ in range(message_limits.MAX_DEPTH - 1):
        nested = {"t": "list", "v": [nested]}
    assert codec.decode(framing.parse(json.dumps({"ok": nested}).encode())["ok"]) is not None


def test_a_budget_bounds_all_a_worker_sends():
    read, write = os.pipe()
    body = json.dumps({"ok": "x" * 30_000}).encode()
    budget = framing.Budget(total=5 * (len(body) + 8))
    sender = threading.Thread(target=lambda: os.write(write, _framed(body) * 6))
    sender.start()
    for _ in range(5):
        assert framing.receive(read, budget=budget) == {"ok": "x" * 30_000}
    with pytest.raises(ProtocolError, match="in all"):
        framing.receive(read, budget=budget)
    sender.join(5)
    for fd in (read, write):
        os.close(fd)


def test_a_reader_that_stops_reading_costs_a_writer_only_until_its_deadline():
    read, write = os.pipe()
    os.set_blocking(write, False)
    started = time.monotonic()
    with pytest.raises(TimeoutError):
        for _ in range(10_000):  # the pipe holds 64 KiB: it fills, and nothing reads
            framing.send(write, {"callback": 0, "pad": "x" * 1000}, time.monotonic() + 0.5)
    assert time.monotonic() - started < 3
    for fd in (read, write):
        os.close(fd)


def test_framing_and_the_size_limit():
    read, write = os.pipe()
    sender = threading.Thread(
        target=lambda: (framing.send(write, {"ok": "x" * 300_000}), os.close(write))
    )
    sender.start()
    assert framing.receive(read) == {"ok": "x" * 300_000}
    sender.join(5)
    os.close(read)
    read, write = os.pipe()
    os.write(write, (10 << 30).to_bytes(8, "big"))
    with pytest.raises(ProtocolError, match="larger than the limit"):
        framing.receive(read)
    os.close(read)
    os.close(write)


def test_student_exceptions_come_back_as_their_builtin_kind():
    exc = remote_exception(
        {
            "type": "DuplicateSpecError",
            "base": "Exception",
            "message": "axis x twice",
            "frames": [{"file": "ex02.py", "line": 3, "function": "f", "code": "raise"}],
        }
    )
    assert type(exc).__name__ == "DuplicateSpecError" and not isinstance(exc, ValueError)
    assert exc.student_frames[0]["line"] == 3
    error = remote_exception({"type": "MyError", "base": "ValueError", "message": "dimension 1"})
    assert isinstance(error, ValueError) and str(error) == "dimension 1"
    stub = remote_exception(
        {"type": "NotImplementedError", "base": "NotImplementedError", "message": "ex02: x"}
    )
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
    forged = _artifact(
        lambda v: jax.ffi.ffi_call("shardlab_forged_target", x)(v),
        x,
        disabled_checks=[jax.export.DisabledSafetyCheck.custom_call("shardlab_forged_target")],
    )
    with pytest.raises(UntrustedProgram, match="shardlab_forged_target"):
        checked_program(forged)


@pytest.mark.parametrize(
    "artifact",
    [base64.b64encode(b"not a program").decode(), "%%%", None],
    ids=["garbage", "not-base64", "missing"],
)
def test_garbage_is_refused(artifact):
    with pytest.raises((UntrustedProgram, ValueError)):
        checked_program(artifact)


def _module(target: str) -> str:
    """The smallest module calling a custom call (the generic form, so that any target name is valid)."""
    return f"""
    module @m {{
      func.func public @main(%arg0: tensor<4xf32>) -> tensor<4xf32> {{
        %0 = "stablehlo.custom_call"(%arg0) {{call_target_name = "{target}"}} : (tensor<4xf32>) -> tensor<4xf32>
        return %0 : tensor<4xf32>
      }}
    }}"""


REFUSED_TARGETS = sorted(
    _export._CUSTOM_CALL_TARGETS_GUARANTEED_STABLE - programs.ALLOWED_CUSTOM_CALLS
)


@pytest.mark.parametrize(
    "target",
    [
        *REFUSED_TARGETS,
        "xla_ffi_python_cpu_callback",
        "xla_python_cpu_callback",
        "shardlab_unknown",
    ],
)
def test_every_custom_call_the_course_does_not_need_is_refused(target):
    """Every target of jax's own stable list but the partitioner's annotations (lapack_sgetrf_ffi among
    them, which corrupted the harness's heap), and the host callbacks."""
    why = programs.refusal(programs.module_facts(_module(target)))
    assert why is not None and target in why and programs.REFUSED in why


@pytest.mark.parametrize("target", sorted(programs.ALLOWED_CUSTOM_CALLS))
def test_the_partitioners_annotations_are_allowed(target):
    # nothing jax does not keep stable
    assert target in _export._CUSTOM_CALL_TARGETS_GUARANTEED_STABLE
    assert programs.refusal(programs.module_facts(_module(target))) is None


def test_a_program_lowered_with_gspmd_is_accepted():
    """A student's module may turn Shardy off: its shard_map then carries the SPMD annotations."""
    mesh = test_mesh((4,), ("d",), "explicit")
    x = jax.ShapeDtypeStruct((8, 3), jnp.float32, sharding=NamedSharding(mesh, P("d")))
    body = jax.shard_map(
        lambda b: jax.lax.psum(b.sum(0), "d"), mesh=mesh, in_specs=P("d"), out_specs=P()
    )
    with jax_config.use_shardy_partitioner(False):
        artifact = _artifact(body, x)
    exported = checked_program(artifact)
    assert {"SPMDFullToShardShape", "SPMDShardToFullShape"} <= programs.exported_facts(
        exported
    ).custom_calls
    placed = jax.device_put(np.ones((8, 3), np.float32), NamedSharding(mesh, P("d")))
    np.testing.assert_array_equal(np.asarray(exported.call(placed)), np.full(3, 8.0))


def test_a_student_lu_is_refused():
    x = jax.ShapeDtypeStruct((4, 4), jnp.float32)
    with pytest.raises(UntrustedProgram, match=f"lapack_sgetrf_ffi: {programs.REFUSED}"):
        checked_program(_artifact(lambda a: jax.lax.linalg.lu(a)[0], x))


def test_a_program_with_host_transfers_is_refused():
    text = """
    module @m {
      func.func public @main(%arg0: tensor<4xf32>) -> tensor<4xf32> {
        %0 = stablehlo.create_token : !stablehlo.token
        %1:2 = "stablehlo.infeed"(%0) {infeed_config = ""} : (!stablehlo.token) -> (tensor<4xf32>, !stablehlo.token)
        return %1#0 : tensor<4xf32>
      }
    }"""
    assert "stablehlo.infeed" in programs.refusal(programs.module_facts(text))


def test_huge_buffers_are_refused_before_anything_is_compiled():
    """One array over the bound, or many arrays each under it that add up to more than a program may
    hold: refused on the program's types (nothing is allocated). The course's largest passes."""
    x = jax.ShapeDtypeStruct((4,), jnp.float32)
    one = _artifact(
        lambda v: v + jax.lax.optimization_barrier(jnp.full((96 << 20,), v.sum()))[-1], x
    )
    with pytest.raises(
        UntrustedProgram,
        match=r"array of 384.0 MiB \(tensor<100663296xf32>\), more than the 64.0 MiB",
    ):
        checked_program(one)

    def many(v):
        parts = [
            jax.lax.optimization_barrier(jnp.full((15 << 20,), v.sum() + i)) for i in range(20)
        ]
        return v + sum(p[-1] for p in parts)

    with pytest.raises(UntrustedProgram, match="GiB in all, more than the 1.00 GiB"):
        checked_program(_artifact(many, x))
    largest = jax.ShapeDtypeStruct((2048, 1024), jnp.float32)  # ex04's timed layer: 8 MiB
    assert checked_program(_artifact(lambda w: jnp.tanh(w @ w.T @ w), largest)) is not None


def test_dynamic_shapes_and_derivatives_are_refused():
    symbolic = jax.ShapeDtypeStruct(jax.export.symbolic_shape("n"), jnp.float32)
    with pytest.raises(UntrustedProgram, match="dynamic shape"):
        checked_program(_artifact(lambda v: v * 2, symbolic))
    x = jax.ShapeDtypeStruct((4,), jnp.float32)
    exported = jax.export.export(jax.jit(lambda v: v * 2))(x)
    with pytest.raises(UntrustedProgram, match="derivative"):
        checked_program(base64.b64encode(exported.serialize(vjp_order=1)).decode())


def _with_vjp(fn, *args, order=1) -> str:
    exported = jax.export.export(jax.jit(fn))(*args)
    return base64.b64encode(exported.serialize(vjp_order=order)).decode()


def test_a_derivative_asked_for_is_checked_and_is_the_one_differentiated():
    """When the tests differentiate a student's function, its program comes with its VJP: jax.grad then
    runs that derivative, checked as the program is. A program without one, or whose derivative carries
    one of its own, is refused."""
    x = jax.ShapeDtypeStruct((4,), jnp.float32)
    exported = checked_program(_with_vjp(jnp.sin, x), derivative=True)
    grad = jax.jit(jax.grad(lambda v: exported.call(v).sum()))(jnp.arange(4.0))
    np.testing.assert_allclose(grad, np.cos(np.arange(4.0)), rtol=1e-6)
    with pytest.raises(UntrustedProgram, match="carries no derivative"):
        checked_program(_artifact(jnp.sin, x), derivative=True)
    with pytest.raises(UntrustedProgram, match="derivative carries a derivative"):
        checked_program(_with_vjp(jnp.sin, x, order=2), derivative=True)


def test_a_derivative_with_a_custom_call_is_refused():
    """Hostile: a clean forward whose custom VJP calls a custom call (jax will not serialize a host
    callback at all; a custom call is what could reach the harness's native code when jax.grad runs the
    derivative). The derivative is checked as strictly as the program."""
    x = jax.ShapeDtypeStruct((4,), jnp.float32)

    @jax.custom_vjp
    def f(v):
        return v * 2

    def backward(_, g):
        return (jax.ffi.ffi_call("shardlab_forged_target", x)(g),)

    f.defvjp(lambda v: (f(v), None), backward)
    exported = jax.export.export(
        jax.jit(f),
        disabled_checks=[jax.export.DisabledSafetyCheck.custom_call("shardlab_forged_target")],
    )(x)
    assert checked_program(_artifact(f, x)) is not None  # the forward alone is clean
    with pytest.raises(UntrustedProgram, match="shardlab_forged_target"):
        checked_program(base64.b64encode(exported.serialize(vjp_order=1)).decode(), derivative=True)


@jax.jit
def _secret_helper_of_the_tests(v):
    return v * 3


def _tests_per_device_function(block):
    with jax.named_scope("secret_scope_of_the_tests"):
        return jnp.sum(_secret_helper_of_the_tests(block), axis=0)


SECRETS = (
    b"test_protocol",
    b"_secret_helper_of_the_tests",
    b"secret_scope_of_the_tests",
    b"_tests_per_device_function",
    b"/tests/",
    b".py",
)


def test_a_program_sent_to_a_worker_names_nothing_of_the_code_traced():
    """The harness's export of a test's function carries the computation and nothing else: no file,
    line, scope or function name (the artifact's bytes and its module's text), and still runs."""
    args = ((jax.ShapeDtypeStruct((4, 3), jnp.float32),), {})
    plain = base64.b64decode(
        traced_programs.export_traced(_tests_per_device_function, *args)["artifact"]
    )
    assert all(secret in plain for secret in SECRETS[:4])  # what there is to strip
    sent = traced_programs.export_traced(_tests_per_device_function, *args, anonymous=True)
    raw = base64.b64decode(sent["artifact"])
    exported = jax.export.deserialize(bytearray(raw))
    text = exported.mlir_module()
    for secret in SECRETS:
        assert secret not in raw and secret.decode() not in text, secret
    assert 'loc("' not in text and exported.fun_name == "program"  # no named or file location
    block = np.arange(12, dtype=np.float32).reshape(4, 3)
    layout = codec.decode(sent["out"])
    np.testing.assert_array_equal(
        np.asarray(traced_programs.call_exported(exported, layout, [block])), 3 * block.sum(axis=0)
    )
