"""ex08 whose shard_batch deals the rows out round-robin: device i holds rows i, i + n, i + 2n, ... of
the batch (as a strided data loader would) instead of the contiguous block i * n_batch / n to
(i + 1) * n_batch / n, so the placed x and y are the batch in another order. Every other function is
right, and train still computes the right values: the mean loss over a shuffled batch is the same."""

import functools

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import NamedSharding, PartitionSpec as P


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


def sgd_step(params, x, y, lr):
    loss, grads = jax.value_and_grad(mse_loss)(params, x, y)
    return jax.tree.map(lambda p, g: p - lr * g, params, grads), loss


def shard_batch(x, y, mesh):
    n = mesh.devices.size
    dealt = np.arange(x.shape[0]).reshape(-1, n).T.reshape(-1)   # device i's block: rows i, i + n, ...
    batch = NamedSharding(mesh, P("data", None))
    return jax.device_put(np.asarray(x)[dealt], batch), jax.device_put(np.asarray(y)[dealt], batch)


def replicate(params, mesh):
    return jax.device_put(params, NamedSharding(mesh, P()))


@jax.jit
def train_step(params, x, y, lr):
    return sgd_step(params, x, y, lr)


@functools.partial(jax.jit, static_argnames="mesh")
def train_step_shard_map(params, x, y, lr, mesh):
    def loss_dp(params, x, y):
        return jax.lax.pmean(mse_loss(params, x, y), "data")

    loss_fn = jax.shard_map(loss_dp, mesh=mesh, in_specs=(P(), P("data", None), P("data", None)), out_specs=P())
    loss, grads = jax.value_and_grad(loss_fn)(params, x, y)
    return jax.tree.map(lambda p, g: p - lr * g, params, grads), loss


def train(params, x, y, mesh, steps: int, lr: float, use_shard_map: bool = False):
    params = replicate(params, mesh)
    x, y = shard_batch(x, y, mesh)
    losses = []
    for _ in range(steps):
        if use_shard_map:
            params, loss = train_step_shard_map(params, x, y, lr, mesh)
        else:
            params, loss = train_step(params, x, y, lr)
        losses.append(loss)
    return params, jnp.stack(losses)
