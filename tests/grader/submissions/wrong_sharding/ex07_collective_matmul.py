"""ex07 whose reduce-scatter matmul scatters the wrong dimension: psum_scatter over the columns, so
each device ends with all rows and a block of columns, P(None, "i"). The global values are right and
the program has its one reduce-scatter, but the output's sharding is not P("i", None). Everything
else is correct."""

import jax
from jax.sharding import PartitionSpec as P

ROWS, COLS = P("i", None), P(None, "i")


def allgather_matmul(lhs, rhs, mesh):
    def per_device(a, b):
        return a @ jax.lax.all_gather(b, "i", tiled=True)

    return jax.shard_map(per_device, mesh=mesh, in_specs=(ROWS, ROWS), out_specs=ROWS)(lhs, rhs)


def allgather_matmul_overlapped(lhs, rhs, mesh):
    n = mesh.shape["i"]

    def per_device(a, b):
        d = jax.lax.axis_index("i")
        k = b.shape[0]
        perm = [(j, (j + 1) % n) for j in range(n)]
        out = jax.lax.dynamic_slice_in_dim(a, d * k, k, axis=1) @ b
        for s in range(1, n):
            b = jax.lax.ppermute(b, "i", perm)
            out = out + jax.lax.dynamic_slice_in_dim(a, ((d - s) % n) * k, k, axis=1) @ b
        return out

    return jax.shard_map(per_device, mesh=mesh, in_specs=(ROWS, ROWS), out_specs=ROWS)(lhs, rhs)


def reducescatter_matmul(lhs, rhs, mesh):
    def per_device(a, b):
        return jax.lax.psum_scatter(a @ b, "i", scatter_dimension=1, tiled=True)

    return jax.shard_map(per_device, mesh=mesh, in_specs=(COLS, ROWS), out_specs=COLS)(lhs, rhs)


def reducescatter_matmul_overlapped(lhs, rhs, mesh):
    n = mesh.shape["i"]

    def per_device(a, b):
        d = jax.lax.axis_index("i")
        m = a.shape[0] // n
        perm = [(j, (j - 1) % n) for j in range(n)]
        acc = jax.lax.dynamic_slice_in_dim(a, ((d + 1) % n) * m, m) @ b
        for s in range(1, n):
            acc = jax.lax.ppermute(acc, "i", perm) + jax.lax.dynamic_slice_in_dim(a, ((d + 1 + s) % n) * m, m) @ b
        return acc

    return jax.shard_map(per_device, mesh=mesh, in_specs=(COLS, ROWS), out_specs=ROWS)(lhs, rhs)
