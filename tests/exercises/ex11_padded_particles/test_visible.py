"""ex11_padded_particles, visible tests (8 devices). Run them with `shardlab check ex11`.

Points (ex11_padded_particles.py's docstring): these tests carry 4 of the 20, one each."""

import jax.numpy as jnp
import numpy as np
from jax.sharding import PartitionSpec as P

from grader.checks import assert_close, test_mesh

N = 8
TOL = dict(rtol=1e-5, atol=1e-6)
# Device 1 is empty, device 3 full; the others hold a few particles each.
SLABS = [[0, 5, 5], [], [2, 7, 1, 1], [3, 3, 0, 6, 4, 2, 7, 5], [6], [4, 4], [0, 1, 2, 3, 4], [7]]


def valid_sum(block, count):
    """The tests' per-device function: the sum of the valid rows, and the count."""
    valid = jnp.arange(block.shape[0]) < count[0]
    return jnp.where(valid[:, None], block, 0.0).sum(axis=0), count[0]


def test_expanding_shard_map(impl, padded, place, assert_stacked):
    mesh = test_mesh((N,), ("d",), "explicit")
    pos, num = padded(SLABS, N)
    counts = impl.expanding_shard_map(lambda p, k: k[0], mesh, (P("d"), P("d")), P("d"))
    assert_stacked(counts(*place(mesh, pos, num)), mesh, P("d"), num, name="the count of each device")
    sums, counts = impl.expanding_shard_map(valid_sum, mesh, (P("d"), P("d")), (P("d"), P("d")))(
        *place(mesh, pos, num))
    blocks = pos.reshape(N, -1, 3)
    expected = np.stack([blocks[i, :num[i]].sum(axis=0) for i in range(N)])
    assert_stacked(sums, mesh, P("d"), expected, **TOL, name="the per-device sums")
    assert_stacked(counts, mesh, P("d"), num, name="the per-device counts")


def test_masked_mean(impl, padded, place, reference_mean):
    mesh = test_mesh((N,), ("d",), "explicit")
    pos, num = padded(SLABS, N)
    mean = impl.masked_mean(*place(mesh, pos, num), mesh)
    assert not np.isnan(np.asarray(mean)).any(), f"masked_mean gave NaN with an empty device: {mean}"
    assert_close(mean, reference_mean(pos, num, N), **TOL, name="masked_mean")


def test_redistribute_by_slab(impl, padded, place, check_redistribution):
    mesh = test_mesh((N,), ("d",), "explicit")
    pos, num = padded(SLABS, N)
    capacity = 4   # no device has more than 2 particles for one slab: nothing overflows
    result = impl.redistribute_by_slab(*place(mesh, pos, num), mesh, capacity)
    check_redistribution(result, pos, num, N, capacity, mesh)


def test_redistribute_overflow_example(impl, padded, place, check_redistribution):
    mesh = test_mesh((N,), ("d",), "explicit")
    pos, num = padded(SLABS, N)
    # Devices 0, 2, 3 and 5 each have 2 particles for one slab (5, 1, 3 and 4): buckets of 1 cannot hold them.
    # The one that does not fit in each is lost, and overflow must say so; every other particle still arrives.
    capacity = 1
    result = impl.redistribute_by_slab(*place(mesh, pos, num), mesh, capacity)
    check_redistribution(result, pos, num, N, capacity, mesh)
