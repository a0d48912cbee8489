"""ex06 in which every device gathers what it needs for all of C, computes all of C, and keeps its part,
with the collectives each docstring names (and others where the docstring allows them). Values and
output shardings are right. case1_local cannot replicate without a collective, so its program has
all-gathers where none belongs; case2_allgather, whose every device computes all of C by design,
gathers A along both mesh axes instead of along "x"; case3_allreduce sums zero-padded copies of A and B
with its all-reduce; case3_reducescatter gathers A and B and reduce-scatters the whole C from one
device per row; case4_allgather gathers A's rows as well as B's columns."""

import jax
import jax.numpy as jnp
from jax.sharding import PartitionSpec as P


def _rows(whole, axis, count):
    """This device's `count` rows of `whole` along mesh axis `axis`."""
    return jax.lax.dynamic_slice_in_dim(whole, jax.lax.axis_index(axis) * count, count)


def case1_local(A, B, mesh):
    def per_device(a, b):
        C = jax.lax.all_gather(a, "x", tiled=True) @ jax.lax.all_gather(b, "y", axis=1, tiled=True)
        mine = _rows(C, "x", a.shape[0])
        return jax.lax.dynamic_slice_in_dim(mine, jax.lax.axis_index("y") * b.shape[1], b.shape[1], axis=1)

    return jax.shard_map(per_device, mesh=mesh, in_specs=(P("x", None), P(None, "y")),
                         out_specs=P("x", "y"))(A, B)


def case2_allgather(A, B, mesh):
    ny = mesh.shape["y"]

    def per_device(a_cols, b):
        # every device's block, the copies along "y" too: keep one of each
        gathered = jax.lax.all_gather(a_cols, ("x", "y"), axis=1, tiled=True)
        width = a_cols.shape[1]
        blocks = gathered.reshape(gathered.shape[0], -1, ny, width)[:, :, 0, :]
        return blocks.reshape(gathered.shape[0], -1) @ b

    return jax.shard_map(per_device, mesh=mesh, in_specs=(P(None, "x"), P(None, None)),
                         out_specs=P(None, None), check_vma=False)(A, B)


def case3_allreduce(A, B, mesh):
    nx = mesh.shape["x"]

    def per_device(a_cols, b_rows):
        me = jax.lax.axis_index("x")
        a_pad = jnp.zeros((nx,) + a_cols.shape, a_cols.dtype).at[me].set(a_cols)
        b_pad = jnp.zeros((nx,) + b_rows.shape, b_rows.dtype).at[me].set(b_rows)
        a_all, b_all = jax.lax.psum((a_pad, b_pad), "x")
        A_whole = jnp.concatenate(list(a_all), axis=1)
        B_whole = jnp.concatenate(list(b_all), axis=0)
        return A_whole @ B_whole

    return jax.shard_map(per_device, mesh=mesh, in_specs=(P(None, "x"), P("x", None)),
                         out_specs=P(None, None))(A, B)


def case3_reducescatter(A, B, mesh):
    def per_device(a_cols, b_rows):
        C = jax.lax.all_gather(a_cols, "x", axis=1, tiled=True) @ jax.lax.all_gather(b_rows, "x", tiled=True)
        only_first = jnp.where(jax.lax.axis_index("x") == 0, C, jnp.zeros_like(C))
        return jax.lax.psum_scatter(only_first, "x", scatter_dimension=0, tiled=True)

    return jax.shard_map(per_device, mesh=mesh, in_specs=(P(None, "x"), P("x", None)),
                         out_specs=P("x", None), check_vma=False)(A, B)


def case4_allgather(A, B, mesh):
    def per_device(a_rows, b_cols):
        C = jax.lax.all_gather(a_rows, "x", tiled=True) @ jax.lax.all_gather(b_cols, "x", axis=1, tiled=True)
        return _rows(C, "x", a_rows.shape[0])

    return jax.shard_map(per_device, mesh=mesh, in_specs=(P("x", None), P(None, "x")),
                         out_specs=P("x", None), check_vma=False)(A, B)
