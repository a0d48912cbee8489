"""What ex07's visible and hidden tests share: the inputs, placed on the mesh, and the float64 NumPy product."""

import jax
import numpy as np
import pytest
from jax.sharding import NamedSharding, PartitionSpec as P

from grader.checks import inputs


def _inputs(M, K, N, seed=0):
    rng = inputs.rng(seed)
    return (rng.standard_normal((M, K), dtype=np.float32),
            rng.standard_normal((K, N), dtype=np.float32) / np.float32(np.sqrt(K)))


LAYOUTS = {"allgather": (P("i", None), P("i", None)), "reducescatter": (P(None, "i"), P("i", None))}


def _placed(mesh, layout, lhs, rhs):
    specs = LAYOUTS[layout]
    return tuple(jax.device_put(v, NamedSharding(mesh, spec)) for v, spec in zip((lhs, rhs), specs))


@pytest.fixture
def matmul_inputs():
    """matmul_inputs(M, K, N, seed) -> (lhs, rhs) as float32 NumPy arrays."""
    return _inputs


@pytest.fixture
def placed():
    """placed(mesh, layout, lhs, rhs) -> (lhs, rhs) put on the mesh; layout "allgather" is lhs P("i", None),
    rhs P("i", None), layout "reducescatter" lhs P(None, "i"), rhs P("i", None)."""
    return _placed


@pytest.fixture
def reference_matmul():
    """lhs @ rhs in float64 NumPy, on one device."""
    return lambda lhs, rhs: np.asarray(lhs, np.float64) @ np.asarray(rhs, np.float64)
