"""What ex05's visible and hidden tests share: inputs placed P("i") and NumPy versions of each collective."""

import jax
import numpy as np
import pytest
from jax.sharding import NamedSharding, PartitionSpec as P

from grader.checks import test_mesh

EXAMPLE = np.array([3, 1, 4, 1, 5, 9, 2, 6, 5, 3, 5, 8, 9, 7, 1, 2], dtype=np.float32)


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


@pytest.fixture
def expected():
    return Expected


@pytest.fixture
def ring():
    """ring(n) -> (mesh, place): the 1-D Explicit mesh "i" over n devices, and x -> x placed P("i")."""
    def make(n):
        mesh = test_mesh((n,), ("i",), "explicit")
        return mesh, lambda x: jax.device_put(np.asarray(x, dtype=np.float32), NamedSharding(mesh, P("i")))
    return make


@pytest.fixture
def example():
    return EXAMPLE.copy()
