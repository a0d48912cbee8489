"""ex11 whose redistribute_by_slab reports overflow, and then keeps nothing: as soon as any bucket is too
small, every device says it received no particle at all. Overflow is reported exactly when it should be, so a
test that only asks "was anything lost without overflow?" passes it; but overflow excuses only the particles
that did not fit. Everything else (and the whole exchange when nothing overflows) is right."""

from functools import partial

import jax
import jax.numpy as jnp
from jax.sharding import PartitionSpec as P


def expanding_shard_map(f, mesh, in_specs, out_specs):
    def varying(spec):
        return spec is not None and any(entry is not None for entry in spec)

    def per_device(*args):
        results = f(*args)
        specs = jax.tree.broadcast(out_specs, results, is_leaf=lambda s: s is None)
        return jax.tree.map(lambda r, s: jnp.expand_dims(r, 0) if varying(s) else r, results, specs,
                            is_leaf=lambda s: s is None)

    # jax.jit: compiled once, instead of running the body one operation at a time on every call.
    return jax.jit(jax.shard_map(per_device, mesh=mesh, in_specs=in_specs, out_specs=out_specs))


@partial(jax.jit, static_argnames=("mesh",))
def masked_mean(pos, num, mesh):
    axis = mesh.axis_names[0]

    def per_device(block, count):
        valid = jnp.arange(block.shape[0]) < count[0]
        total = jax.lax.psum(jnp.where(valid[:, None], block, 0.0).sum(axis=0), axis)
        how_many = jax.lax.psum(valid.sum(), axis)
        return total / jnp.maximum(how_many, 1).astype(block.dtype)

    return jax.shard_map(per_device, mesh=mesh, in_specs=(P(axis), P(axis)), out_specs=P())(pos, num)


@partial(jax.jit, static_argnames=("mesh", "capacity"))
def redistribute_by_slab(pos, num, mesh, capacity):
    axis = mesh.axis_names[0]
    n = mesh.shape[axis]

    def per_device(block, count):
        rows = block.shape[0]
        valid = jnp.arange(rows) < count[0]
        dest = jnp.clip(jnp.floor(block[:, 0] * n).astype(jnp.int32), 0, n - 1)
        onehot = (valid[:, None] & (dest[:, None] == jnp.arange(n))).astype(jnp.int32)   # (rows, n)
        place = jnp.take_along_axis(jnp.cumsum(onehot, axis=0), dest[:, None], axis=1)[:, 0] - 1
        wanted = onehot.sum(axis=0)                                                     # per destination
        fits = valid & (place < capacity)
        # Padding and rows that do not fit get an out-of-range bucket: mode="drop" leaves them out.
        buckets = jnp.zeros((n, capacity, 3), block.dtype).at[jnp.where(fits, dest, n), place].set(
            block, mode="drop")
        sent = jnp.minimum(wanted, capacity)
        received = jax.lax.all_to_all(buckets, axis, split_axis=0, concat_axis=0)       # (n, capacity, 3)
        got = jax.lax.all_to_all(sent[:, None], axis, split_axis=0, concat_axis=0)[:, 0]  # (n,)
        # Compact: the received rows of source s go after those of sources 0 .. s-1.
        start = jnp.cumsum(got) - got
        slot = jnp.arange(capacity)
        target = jnp.where(slot[None, :] < got[:, None], start[:, None] + slot[None, :], n * capacity)
        out = jnp.zeros((n * capacity, 3), block.dtype).at[target.reshape(-1)].set(
            received.reshape(-1, 3), mode="drop")
        overflow = jax.lax.psum(jnp.any(wanted > capacity).astype(jnp.int32), axis) > 0
        got = jnp.where(overflow, 0, got)   # one bucket too small: give up on the whole exchange
        return out, got.sum(keepdims=True).astype(jnp.int32), overflow

    return jax.shard_map(per_device, mesh=mesh, in_specs=(P(axis), P(axis)),
                         out_specs=(P(axis), P(axis), P()))(pos, num)
