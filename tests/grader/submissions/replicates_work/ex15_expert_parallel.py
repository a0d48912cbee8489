"""ex15 in which every device does the whole job: dispatch_combine all-gathers every token, expert id, gate
and expert, applies each of the T tokens' experts on every device (the capacity rule applied per source
device's block), and keeps its own rows; moe_layer routes all T tokens on every device the same way. The
values and drops are right; each device executes about n / capacity_factor times its share, and the
experts' weights travel instead of the tokens."""

import math
from functools import partial

import jax
import jax.numpy as jnp
from jax.sharding import PartitionSpec as P


def _everything(x, ids, gates, w1, w2, n, capacity):
    """out and drops of all T tokens, from whole arrays: per source device's block of T/n tokens, the first
    `capacity` routed to each expert are kept."""
    experts = w1.shape[0]
    blocks = ids.reshape(n, -1)
    onehot = jax.nn.one_hot(blocks, experts, dtype=jnp.int32)  # (n, T/n, E)
    place = jnp.take_along_axis(jnp.cumsum(onehot, axis=1) - 1, blocks[..., None], axis=2)
    kept = (place[..., 0] < capacity).reshape(-1)
    hidden = jax.nn.relu(jnp.einsum("td,tdh->th", x, w1[ids]))
    out = jnp.einsum("th,thd->td", hidden, w2[ids]) * gates[:, None]
    return jnp.where(kept[:, None], out, 0.0), jnp.sum(~kept, dtype=jnp.int32)


def _mine(out, n):
    rows = out.shape[0] // n
    return jax.lax.dynamic_slice_in_dim(out, jax.lax.axis_index("ep") * rows, rows)


@partial(jax.jit, static_argnames=("mesh", "capacity"))
def dispatch_combine(x, expert_ids, gates, w1, w2, mesh, capacity: int):
    n = mesh.shape["ep"]

    def per_device(*local):
        x, ids, gates, w1, w2 = (jax.lax.all_gather(a, "ep", tiled=True) for a in local)
        out, dropped = _everything(x, ids, gates, w1, w2, n, capacity)
        return _mine(out, n), dropped

    spec = P("ep")
    # every device computes the same drop count from the gathered arrays
    return jax.shard_map(
        per_device,
        mesh=mesh,
        in_specs=(spec,) * 5,
        out_specs=(spec, P()),
        check_vma=False,
    )(x, expert_ids, gates, w1, w2)


@partial(jax.jit, static_argnames=("mesh", "capacity_factor"))
def moe_layer(x, wg, w1, w2, mesh, capacity_factor: float):
    n = mesh.shape["ep"]
    experts = wg.shape[1]
    capacity = math.ceil(capacity_factor * (x.shape[0] / n) / experts)

    def per_device(x, wg, w1, w2):
        x, w1, w2 = (jax.lax.all_gather(a, "ep", tiled=True) for a in (x, w1, w2))
        logits = x @ wg
        ids = jnp.argmax(logits, axis=-1).astype(jnp.int32)
        gates = jnp.take_along_axis(jax.nn.softmax(logits, axis=-1), ids[:, None], axis=-1)[:, 0]
        out, dropped = _everything(x, ids, gates, w1, w2, n, capacity)
        return _mine(out, n), dropped

    spec = P("ep")
    return jax.shard_map(
        per_device,
        mesh=mesh,
        in_specs=(spec, P(), spec, spec),
        out_specs=(spec, P()),
        check_vma=False,
    )(x, wg, w1, w2)
