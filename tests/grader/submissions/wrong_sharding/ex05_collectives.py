"""ex05 with all_gather putting its result back in x's layout: every device gathers all of x (the right
values, one all-gather), then the result is resharded P("i"), as x came in, where P() (replicated) is
asked. Everything else is right."""

import jax
import jax.numpy as jnp
from jax.sharding import PartitionSpec as P


def _on_blocks(fn, mesh, out_spec, **kwargs):
    return jax.shard_map(fn, mesh=mesh, in_specs=P("i"), out_specs=out_spec, **kwargs)


def device_ranks(mesh):
    n = mesh.shape["i"]
    ones = jnp.ones((n,), jnp.int32)   # one element per device, then each writes its index

    def mine(block):
        return block * jax.lax.axis_index("i")

    return jax.shard_map(mine, mesh=mesh, in_specs=P("i"), out_specs=P("i"))(
        jax.device_put(ones, jax.NamedSharding(mesh, P("i"))))


def all_gather(x, mesh):
    def gather(block):
        stacked = jax.lax.all_gather(block, "i")        # (n, rows, ...)
        return stacked.reshape((-1,) + block.shape[1:])
    whole = _on_blocks(gather, mesh, P(), check_vma=False)(x)
    return jax.sharding.reshard(whole, jax.NamedSharding(mesh, P("i")))   # "the same layout as x": wrong


def all_reduce(x, mesh):
    return _on_blocks(lambda b: jax.lax.psum(b, axis_name="i"), mesh, P())(x)


def reduce_scatter(x, mesh):
    n = mesh.shape["i"]

    def scatter(block):
        pieces = block.reshape((n, -1) + block.shape[1:])
        return jax.lax.psum_scatter(pieces, "i", scatter_dimension=0)   # untiled: drops the n axis
    return _on_blocks(scatter, mesh, P("i"))(x)


def all_reduce_via_scatter_gather(x, mesh):
    def twice(block):
        mine = jax.lax.psum_scatter(block, "i", tiled=True)
        return jax.lax.all_gather(mine, "i", axis=0, tiled=True)
    return _on_blocks(twice, mesh, P(), check_vma=False)(x)


def all_to_all(x, mesh):
    n = mesh.shape["i"]

    def swap(block):
        sub = block.reshape((n, -1) + block.shape[1:])
        moved = jax.lax.all_to_all(sub, "i", 0, 0)
        return moved.reshape(block.shape)
    return _on_blocks(swap, mesh, P("i"))(x)


def ring_shift(x, mesh, k=1):
    n = mesh.shape["i"]
    k = k % n
    perm = [(src, (src + k) % n) for src in range(n)]
    return _on_blocks(lambda b: jax.lax.ppermute(b, "i", perm=perm), mesh, P("i"))(x)


def ring_all_reduce(x, mesh):
    n = mesh.shape["i"]
    back = [(j, (j - 1) % n) for j in range(n)]

    def ring(block):
        def step(_, carry):
            acc, travelling = carry
            travelling = jax.lax.ppermute(travelling, "i", back)
            return acc + travelling, travelling
        acc, _ = jax.lax.fori_loop(0, n - 1, step, (block, block))
        return acc
    return _on_blocks(ring, mesh, P(), check_vma=False)(x)
