"""ex17 written another way: accumulate_grads takes jax.grad outside a shard_mapped scan over the
microbatches (the params pcast to varying before the loop, so the reduction is the pcast's transpose, once
per leaf); zero1_init places NumPy zeros; zero1_adam_step loops over the microbatches in Python, picks its
rows by reshaping, gathers untiled and reshapes, and bias-corrects through the learning rate."""

import functools

import jax
import jax.numpy as jnp
from jax.sharding import NamedSharding, PartitionSpec as P  # noqa: F401  (for your code)

B1, B2, EPS = 0.9, 0.999, 1e-8


def init_mlp(key, sizes):
    """Parameters of an MLP with layer widths `sizes` (e.g. (16, 32, 16, 8)): a list of (W, b) with
    W of shape (n_in, n_out) and b of shape (n_out,). Given: do not change it."""
    keys = jax.random.split(key, len(sizes) - 1)
    params = []
    for k, n_in, n_out in zip(keys, sizes[:-1], sizes[1:]):
        w_key, b_key = jax.random.split(k)
        params.append(
            (
                0.1 * jax.random.normal(w_key, (n_in, n_out)),
                0.1 * jax.random.normal(b_key, (n_out,)),
            )
        )
    return params


def mlp_forward(params, x):
    """tanh after every layer but the last, which is linear. Given: do not change it."""
    for W, b in params[:-1]:
        x = jnp.tanh(x @ W + b)
    W, b = params[-1]
    return x @ W + b


def mse_loss(params, x, y):
    """The mean squared error over the whole batch. Given: do not change it."""
    return jnp.mean((mlp_forward(params, x) - y) ** 2)


def accumulate_grads(params, xs, ys, mesh):
    n, mb = mesh.shape["data"], xs.shape[0]

    def total_loss(params, xs, ys):
        # pcast before the loop: its transpose (one psum per leaf) is where the gradient is reduced
        params = jax.lax.pcast(params, "data", to="varying")

        def add(total, xy):
            return total + mse_loss(params, *xy), None

        start = jax.lax.pcast(jnp.zeros(()), "data", to="varying")
        total, _ = jax.lax.scan(add, start, (xs, ys))
        return jax.lax.psum(total, "data") / (mb * n)

    loss = jax.shard_map(
        total_loss, mesh=mesh, in_specs=(P(), P(None, "data"), P(None, "data")), out_specs=P()
    )
    return jax.grad(loss)(params, xs, ys)



def zero1_init(params, mesh):
    import numpy as np

    def zeros():
        return [
            tuple(jax.device_put(np.zeros(a.shape, np.float32), NamedSharding(mesh, P("data"))) for a in layer)
            for layer in params
        ]

    return {"t": jax.device_put(np.int32(0), NamedSharding(mesh, P())), "m": zeros(), "v": zeros()}



def zero1_adam_step(params, opt_state, xs, ys, lr, mesh):
    n, mb = mesh.shape["data"], xs.shape[0]
    flat, tree = jax.tree.flatten(params)
    shard_specs = [P("data")] * len(flat)

    def per_device(flat, m, v, t, xs, ys):
        local = [jax.lax.pcast(p, "data", to="varying") for p in flat]
        loss, grads = 0.0, None
        def loss_of(flat, x, y):
            return mse_loss(jax.tree.unflatten(tree, flat), x, y)

        for i in range(mb):  # a Python loop: static
            value, g = jax.value_and_grad(loss_of)(local, xs[i], ys[i])
            loss = loss + value
            grads = g if grads is None else [a + b for a, b in zip(grads, g)]
        grads = [jax.lax.psum_scatter(g, "data", tiled=True) / (mb * n) for g in grads]
        t = t + 1
        step = lr * jnp.sqrt(1 - B2 ** t.astype(jnp.float32)) / (1 - B1 ** t.astype(jnp.float32))
        eps = EPS * jnp.sqrt(1 - B2 ** t.astype(jnp.float32))
        me = jax.lax.axis_index("data")
        new_m, new_v, new_p = [], [], []
        for p, a, b, g in zip(flat, m, v, grads):
            a = B1 * a + (1 - B1) * g
            b = B2 * b + (1 - B2) * jnp.square(g)
            rows = p.reshape(n, p.shape[0] // n, *p.shape[1:])[me]
            rows = rows - step * a / (jnp.sqrt(b) + eps)
            whole = jax.lax.all_gather(rows, "data", to="invarying")
            new_p.append(whole.reshape(p.shape))
            new_m.append(a)
            new_v.append(b)
        return new_p, new_m, new_v, t, jax.lax.psum(loss, "data") / (mb * n)

    new_p, m, v, t, loss = jax.shard_map(
        per_device,
        mesh=mesh,
        in_specs=(P(), shard_specs, shard_specs, P(), P(None, "data"), P(None, "data")),
        out_specs=(P(), shard_specs, shard_specs, P(), P()),
    )(flat, jax.tree.leaves(opt_state["m"]), jax.tree.leaves(opt_state["v"]), opt_state["t"], xs, ys)
    unflat = functools.partial(jax.tree.unflatten, tree)
    return unflat(new_p), {"m": unflat(m), "v": unflat(v), "t": t}, loss
