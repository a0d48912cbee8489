"""ex06_matmul_cases, visible tests: each case's values and output sharding on a 2x4 mesh, the collectives
of its compiled program with each device's work and bytes sent on a 4x2 mesh, and the per-device output
bytes of case3_reducescatter on 2x4. Run them with `shardlab check ex06`. Points: values 2, collectives 2,
output bytes 1 (of 15: the hidden tests grade the same rules on 2x1, 2x2, 2x4 and 4x2 meshes, with other
inputs)."""

import jax
import pytest

from grader.checks import assert_sharded_like, test_mesh

CASE_NAMES = [
    "case1_local",
    "case2_allgather",
    "case3_allreduce",
    "case3_reducescatter",
    "case4_allgather",
]


@pytest.fixture
def mesh():
    return test_mesh((2, 4), ("x", "y"), "explicit")


@pytest.mark.rules("values", "layouts")
@pytest.mark.points(2)
@pytest.mark.parametrize("case", CASE_NAMES)
def test_case(impl, mesh, cases, operands, product, tol, case):
    (A, B), placed = operands(mesh, case)
    out = jax.jit(lambda a, b: getattr(impl, case)(a, b, mesh))(*placed)
    assert_sharded_like(out, mesh, cases[case][2], product(A, B), **tol, name=f"{case}'s C")


@pytest.mark.rules("collectives", "values", "work", "traffic", functions=("{case}",))
@pytest.mark.points(2)
@pytest.mark.parametrize("case", CASE_NAMES)
def test_collectives_on_4x2(collectives_rule, case):
    """The collectives each docstring states, in the program compiled for A (32, 64) and B (64, 32) drawn for
    the test on a 4x2 mesh; that program must compute C too, each device executing at most 2 x its share of
    the work and sending no more than its case needs. With four devices along "x", every device computing
    all of C executes twice the bound of cases 3 and 4."""
    mesh = test_mesh((4, 2), ("x", "y"), "explicit")
    collectives_rule(case, mesh, rows=32, inner=64, cols=32, seed=1)


@pytest.mark.rules("memory", "values", functions=("case3_reducescatter",))
@pytest.mark.points(1)
def test_reducescatter_output_bytes_on_2x4(mesh, output_bytes_rule):
    """Each device's output of case3_reducescatter takes 1/|x| of the bytes of an all-reduce's (all of C)."""
    output_bytes_rule(mesh, seed=1)
