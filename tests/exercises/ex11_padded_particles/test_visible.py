"""ex11_padded_particles, visible tests (8 devices). Run them with `shardlab check ex11`.

Points (ex11_padded_particles.py's docstring): these tests carry 4.5 of the 20: one each, and 0.5 for the
all-to-all in the compiled redistribution."""

import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import PartitionSpec as P

from grader.checks import compiled, test_mesh

N = 8
CAP = 8  # the conftest's: rows per device
PROGRAM_CAPACITY = 2  # the conftest's: the compiled redistribution's buckets
TOL = dict(rtol=1e-5, atol=1e-6)
# Device 1 is empty, device 3 full; the others hold a few particles each.
SLABS = [[0, 5, 5], [], [2, 7, 1, 1], [3, 3, 0, 6, 4, 2, 7, 5], [6], [4, 4], [0, 1, 2, 3, 4], [7]]


def valid_sum(block, count):
    """The tests' per-device function: the sum of the valid rows (the mask times the block, a (CAP,) x
    (CAP, 3) matmul: CAP x 3 multiply-adds), and the count."""
    valid = (jnp.arange(block.shape[0]) < count[0]).astype(block.dtype)
    return valid @ block, count[0]


VALID_SUM_WORK = CAP * 3  # valid_sum's multiply-adds on one block


@pytest.mark.points(1)
@pytest.mark.rules("values", "layouts", "work", "traffic")
def test_expanding_shard_map(impl, padded, place, assert_stacked, assert_stacking_shares):
    """Called directly, then compiled (valid_sum's stacked results, read from the program that computes
    them): each device executes valid_sum on its own block only (CAP x 3 multiply-adds, at most twice that)
    and sends nothing."""
    mesh = test_mesh((N,), ("d",), "explicit")
    pos, num = padded(SLABS, N)
    counts = impl.expanding_shard_map(lambda p, k: k[0], mesh, (P("d"), P("d")), P("d"))
    assert_stacked(
        counts(*place(mesh, pos, num)), mesh, P("d"), num, name="the count of each device"
    )
    args = place(mesh, pos, num)
    program = compiled(
        impl.expanding_shard_map(valid_sum, mesh, (P("d"), P("d")), (P("d"), P("d"))), *args
    )
    sums, counts = program(*args)
    blocks = pos.reshape(N, -1, 3)
    expected = np.stack([blocks[i, : num[i]].sum(axis=0) for i in range(N)])
    assert_stacked(sums, mesh, P("d"), expected, **TOL, name="the per-device sums")
    assert_stacked(counts, mesh, P("d"), num, name="the per-device counts")
    assert_stacking_shares(program, args, N, VALID_SUM_WORK, "valid_sum: CAP x 3 multiply-adds")


@pytest.mark.points(1)
@pytest.mark.rules("values", "work", "traffic")
def test_masked_mean(impl, padded, place, check_mean, assert_mean_shares):
    """Compiled, its values read from the program: each device masks its own block only and sends at most
    its 3 sums and its count to every other device (and a quarter more)."""
    mesh = test_mesh((N,), ("d",), "explicit")
    pos, num = padded(SLABS, N)
    args = place(mesh, pos, num)
    program = compiled(lambda p, k: impl.masked_mean(p, k, mesh), *args)
    check_mean(program(*args), pos, num, N, **TOL)
    assert_mean_shares(program, args, N)


@pytest.mark.points(1)
@pytest.mark.rules("properties", "layouts")
def test_redistribute_by_slab(impl, padded, place, check_redistribution):
    mesh = test_mesh((N,), ("d",), "explicit")
    pos, num = padded(SLABS, N)
    capacity = 4  # no device has more than 2 particles for one slab: nothing overflows
    result = impl.redistribute_by_slab(*place(mesh, pos, num), mesh, capacity)
    check_redistribution(result, pos, num, N, capacity, mesh)


@pytest.mark.points(1)
@pytest.mark.rules("properties", "layouts")
def test_redistribute_overflow_example(impl, padded, place, check_redistribution):
    mesh = test_mesh((N,), ("d",), "explicit")
    pos, num = padded(SLABS, N)
    # Devices 0, 2, 3 and 5 each have 2 particles for one slab (5, 1, 3 and 4): buckets of 1 cannot hold them.
    # The one that does not fit in each is lost, and overflow must say so; every other particle still arrives.
    capacity = 1
    result = impl.redistribute_by_slab(*place(mesh, pos, num), mesh, capacity)
    check_redistribution(result, pos, num, N, capacity, mesh)


@pytest.mark.points(0.5)
@pytest.mark.rules("collectives", "properties", "work", "traffic")
def test_redistribute_all_to_all(impl, padded, assert_redistribution_program):
    """Compiled under jax.jit (capacity 2: nothing overflows): an all-to-all in the program, which also
    redistributes right; each device works on its own rows and on what it receives, and sends at most its
    buckets and their counts (and a quarter more)."""
    mesh = test_mesh((N,), ("d",), "explicit")
    pos, num = padded(SLABS, N)
    assert_redistribution_program(impl, mesh, pos, num, PROGRAM_CAPACITY)
