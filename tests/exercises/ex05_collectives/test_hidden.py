"""ex05_collectives, hidden tests: every collective's values and layout on 2, 4 and 8 devices, with 1-D
and 2-D inputs, and the collectives of its compiled program (one to one on the CPU backend), checked
together with the values that program computes."""

import jax
import numpy as np
import pytest
from jax.sharding import PartitionSpec as P

from grader.checks import assert_collectives, assert_sharded_like, inputs

pytestmark = pytest.mark.hidden

TOL = dict(rtol=1e-5, atol=1e-5)

# name: (output spec, rows of x per device as a multiple of n, the collectives its program may contain).
# The kinds are strict (on the CPU backend each shard_map collective is one HLO op, and jit inserts
# none of its own here); the counts are not: a ring all-reduce unrolled in Python has n - 1
# collective-permutes, in a fori_loop one.
CONTRACT = {
    "all_gather": (P(), 2, ("all-gather",)),
    "all_reduce": (P(), 2, ("all-reduce",)),
    "reduce_scatter": (P("i"), 2, ("reduce-scatter",)),
    "all_reduce_via_scatter_gather": (P(), 2, ("reduce-scatter", "all-gather")),
    "all_to_all": (P("i"), 2, ("all-to-all",)),
    "ring_shift": (P("i"), 1, ("collective-permute",)),
    "ring_all_reduce": (P(), 2, ("collective-permute",)),
}
FUNCTIONS = list(CONTRACT)


def _input(n, name, seed, cols=3):
    """x with n blocks; each block's rows a multiple of n, so that a reduce-scatter can split it again."""
    rows = CONTRACT[name][1] * n * n
    rng = inputs.rng(seed)
    return rng.standard_normal((rows, cols)).astype(np.float32) if cols else \
        rng.standard_normal(rows).astype(np.float32)


def test_device_ranks_values(impl, n_devices, ring):
    mesh, _ = ring(n_devices)
    ranks = impl.device_ranks(mesh)
    assert_sharded_like(ranks, mesh, P("i"), np.arange(n_devices), rtol=0, atol=0, name="device_ranks")
    assert np.issubdtype(ranks.dtype, np.integer), f"device_ranks should hold integers, got {ranks.dtype}"


@pytest.mark.points(3)
@pytest.mark.parametrize("name", FUNCTIONS)
def test_values(impl, n_devices, ring, expected, name):
    """Each device's shard, for a 2-D x on every mesh size and a 1-D x too."""
    mesh, place = ring(n_devices)
    spec = CONTRACT[name][0]
    for cols in (3, 0):
        x = _input(n_devices, name, seed=n_devices + cols, cols=cols)
        out = jax.jit(lambda x: getattr(impl, name)(x, mesh))(place(x))
        assert_sharded_like(out, mesh, spec, getattr(expected, name)(x, n_devices), **TOL,
                            name=f"{name} of x with shape {x.shape}")


def test_ring_shift_any_k(impl, n_devices, ring, expected):
    """k counts round the ring: negative, zero, or more than n."""
    mesh, place = ring(n_devices)
    x = _input(n_devices, "ring_shift", seed=7)
    for k in (-1, 0, n_devices + 1):
        out = jax.jit(lambda x, k=k: impl.ring_shift(x, mesh, k))(place(x))
        assert_sharded_like(out, mesh, P("i"), expected.ring_shift(x, n_devices, k), **TOL,
                            name=f"ring_shift with k={k} on {n_devices} devices")


@pytest.mark.points(3)
@pytest.mark.parametrize("name", FUNCTIONS)
def test_collectives(impl, n_devices, ring, expected, name):
    mesh, place = ring(n_devices)
    x = _input(n_devices, name, seed=11)
    kinds = CONTRACT[name][2]
    assert_collectives(lambda x: getattr(impl, name)(x, mesh), place(x), present=kinds, only=kinds,
                       expected=getattr(expected, name)(x, n_devices), **TOL, what=name)
