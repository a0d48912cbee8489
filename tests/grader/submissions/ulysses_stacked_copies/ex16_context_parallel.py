"""ex16 whose ulysses_attention skips the head split: one all_to_all of n stacked copies of the device's
q, k and v blocks hands every device all of q, k and v, every device computes every head over the whole
sequence, keeps its own heads and sends them back with the usual all_to_all. Two all-to-alls and nothing
else, the right values, and every device doing the whole layer's work (the rest is right)."""

import math

import jax
import jax.numpy as jnp
from jax.sharding import PartitionSpec as P


def ring_attention(q, k, v, mesh, causal: bool):
    n = mesh.shape["sp"]
    scale = 1.0 / math.sqrt(q.shape[1])
    to_next = [(j, (j + 1) % n) for j in range(n)]

    def per_device(q_blk, k_blk, v_blk):
        d = jax.lax.axis_index("sp")
        tb = q_blk.shape[0]
        rows = d * tb + jnp.arange(tb)

        def attend(s, m, total, o, k_blk, v_blk):
            scores = (q_blk @ k_blk.T) * scale
            if causal:
                cols = ((d - s) % n) * tb + jnp.arange(tb)
                scores = jnp.where(cols[None, :] <= rows[:, None], scores, -jnp.inf)
            m_new = jnp.maximum(m, scores.max(axis=1))
            shift = jnp.where(jnp.isfinite(m_new), m_new, 0.0)
            p = jnp.exp(scores - shift[:, None])
            correction = jnp.exp(m - shift)
            return m_new, total * correction + p.sum(axis=1), o * correction[:, None] + p @ v_blk

        def step(s, carry):
            m, total, o, k_blk, v_blk = carry
            m, total, o = attend(s, m, total, o, k_blk, v_blk)
            k_blk, v_blk = jax.lax.ppermute((k_blk, v_blk), "sp", to_next)
            return m, total, o, k_blk, v_blk

        start = jax.lax.pcast(
            (jnp.full((tb,), -jnp.inf), jnp.zeros((tb,)), jnp.zeros(q_blk.shape)),
            "sp",
            to="varying",
        )
        m, total, o, k_blk, v_blk = jax.lax.fori_loop(0, n - 1, step, (*start, k_blk, v_blk))
        m, total, o = attend(n - 1, m, total, o, k_blk, v_blk)
        return o / total[:, None]

    return jax.shard_map(per_device, mesh=mesh, in_specs=(P("sp"),) * 3, out_specs=P("sp"))(q, k, v)


def ulysses_attention(q, k, v, mesh):
    n = mesh.shape["sp"]
    scale = 1.0 / math.sqrt(q.shape[2])

    def per_device(q_blk, k_blk, v_blk):
        heads = q_blk.shape[1] // n
        d = jax.lax.axis_index("sp")
        # n copies of (q, k, v): copy j goes to device j, so every device receives every block
        copies = jnp.broadcast_to(jnp.stack([q_blk, k_blk, v_blk]), (n, 3, *q_blk.shape))
        qkv = jax.lax.all_to_all(copies, "sp", split_axis=0, concat_axis=2, tiled=True)[0]
        qw, kw, vw = qkv[0], qkv[1], qkv[2]  # (T, H, D) each: all of q, k and v
        scores = jnp.einsum("thd,shd->hts", qw, kw) * scale
        out = jnp.einsum("hts,shd->thd", jax.nn.softmax(scores, axis=-1), vw)
        mine = jax.lax.dynamic_slice_in_dim(out, d * heads, heads, axis=1)
        return jax.lax.all_to_all(mine, "sp", split_axis=0, concat_axis=1, tiled=True)

    return jax.shard_map(per_device, mesh=mesh, in_specs=(P("sp"),) * 3, out_specs=P("sp"))(q, k, v)


def zigzag_order(seq_len: int, n: int) -> list[int]:
    chunk = seq_len // (2 * n)
    order = []
    for d in range(n):
        for c in (d, 2 * n - 1 - d):
            order += range(c * chunk, (c + 1) * chunk)
    return order
