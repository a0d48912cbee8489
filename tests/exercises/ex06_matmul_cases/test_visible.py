"""ex06_matmul_cases, visible tests: each case's values and output sharding on a 2x4 mesh. Run them with
`shardlab check ex06`."""

import jax
import pytest

from grader.checks import assert_sharded_like, test_mesh

TOL = dict(rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("case", ["case1_local", "case2_allgather", "case3_allreduce", "case3_reducescatter",
                                  "case4_allgather"])
def test_case(impl, cases, operands, product, case):
    mesh = test_mesh((2, 4), ("x", "y"), "explicit")
    (A, B), placed = operands(mesh, case)
    out = jax.jit(lambda a, b: getattr(impl, case)(a, b, mesh))(*placed)
    assert_sharded_like(out, mesh, cases[case][2], product(A, B), **TOL, name=f"{case}'s C")
