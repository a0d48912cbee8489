"""ex16 in which every device computes the whole attention: ring_attention passes q, k and v round a ring
of ppermutes until every device holds all of them (collective-permute only, one cycle, n - 1 moves),
attends every query to every key and keeps its own rows; ulysses_attention hands every device all of q,
k and v with three all_to_alls of n stacked copies, computes every head over the whole sequence and keeps
its own rows. The right values and the collectives the rules name; every device does n x its share of the
work, and sends more than its share."""

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import PartitionSpec as P


def _attention(q, k, v, causal):
    scores = jnp.einsum("qhd,khd->hqk", q, k) / np.sqrt(q.shape[-1])
    if causal:
        t = q.shape[0]
        scores = jnp.where(jnp.tril(jnp.ones((t, t), bool)), scores, -jnp.inf)
    return jnp.einsum("hqk,khd->qhd", jax.nn.softmax(scores, axis=-1), v)


def ring_attention(q, k, v, mesh, causal):
    n = mesh.shape["sp"]
    to_next = [(j, (j + 1) % n) for j in range(n)]

    def per_device(qb, kb, vb):
        d = jax.lax.axis_index("sp")
        tb = qb.shape[0]
        # block j of the whole sequence arrives after (d - j) mod n moves
        blocks = [jnp.stack([qb, kb, vb])]
        for _ in range(n - 1):
            blocks.append(jax.lax.ppermute(blocks[-1], "sp", to_next))
        order = [(d - j) % n for j in range(n)]
        whole = jnp.concatenate([jnp.stack(blocks)[order[j]] for j in range(n)], axis=1)
        out = _attention(*(whole[i][:, None] for i in range(3)), causal)[:, 0]
        return jax.lax.dynamic_slice_in_dim(out, d * tb, tb, axis=0)

    return jax.shard_map(per_device, mesh=mesh, in_specs=(P("sp"),) * 3, out_specs=P("sp"))(q, k, v)


def ulysses_attention(q, k, v, mesh):
    n = mesh.shape["sp"]

    def per_device(qb, kb, vb):
        d = jax.lax.axis_index("sp")
        tb = qb.shape[0]

        def everywhere(x):  # copy j goes to device j: every device receives every block
            copies = jnp.broadcast_to(x, (n, *x.shape))
            return jax.lax.all_to_all(copies, "sp", split_axis=0, concat_axis=1, tiled=True)[0]

        out = _attention(everywhere(qb), everywhere(kb), everywhere(vb), causal=False)
        return jax.lax.dynamic_slice_in_dim(out, d * tb, tb, axis=0)

    return jax.shard_map(per_device, mesh=mesh, in_specs=(P("sp"),) * 3, out_specs=P("sp"))(q, k, v)


def zigzag_order(seq_len, n):
    chunk = seq_len // (2 * n)
    return [i for d in range(n) for c in (d, 2 * n - 1 - d) for i in range(c * chunk, (c + 1) * chunk)]
