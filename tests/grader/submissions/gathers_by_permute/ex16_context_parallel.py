"""Hostile ex16: ring_attention collects every K and V block with n - 1 ppermutes round the ring
(a fori_loop, pairs one cycle) into whole K and V, then attends locally: the collectives of a ring,
the memory of a gather."""

import jax
import jax.numpy as jnp
from jax.sharding import PartitionSpec as P


def _local_attention(qb, kb, vb, qpos, kpos, causal):
    scores = qb @ kb.T / jnp.sqrt(jnp.float32(qb.shape[-1]))
    if causal:
        scores = jnp.where(kpos[None, :] <= qpos[:, None], scores, -jnp.inf)
    return jax.nn.softmax(scores, axis=-1) @ vb


def ring_attention(q, k, v, mesh, causal):
    n = mesh.shape["sp"]
    pairs = [(j, (j + 1) % n) for j in range(n)]

    def per_device(qb, kb, vb):
        d = jax.lax.axis_index("sp")
        tb = qb.shape[0]

        def step(s, carry):
            kw, vw, kb, vb = carry
            kb, vb = jax.lax.ppermute((kb, vb), "sp", pairs)
            at = ((d - s - 1) % n) * tb
            kw = jax.lax.dynamic_update_slice_in_dim(kw, kb, at, 0)
            vw = jax.lax.dynamic_update_slice_in_dim(vw, vb, at, 0)
            return kw, vw, kb, vb

        whole = jnp.zeros((n * tb, kb.shape[1]))
        kw = jax.lax.dynamic_update_slice_in_dim(
            jax.lax.pcast(whole, "sp", to="varying"), kb, d * tb, 0
        )
        vw = jax.lax.dynamic_update_slice_in_dim(
            jax.lax.pcast(whole, "sp", to="varying"), vb, d * tb, 0
        )
        kw, vw, _, _ = jax.lax.fori_loop(0, n - 1, step, (kw, vw, kb, vb))
        return _local_attention(qb, kw, vw, d * tb + jnp.arange(tb), jnp.arange(n * tb), causal)

    return jax.shard_map(per_device, mesh=mesh, in_specs=(P("sp"),) * 3, out_specs=P("sp"))(q, k, v)


def ulysses_attention(q, k, v, mesh):
    def per_device(qb, kb, vb):
        qkv = jax.lax.all_to_all(jnp.stack([qb, kb, vb]), "sp", 2, 1, tiled=True)
        scores = jnp.einsum("thd,shd->hts", qkv[0], qkv[1]) / jnp.sqrt(jnp.float32(qb.shape[-1]))
        out = jnp.einsum("hts,shd->thd", jax.nn.softmax(scores, axis=-1), qkv[2])
        return jax.lax.all_to_all(out, "sp", 0, 1, tiled=True)

    return jax.shard_map(per_device, mesh=mesh, in_specs=(P("sp"),) * 3, out_specs=P("sp"))(q, k, v)


def zigzag_order(seq_len, n):
    chunk = seq_len // (2 * n)
    return [
        p for d in range(n) for c in (d, 2 * n - 1 - d) for p in range(c * chunk, (c + 1) * chunk)
    ]
