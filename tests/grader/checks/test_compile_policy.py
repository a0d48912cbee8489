"""The grader compiles quickly what it checks and fully optimizes what it times (grader.checks.compile_policy):
a quickly compiled program is the same program to every check (its HLO, collectives, memory and flops), and a
program compiled before a measurement is compiled again, optimized, for it."""

import jax
import numpy as np
import pytest
from jax._src import compiler
from jax.sharding import NamedSharding, PartitionSpec as P

from grader.checks.compile_policy import FLAG, compile_quickly, optimized_compiles
from grader.checks.hlo import (
    collectives_in,
    flops_per_device,
    instruction_opcode,
    memory_per_device,
)
from grader.checks.training import make_problem
from grader.course import catalog, paths
from grader.course.implementations import load_module

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


def test_a_quick_compile_is_the_same_program_to_every_check():
    compile_quickly()  # as the harness and the worker are
    for fn, args in programs():
        quick = facts_of(fn, args)
        with optimized_compiles():
            optimized = facts_of(fn, args)
        assert quick == optimized


def test_what_is_timed_is_compiled_again_optimized(monkeypatch):
    compile_quickly()
    levels = []
    real = compiler.get_compile_options

    def recording(*args, **kwargs):
        options = real(*args, **kwargs)
        levels.append(options.executable_build_options.debug_options.xla_backend_optimization_level)
        return options

    monkeypatch.setattr(compiler, "get_compile_options", recording)
    double = jax.jit(lambda v: 2 * v + 1)
    x = np.arange(7.0, dtype=np.float32)
    double(x)
    assert levels == [0]  # quick
    with optimized_compiles():
        assert not jax.config.read(FLAG)
        double(x)  # compiled before: compiled again, optimized
    assert len(levels) == 2 and levels[1] != 0
    assert jax.config.read(FLAG)  # quick again after the measurement


@pytest.fixture(autouse=True)
def _quick_as_the_harness_leaves_it():
    yield
    compile_quickly()
