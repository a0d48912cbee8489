"""ex05 in which every collective gets every block to every device and works out the result there, with
only the kind of collective its docstring names: each block is padded with zeros (or repeated) to the
size of all of x before the collective runs, so the program sends about n times what the collective
needs. Values, layouts and kinds of collective are right. The ring all-reduce passes the whole padded
array round the ring instead of one block. device_ranks gathers every index to pick its own, and earns
its points all the same: it takes no array, so grading reads no program of it and holds it to no
traffic."""

import jax
import jax.numpy as jnp
from jax.sharding import PartitionSpec as P


def _n(mesh):
    return mesh.shape["i"]


def _padded(block, n):
    """(n, *block.shape): zeros but for this device's block, at its index."""
    return jnp.zeros((n,) + block.shape, block.dtype).at[jax.lax.axis_index("i")].set(block)


def _mine(everything, rows):
    return jax.lax.dynamic_slice_in_dim(everything, jax.lax.axis_index("i") * rows, rows)


def _transposed(blocks, n):
    """The block transpose of (n, rows, ...) blocks, whole: device d's j-th sub-block to block j."""
    sub = blocks.reshape((n, n, -1) + blocks.shape[2:])
    return jnp.swapaxes(sub, 0, 1).reshape((-1,) + blocks.shape[2:])


def device_ranks(mesh):
    def per_device():
        every = jax.lax.all_gather(jax.lax.axis_index("i"), "i")
        return jnp.reshape(every[jax.lax.axis_index("i")], (1,)).astype(jnp.int32)

    return jax.shard_map(per_device, mesh=mesh, in_specs=(), out_specs=P("i"), check_vma=False)()


def all_gather(x, mesh):
    n = _n(mesh)

    def per_device(block):
        return jax.lax.all_gather(_padded(block, n), "i").sum(0).reshape((-1,) + block.shape[1:])

    return jax.shard_map(per_device, mesh=mesh, in_specs=P("i"), out_specs=P(), check_vma=False)(x)


def all_reduce(x, mesh):
    n = _n(mesh)

    def per_device(block):
        return jax.lax.psum(_padded(block, n), "i").sum(0)

    return jax.shard_map(per_device, mesh=mesh, in_specs=P("i"), out_specs=P(), check_vma=False)(x)


def reduce_scatter(x, mesh):
    n = _n(mesh)

    def per_device(block):
        # every device's copy of its block, n times over: the piece each keeps is the whole sum
        whole_sum = jax.lax.psum_scatter(jnp.concatenate([block] * n), "i", tiled=True)
        return _mine(whole_sum, block.shape[0] // n)

    return jax.shard_map(per_device, mesh=mesh, in_specs=P("i"), out_specs=P("i"))(x)


def all_reduce_via_scatter_gather(x, mesh):
    n = _n(mesh)

    def per_device(block):
        whole_sum = jax.lax.psum_scatter(jnp.concatenate([block] * n), "i", tiled=True)
        return jax.lax.all_gather(_mine(whole_sum, block.shape[0] // n), "i", tiled=True)

    return jax.shard_map(per_device, mesh=mesh, in_specs=P("i"), out_specs=P(), check_vma=False)(x)


def all_to_all(x, mesh):
    n = _n(mesh)

    def per_device(block):
        # device j's copies: from each device d, its whole block
        blocks = jax.lax.all_to_all(jnp.concatenate([block] * n), "i", 0, 0, tiled=True)
        return _mine(_transposed(blocks.reshape((n,) + block.shape), n), block.shape[0])

    return jax.shard_map(per_device, mesh=mesh, in_specs=P("i"), out_specs=P("i"))(x)


def ring_shift(x, mesh, k=1):
    n = _n(mesh)
    to_next = [(d, (d + 1) % n) for d in range(n)]

    def per_device(block):
        everything, passing = _padded(block, n), _padded(block, n)
        for _ in range(n - 1):
            passing = jax.lax.ppermute(passing, "i", to_next)
            everything = everything + passing
        return everything[(jax.lax.axis_index("i") - k) % n]

    return jax.shard_map(per_device, mesh=mesh, in_specs=P("i"), out_specs=P("i"))(x)


def ring_all_reduce(x, mesh):
    n = _n(mesh)
    to_next = [(d, (d + 1) % n) for d in range(n)]

    def per_device(block):
        everything, passing = _padded(block, n), _padded(block, n)
        for _ in range(n - 1):
            passing = jax.lax.ppermute(passing, "i", to_next)
            everything = everything + passing
        return everything.sum(0)

    return jax.shard_map(per_device, mesh=mesh, in_specs=P("i"), out_specs=P(), check_vma=False)(x)
