"""ex06_matmul_cases, hidden tests: each case's values and output sharding on 2x1, 2x2, 2x4 and 4x2
meshes, the collectives of its compiled program (checked with the values that program computes), and
the per-device output bytes of case3_reducescatter, read from the compiled program."""

import jax
import pytest
from jax.sharding import PartitionSpec as P

from grader.checks import (
    NotReported,
    assert_collectives,
    assert_computes,
    assert_sharded_like,
    compiled,
    memory_per_device,
    test_mesh,
)

pytestmark = pytest.mark.hidden

TOL = dict(rtol=1e-5, atol=1e-5)
MESHES = {2: [(2, 1)], 4: [(2, 2)], 8: [(2, 4), (4, 2)]}
RULES = {
    "case1_local": dict(exactly={}),
    "case2_allgather": dict(present=("all-gather",), absent=("all-reduce",)),
    "case3_allreduce": dict(present=("all-reduce",)),
    "case3_reducescatter": dict(present=("reduce-scatter",), absent=("all-reduce",)),
    "case4_allgather": dict(present=("all-gather",)),
}
CASE_NAMES = list(RULES)


def meshes(n):
    return [test_mesh(shape, ("x", "y"), "explicit") for shape in MESHES[n]]


@pytest.mark.points(3)
@pytest.mark.parametrize("case", CASE_NAMES)
def test_values(impl, n_devices, cases, operands, product, case):
    for mesh in meshes(n_devices):
        (A, B), placed = operands(mesh, case, seed=n_devices)
        out = jax.jit(lambda a, b, mesh=mesh: getattr(impl, case)(a, b, mesh))(*placed)
        assert_sharded_like(out, mesh, cases[case][2], product(A, B), **TOL,
                            name=f"{case}'s C on a {'x'.join(map(str, mesh.shape.values()))} mesh")


@pytest.mark.points(3)
@pytest.mark.parametrize("case", CASE_NAMES)
def test_collectives(impl, n_devices, operands, product, case):
    for mesh in meshes(n_devices):
        (A, B), placed = operands(mesh, case, rows=8, inner=16, cols=8, seed=5)
        assert_collectives(lambda a, b, mesh=mesh: getattr(impl, case)(a, b, mesh), *placed, **RULES[case],
                           expected=product(A, B), **TOL, what=case)


def _reference_allreduce(A, B, mesh):
    """case3 with an all-reduce, written here: its compiled output bytes are what a reduce-scatter divides."""
    return jax.shard_map(lambda a, b: jax.lax.psum(a @ b, "x"), mesh=mesh, in_specs=(P(None, "x"), P("x", None)),
                         out_specs=P(None, None))(A, B)


@pytest.mark.parametrize("shape", [(2, 2), (4, 2)], ids=["2x2", "4x2"])
def test_reducescatter_output_bytes(impl, shape, operands, product):
    """XLA's own figures for the bytes of each device's output, read from two compiled programs: an
    all-reduce leaves all of C on every device, a reduce-scatter 1/|x| of it."""
    mesh = test_mesh(shape, ("x", "y"), "explicit")
    (A, B), placed = operands(mesh, "case3_reducescatter", rows=32, inner=16, cols=64, seed=9)
    program = compiled(lambda a, b: impl.case3_reducescatter(a, b, mesh), *placed)
    assert_computes(program(*placed), product(A, B), **TOL, what="case3_reducescatter")
    try:
        each = memory_per_device(program).output_bytes
        whole = memory_per_device(compiled(lambda a, b: _reference_allreduce(a, b, mesh), *placed)).output_bytes
    except NotReported as exc:
        pytest.skip(str(exc))
    n_x = shape[0]
    assert each * n_x <= whole, (
        f"each device's output of case3_reducescatter takes {each} bytes; an all-reduce leaves all of C "
        f"({whole} bytes) on every device, and a reduce-scatter over |x| = {n_x} devices {whole // n_x}. "
        "Does every device still hold all of C (an all-reduce, or out_specs that replicate)?")
