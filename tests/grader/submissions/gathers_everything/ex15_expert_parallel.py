"""ex15 whose dispatch_combine gathers the experts' weights instead of sending the tokens: every device
all-gathers w1 and w2 and applies each of its own tokens' experts locally, with the capacity rule: right
values and drops, but no all-to-all, and every device holds every expert."""

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
