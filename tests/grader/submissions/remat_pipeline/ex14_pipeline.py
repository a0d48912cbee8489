"""ex14 written another honest way, spending work to save memory: the pipelines as jax.lax.scan over the
steps, each step's result stacked and the outputs handed out with one all-gather (the forward pipeline's
outputs; the circular pipeline's last stage's whole history, bubbles included); the training step's scan
over jax.checkpoint-ed steps, so that its backward pass recomputes every step's forward (more dot work
than the reference's, within twice the share)."""

import jax
import jax.numpy as jnp
from jax.sharding import PartitionSpec as P


def gpipe_schedule(num_stages, num_microbatches):
    steps = num_microbatches + num_stages - 1
    return [[t - s if s <= t < s + num_microbatches else -1 for t in range(steps)] for s in range(num_stages)]


def bubble_fraction(num_stages, num_microbatches, repeats=1):
    return float(num_stages - 1) / float(repeats * num_microbatches + num_stages - 1)


def _feed(xs, steps):
    """Stage 0's input at each step: the microbatches, then zeros while the pipeline drains."""
    M, B, F = xs.shape
    return jnp.concatenate([xs, jnp.zeros((steps - M, B, F), xs.dtype)])


def pipeline_forward(ws, xs, mesh):
    S = mesh.shape["stage"]
    M = xs.shape[0]
    steps = M + S - 1
    pairs = [(s, s + 1) for s in range(S - 1)]

    def per_device(w, xs):
        first = jax.lax.axis_index("stage") == 0

        def step(received, x):
            h = jnp.tanh(jnp.where(first, x, received) @ w[0])
            return jax.lax.ppermute(h, "stage", pairs), h

        start = jax.lax.pcast(jnp.zeros(xs.shape[1:], xs.dtype), "stage", to="varying")
        _, history = jax.lax.scan(step, start, _feed(xs, steps))
        # every stage's last M results, gathered; the last stage's are the outputs
        return jax.lax.all_gather(history[S - 1 :], "stage")[S - 1]

    # the all-gathered outputs are the same on every device, which shard_map cannot infer
    return jax.shard_map(
        per_device, mesh=mesh, in_specs=(P("stage"), P()), out_specs=P(), check_vma=False
    )(ws, xs)


def pipeline_train_step(ws, xs, ys, lr, mesh):
    S = mesh.shape["stage"]
    M, B, F = xs.shape
    steps = M + S - 1
    pairs = [(s, s + 1) for s in range(S - 1)]

    def row_error(w, xs, ys):
        s = jax.lax.axis_index("stage")
        w = jax.lax.pcast(w[0], "data", to="varying")
        targets = jnp.concatenate([jnp.zeros((S - 1,) + ys.shape[1:], ys.dtype), ys])

        @jax.checkpoint
        def step(received, inputs):
            x, y, t = inputs
            h = jnp.tanh(jnp.where(s == 0, x, received) @ w)
            scored = (s == S - 1) & (t >= S - 1)
            err = jnp.where(scored, jnp.sum((h - y) ** 2), 0.0)
            return jax.lax.ppermute(h, "stage", pairs), err

        start = jax.lax.pcast(jnp.zeros(xs.shape[1:], xs.dtype), ("data", "stage"), to="varying")
        _, errs = jax.lax.scan(step, start, (_feed(xs, steps), targets, jnp.arange(steps)))
        return jax.lax.psum(jnp.sum(errs), ("data", "stage")) / (M * B * F)

    loss_fn = jax.shard_map(
        row_error,
        mesh=mesh,
        in_specs=(P("stage"), P(None, "data"), P(None, "data")),
        out_specs=P(),
    )
    loss, grad = jax.value_and_grad(loss_fn)(ws, xs, ys)
    return ws - lr * grad, loss


def circular_forward(ws, xs, mesh):
    S = mesh.shape["stage"]
    R, M = ws.shape[0], xs.shape[0]
    steps = R * M + S - 1
    ring = [(s, (s + 1) % S) for s in range(S)]

    def per_device(w, xs):
        s = jax.lax.axis_index("stage")
        layers = w[:, 0]

        def step(carry, t):
            received, waiting = carry
            # stage 0 keeps what comes round the ring until the microbatch's next pass
            waiting = jnp.where(t >= S, waiting.at[(t - S) % M].set(received), waiting)
            k = t - s
            layer = layers[jnp.clip(k // M, 0, R - 1)]
            h = jnp.tanh(jnp.where(s == 0, waiting[k % M], received) @ layer)
            return (jax.lax.ppermute(h, "stage", ring), waiting), h

        start = jax.lax.pcast((jnp.zeros(xs.shape[1:], xs.dtype), xs), "stage", to="varying")
        _, history = jax.lax.scan(step, start, jnp.arange(steps))
        # the last stage's whole history, bubbles included, handed to every device
        return jax.lax.all_gather(history, "stage")[S - 1, (R - 1) * M + S - 1 :]

    return jax.shard_map(
        per_device, mesh=mesh, in_specs=(P(None, "stage"), P()), out_specs=P(), check_vma=False
    )(ws, xs)
