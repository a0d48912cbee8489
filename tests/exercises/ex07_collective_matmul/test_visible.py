"""ex07_collective_matmul, visible tests (8 devices). Run them with `shardlab check ex07`."""

import jax
from jax.sharding import PartitionSpec as P

from grader.checks import assert_close, assert_sharding, test_mesh

# float32 matmuls summed in different orders; the product's entries are of order 1.
TOL = dict(rtol=1e-5, atol=1e-4)
SHAPES = dict(M=64, K=128, N=32)   # each device: 8 rows of lhs, 16 rows of rhs (or 16 columns of lhs)


def _check(impl_fn, layout, matmul_inputs, placed, reference_matmul):
    mesh = test_mesh((8,), ("i",), "explicit")
    lhs, rhs = matmul_inputs(**SHAPES)
    # Under jax.jit: one compiled program, however many steps the ring takes.
    out = jax.jit(lambda a, b: impl_fn(a, b, mesh))(*placed(mesh, layout, lhs, rhs))
    assert_sharding(out, mesh, P("i", None))
    assert_close(out, reference_matmul(lhs, rhs), **TOL)


def test_allgather_matmul(impl, matmul_inputs, placed, reference_matmul):
    _check(impl.allgather_matmul, "allgather", matmul_inputs, placed, reference_matmul)


def test_allgather_matmul_overlapped(impl, matmul_inputs, placed, reference_matmul):
    _check(impl.allgather_matmul_overlapped, "allgather", matmul_inputs, placed, reference_matmul)


def test_reducescatter_matmul(impl, matmul_inputs, placed, reference_matmul):
    _check(impl.reducescatter_matmul, "reducescatter", matmul_inputs, placed, reference_matmul)


def test_reducescatter_matmul_overlapped(impl, matmul_inputs, placed, reference_matmul):
    _check(impl.reducescatter_matmul_overlapped, "reducescatter", matmul_inputs, placed, reference_matmul)
