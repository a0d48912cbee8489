"""ex05 -- the collective zoo. All of them, I think."""

import jax
import jax.numpy as jnp
from jax.sharding import PartitionSpec as P


def device_ranks(mesh):
    def rank():
        return jax.lax.axis_index("i")[None]   # a block of one element per device
    return jax.shard_map(rank, mesh=mesh, in_specs=(), out_specs=P("i"))()


def all_gather(x, mesh):
    gather = jax.shard_map(lambda b: jax.lax.all_gather(b, "i", tiled=True), mesh=mesh, in_specs=P("i"),
                           out_specs=P(), check_vma=False)
    return gather(x)


def all_reduce(x, mesh):
    return jax.shard_map(lambda b: jax.lax.psum(b, "i"), mesh=mesh, in_specs=P("i"), out_specs=P())(x)


def reduce_scatter(x, mesh):
    return jax.shard_map(lambda b: jax.lax.psum_scatter(b, "i", tiled=True), mesh=mesh, in_specs=P("i"),
                         out_specs=P("i"))(x)


def all_reduce_via_scatter_gather(x, mesh):
    def body(b):
        return jax.lax.all_gather(jax.lax.psum_scatter(b, "i", tiled=True), "i", tiled=True)
    return jax.shard_map(body, mesh=mesh, in_specs=P("i"), out_specs=P(), check_vma=False)(x)


def all_to_all(x, mesh):
    def body(b):
        return jax.lax.all_to_all(b, "i", split_axis=0, concat_axis=0, tiled=True)
    return jax.shard_map(body, mesh=mesh, in_specs=P("i"), out_specs=P("i"))(x)


def ring_shift(x, mesh, k=1):
    n = mesh.shape["i"]
    pairs = [(d, (d + k) % n) for d in range(n)]
    return jax.shard_map(lambda b: jax.lax.ppermute(b, "i", pairs), mesh=mesh, in_specs=P("i"),
                         out_specs=P("i"))(x)


def ring_all_reduce(x, mesh):
    n = mesh.shape["i"]
    pairs = [(d, (d + 1) % n) for d in range(n)]

    def body(b):
        total = jnp.copy(b)
        for _ in range(n - 1):   # after n - 1 hops every block has visited every device
            b = jax.lax.ppermute(b, "i", pairs)
            total = total + b
        return total
    return jax.shard_map(body, mesh=mesh, in_specs=P("i"), out_specs=P(), check_vma=False)(x)
