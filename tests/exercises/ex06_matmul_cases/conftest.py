"""What ex06's visible and hidden tests share: each case's input shardings, inputs placed with them, the
float64 NumPy product, the tolerance, and the rules each case's compiled program is graded by (its
collectives, the multiply-adds each device executes and the bytes it sends; case3_reducescatter's output
bytes), checked the same way by the visible and the hidden tests."""

import jax
import numpy as np
import pytest
from jax.sharding import NamedSharding, PartitionSpec as P

from grader.checks import (
    NotReported,
    assert_collectives,
    assert_computes,
    assert_traffic,
    assert_work,
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


# Each case's share of C's I J K multiply-adds per device, and the bytes it may send (float32), from the
# shapes (i, j, k: I, J, K) and the mesh sizes |x| and |y|. In cases 2 to 4 only "x" splits anything: the
# devices along "y" repeat the work of their "x" row, so the share divides by |x| alone. A program in
# which every device gathers A and B and computes all of C executes I J K: |x| times the share of cases 3
# and 4, |x| |y| times case 1's; case 2's share is all of C already, and only the traffic tells a program
# that gathers more than A's blocks along "x" from the case's.
F32 = 4


def all_of_c(i, j, k, nx, ny):
    return i * j * k


def its_block_of_c(i, j, k, nx, ny):
    return i * j * k // (nx * ny)


def its_share_along_x(i, j, k, nx, ny):
    return i * j * k // nx


def nothing(i, j, k, nx, ny):
    return 0


def a_gathered(i, j, k, nx, ny):
    """(|x| - 1) x its (I, J / |x|) block of A: an all-gather of A along "x"."""
    return (nx - 1) * i * (j // nx) * F32


def c_all_reduced(i, j, k, nx, ny):
    """2 (|x| - 1) / |x| of its (I, K) partial C: one all-reduce along "x"."""
    return 2 * (nx - 1) * i * k * F32 // nx


def c_reduce_scattered(i, j, k, nx, ny):
    """(|x| - 1) / |x| of its (I, K) partial C: one reduce-scatter along "x"."""
    return (nx - 1) * i * k * F32 // nx


def b_gathered(i, j, k, nx, ny):
    """(|x| - 1) x its (J, K / |x|) block of B: an all-gather of B along "x"."""
    return (nx - 1) * j * (k // nx) * F32


# case: (share, the share in words, traffic bound, the bound in words)
SHARES = {
    "case1_local": (
        its_block_of_c,
        "C (I J K / (|x| |y|): its block of C)",
        nothing,
        "each device multiplies the blocks it holds",
    ),
    "case2_allgather": (
        all_of_c,
        "C (I J K: all of C on every device, as this case computes it)",
        a_gathered,
        "(|x| - 1) x I J / |x| x 4: its block of A to each other device along 'x', once",
    ),
    "case3_allreduce": (
        its_share_along_x,
        "C (I J K / |x|: its slice of J)",
        c_all_reduced,
        "2 (|x| - 1) / |x| x I K x 4: one all-reduce of its partial C",
    ),
    "case3_reducescatter": (
        its_share_along_x,
        "C (I J K / |x|: its slice of J)",
        c_reduce_scattered,
        "(|x| - 1) / |x| x I K x 4: one reduce-scatter of its partial C",
    ),
    "case4_allgather": (
        its_share_along_x,
        "C (I J K / |x|: its rows of C)",
        b_gathered,
        "(|x| - 1) x J K / |x| x 4: its block of B to each other device along 'x', once",
    ),
}

REPLICATED = (
    "Does every device gather more than its case needs (both operands, or along both mesh axes) and "
    "compute more of C than its part? Multiply the blocks each device holds, and move only what the "
    "case's docstring names."
)


def assert_shares(program, case, mesh, A, B, args):
    """The case's compiled program on `mesh`: each device executes at most 2 x its share of C's work and
    sends at most the bytes of SHARES (its values are checked by the caller, on the same program)."""
    share, share_words, bound, bound_words = SHARES[case]
    sizes = (*A.shape, B.shape[1], mesh.shape["x"], mesh.shape["y"])
    assert_work(
        program, share=share(*sizes), share_of=share_words, what=case, hint=REPLICATED, args=args
    )
    assert_traffic(
        program, at_most=bound(*sizes), bound_of=bound_words, what=case, hint=REPLICATED, args=args
    )


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
    collectives its docstring states, computes C, and keeps to the work and traffic of SHARES."""

    def check(case, mesh, **sizes):
        (A, B), placed = _operands(mesh, case, **sizes)
        program = compiled(lambda a, b: getattr(impl, case)(a, b, mesh), *placed)
        assert_collectives(
            program, *placed, **COLLECTIVES[case], expected=_product(A, B), **TOL, what=case
        )
        assert_shares(program, case, mesh, A, B, placed)

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
