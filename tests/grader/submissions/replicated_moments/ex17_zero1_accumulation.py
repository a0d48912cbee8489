"""ex17 whose Adam state is not sharded: zero1_init places m and v replicated, and
zero1_adam_step all-reduces the gradients and runs Adam on whole moments on every device (plain
data-parallel Adam: the right values, n times the moments' memory; accumulate_grads is right)."""

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

    def per_device(params, xs, ys):
        # Device-varying params: the gradients below are this device's own, not summed over "data".
        params = jax.lax.pcast(params, "data", to="varying")

        def add(i, total):
            grads = jax.grad(mse_loss)(params, xs[i], ys[i])
            return jax.tree.map(jnp.add, total, grads)

        total = jax.lax.fori_loop(0, mb, add, jax.tree.map(jnp.zeros_like, params))
        # One reduction per leaf, after the loop; each device's loss is the mean over its block.
        return jax.tree.map(lambda g: jax.lax.psum(g, "data") / (mb * n), total)

    return jax.shard_map(
        per_device,
        mesh=mesh,
        in_specs=(P(), P(None, "data"), P(None, "data")),
        out_specs=P(),
    )(params, xs, ys)



def zero1_init(params, mesh):
    whole = NamedSharding(mesh, P())
    zeros = lambda: jax.tree.map(lambda p: jnp.zeros(p.shape, p.dtype, device=whole), params)  # noqa: E731
    return {"m": zeros(), "v": zeros(), "t": jnp.zeros((), jnp.int32, device=whole)}



def zero1_adam_step(params, opt_state, xs, ys, lr, mesh):
    n, mb = mesh.shape["data"], xs.shape[0]
    whole = jax.tree.map(lambda _: P(), params)
    state_specs = {"m": whole, "v": whole, "t": P()}

    def per_device(params, state, xs, ys):
        local = jax.lax.pcast(params, "data", to="varying")

        def add(total, xy):
            loss, grads = jax.value_and_grad(mse_loss)(local, *xy)
            return jax.tree.map(jnp.add, total, (loss, grads)), None

        zero = jax.lax.pcast((jnp.zeros(()), jax.tree.map(jnp.zeros_like, params)), "data", to="varying")
        (loss, grads), _ = jax.lax.scan(add, zero, (xs, ys))
        grads = jax.tree.map(lambda g: jax.lax.psum(g, "data") / (mb * n), grads)
        t = state["t"] + 1
        m = jax.tree.map(lambda m, g: B1 * m + (1 - B1) * g, state["m"], grads)
        v = jax.tree.map(lambda v, g: B2 * v + (1 - B2) * g * g, state["v"], grads)
        m_hat = jax.tree.map(lambda m: m / (1 - B1 ** t.astype(jnp.float32)), m)
        v_hat = jax.tree.map(lambda v: v / (1 - B2 ** t.astype(jnp.float32)), v)
        new = jax.tree.map(lambda p, a, b: p - lr * a / (jnp.sqrt(b) + EPS), params, m_hat, v_hat)
        return new, {"m": m, "v": v, "t": t}, jax.lax.psum(loss, "data") / (mb * n)

    # whatever layout the state comes in, the moments are kept whole on every device
    opt_state = jax.sharding.reshard(opt_state, NamedSharding(mesh, P()))
    return jax.shard_map(
        per_device,
        mesh=mesh,
        in_specs=(P(), state_specs, P(None, "data"), P(None, "data")),
        out_specs=(P(), state_specs, P()),
    )(params, opt_state, xs, ys)
