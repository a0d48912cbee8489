"""ex16 whose ring sends d -> d + 1 without the wrap from the last device to the first: a chain, so
device 0 receives zeros and the blocks never go all the way round (the rest is right)."""

import jax
import jax.numpy as jnp
from jax.sharding import PartitionSpec as P


def _merge(qb, kb, vb, qpos, kpos, causal, m, den, o):
    scores = qb @ kb.T / jnp.sqrt(jnp.float32(qb.shape[-1]))
    if causal:
        scores = jnp.where(kpos[None, :] <= qpos[:, None], scores, -jnp.inf)
    new = jnp.maximum(m, scores.max(axis=1))
    shift = jnp.where(jnp.isfinite(new), new, 0.0)
    p = jnp.exp(scores - shift[:, None])
    c = jnp.exp(m - shift)
    return new, den * c + p.sum(axis=1), o * c[:, None] + p @ vb


def ring_attention(q, k, v, mesh, causal):
    n = mesh.shape["sp"]
    pairs = [(j, j + 1) for j in range(n - 1)]

    def per_device(qb, kb, vb):
        d = jax.lax.axis_index("sp")
        tb = qb.shape[0]
        qpos = d * tb + jnp.arange(tb)

        def step(s, carry):
            m, den, o, kb, vb = carry
            kpos = ((d - s) % n) * tb + jnp.arange(tb)
            m, den, o = _merge(qb, kb, vb, qpos, kpos, causal, m, den, o)
            kb, vb = jax.lax.ppermute((kb, vb), "sp", pairs)
            return m, den, o, kb, vb

        start = (jnp.full((tb,), -jnp.inf), jnp.zeros((tb,)), jnp.zeros(qb.shape))
        start = jax.lax.pcast(start, "sp", to="varying")
        m, den, o, kb, vb = jax.lax.fori_loop(0, n - 1, step, (*start, kb, vb))
        kpos = ((d - n + 1) % n) * tb + jnp.arange(tb)
        m, den, o = _merge(qb, kb, vb, qpos, kpos, causal, m, den, o)
        return o / den[:, None]

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
