"""ex14 in which every device does the whole job: the forward pipelines all-gather every stage's weights and
run the whole model on every device; the training step fetches every stage's weights along its data row's
chain of stages both ways (ppermutes s -> s + 1 and s + 1 -> s: the pairs the contract names, and no
all-gather), and every device of the row runs the whole model on the row's part of the batch. The values are
right (the table and bubble fractions too); each device executes S times its share."""

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


def _model(layers, xs):
    h = xs
    for w in layers:
        h = jnp.tanh(h @ w)
    return h


def pipeline_forward(ws, xs, mesh):
    def per_device(w, xs):
        every = jax.lax.all_gather(w[0], "stage")
        return _model(every, xs)

    # every device computes the same outputs from the gathered weights
    return jax.shard_map(
        per_device, mesh=mesh, in_specs=(P("stage"), P()), out_specs=P(), check_vma=False
    )(ws, xs)


def pipeline_train_step(ws, xs, ys, lr, mesh):
    S = mesh.shape["stage"]
    M, B, F = xs.shape
    down = [(s, s + 1) for s in range(S - 1)]
    up = [(s + 1, s) for s in range(S - 1)]

    def row_loss(w, xs, ys):
        s = jax.lax.axis_index("stage")
        mine = jax.lax.pcast(w[0], "data", to="varying")
        every = jnp.zeros((S, F, F), mine.dtype).at[s].set(mine)
        from_above, from_below = mine, mine
        for j in range(1, S):
            # after j steps, device s holds stage s - j's weights from above and s + j's from below
            from_above = jax.lax.ppermute(from_above, "stage", down)
            from_below = jax.lax.ppermute(from_below, "stage", up)
            every = jnp.where(s >= j, every.at[jnp.maximum(s - j, 0)].set(from_above), every)
            every = jnp.where(s + j < S, every.at[jnp.minimum(s + j, S - 1)].set(from_below), every)
        out = _model(every, xs.reshape(-1, F))
        err = jnp.sum((out - ys.reshape(-1, F)) ** 2)
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
    def per_device(w, xs):
        every = jax.lax.all_gather(w, "stage", axis=1, tiled=True)  # (R, S, F, F)
        return _model(every.reshape(-1, *every.shape[2:]), xs)

    return jax.shard_map(
        per_device, mesh=mesh, in_specs=(P(None, "stage"), P()), out_specs=P(), check_vma=False
    )(ws, xs)
