"""ex07_collective_matmul, hidden tests: values and shardings on 2, 4 and 8 devices, the compiled
collectives of each function, and the temporary memory of the overlapped all-gather matmul."""

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


def _collectives(name, layout, n, matmul_inputs, placed, reference_matmul, impl, **rule):
    mesh = _mesh(n)
    lhs, rhs = matmul_inputs(M=4 * n, K=8 * n, N=16, seed=n + 10)
    fn = getattr(impl, name)
    return assert_collectives(lambda a, b: fn(a, b, mesh), *placed(mesh, layout, lhs, rhs), **rule,
                              expected=reference_matmul(lhs, rhs), **TOL, what=name)


def test_allgather_matmul_values(impl, n_devices, matmul_inputs, placed, reference_matmul):
    _values(impl.allgather_matmul, "allgather", n_devices, matmul_inputs, placed, reference_matmul)


def test_allgather_matmul_uses_one_all_gather(impl, n_devices, matmul_inputs, placed, reference_matmul):
    _collectives("allgather_matmul", "allgather", n_devices, matmul_inputs, placed, reference_matmul, impl,
                 exactly={"all-gather": 1})


def test_allgather_matmul_overlapped_values(impl, n_devices, matmul_inputs, placed, reference_matmul):
    _values(impl.allgather_matmul_overlapped, "allgather", n_devices, matmul_inputs, placed, reference_matmul)


def test_allgather_matmul_overlapped_uses_collective_permute_not_all_gather(impl, n_devices, matmul_inputs, placed,
                                                                          reference_matmul):
    _collectives("allgather_matmul_overlapped", "allgather", n_devices, matmul_inputs, placed, reference_matmul,
                 impl, present=("collective-permute",), absent=("all-gather",))


@pytest.mark.parametrize("n", [4, 8], ids=["4dev", "8dev"])
def test_allgather_matmul_overlapped_temp_memory_below_whole_rhs(impl, n, matmul_inputs, placed, reference_matmul):
    """XLA's own figure for the temporary buffers one device needs: the all-gather version holds the
    whole rhs at once; blocks travelling round the ring need only a few of its n blocks at a time."""
    mesh = _mesh(n)
    lhs, rhs = matmul_inputs(**MEMORY_SHAPES, seed=3)
    args = placed(mesh, "allgather", lhs, rhs)
    program = compiled(lambda a, b: impl.allgather_matmul_overlapped(a, b, mesh), *args)
    assert_computes(program(*args), reference_matmul(lhs, rhs), **TOL, what="allgather_matmul_overlapped")
    try:
        temp = memory_per_device(program).temp_bytes
    except NotReported as exc:
        pytest.skip(str(exc))
    whole_rhs = rhs.size * rhs.dtype.itemsize
    assert temp < whole_rhs, (
        f"with lhs {lhs.shape} and rhs {rhs.shape} on {n} devices, the compiled allgather_matmul_overlapped "
        f"needs {temp} bytes of temporary memory per device, the whole rhs is {whole_rhs} bytes (one block "
        f"{whole_rhs // n}): it must stay below the whole rhs. Does your function gather rhs, or collect "
        "every block before multiplying? Multiply each block as it arrives and keep only the running result.")


def test_reducescatter_matmul_values(impl, n_devices, matmul_inputs, placed, reference_matmul):
    _values(impl.reducescatter_matmul, "reducescatter", n_devices, matmul_inputs, placed, reference_matmul)


def test_reducescatter_matmul_uses_one_reduce_scatter(impl, n_devices, matmul_inputs, placed, reference_matmul):
    _collectives("reducescatter_matmul", "reducescatter", n_devices, matmul_inputs, placed, reference_matmul, impl,
                 exactly={"reduce-scatter": 1})


def test_reducescatter_matmul_overlapped_values(impl, n_devices, matmul_inputs, placed, reference_matmul):
    _values(impl.reducescatter_matmul_overlapped, "reducescatter", n_devices, matmul_inputs, placed,
            reference_matmul)


def test_reducescatter_matmul_overlapped_uses_only_collective_permute(impl, n_devices, matmul_inputs, placed,
                                                                      reference_matmul):
    _collectives("reducescatter_matmul_overlapped", "reducescatter", n_devices, matmul_inputs, placed,
                 reference_matmul, impl, only=("collective-permute",))
