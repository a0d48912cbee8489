"""A correct ex07 written from the exercise contract alone (the docstrings), deliberately unlike the
reference: Python loops where it has fori_loop and back, rings turning the other way, einsum, blocks
picked by reshaping instead of slicing, an untiled psum_scatter."""

from functools import partial

import jax
import jax.numpy as jnp


def allgather_matmul(lhs, rhs, mesh):
    @partial(jax.shard_map, mesh=mesh, in_specs=(jax.P("i"), jax.P("i")), out_specs=jax.P("i"))
    def per_device(a, b):
        whole = jax.lax.all_gather(b, axis_name="i")          # (n, K/n, N), stacked
        return jnp.einsum("mk,kn->mn", a, whole.reshape(-1, whole.shape[-1]))

    return per_device(lhs, rhs)


def allgather_matmul_overlapped(lhs, rhs, mesh):
    n = mesh.axis_sizes[mesh.axis_names.index("i")]
    forward = [(src, (src + 1) % n) for src in range(n)]      # d sends to d + 1: at step s, d holds block d - s

    @partial(jax.shard_map, mesh=mesh, in_specs=(jax.P("i"), jax.P("i")), out_specs=jax.P("i"))
    def per_device(a, b):
        me = jax.lax.axis_index("i")
        a_blocks = a.reshape(a.shape[0], n, b.shape[0])       # column blocks of my rows
        total = None
        for s in range(n):
            j = (me - s + n) % n
            part = jnp.einsum("mk,kn->mn", a_blocks[:, j, :], b)
            total = part if total is None else total + part
            if s + 1 < n:
                b = jax.lax.ppermute(b, "i", perm=forward)
        return total

    return per_device(lhs, rhs)


def reducescatter_matmul(lhs, rhs, mesh):
    n = mesh.axis_sizes[mesh.axis_names.index("i")]

    @partial(jax.shard_map, mesh=mesh, in_specs=(jax.P(None, "i"), jax.P("i")), out_specs=jax.P("i"))
    def per_device(a, b):
        partial_product = jnp.dot(a, b)
        stacked = partial_product.reshape(n, -1, partial_product.shape[-1])
        return jax.lax.psum_scatter(stacked, "i", scatter_dimension=0, tiled=False)

    return per_device(lhs, rhs)


def reducescatter_matmul_overlapped(lhs, rhs, mesh):
    n = mesh.axis_sizes[mesh.axis_names.index("i")]
    forward = [(src, (src + 1) % n) for src in range(n)]   # sums move d -> d + 1: at step s, d adds to block d - 1 - s

    @partial(jax.shard_map, mesh=mesh, in_specs=(jax.P(None, "i"), jax.P("i")), out_specs=jax.P("i"))
    def per_device(a, b):
        me = jax.lax.axis_index("i")
        a_blocks = a.reshape(n, a.shape[0] // n, a.shape[1])     # row blocks of my columns

        def mine(s):
            return jnp.einsum("mk,kn->mn", a_blocks[(me - 1 - s) % n], b)

        def step(s, running):
            return jax.lax.ppermute(running, "i", perm=forward) + mine(s)

        return jax.lax.fori_loop(1, n, step, mine(0))

    return per_device(lhs, rhs)
