"""ex07_collective_matmul, hidden tests: values and shardings on 2, 4 and 8 devices, the compiled
collectives of each function (with the work each device executes and the bytes it sends), and the
temporary memory of the overlapped all-gather matmul.

Points (the module docstring of ex07_collective_matmul.py): the weights are points out of 15, the visible
tests' included. The collectives and the memory are checked by the conftest's helpers, which the visible
tests sample on 8 devices."""

import jax
import pytest
from jax.sharding import PartitionSpec as P

from grader.checks import assert_sharded_like, test_mesh

pytestmark = pytest.mark.hidden

# float32 matmuls summed in different orders; the product's entries are of order 1.
TOL = dict(rtol=1e-5, atol=1e-4)
# rhs dominates: K is much larger than a device's rows of lhs (M/n = 16 or 8) and rhs (256 KiB) is
# 4x lhs. Measured temporary bytes per device against the whole rhs's 262144 (jax 0.10.2, CPU): the
# reference (fori_loop) 155780 at n=4 and 73860 at n=8, a Python-loop ring 163840 and 96256; the
# all-gather version 262144 at both; rings that collect every block before one matmul 327680 to 491520.
MEMORY_SHAPES = dict(M=64, K=512, N=128)


def _mesh(n):
    return test_mesh((n,), ("i",), "explicit")


def _values(impl_fn, layout, n, matmul_inputs, placed, reference_matmul):
    mesh = _mesh(n)
    lhs, rhs = matmul_inputs(M=8 * n, K=16 * n, N=24, seed=n)
    # Under jax.jit: one compiled program, however many steps the ring takes.
    out = jax.jit(lambda a, b: impl_fn(a, b, mesh))(*placed(mesh, layout, lhs, rhs))
    assert_sharded_like(out, mesh, P("i", None), reference_matmul(lhs, rhs), **TOL)


def _collectives(name, n, matmul_inputs, check_collectives, impl):
    lhs, rhs = matmul_inputs(M=4 * n, K=8 * n, N=16, seed=n + 10)
    return check_collectives(impl, name, _mesh(n), lhs, rhs)


@pytest.mark.points(1)
@pytest.mark.rules("values", "layouts")
def test_allgather_matmul_values(impl, n_devices, matmul_inputs, placed, reference_matmul):
    _values(impl.allgather_matmul, "allgather", n_devices, matmul_inputs, placed, reference_matmul)


@pytest.mark.points(1)
@pytest.mark.rules("collectives", "values", "work", "traffic", functions=("allgather_matmul",))
def test_allgather_matmul_uses_one_all_gather(impl, n_devices, matmul_inputs, check_collectives):
    _collectives("allgather_matmul", n_devices, matmul_inputs, check_collectives, impl)


@pytest.mark.points(1)
@pytest.mark.rules("values", "layouts")
def test_allgather_matmul_overlapped_values(
    impl, n_devices, matmul_inputs, placed, reference_matmul
):
    _values(
        impl.allgather_matmul_overlapped,
        "allgather",
        n_devices,
        matmul_inputs,
        placed,
        reference_matmul,
    )


@pytest.mark.points(1)
@pytest.mark.rules(
    "collectives", "values", "work", "traffic", functions=("allgather_matmul_overlapped",)
)
def test_allgather_matmul_overlapped_uses_collective_permute_not_all_gather(
    impl, n_devices, matmul_inputs, check_collectives
):
    _collectives("allgather_matmul_overlapped", n_devices, matmul_inputs, check_collectives, impl)


@pytest.mark.points(1.5)
@pytest.mark.rules("memory", "values")
@pytest.mark.parametrize("n", [4, 8], ids=["4dev", "8dev"])
def test_allgather_matmul_overlapped_temp_memory_below_whole_rhs(
    impl, n, matmul_inputs, check_temp_memory
):
    """XLA's own figure for the temporary buffers one device needs: the all-gather version holds the
    whole rhs at once; blocks travelling round the ring need only a few of its n blocks at a time."""
    lhs, rhs = matmul_inputs(**MEMORY_SHAPES, seed=3)
    check_temp_memory(impl, _mesh(n), lhs, rhs)


@pytest.mark.points(1)
@pytest.mark.rules("values", "layouts")
def test_reducescatter_matmul_values(impl, n_devices, matmul_inputs, placed, reference_matmul):
    _values(
        impl.reducescatter_matmul,
        "reducescatter",
        n_devices,
        matmul_inputs,
        placed,
        reference_matmul,
    )


@pytest.mark.points(1)
@pytest.mark.rules("collectives", "values", "work", "traffic", functions=("reducescatter_matmul",))
def test_reducescatter_matmul_uses_one_reduce_scatter(
    impl, n_devices, matmul_inputs, check_collectives
):
    _collectives("reducescatter_matmul", n_devices, matmul_inputs, check_collectives, impl)


@pytest.mark.points(1)
@pytest.mark.rules("values", "layouts")
def test_reducescatter_matmul_overlapped_values(
    impl, n_devices, matmul_inputs, placed, reference_matmul
):
    _values(
        impl.reducescatter_matmul_overlapped,
        "reducescatter",
        n_devices,
        matmul_inputs,
        placed,
        reference_matmul,
    )


@pytest.mark.points(1)
@pytest.mark.rules(
    "collectives", "values", "work", "traffic", functions=("reducescatter_matmul_overlapped",)
)
def test_reducescatter_matmul_overlapped_uses_only_collective_permute(
    impl, n_devices, matmul_inputs, check_collectives
):
    _collectives(
        "reducescatter_matmul_overlapped", n_devices, matmul_inputs, check_collectives, impl
    )
