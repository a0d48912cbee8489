"""ex05_collectives, hidden tests: every collective's values and layout on 2, 4 and 8 devices, with 1-D
and 2-D inputs, and the collectives of its compiled program (one to one on the CPU backend), checked
together with the values that program computes, its work (none) and the bytes each device sends.
Points: device_ranks 2, values 4 and ring_shift's k 1, collectives 3 (and the visible tests 5:
device_ranks 1, the worked example 2, collectives 2)."""

import jax
import numpy as np
import pytest

from grader.checks import assert_sharded_like, inputs

pytestmark = pytest.mark.hidden

FUNCTIONS = [
    "all_gather",
    "all_reduce",
    "reduce_scatter",
    "all_reduce_via_scatter_gather",
    "all_to_all",
    "ring_shift",
    "ring_all_reduce",
]


def _input(contract, n, name, seed, cols=3):
    """x with n blocks; each block's rows a multiple of n, so that a reduce-scatter can split it again."""
    rows = contract[name][1] * n * n
    rng = inputs.rng(seed)
    return (
        rng.standard_normal((rows, cols)).astype(np.float32)
        if cols
        else rng.standard_normal(rows).astype(np.float32)
    )


@pytest.mark.rules("values", "layouts", functions=("device_ranks",))
@pytest.mark.points(2)
def test_device_ranks_values(n_devices, ranks_rule):
    ranks_rule(n_devices)


@pytest.mark.rules("values", "layouts")
@pytest.mark.points(4)
@pytest.mark.parametrize("name", FUNCTIONS)
def test_values(impl, n_devices, ring, expected, contract, tol, name):
    """Each device's shard, for a 2-D x on every mesh size and a 1-D x too."""
    mesh, place = ring(n_devices)
    spec = contract[name][0]
    for cols in (3, 0):
        x = _input(contract, n_devices, name, seed=n_devices + cols, cols=cols)
        out = jax.jit(lambda x: getattr(impl, name)(x, mesh))(place(x))
        assert_sharded_like(
            out,
            mesh,
            spec,
            getattr(expected, name)(x, n_devices),
            **tol,
            name=f"{name} of x with shape {x.shape}",
        )


@pytest.mark.rules("values", "layouts")
@pytest.mark.points(1)
def test_ring_shift_any_k(impl, n_devices, ring, expected, contract, tol):
    """k counts round the ring: negative, zero, or more than n."""
    mesh, place = ring(n_devices)
    x = _input(contract, n_devices, "ring_shift", seed=7)
    for k in (-1, 0, n_devices + 1):
        out = jax.jit(lambda x, k=k: impl.ring_shift(x, mesh, k))(place(x))
        assert_sharded_like(
            out,
            mesh,
            contract["ring_shift"][0],
            expected.ring_shift(x, n_devices, k),
            **tol,
            name=f"ring_shift with k={k} on {n_devices} devices",
        )


@pytest.mark.rules("collectives", "values", "work", "traffic", functions=("{name}",))
@pytest.mark.points(3)
@pytest.mark.parametrize("name", FUNCTIONS)
def test_collectives(n_devices, contract, collectives_rule, name):
    collectives_rule(name, n_devices, _input(contract, n_devices, name, seed=11))
