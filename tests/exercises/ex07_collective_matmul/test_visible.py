"""ex07_collective_matmul, visible tests (8 devices). Run them with `shardlab check ex07`.

Points (ex07_collective_matmul.py's docstring): these tests carry 5.5 of the 15. The hidden ones check the
values and shardings on 2, 4 and 8 devices with other shapes, the compiled collectives on 2, 4 and 8
devices, and the temporary memory on 4 and 8 devices with another rhs."""

import jax
import pytest
from jax.sharding import PartitionSpec as P

from grader.checks import assert_close_or_named, assert_sharding, test_mesh

# float32 matmuls summed in different orders; the product's entries are of order 1.
TOL = dict(rtol=1e-5, atol=1e-4)
# each device: 8 rows of lhs, 16 rows of rhs (or 16 columns of lhs)
SHAPES = dict(M=64, K=128, N=32)
# rhs (128 KiB) much larger than a device's 4 rows of lhs: a ring holds a block or two of it, a gather all of it.
MEMORY_SHAPES = dict(M=32, K=256, N=128)
FUNCTIONS = [
    "allgather_matmul",
    "allgather_matmul_overlapped",
    "reducescatter_matmul",
    "reducescatter_matmul_overlapped",
]


def _mesh():
    return test_mesh((8,), ("i",), "explicit")


def _check(impl_fn, layout, matmul_inputs, placed, reference_matmul, wrong_variants):
    mesh = _mesh()
    lhs, rhs = matmul_inputs(**SHAPES)
    # Under jax.jit: one compiled program, however many steps the ring takes.
    out = jax.jit(lambda a, b: impl_fn(a, b, mesh))(*placed(mesh, layout, lhs, rhs))
    assert_sharding(out, mesh, P("i", None))
    variants = wrong_variants(lhs, rhs, mesh.shape["i"], layout)
    assert_close_or_named(out, reference_matmul(lhs, rhs), variants, **TOL)


@pytest.mark.points(1)
@pytest.mark.rules("values", "layouts")
def test_allgather_matmul(impl, matmul_inputs, placed, reference_matmul, wrong_variants):
    _check(
        impl.allgather_matmul, "allgather", matmul_inputs, placed, reference_matmul, wrong_variants
    )


@pytest.mark.points(1)
@pytest.mark.rules("values", "layouts")
def test_allgather_matmul_overlapped(impl, matmul_inputs, placed, reference_matmul, wrong_variants):
    _check(
        impl.allgather_matmul_overlapped,
        "allgather",
        matmul_inputs,
        placed,
        reference_matmul,
        wrong_variants,
    )


@pytest.mark.points(1)
@pytest.mark.rules("values", "layouts")
def test_reducescatter_matmul(impl, matmul_inputs, placed, reference_matmul, wrong_variants):
    _check(
        impl.reducescatter_matmul,
        "reducescatter",
        matmul_inputs,
        placed,
        reference_matmul,
        wrong_variants,
    )


@pytest.mark.points(1)
@pytest.mark.rules("values", "layouts")
def test_reducescatter_matmul_overlapped(
    impl, matmul_inputs, placed, reference_matmul, wrong_variants
):
    _check(
        impl.reducescatter_matmul_overlapped,
        "reducescatter",
        matmul_inputs,
        placed,
        reference_matmul,
        wrong_variants,
    )


@pytest.mark.points(1)
@pytest.mark.rules("collectives", "values", "work", "traffic", functions=("{name}",))
@pytest.mark.parametrize("name", FUNCTIONS)
def test_compiled_collectives(impl, name, matmul_inputs, check_collectives):
    """Each function's docstring says which collectives its compiled program may run: exactly one all-gather,
    collective-permute and no all-gather, exactly one reduce-scatter, only collective-permute. The program
    must also compute the product, each device executing at most 2 x its share of the work and sending no
    more than its docstring's bound."""
    lhs, rhs = matmul_inputs(**SHAPES, seed=1)
    check_collectives(impl, name, _mesh(), lhs, rhs)


@pytest.mark.points(0.5)
@pytest.mark.rules("memory", "values")
def test_allgather_matmul_overlapped_temp_memory(impl, matmul_inputs, check_temp_memory):
    """XLA's temporary bytes per device of the compiled allgather_matmul_overlapped stay below the whole rhs."""
    lhs, rhs = matmul_inputs(**MEMORY_SHAPES, seed=2)
    check_temp_memory(impl, _mesh(), lhs, rhs)
