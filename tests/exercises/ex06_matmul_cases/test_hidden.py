"""ex06_matmul_cases, hidden tests: each case's values and output sharding on 2x1, 2x2, 2x4 and 4x2
meshes, the collectives of its compiled program (checked with the values that program computes, the
work each device executes and the bytes it sends), and the per-device output bytes of
case3_reducescatter, read from the compiled program. Points: values 5,
collectives 4, output bytes 1 (and the visible tests 5: values 2, collectives 2, output bytes 1)."""

import jax
import pytest

from grader.checks import assert_sharded_like, test_mesh

pytestmark = pytest.mark.hidden

MESHES = {2: [(2, 1)], 4: [(2, 2)], 8: [(2, 4), (4, 2)]}
CASE_NAMES = [
    "case1_local",
    "case2_allgather",
    "case3_allreduce",
    "case3_reducescatter",
    "case4_allgather",
]


def meshes(n):
    return [test_mesh(shape, ("x", "y"), "explicit") for shape in MESHES[n]]


@pytest.mark.rules("values", "layouts")
@pytest.mark.points(5)
@pytest.mark.parametrize("case", CASE_NAMES)
def test_values(impl, n_devices, cases, operands, product, tol, case):
    for mesh in meshes(n_devices):
        (A, B), placed = operands(mesh, case, seed=n_devices)
        out = jax.jit(lambda a, b, mesh=mesh: getattr(impl, case)(a, b, mesh))(*placed)
        assert_sharded_like(
            out,
            mesh,
            cases[case][2],
            product(A, B),
            **tol,
            name=f"{case}'s C on a {'x'.join(map(str, mesh.shape.values()))} mesh",
        )


@pytest.mark.rules("collectives", "values", "work", "traffic", functions=("{case}",))
@pytest.mark.points(4)
@pytest.mark.parametrize("case", CASE_NAMES)
def test_collectives(n_devices, collectives_rule, case):
    for mesh in meshes(n_devices):
        collectives_rule(case, mesh, rows=8, inner=16, cols=8, seed=5)


@pytest.mark.rules("memory", "values", functions=("case3_reducescatter",))
@pytest.mark.points(1)
@pytest.mark.parametrize("shape", [(2, 2), (4, 2)], ids=["2x2", "4x2"])
def test_reducescatter_output_bytes(shape, output_bytes_rule):
    """XLA's own figure for the bytes of each device's output, read from the compiled program: an
    all-reduce leaves all of C on every device, a reduce-scatter 1/|x| of it."""
    output_bytes_rule(test_mesh(shape, ("x", "y"), "explicit"), rows=32, inner=16, cols=64, seed=9)
