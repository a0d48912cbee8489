"""What ex06's visible and hidden tests share: each case's input shardings, inputs placed with them, the
float64 NumPy product, the tolerance, and the rules each case's compiled program is graded by (its
collectives; case3_reducescatter's output bytes), checked the same way by the visible and the hidden tests."""

import jax
import numpy as np
import pytest
from jax.sharding import NamedSharding, PartitionSpec as P

from grader.checks import (
    NotReported,
    assert_collectives,
    assert_computes,
    compiled,
    inputs,
    memory_per_device,
)

# The module docstring's tolerance.
TOL = dict(rtol=1e-5, atol=1e-5)

# case: (A's spec, B's spec, C's spec)
CASES = {
    "case1_local": (P("x", None), P(None, "y"), P("x", "y")),
    "case2_allgather": (P(None, "x"), P(None, None), P(None, None)),
    "case3_allreduce": (P(None, "x"), P("x", None), P(None, None)),
    "case3_reducescatter": (P(None, "x"), P("x", None), P("x", None)),
    "case4_allgather": (P("x", None), P(None, "x"), P("x", None)),
}

# case: what its compiled program's collectives must be (the docstrings' rules).
COLLECTIVES = {
    "case1_local": dict(exactly={}),
    "case2_allgather": dict(present=("all-gather",), absent=("all-reduce",)),
    "case3_allreduce": dict(present=("all-reduce",)),
    "case3_reducescatter": dict(present=("reduce-scatter",), absent=("all-reduce",)),
    "case4_allgather": dict(present=("all-gather",)),
}


def _operands(mesh, case, rows=16, inner=24, cols=32, seed=0):
    """A (rows, inner) and B (inner, cols) as float32 NumPy, every dimension a multiple of 8 so that any of
    the test meshes splits it, and (A, B) placed with the case's input shardings."""
    rng = inputs.rng(seed)
    A = rng.standard_normal((rows, inner)).astype(np.float32)
    B = (rng.standard_normal((inner, cols)) / np.sqrt(inner)).astype(np.float32)
    a_spec, b_spec, _ = CASES[case]
    return (A, B), (
        jax.device_put(A, NamedSharding(mesh, a_spec)),
        jax.device_put(B, NamedSharding(mesh, b_spec)),
    )


def _product(A, B):
    return np.asarray(A, np.float64) @ np.asarray(B, np.float64)


@pytest.fixture
def cases():
    return CASES


@pytest.fixture
def tol():
    return TOL


@pytest.fixture
def operands():
    """operands(mesh, case, rows, inner, cols, seed) -> ((A, B) in NumPy, (A, B) placed for the case)."""
    return _operands


@pytest.fixture
def product():
    return _product


@pytest.fixture
def collectives_rule(impl):
    """check(case, mesh, **sizes): the case's compiled program on `mesh`, for operands of these sizes, has the
    collectives its docstring states, and computes C."""

    def check(case, mesh, **sizes):
        (A, B), placed = _operands(mesh, case, **sizes)
        assert_collectives(
            lambda a, b: getattr(impl, case)(a, b, mesh),
            *placed,
            **COLLECTIVES[case],
            expected=_product(A, B),
            **TOL,
            what=case,
        )

    return check


@pytest.fixture
def output_bytes_rule(impl):
    """check(mesh, **sizes): XLA's own figure for the bytes of each device's output, read from the compiled
    program of case3_reducescatter: 1/|x| of all of C (float32), which is what an all-reduce leaves on every
    device. Its program must compute C too."""

    def check(mesh, **sizes):
        (A, B), placed = _operands(mesh, "case3_reducescatter", **sizes)
        program = compiled(lambda a, b: impl.case3_reducescatter(a, b, mesh), *placed)
        assert_computes(program(*placed), _product(A, B), **TOL, what="case3_reducescatter")
        try:
            each = memory_per_device(program).output_bytes
        except NotReported as exc:
            pytest.skip(str(exc))
        whole = A.shape[0] * B.shape[1] * np.dtype(np.float32).itemsize
        n_x = mesh.shape["x"]
        assert each * n_x <= whole, (
            f"each device's output of case3_reducescatter takes {each} bytes; an all-reduce leaves all of C "
            f"({whole} bytes) on every device, and a reduce-scatter over |x| = {n_x} devices {whole // n_x}. "
            "Does every device still hold all of C (an all-reduce, or out_specs that replicate)?"
        )

    return check
