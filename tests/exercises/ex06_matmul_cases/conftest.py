"""What ex06's visible and hidden tests share: each case's input shardings, inputs placed with them, and
the float64 NumPy product."""

import jax
import numpy as np
import pytest
from jax.sharding import NamedSharding, PartitionSpec as P

from grader.checks import inputs

# case: (A's spec, B's spec, C's spec)
CASES = {
    "case1_local": (P("x", None), P(None, "y"), P("x", "y")),
    "case2_allgather": (P(None, "x"), P(None, None), P(None, None)),
    "case3_allreduce": (P(None, "x"), P("x", None), P(None, None)),
    "case3_reducescatter": (P(None, "x"), P("x", None), P("x", None)),
    "case4_allgather": (P("x", None), P(None, "x"), P("x", None)),
}


def _operands(mesh, case, rows=16, inner=24, cols=32, seed=0):
    """A (rows, inner) and B (inner, cols) as float32 NumPy, every dimension a multiple of 8 so that any of
    the test meshes splits it, and (A, B) placed with the case's input shardings."""
    rng = inputs.rng(seed)
    A = rng.standard_normal((rows, inner)).astype(np.float32)
    B = (rng.standard_normal((inner, cols)) / np.sqrt(inner)).astype(np.float32)
    a_spec, b_spec, _ = CASES[case]
    return (A, B), (jax.device_put(A, NamedSharding(mesh, a_spec)), jax.device_put(B, NamedSharding(mesh, b_spec)))


@pytest.fixture
def cases():
    return CASES


@pytest.fixture
def operands():
    """operands(mesh, case, rows, inner, cols, seed) -> ((A, B) in NumPy, (A, B) placed for the case)."""
    return _operands


@pytest.fixture
def product():
    return lambda A, B: np.asarray(A, np.float64) @ np.asarray(B, np.float64)
