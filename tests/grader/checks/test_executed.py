"""Collectives as executed: each weighted by the trip counts of the loops around it, a loop with no static
count reported as such; a permute's pairs judged along one mesh axis; the bytes each moves."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import NamedSharding, PartitionSpec as P

from grader.checks import (
    assert_executed,
    assert_memory,
    assert_operand_bytes,
    assert_permute_pairs,
    compiled,
    executed_collectives,
    test_mesh,
)
from grader.core import facts
from grader.core.results import PipelineSchedule


def ring(n, step=1):
    return [(s, (s + step) % n) for s in range(n)]


def chain(n):
    return [(s, s + 1) for s in range(n - 1)]


@pytest.fixture
def line():
    return test_mesh((4,), ("stage",), "explicit")


@pytest.fixture
def grid():
    return test_mesh((2, 4), ("data", "stage"), "explicit")


def program(mesh, body, spec, *extra, extra_specs=()):
    fn = jax.shard_map(body, mesh=mesh, in_specs=(spec, *extra_specs), out_specs=spec)
    x = jax.device_put(
        jnp.arange(8 * 16, dtype=jnp.float32).reshape(8, 16), NamedSharding(mesh, spec)
    )
    return compiled(fn, x, *extra), x


def test_a_loop_counts_its_trip_count_and_nested_loops_multiply(line):
    def body(x):
        inner = lambda i, c: jax.lax.ppermute(c, "stage", ring(4)) * 2  # noqa: E731
        return jax.lax.fori_loop(0, 5, lambda i, c: jax.lax.fori_loop(0, 3, inner, c), x)

    prog, _ = program(line, body, P("stage"))
    (op,) = executed_collectives(prog)
    assert (op.kind, op.times, op.operand_shapes, op.operand_bytes) == (
        "collective-permute",
        15,
        ((2, 16),),
        2 * 16 * 4,
    )
    assert op.pairs == tuple(ring(4))
    assert assert_executed(prog, "collective-permute", at_least=15, at_most=15) == 15


def test_a_scan_and_a_python_loop_count_alike(line):
    def scanned(x):
        return jax.lax.scan(
            lambda c, _: (jax.lax.ppermute(c, "stage", ring(4)), None), x, length=6
        )[0]

    def unrolled(x):
        for _ in range(6):
            x = jax.lax.ppermute(x, "stage", ring(4))
        return x

    counts = [
        sum(op.times for op in executed_collectives(program(line, f, P("stage"))[0]))
        for f in (scanned, unrolled)
    ]
    assert counts == [6, 6]


def test_a_loop_without_a_static_trip_count_is_reported_never_guessed(line):
    def body(x, steps):
        return jax.lax.fori_loop(0, steps, lambda i, c: jax.lax.ppermute(c, "stage", ring(4)), x)

    prog, x = program(line, body, P("stage"), jnp.int32(3), extra_specs=(P(),))
    (op,) = executed_collectives(prog)
    assert op.times is None
    facts.start()
    with pytest.raises(AssertionError, match="cannot be counted"):
        assert_executed(prog, "collective-permute", at_least=1)
    (check,) = facts.take().collectives
    assert check.passed is False and check.found[0].unknown_trip_count
    assert check.found[0].executed is None


def test_the_count_message_names_what_ran_and_what_should(line):
    def body(x):
        return jax.lax.fori_loop(0, 3, lambda i, c: jax.lax.ppermute(c, "stage", chain(4)), x)

    prog, x = program(line, body, P("stage"))
    facts.start()
    with pytest.raises(AssertionError) as caught:
        assert_executed(
            prog,
            "collective-permute",
            at_least=8,
            at_most=9,
            what="pipeline_forward",
            hint="Is the whole batch going through as one microbatch?",
            schedule=PipelineSchedule(4, 6),
        )
    assert str(caught.value) == (
        "the compiled program of pipeline_forward runs collective-permute 3 times; it should run 8 or 9 "
        "times. Is the whole batch going through as one microbatch?"
    )
    (check,) = facts.take().collectives
    assert check.schedule == PipelineSchedule(4, 6) and check.found[0].executed == 3
    assert check.rule == "collective-permute runs 8 or 9 times"


def test_a_name_or_a_scope_is_not_a_collective(line):
    def body(x):
        with jax.named_scope("collective-permute(source_target_pairs={{0,1}})"):
            return jnp.sin(x)

    prog, _ = program(line, body, P("stage"))
    assert executed_collectives(prog) == []
    with pytest.raises(AssertionError, match="no collective-permute at all"):
        assert_permute_pairs(prog, line, "stage", shape="cycle")


def test_a_count_is_earned_only_with_the_right_values(line):
    def body(x):
        return jax.lax.fori_loop(0, 3, lambda i, c: jax.lax.ppermute(c, "stage", ring(4)), x)

    prog, x = program(line, body, P("stage"))
    with pytest.raises(AssertionError):
        assert_executed(
            prog, "collective-permute", at_least=3, expected=np.zeros((8, 16)), args=(x,)
        )


def test_chain_pairs_pass_a_chain_and_fail_a_cycle_and_the_wrap_fails_a_chain(line):
    def forward(x):
        return jax.lax.ppermute(x, "stage", chain(4))

    prog, _ = program(line, forward, P("stage"))
    assert assert_permute_pairs(prog, line, "stage", shape="chain") == [tuple(chain(4))]
    with pytest.raises(AssertionError, match="not one cycle"):
        assert_permute_pairs(prog, line, "stage", shape="cycle")

    def wrapped(x):
        return jax.lax.ppermute(x, "stage", ring(4))

    prog, _ = program(line, wrapped, P("stage"))
    with pytest.raises(AssertionError, match=r"3->0"):
        assert_permute_pairs(prog, line, "stage", shape="chain")
    assert assert_permute_pairs(prog, line, "stage", shape="cycle")


def test_a_cycle_runs_either_way_but_one_that_skips_a_device_is_not_one(line):
    def backward(x):
        return jax.lax.ppermute(x, "stage", ring(4, step=-1))

    assert assert_permute_pairs(
        program(line, backward, P("stage"))[0], line, "stage", shape="cycle"
    )

    def two_cycles(x):
        return jax.lax.ppermute(x, "stage", ring(4, step=2))

    with pytest.raises(AssertionError, match="not one cycle"):
        assert_permute_pairs(program(line, two_cycles, P("stage"))[0], line, "stage", shape="cycle")


def test_pairs_along_one_axis_of_a_grid_and_the_backward_chain(grid):
    def both_ways(x):
        x = jax.lax.ppermute(x, "stage", chain(4))
        return jax.lax.ppermute(x, "stage", [(t, s) for s, t in chain(4)])

    prog, _ = program(grid, both_ways, P("data", "stage"))
    pairs = assert_permute_pairs(prog, grid, "stage", shape="chain", reverse_too=True)
    assert pairs[0] == ((0, 1), (1, 2), (2, 3), (4, 5), (5, 6), (6, 7))

    def forward_only(x):
        return jax.lax.ppermute(x, "stage", chain(4))

    with pytest.raises(AssertionError, match="reversed pairs"):
        assert_permute_pairs(
            program(grid, forward_only, P("data", "stage"))[0],
            grid,
            "stage",
            shape="chain",
            reverse_too=True,
        )

    def across_rows(x):
        return jax.lax.ppermute(x, ("data", "stage"), [(s, (s + 4) % 8) for s in range(8)])

    with pytest.raises(AssertionError, match="across another mesh axis"):
        assert_permute_pairs(
            program(grid, across_rows, P("data", "stage"))[0], grid, "stage", shape="within"
        )


def test_operand_bytes_of_an_all_to_all_and_the_buffer_recorded(line):
    def exchange(
        x,
    ):  # (2, 16) per device, sent as 4 blocks of (2, 4): XLA:CPU lists each as an operand
        return jax.lax.all_to_all(x, "stage", 1, 0, tiled=True)

    spec = P("stage")
    fn = jax.shard_map(exchange, mesh=line, in_specs=spec, out_specs=spec)
    x = jax.device_put(jnp.ones((8, 16), jnp.float32), NamedSharding(line, spec))
    prog = compiled(fn, x)
    facts.start()
    assert assert_operand_bytes(prog, "all-to-all", at_most=128, buffer_bytes=128) == [128]
    (check,) = facts.take().collectives
    assert check.buffer_bytes == 128 and check.found[0].operand_bytes == 128
    with pytest.raises(
        AssertionError,
        match=r"moves 128 bytes \(\[2, 4\] \+ \[2, 4\] \+ \[2, 4\] \+ \[2, 4\]\) per device",
    ):
        assert_operand_bytes(prog, "all-to-all", at_most=64)
    with pytest.raises(AssertionError, match="has no all-gather"):
        assert_operand_bytes(prog, "all-gather", at_most=64)


def test_memory_bounds(line):
    prog, _ = program(line, lambda x: jax.lax.ppermute(x, "stage", ring(4)), P("stage"))
    memory = assert_memory(prog, argument_below=10**6, temp_below=10**6)
    assert memory.argument_bytes == 2 * 16 * 4
    with pytest.raises(AssertionError, match="its arguments take 128 bytes per device"):
        assert_memory(prog, argument_below=128)


FORGED = '{"known_trip_count":{"n":"99"}}'


@pytest.mark.parametrize(
    "attributes",
    [
        {"known_trip_count": 99, "backend_config": FORGED},  # as values: printed quoted or nested
        {f"a}}, backend_config={FORGED}, b={{x": 1},  # as a key: printed as written
        {f"a}}, metadata={{op_name=1}}, backend_config={FORGED}, b": 1},
    ],
    ids=["values", "key", "key-and-metadata"],
)
@pytest.mark.parametrize("steps", [None, 3], ids=["traced-bound", "static-bound"])
def test_attributes_a_program_sets_cannot_forge_a_trip_count(line, attributes, steps):
    """jax lets a program put frontend attributes on its ops (set_xla_metadata); their keys print as
    written, so one can imitate the compiler's backend_config. Such a program gets no count at all."""
    from jax.experimental.xla_metadata import set_xla_metadata

    def body(x, bound):
        with set_xla_metadata(**attributes):
            return jax.lax.fori_loop(
                0, steps or bound, lambda i, c: jax.lax.ppermute(c, "stage", ring(4)), x
            )

    prog, _ = program(line, body, P("stage"), jnp.int32(3), extra_specs=(P(),))
    assert "known_trip_count" in prog.as_text()
    assert [op.times for op in executed_collectives(prog)] == [None]
    with pytest.raises(AssertionError, match="cannot be counted"):
        assert_executed(prog, "collective-permute", at_least=1)


def test_operands_count_each_array_a_combined_collective_reduces(line):
    """Three psums in one loop step become one all-reduce instruction of three operands, run 4 times: per
    array, that is 12 reductions, and an operand rule sees them where an instruction count sees 4."""

    def body(x):
        def step(i, carry):
            a, b, c = carry
            return tuple(v + jax.lax.psum(v * k, "stage") for k, v in enumerate((a, b, c), 1))

        return sum(jax.lax.fori_loop(0, 4, step, (x, x * 3, x - 1)))

    prog, _ = program(line, body, P("stage"))
    reduces = [op for op in executed_collectives(prog) if op.kind == "all-reduce"]
    per_instruction = sum(op.times for op in reduces)
    per_operand = sum(op.times * len(op.operand_shapes) for op in reduces)
    assert per_operand == 12
    assert assert_executed(prog, "all-reduce", operands=True, at_most=12) == 12
    with pytest.raises(
        AssertionError, match="runs all-reduce operands 12 times; it should run at most 3"
    ):
        assert_executed(prog, "all-reduce", operands=True, at_most=3)
    assert assert_executed(prog, "all-reduce", at_most=12) == per_instruction
