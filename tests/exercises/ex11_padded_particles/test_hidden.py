"""ex11_padded_particles, hidden tests on 2, 4 and 8 devices: expanding_shard_map with several outputs,
replicated outputs and under jax.jit; masked_mean and redistribute_by_slab on random counts and positions
(property-based: derandomized in a student's run, each test's own examples from the grading's secret while
grading; the shapes stay fixed so that every example reuses one compiled program); and the all-to-all in
the compiled redistribution; each compiled function's work and traffic.

Points (the module docstring of ex11_padded_particles.py): the weights are points out of 20; these tests carry
15.5 of them. Never dropping a particle without reporting it is what the exercise teaches, and weighs most."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import example, given, settings, strategies as st
from jax.sharding import NamedSharding, PartitionSpec as P

from grader.checks import assert_close, compiled, test_mesh
from grader.checks.properties import GRADING

pytestmark = pytest.mark.hidden

TOL = dict(rtol=1e-5, atol=1e-6)
CAP = 8
PROGRAM_CAPACITY = 2  # the conftest's: the compiled redistribution's buckets
MAX_DEVICES = 8
# Per device, the slabs of its particles (taken modulo n, so that every mesh size uses the same draws).
SLABS = st.lists(
    st.lists(st.integers(0, MAX_DEVICES - 1), max_size=CAP),
    min_size=MAX_DEVICES,
    max_size=MAX_DEVICES,
)
COUNTS = st.lists(st.integers(0, CAP), min_size=MAX_DEVICES, max_size=MAX_DEVICES)
SEEDS = st.integers(0, 2**16)


def block_stats(block, count, scale):
    """The tests' per-device function: a scalar, a vector and a matrix, from the valid rows only."""
    valid = (jnp.arange(block.shape[0]) < count[0]).astype(block.dtype)
    sums = valid @ block
    return count[0] * scale, sums, jnp.stack([sums, sums * scale])


# block_stats's multiply-adds on one block: the mask times the block (CAP x 3), and 4 products by scale.
BLOCK_STATS_WORK = CAP * 3 + 4


def expected_stats(pos, num, scale, n):
    sums = np.stack([pos.reshape(n, -1, 3)[i, : num[i]].sum(axis=0) for i in range(n)])
    return num * np.float32(scale), sums, np.stack([sums, sums * np.float32(scale)], axis=1)


def stats_inputs(n, padded, random_slabs, place, seed=0):
    mesh = test_mesh((n,), ("d",), "explicit")
    pos, num = padded(random_slabs(n, [(3 * i) % (CAP + 1) for i in range(n)], seed), n, seed=seed)
    scale = np.float32(1.5)
    args = (*place(mesh, pos, num), jax.device_put(scale, NamedSharding(mesh, P())))
    return mesh, args, expected_stats(pos, num, scale, n)


def check_stats(assert_stacked, results, mesh, expected, what):
    assert isinstance(results, (tuple, list)) and len(results) == 3, (
        f"{what}: f returns 3 arrays (a scalar, a vector and a matrix per device), so the stacked result "
        f"should be 3 arrays too, got {type(results).__name__}"
    )
    for name, got, want in zip(("scalar", "vector", "matrix"), results, expected):
        assert_stacked(
            got, mesh, P("d"), want, **TOL, name=f"{what}: the per-device {name}, stacked"
        )


@pytest.mark.points(1)
@pytest.mark.rules("values", "layouts")
def test_expanding_shard_map_stacks_every_output(
    impl, n_devices, padded, random_slabs, place, assert_stacked
):
    mesh, args, expected = stats_inputs(n_devices, padded, random_slabs, place)
    stacked = impl.expanding_shard_map(
        block_stats, mesh, (P("d"), P("d"), P()), (P("d"), P("d"), P("d"))
    )
    check_stats(assert_stacked, stacked(*args), mesh, expected, "called directly")
    # One spec for all the outputs, as jax.shard_map allows.
    stacked = impl.expanding_shard_map(block_stats, mesh, (P("d"), P("d"), P()), P("d"))
    check_stats(
        assert_stacked,
        stacked(*args),
        mesh,
        expected,
        "with out_specs=P('d') for all three outputs",
    )


@pytest.mark.points(1)
@pytest.mark.rules("values", "layouts", "work", "traffic")
def test_expanding_shard_map_under_jit(
    impl, n_devices, padded, random_slabs, place, assert_stacked, assert_stacking_shares
):
    mesh, args, expected = stats_inputs(n_devices, padded, random_slabs, place, seed=1)
    stacked = impl.expanding_shard_map(
        block_stats, mesh, (P("d"), P("d"), P()), (P("d"), P("d"), P("d"))
    )
    program = compiled(stacked, *args)
    check_stats(assert_stacked, program(*args), mesh, expected, "under jax.jit")
    assert_stacking_shares(
        program, args, n_devices, BLOCK_STATS_WORK, "block_stats: CAP x 3 + 4 multiply-adds"
    )


@pytest.mark.points(1)
@pytest.mark.rules("values", "layouts")
def test_expanding_shard_map_keeps_replicated_outputs(
    impl, padded, random_slabs, place, assert_stacked
):
    n = 4
    mesh, args, expected = stats_inputs(n, padded, random_slabs, place, seed=2)

    def f(block, count, scale):
        total, sums, _ = block_stats(block, count, scale)
        return sums, scale * 2

    results = impl.expanding_shard_map(f, mesh, (P("d"), P("d"), P()), (P("d"), P()))(*args)
    assert isinstance(results, (tuple, list)) and len(results) == 2, (
        f"expected 2 results, got {results!r}"
    )
    sums, doubled = results
    assert_stacked(
        sums, mesh, P("d"), expected[1], **TOL, name="the varying output (out spec P('d'))"
    )
    assert_stacked(
        doubled,
        mesh,
        P(),
        np.float32(3.0),
        **TOL,
        name="the output with out spec P(): the same on every device, so no device axis",
    )


@pytest.mark.points(2)
@pytest.mark.rules("values", "work", "traffic")
@settings(GRADING, max_examples=8)
@given(counts=COUNTS, seed=SEEDS)
@example(counts=[0, CAP, 0, 1, 0, 0, 2, 0], seed=0)
def test_masked_mean_values(
    impl, n_devices, padded, random_slabs, place, check_mean, assert_mean_shares, once, counts, seed
):
    """Every example runs one compiled program (the shapes never change), whose work and traffic are
    judged once."""
    mesh = test_mesh((n_devices,), ("d",), "explicit")
    pos, num = padded(random_slabs(n_devices, counts[:n_devices], seed), n_devices, seed=seed)
    args = place(mesh, pos, num)
    program = once("program", lambda: compiled(lambda p, k: impl.masked_mean(p, k, mesh), *args))
    check_mean(program(*args), pos, num, n_devices, **TOL)
    once("shares", lambda: assert_mean_shares(program, args, n_devices))


@pytest.mark.points(1)
@pytest.mark.rules("values")
def test_masked_mean_of_nothing_is_zero(impl, padded, place, reference_mean):
    n = 4
    mesh = test_mesh((n,), ("d",), "explicit")
    # zeros(3) is also what a function that averages nothing at all returns: first some particles.
    pos, num = padded([[0, 1], [], [3, 3, 2], [1]], n, seed=4)
    assert_close(
        np.asarray(impl.masked_mean(*place(mesh, pos, num), mesh)),
        reference_mean(pos, num, n),
        **TOL,
        name=f"masked_mean with counts {num.tolist()}, before the case of no particle at all",
    )
    pos, num = padded([[]] * n, n)
    mean = np.asarray(impl.masked_mean(*place(mesh, pos, num), mesh))
    assert_close(
        mean, np.zeros(3), name="masked_mean when no device holds a particle (documented: zeros)"
    )


@pytest.mark.points(3)
@pytest.mark.rules("properties", "layouts")
@settings(GRADING, max_examples=8)
@given(slabs=SLABS, seed=SEEDS)
@example(slabs=[[]] * MAX_DEVICES, seed=0)
@example(slabs=[[7] * CAP] * MAX_DEVICES, seed=1)
def test_redistribute_keeps_every_particle(
    impl, n_devices, padded, place, check_redistribution, slabs, seed
):
    """capacity = CAP: a bucket can hold everything a device has, so no bucket overflows."""
    mesh = test_mesh((n_devices,), ("d",), "explicit")
    pos, num = padded(slabs, n_devices, seed=seed)
    result = impl.redistribute_by_slab(*place(mesh, pos, num), mesh, CAP)
    check_redistribution(result, pos, num, n_devices, CAP, mesh)


@pytest.mark.points(5)
@pytest.mark.rules("properties", "layouts")
@settings(GRADING, max_examples=8)
@given(slabs=SLABS, seed=SEEDS)
@example(slabs=[[0, 0, 0, 0]] + [[]] * (MAX_DEVICES - 1), seed=0)  # one bucket one too small
@example(slabs=[[7, 7, 7], [1]] + [[]] * (MAX_DEVICES - 2), seed=1)  # a full bucket fits
@example(slabs=[[1, 1, 1, 1, 1, 1], [6, 6], [5, 5, 5]] + [[]] * 5, seed=2)
@example(slabs=[[], [2, 2, 2, 2, 2]] + [[]] * (MAX_DEVICES - 2), seed=3)  # device 1 alone overflows
def test_redistribute_reports_overflow(
    impl, n_devices, padded, place, check_redistribution, slabs, seed
):
    """capacity = 3: crowded slabs overflow their buckets; nothing may be lost without overflow, and with it
    only what did not fit. The examples without overflow (a full bucket fits) check every particle arrives."""
    capacity = 3
    mesh = test_mesh((n_devices,), ("d",), "explicit")
    pos, num = padded(slabs, n_devices, seed=seed)
    result = impl.redistribute_by_slab(*place(mesh, pos, num), mesh, capacity)
    check_redistribution(result, pos, num, n_devices, capacity, mesh)


@pytest.mark.points(1.5)
@pytest.mark.rules("collectives", "properties", "work", "traffic")
def test_redistribute_uses_all_to_all(
    impl, n_devices, padded, random_slabs, assert_redistribution_program
):
    mesh = test_mesh((n_devices,), ("d",), "explicit")
    pos, num = padded(
        random_slabs(n_devices, [CAP - i % 3 for i in range(n_devices)], 5), n_devices, seed=5
    )
    # The rule is earned only by a program that also redistributes correctly (buckets of 2 may overflow:
    # then it must say so, and lose only what did not fit).
    assert_redistribution_program(impl, mesh, pos, num, PROGRAM_CAPACITY)
