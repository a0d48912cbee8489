"""ex15, hostile: worst-case buffers (every one of a device's tokens for every expert, capacity T/n), with the
experts' work moved into a fori_loop over the source devices so that XLA's cost analysis, which counts a loop
body once, reports about 1/n of it. Right values and drops; the flops rule must not be earned by a loop, and
each all-to-all still moves T/n rows per expert."""

import math
from functools import partial

import jax
import jax.numpy as jnp
from jax.sharding import PartitionSpec as P


@partial(jax.jit, static_argnames=("mesh", "capacity"))
def dispatch_combine(x, expert_ids, gates, w1, w2, mesh, capacity: int):

    n = mesh.shape["ep"]
    num_experts = w1.shape[0]
    k = num_experts // n

    def per_device(x, ids, gates, w1, w2):
        tokens, d = x.shape
        onehot = jax.nn.one_hot(ids, num_experts, dtype=jnp.int32)  # (T/n, E)
        # A token's slot: how many of this device's earlier tokens chose the same expert.
        slot = jnp.take_along_axis(jnp.cumsum(onehot, axis=0) - 1, ids[:, None], axis=1)[:, 0]
        kept = slot < capacity
        room = tokens  # room for every token: nothing can overflow the buffer
        where = slot
        buf = jnp.zeros((num_experts, room, d), x.dtype).at[ids, where].set(x, mode="drop")
        # (n, k, C, D): group j holds the slots of device j's experts; afterwards, what device j sent us.
        received = jax.lax.all_to_all(
            buf.reshape(n, k, room, d), "ep", split_axis=0, concat_axis=0, tiled=True
        )
        # The worst-case buffer's expert work in a loop over the source devices: XLA's cost
        # analysis counts a loop body once, so the flops reported are 1/n of the work done.
        def one_source(s, done):
            part = jax.lax.dynamic_index_in_dim(received, s, 0, keepdims=False)
            hidden = jax.nn.relu(jnp.einsum("kcd,kdh->kch", part, w1))
            return jax.lax.dynamic_update_index_in_dim(
                done, jnp.einsum("kch,khd->kcd", hidden, w2), s, 0
            )

        done = jax.lax.fori_loop(0, n, one_source, jnp.zeros_like(received))
        back = jax.lax.all_to_all(done, "ep", split_axis=0, concat_axis=0, tiled=True)
        back = back.reshape(num_experts, room, d)
        rows = back[ids, slot]
        out = jnp.where(kept[:, None], rows * gates[:, None], 0.0)
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
