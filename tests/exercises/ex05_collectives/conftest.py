"""What ex05's visible and hidden tests share: inputs placed P("i"), NumPy versions of each collective, the
tolerance, and the rules each function's compiled program is graded by (its kinds of collective), checked
the same way by the visible and the hidden tests."""

import jax
import numpy as np
import pytest
from jax.sharding import NamedSharding, PartitionSpec as P

from grader.checks import assert_collectives, assert_sharded_like, test_mesh

EXAMPLE = np.array([3, 1, 4, 1, 5, 9, 2, 6, 5, 3, 5, 8, 9, 7, 1, 2], dtype=np.float32)

# The module docstring's tolerance: sums added in another order differ in the last bits.
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


def blocks_of(x: np.ndarray, n: int) -> list[np.ndarray]:
    return np.split(np.asarray(x, dtype=np.float64), n)


class Expected:
    """The global result of each collective, from the blocks, in float64 NumPy."""

    @staticmethod
    def all_gather(x, n):
        return np.asarray(x, dtype=np.float64)

    @staticmethod
    def all_reduce(x, n):
        return sum(blocks_of(x, n))

    reduce_scatter = all_reduce
    all_reduce_via_scatter_gather = all_reduce
    ring_all_reduce = all_reduce

    @staticmethod
    def all_to_all(x, n):
        # block d, sub-block j -> block j, sub-block d
        sub = np.asarray(x, dtype=np.float64).reshape(n, n, -1, *np.shape(x)[1:])
        return np.swapaxes(sub, 0, 1).reshape(np.shape(x))

    @staticmethod
    def ring_shift(x, n, k=1):
        return np.concatenate(np.roll(np.stack(blocks_of(x, n)), k, axis=0))


def _ring(n):
    mesh = test_mesh((n,), ("i",), "explicit")
    return mesh, lambda x: jax.device_put(
        np.asarray(x, dtype=np.float32), NamedSharding(mesh, P("i"))
    )


@pytest.fixture
def expected():
    return Expected


@pytest.fixture
def contract():
    """{name: (output spec, rows of x per device as a multiple of n, the kinds of collective it may use)}"""
    return CONTRACT


@pytest.fixture
def tol():
    return TOL


@pytest.fixture
def ring():
    """ring(n) -> (mesh, place): the 1-D Explicit mesh "i" over n devices, and x -> x placed P("i")."""
    return _ring


@pytest.fixture
def example():
    return EXAMPLE.copy()


@pytest.fixture
def ranks_rule(impl):
    """check(n): device_ranks on n devices is [0 .. n-1], integers, sharded P("i"), compared exactly."""

    def check(n):
        mesh, _ = _ring(n)
        ranks = impl.device_ranks(mesh)
        assert_sharded_like(ranks, mesh, P("i"), np.arange(n), rtol=0, atol=0, name="device_ranks")
        assert np.issubdtype(ranks.dtype, np.integer), (
            f"device_ranks should hold integers, got {ranks.dtype}"
        )

    return check


@pytest.fixture
def collectives_rule(impl):
    """check(name, n, x): the compiled program of the function `name` on n devices, with x placed P("i"),
    uses the kinds of collective its docstring names and no other, and computes the right values."""

    def check(name, n, x):
        mesh, place = _ring(n)
        kinds = CONTRACT[name][2]
        assert_collectives(
            lambda x: getattr(impl, name)(x, mesh),
            place(x),
            present=kinds,
            only=kinds,
            expected=getattr(Expected, name)(x, n),
            **TOL,
            what=name,
        )

    return check
