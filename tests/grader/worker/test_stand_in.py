"""The harness's stand-in for a student module, against a real confined worker: both routes of a call,
functions crossing as references, and what a crash, a hang, an exception, printing, a message out of
bounds or a native kernel cost."""

import textwrap
import time

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import NamedSharding, PartitionSpec as P

from grader.checks import collectives_in, compiled, test_mesh
from grader.sandbox import confinement
from grader.worker import programs
from grader.worker.failures import (
    UntrustedProgram,
    WorkerBrokeProtocol,
    WorkerCrashed,
    WorkerTimeout,
)
from grader.worker.stand_in import RemoteModule
from grader.worker.supervisor import Worker

MODULE = textwrap.dedent('''
    import os, time
    import jax, jax.numpy as jnp
    from jax.sharding import NamedSharding, PartitionSpec as P

    def add_one(x):
        print("adding one")
        return x + 1

    def total(x, mesh):
        return jax.shard_map(lambda b: jax.lax.psum(b.sum(0), "d"), mesh=mesh, in_specs=P("d"), out_specs=P())(x)

    def with_types(x):
        return x * 2, {"type": str(jax.typeof(x))}

    def per_device(f, mesh):
        """A higher-order function: runs the tests' f on each block, one result row per device."""
        def body(block):
            return f(block)[None]
        return jax.shard_map(body, mesh=mesh, in_specs=P("d"), out_specs=P("d"))

    def column_sums_replicated(x):
        """Reads the mesh from the type, as a student may on an Auto mesh."""
        mesh = jax.typeof(x).sharding.mesh
        return jax.lax.with_sharding_constraint(x.sum(axis=0), NamedSharding(mesh, P()))

    def strict(n):
        if n < 0:
            raise ValueError(f"n must be >= 0, got {n}")
        return n

    def sleep(seconds):
        time.sleep(seconds)

    def die():
        os._exit(5)

    def aborts_after_answering(seconds=0.3):
        import threading
        threading.Timer(seconds, os.abort).start()
        return "answered"

    def dies_in_an_old_worker(always=False):
        """Dies whenever its worker ran a request before this one (its module's counter, a fresh worker's
        import starting it again), or always."""
        global _calls
        _calls = globals().get("_calls", 0) + 1
        if _calls > 1 or always:
            os._exit(6)
        return _calls

    def returns_an_object():
        return object()

    def with_lu(x):
        """An honest student's LU decomposition: LAPACK's getrf, a custom call."""
        return x + jax.lax.linalg.lu(jnp.eye(4, dtype=x.dtype) + x.sum())[0][0, 0] * 0

    @jax.custom_vjp
    def lu_in_its_derivative(x):
        """A clean forward whose derivative runs a native kernel the harness refuses."""
        return x * 2

    def _forward(x):
        return x * 2, x

    def _backward(x, g):
        return (g * jax.lax.linalg.lu(jnp.diag(x))[0].diagonal(),)

    lu_in_its_derivative.defvjp(_forward, _backward)

    def programs_given(f, x):
        """Runs the tests' f under jit, and returns the text of every program the harness sent for it."""
        jax.jit(f)(x)
        return [exported.mlir_module() for exported, _ in f.programs.values()]

    def _send_raw(body, announced=None):
        """A frame written straight to the worker's pipe to the harness, found in this process's memory."""
        import gc, struct
        fd = next(o.response_fd for o in gc.get_objects() if type(o).__name__ == "Channel")
        data = memoryview(struct.pack(">Q", len(body) if announced is None else announced) + body)
        while data:
            data = data[os.write(fd, data):]

    def breaks_bounds(kind):
        if kind == "huge":         # announces 1 GiB, sends 1 MiB of it
            _send_raw(b"[" * (1 << 20), announced=1 << 30)
        elif kind == "deep":
            _send_raw(b'{"kind":"ok","value":' + b"[" * 200_000 + b"]" * 200_000 + b"}")
        elif kind == "many":       # 15 MiB callback requests, each within the size limit
            for _ in range(100):
                _send_raw(b'{"kind":"callback","function":0,"args":{"t":"tuple","v":["' + b"x" * (15 << 20)
                          + b'"]},"kwargs":{"t":"dict","v":[]}}')
        elif kind == "unread":     # asks for programs and never reads them
            for _ in range(100_000):
                _send_raw(b'{"kind":"callback","function":0,"args":{"t":"tuple","v":[]},"kwargs":{"t":"dict","v":[]}}')
        return kind
''')


@pytest.fixture
def module(tmp_path):
    folder = tmp_path / "submission"
    folder.mkdir()
    (folder / "student.py").write_text(MODULE)
    worker = Worker(folder, isolation=confinement.choose_isolation("auto"), scratch=tmp_path)
    worker.deadline = time.monotonic() + 60
    yield RemoteModule(folder / "student.py", worker)
    worker.stop()


def mesh4():
    return test_mesh((4,), ("d",), "explicit")


def test_a_direct_call_returns_data_and_relays_printing(module, capsys):
    x = jax.device_put(np.arange(8, dtype=np.float32), NamedSharding(mesh4(), P("d")))
    out = module.add_one(x)
    assert out.sharding.is_equivalent_to(x.sharding, 1)
    np.testing.assert_array_equal(np.asarray(out), np.arange(8) + 1)
    assert "adding one" in capsys.readouterr().out


def test_a_traced_call_is_compiled_by_the_harness(module):
    mesh = mesh4()
    x = jax.device_put(np.ones((8, 3), np.float32), NamedSharding(mesh, P("d")))
    program = jax.jit(lambda v: module.total(v, mesh))
    np.testing.assert_array_equal(np.asarray(program(x)), np.full(3, 8.0))
    assert collectives_in(program.lower(x).compile())["all-reduce"] == 1


def test_a_traced_call_can_be_differentiated(module):
    """jax.grad around a student's function (a gradient rule): the worker exports the program with its
    derivative, and the harness's jax.grad runs it; without the grad, no derivative is asked for."""
    mesh = mesh4()
    x = jax.device_put(np.arange(24, dtype=np.float32).reshape(8, 3), NamedSharding(mesh, P("d")))
    weights = jnp.asarray([1.0, 2.0, 3.0])
    grad = jax.jit(jax.grad(lambda v: jnp.sum(module.total(v, mesh) * weights)))(x)
    np.testing.assert_array_equal(np.asarray(grad), np.tile([1.0, 2.0, 3.0], (8, 1)))
    programs_sent = list(module._programs.values())
    assert [exported.has_vjp() for exported, _ in programs_sent] == [True]
    jax.jit(lambda v: module.total(v, mesh))(x)
    assert sorted(e.has_vjp() for e, _ in module._programs.values()) == [False, True]


def test_on_an_auto_mesh_the_traced_program_gets_the_checks_input_layout(module):
    """A tracer on an Auto mesh carries no layout; the program traced in the worker must still compile,
    here, to what the check's own jit would give (the layout comes from the argument being compiled for)."""
    mesh = test_mesh((2, 4), ("x", "y"), "auto")
    x = jax.device_put(np.ones((16, 32), np.float32), NamedSharding(mesh, P("x", "y")))

    def in_process(v):
        return jax.lax.with_sharding_constraint(
            v.sum(axis=0), NamedSharding(jax.typeof(v).sharding.mesh, P())
        )

    assert collectives_in(compiled(module.column_sums_replicated, x)) == collectives_in(
        compiled(in_process, x)
    )
    np.testing.assert_array_equal(
        np.asarray(compiled(module.column_sums_replicated, x)(x)), np.full(32, 16.0)
    )


def test_data_produced_while_tracing_comes_back(module):
    mesh = mesh4()
    x = jax.device_put(np.ones(8, np.float32), NamedSharding(mesh, P("d")))
    seen = {}

    def traced(v):
        doubled, info = module.with_types(v)
        seen.update(info)
        return doubled

    doubled = jax.jit(traced)(x)
    assert seen == {"type": "float32[8@d]"}
    np.testing.assert_array_equal(np.asarray(doubled), np.full(8, 2.0))


def test_functions_cross_as_references_both_ways(module):
    mesh = mesh4()
    x = jax.device_put(np.arange(24, dtype=np.float32).reshape(8, 3), NamedSharding(mesh, P("d")))
    runner = module.per_device(lambda block: jnp.sum(block, axis=0), mesh)  # the tests' function
    expected = np.arange(24, dtype=np.float32).reshape(4, 2, 3).sum(axis=1)
    np.testing.assert_array_equal(np.asarray(runner(x)), expected)  # called directly
    np.testing.assert_array_equal(np.asarray(jax.jit(runner)(x)), expected)  # traced


def test_exceptions_keep_their_kind_and_the_students_line(module):
    with pytest.raises(ValueError, match="n must be >= 0") as raised:
        module.strict(-1)
    assert raised.value.student_frames[-1]["function"] == "strict"
    assert module.strict(3) == 3  # the worker lives on
    with pytest.raises(TypeError, match="cannot be sent"):
        module.returns_an_object()
    with pytest.raises(AttributeError):
        module.not_there()


@pytest.mark.slow  # its cap is waited out for real
def test_a_hang_costs_the_call_and_the_next_call_gets_a_fresh_worker(module):
    module.strict(0)  # imported: what hangs next is a call, not the import
    module._worker.deadline = time.monotonic() + 8
    started = time.monotonic()
    with pytest.raises(WorkerTimeout, match="did not finish this call"):
        module.sleep(600)
    assert time.monotonic() - started < 15
    module._worker.deadline = time.monotonic() + 60
    assert module.strict(1) == 1


def test_a_crash_costs_the_call(module, capsys):
    """In a worker that ran earlier requests, a call that dies is asked once more of a fresh worker (it may
    have died of what an earlier call did): a call that dies there as well is the crash."""
    module.strict(0)
    forked = module._worker._forked
    with pytest.raises(WorkerCrashed, match="exited with status 5"):
        module.die()
    assert module._worker._forked == forked + 1  # asked again once, of one fresh worker
    assert "asked again of a fresh worker" in capsys.readouterr().out
    assert module.strict(2) == 2


def test_a_call_is_asked_again_only_of_a_worker_that_ran_earlier_requests(module):
    forked = module._worker._forked
    with pytest.raises(WorkerCrashed, match="exited with status 6"):
        module.dies_in_an_old_worker(always=True)  # a fresh worker's first request: its own crash
    assert module._worker._forked == forked + 1
    # the next fresh worker imports the module anew: the first call answers, the second dies in its
    # worker and is answered by a fresh one
    assert module.dies_in_an_old_worker() == 1
    assert module.dies_in_an_old_worker() == 1
    assert module._worker._forked == forked + 3


def test_an_abort_that_falls_in_a_later_call_costs_no_call(module):
    """It answered, then aborted during the next call (as a program that corrupted the worker's heap can,
    when the C library next checks it): that call is asked again of a fresh worker and answers."""
    assert module.aborts_after_answering(1.0) == "answered"
    forked = module._worker._forked
    assert module.sleep(3) is None  # the abort comes a second into it
    assert module._worker._forked == forked + 1


def test_a_worker_that_ends_after_answering_costs_no_later_call(module):
    """It answered, then aborted (a program that corrupted memory can abort as it is freed): the next
    call is not blamed for it, and gets a fresh worker."""
    assert module.aborts_after_answering() == "answered"
    time.sleep(1.5)
    assert module.strict(3) == 3


def test_a_module_that_crashes_or_hangs_at_import_costs_only_itself(tmp_path):
    folder = tmp_path / "submission"
    folder.mkdir()
    (folder / "exits.py").write_text("import os\nos._exit(3)\n")
    (folder / "hangs.py").write_text("while True:\n    pass\n")
    (folder / "fine.py").write_text("def f():\n    return 7\n")
    worker = Worker(folder, isolation=confinement.choose_isolation("auto"), scratch=tmp_path)
    exits, hangs, fine = (
        RemoteModule(folder / name, worker) for name in ("exits.py", "hangs.py", "fine.py")
    )
    worker.deadline = time.monotonic() + 60
    for _ in range(2):  # the second time fails at once, without a new worker
        with pytest.raises(WorkerCrashed, match="exited with status 3.*while importing exits.py"):
            exits.f()
    worker.deadline = time.monotonic() + 6
    with pytest.raises(WorkerTimeout, match="importing hangs.py"):
        hangs.f()
    forked = worker._forked
    with pytest.raises(WorkerTimeout):
        hangs.f()
    assert (
        worker._forked == forked
    )  # the import's hang is remembered: no new worker waits for it again
    worker.deadline = time.monotonic() + 60
    assert fine.f() == 7
    worker.stop()


def test_a_module_that_fails_to_import_fails_every_call_alike(tmp_path):
    (tmp_path / "submission").mkdir()
    (tmp_path / "submission" / "broken.py").write_text("raise RuntimeError('no')\n")
    worker = Worker(
        tmp_path / "submission", isolation=confinement.choose_isolation("auto"), scratch=tmp_path
    )
    worker.deadline = time.monotonic() + 60
    remote = RemoteModule(tmp_path / "submission" / "broken.py", worker)
    from grader.course.implementations import ImplementationImportError

    for _ in range(2):
        with pytest.raises(
            ImplementationImportError, match="RuntimeError while being imported: no"
        ):
            remote.anything()
    worker.stop()


def test_an_lu_decomposition_is_refused_with_the_message_the_tests_expect(module):
    """jax.lax.linalg.lu exports as lapack_sgetrf_ffi, a custom call on jax's stable list that the harness
    never compiles (declared with a too-small result, it corrupts the process's heap)."""
    x = jax.device_put(np.ones(4, np.float32), jax.devices()[0])
    with pytest.raises(UntrustedProgram, match=f"lapack_sgetrf_ffi: {programs.REFUSED}"):
        jax.jit(module.with_lu)(x)
    assert module.strict(4) == 4  # the worker was not at fault


def test_a_derivative_is_checked_as_strictly_as_the_program(module):
    """Hostile: the forward is clean and passes; the derivative jax.grad would run calls lapack_sgetrf_ffi
    (a custom VJP), and is refused before anything of it is compiled."""
    x = jax.device_put(np.arange(1.0, 5.0, dtype=np.float32), jax.devices()[0])
    np.testing.assert_array_equal(
        np.asarray(jax.jit(module.lu_in_its_derivative)(x)), 2 * np.arange(1.0, 5.0)
    )
    with pytest.raises(UntrustedProgram, match=f"lapack_sgetrf_ffi: {programs.REFUSED}"):
        jax.jit(jax.grad(lambda v: module.lu_in_its_derivative(v).sum()))(x)
    assert module.strict(4) == 4  # the worker was not at fault


@jax.jit
def _helper_of_the_tests(v):
    return v * 2


def a_function_of_the_tests(block):
    with jax.named_scope("a_scope_of_the_tests"):
        return _helper_of_the_tests(block).sum(axis=0)


def test_the_program_a_worker_is_given_names_nothing_of_the_tests(module):
    x = jax.device_put(np.ones((8, 3), np.float32), jax.devices()[0])
    texts = module.programs_given(a_function_of_the_tests, x)
    assert texts and all("stablehlo" in text for text in texts)
    for name in (
        "test_stand_in",
        "_helper_of_the_tests",
        "a_function_of_the_tests",
        "a_scope_of_the_tests",
    ):
        assert not any(name in text for text in texts), name


@pytest.mark.parametrize(
    "kind, why",
    [("huge", "larger than the limit"), ("deep", "nested more than"), ("many", "in all")],
)
def test_a_message_out_of_bounds_costs_the_call_and_the_worker(module, kind, why):
    module.strict(0)
    started = time.monotonic()
    with pytest.raises(WorkerBrokeProtocol, match=why):
        module.breaks_bounds(kind)
    assert time.monotonic() - started < 10
    assert module.strict(5) == 5  # a fresh worker


def test_a_worker_that_never_reads_its_programs_costs_the_test_its_time_not_the_harness(module):
    module.strict(0)
    module._worker.deadline = time.monotonic() + 3
    started = time.monotonic()
    with pytest.raises(WorkerTimeout):
        module.breaks_bounds("unread")
    assert time.monotonic() - started < 6
    module._worker.deadline = time.monotonic() + 60
    assert module.strict(6) == 6
