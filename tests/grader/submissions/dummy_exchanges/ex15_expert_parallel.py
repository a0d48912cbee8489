"""ex15, hostile: the experts' weights gathered as in gathers_everything, beside two all-to-alls of dummy
(E, capacity, D) buffers whose results are used (times 0), so that the program runs all-to-all exactly twice
with buffers of the right size. The count earns nothing alone: the all-gather and the memory rules catch it."""

import math
from functools import partial

import jax
import jax.numpy as jnp
from jax.sharding import PartitionSpec as P


@partial(jax.jit, static_argnames=("mesh", "capacity"))
def dispatch_combine(x, expert_ids, gates, w1, w2, mesh, capacity: int):
    num_experts = w1.shape[0]

    def per_device(x, ids, gates, w1, w2):
        w1 = jax.lax.all_gather(w1, "ep", tiled=True)  # every expert on every device
        w2 = jax.lax.all_gather(w2, "ep", tiled=True)
        onehot = jax.nn.one_hot(ids, num_experts, dtype=jnp.int32)
        slot = jnp.take_along_axis(jnp.cumsum(onehot, axis=0) - 1, ids[:, None], axis=1)[:, 0]
        kept = slot < capacity
        hidden = jax.nn.relu(jnp.einsum("td,tdh->th", x, w1[ids]))
        out = jnp.einsum("th,thd->td", hidden, w2[ids]) * (gates * kept)[:, None]
        # Two exchanges of the right size, of nothing: the program shows two all-to-alls.
        dummy = jnp.zeros((num_experts, capacity, x.shape[1]), x.dtype) + x[0, 0]
        there = jax.lax.all_to_all(dummy, "ep", split_axis=0, concat_axis=0, tiled=True)
        back = jax.lax.all_to_all(there * 2, "ep", split_axis=0, concat_axis=0, tiled=True)
        out = out + 0.0 * back.sum()
        dropped = jax.lax.psum(jnp.sum(~kept, dtype=jnp.int32), "ep")
        return out, dropped

    spec = P("ep")
    return jax.shard_map(
        per_device,
        mesh=mesh,
        in_specs=(spec, spec, spec, spec, spec),
        out_specs=(spec, P()),
    )(x, expert_ids, gates, w1, w2)


@partial(jax.jit, static_argnames=("mesh", "capacity_factor"))
def moe_layer(x, wg, w1, w2, mesh, capacity_factor: float):
    n = mesh.shape["ep"]
    num_experts = wg.shape[1]
    capacity = math.ceil(capacity_factor * (x.shape[0] / n) / num_experts)
    logits = x @ wg
    expert_ids = jnp.argmax(logits, axis=-1).astype(jnp.int32)
    gates = jnp.take_along_axis(jax.nn.softmax(logits, axis=-1), expert_ids[:, None], axis=-1)[:, 0]
    return dispatch_combine(x, expert_ids, gates, w1, w2, mesh, capacity)
