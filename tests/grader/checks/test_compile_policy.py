"""A worker, and a run that times nothing, compile quickly (grader.checks.compile_policy): a quickly compiled
program is the same program as a fully optimized one (its HLO, collectives, memory and flops), so the values
a worker's call returns are those of any correct compilation, and every fact a rule reads is the same. This
suite cross-checks every program its run of the exercise tests compiles; here, that the cross-check is on and
can fail, and who compiles quickly."""

import jax
import numpy as np
import pytest
from jax.sharding import NamedSharding, PartitionSpec as P

from grader.checks import compile_policy
from grader.checks.compile_policy import FLAG, compile_quickly
from grader.checks.hlo import (
    assert_same_program,
    collectives_in,
    compiled,
    flops_per_device,
    instruction_opcode,
    memory_per_device,
)
from grader.checks.training import make_problem
from grader.course import catalog, paths
from grader.course.implementations import load_module
from grader.harness.runner import run_tests
from grader.sandbox.confinement import WorkerLimits
from grader.sandbox.restrictions import Isolation
from grader.worker.stand_in import RemoteModule
from grader.worker.supervisor import Worker

EX07, EX08 = catalog.get("ex07"), catalog.get("ex08")


def programs():
    """A training step under shard_map and a ring matmul, as the tests compile them (the reference's)."""
    ex07, ex08 = load_module(EX07, paths.SOLUTIONS_DIR), load_module(EX08, paths.SOLUTIONS_DIR)
    mesh = jax.make_mesh((8,), ("data",))
    rows = NamedSharding(mesh, P("data", None))
    params, x, y = make_problem(192, (12, 20, 16, 5), 0)
    step = (
        lambda p, x, y: ex08.train_step_shard_map(p, x, y, 0.05, mesh),
        (
            jax.device_put(params, NamedSharding(mesh, P())),
            jax.device_put(x, rows),
            *[jax.device_put(y, rows)],
        ),
    )
    ring = jax.make_mesh((4,), ("i",))
    lhs = jax.device_put(np.ones((64, 512), np.float32), NamedSharding(ring, P(None, "i")))
    rhs = jax.device_put(np.ones((512, 128), np.float32), NamedSharding(ring, P("i", None)))
    matmul = (lambda a, b: ex07.reducescatter_matmul_overlapped(a, b, ring), (lhs, rhs))
    return [step, matmul]


def facts_of(fn, args):
    """What the checks read of a compiled program: every instruction (opcode and attributes, no metadata,
    which names the Python lines it was traced from), its collectives, memory and flops."""
    program = jax.jit(fn).lower(*args).compile()
    instructions = [
        op for line in program.as_text().splitlines() if (op := instruction_opcode(line))
    ]
    return (
        instructions,
        collectives_in(program),
        memory_per_device(program),
        flops_per_device(program),
    )


def test_a_quick_compile_is_the_same_program():
    for fn, args in programs():
        optimized = facts_of(fn, args)
        compile_quickly()  # as a worker does
        try:
            quick = facts_of(fn, args)
        finally:
            jax.config.update(FLAG, False)
        assert quick == optimized


def test_only_a_worker_compiles_quickly(tmp_path):
    """Set in the worker before the student's module is imported; the harness (and a check) optimize fully."""
    assert not jax.config.read(FLAG)  # this process runs the grader's plugin
    module = tmp_path / "ex01_meshes.py"
    module.write_text("import jax\n\n\ndef flag():\n    return jax.config.read(%r)\n" % FLAG)
    worker = Worker(tmp_path, isolation=Isolation.PROCESS, limits=WorkerLimits())
    try:
        assert RemoteModule(module, worker).flag() is True
    finally:
        worker.stop()


def test_the_suite_cross_checks_what_it_compiles_and_a_difference_fails():
    """Set by tests/grader/conftest.py for this process (which also runs the exercise tests on the reference):
    a program compiled the other way must be the same, and one that is not fails, naming what differs."""
    assert compile_policy.cross_checking()
    (step, step_args), (matmul, matmul_args) = programs()
    program = compiled(matmul, *matmul_args)  # cross-checked: the same either way
    with pytest.raises(AssertionError, match="differs in its HLO, its memory, its flops"):
        assert_same_program(program, compiled(step, *step_args))


def test_a_run_that_times_nothing_compiles_quickly(tmp_path):
    """--timing=skip compiles every program of the run quickly; any other policy, fully optimized."""
    test = tmp_path / "test_flag.py"
    test.write_text(
        f"import jax\n\n\ndef test_flag():\n    print('quick', jax.config.read({FLAG!r}))\n"
    )
    for timing, quick in (("skip", True), ("report", False)):
        # the plugin named: a test outside the checkout meets no conftest (the device count is inherited)
        plugin = ("-p", "grader.harness.pytest_plugin")
        run = run_tests("reference", tests=[test], timing=timing, extra_args=(*plugin, "-s"))
        assert f"quick {quick}" in run.output, run.output[-1500:]
