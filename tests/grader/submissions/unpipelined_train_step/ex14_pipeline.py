"""ex14 gaming the training step's program rules: pipeline_train_step runs no pipeline. Each device
all-gathers every stage's weights over "stage" and runs the whole model on its data row's part of the
batch; a one-element ppermute s -> s + 1, multiplied by 0, puts the forward pairs in the program and its
transpose the reversed ones, and the gradient is summed over "data". The new ws and loss are right; every
device of a row does the whole row's work (the rest is right: the forward pipelines are honest)."""

import jax
import jax.numpy as jnp
from jax.sharding import PartitionSpec as P


def gpipe_schedule(num_stages: int, num_microbatches: int) -> list[list[int]]:
    table = []
    for s in range(num_stages):
        row = [-1] * (num_microbatches + num_stages - 1)
        for m in range(num_microbatches):
            row[s + m] = m
        table.append(row)
    return table


def bubble_fraction(num_stages: int, num_microbatches: int, repeats: int = 1) -> float:
    idle = num_stages - 1
    return idle / (repeats * num_microbatches + idle)


def _chain(S):
    return [(s, s + 1) for s in range(S - 1)]


def pipeline_forward(ws, xs, mesh):
    S = mesh.shape["stage"]
    M = xs.shape[0]

    def per_device(w, xs):
        me = jax.lax.axis_index("stage")

        def body(t, state):
            inbox, results = state
            fresh = xs[jnp.minimum(t, M - 1)]
            out = jnp.tanh(jnp.where(me == 0, fresh, inbox) @ w[0])
            finished = t - (S - 1)
            keep = (me == S - 1) & (finished >= 0)
            results = jnp.where(
                keep, results.at[jnp.maximum(finished, 0)].set(out), results
            )
            return jax.lax.ppermute(out, "stage", _chain(S)), results

        state = (jnp.zeros_like(xs[0]), jnp.zeros_like(xs))
        state = jax.lax.pcast(state, "stage", to="varying")
        _, results = jax.lax.fori_loop(0, M + S - 1, body, state)
        return jax.lax.psum(results, "stage")

    return jax.shard_map(per_device, mesh=mesh, in_specs=(P("stage"), P()), out_specs=P())(ws, xs)


def pipeline_train_step(ws, xs, ys, lr, mesh):
    S = mesh.shape["stage"]
    M, B, F = xs.shape

    def row_loss(w, xs, ys):
        # every stage's weights on every device of the row, and the whole model run on each
        every = jax.lax.all_gather(w[0], "stage")
        h = xs.reshape(-1, F)
        for s in range(S):
            h = jnp.tanh(h @ every[s])
        err = jnp.sum((h - ys.reshape(-1, F)) ** 2)
        # one element sent s -> s + 1 and multiplied by 0: the pairs, forward and (transposed) back
        token = jax.lax.ppermute(h[:1, :1], "stage", _chain(S))
        err = err + 0.0 * jnp.sum(token)
        # each of the row's S devices computed the row's whole error: count it once
        return jax.lax.psum(err, ("data", "stage")) / (S * M * B * F)

    loss_fn = jax.shard_map(
        row_loss,
        mesh=mesh,
        in_specs=(P("stage"), P(None, "data"), P(None, "data")),
        out_specs=P(),
    )
    loss, grad = jax.value_and_grad(loss_fn)(ws, xs, ys)
    return ws - lr * grad, loss


def circular_forward(ws, xs, mesh):
    S = mesh.shape["stage"]
    R, M = ws.shape[0], xs.shape[0]
    ring = [(s, (s + 1) % S) for s in range(S)]

    def per_device(w, xs):
        me = jax.lax.axis_index("stage")
        layers = w[:, 0]

        def body(t, state):
            inbox, pending, results = state
            # what left the last stage at step t - 1 is microbatch (t - S) mod M: stage 0 files it
            arrived = t - S
            pending = jnp.where(arrived >= 0, pending.at[arrived % M].set(inbox), pending)
            work = t - me
            m = work % M
            r = jnp.clip(work // M, 0, R - 1)
            first = pending[m]
            out = jnp.tanh(jnp.where(me == 0, first, inbox) @ layers[r])
            done = (me == S - 1) & (work >= (R - 1) * M) & (work < R * M)
            results = jnp.where(done, results.at[m].set(out), results)
            return jax.lax.ppermute(out, "stage", ring), pending, results

        state = (jnp.zeros_like(xs[0]), xs, jnp.zeros_like(xs))
        state = jax.lax.pcast(state, "stage", to="varying")
        _, _, results = jax.lax.fori_loop(0, R * M + S - 1, body, state)
        return jax.lax.psum(results, "stage")

    return jax.shard_map(per_device, mesh=mesh, in_specs=(P(None, "stage"), P()), out_specs=P())(
        ws, xs
    )
