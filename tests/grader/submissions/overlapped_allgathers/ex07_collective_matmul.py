"""ex07 whose "overlapped" all-gather matmul simply gathers rhs: the values and the output sharding
are right, but the compiled program has an all-gather and no collective-permute, and it holds the
whole rhs at once. Everything else is correct."""

import jax
from jax.sharding import PartitionSpec as P

ROWS = P("i", None)


def allgather_matmul(lhs, rhs, mesh):
    def per_device(a, b):
        return a @ jax.lax.all_gather(b, "i", tiled=True)

    return jax.shard_map(per_device, mesh=mesh, in_specs=(ROWS, ROWS), out_specs=ROWS)(lhs, rhs)


def allgather_matmul_overlapped(lhs, rhs, mesh):
    return allgather_matmul(lhs, rhs, mesh)


def reducescatter_matmul(lhs, rhs, mesh):
    def per_device(a, b):
        return jax.lax.psum_scatter(a @ b, "i", scatter_dimension=0, tiled=True)

    return jax.shard_map(per_device, mesh=mesh, in_specs=(P(None, "i"), ROWS), out_specs=ROWS)(lhs, rhs)


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

    return jax.shard_map(per_device, mesh=mesh, in_specs=(P(None, "i"), ROWS), out_specs=ROWS)(lhs, rhs)
