"""ex08 in which every device trains on the whole batch: train_step gathers the batch on every device
(jax.reshard to replicated) and train_step_shard_map all-gathers its blocks, then each device takes
the whole batch's step. Values and layouts are right; the programs all-gather the batch, need no
all-reduce, and are no faster than the replicated baseline."""

import functools

import jax
import jax.numpy as jnp
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
    batch = NamedSharding(mesh, P("data", None))
    return jax.device_put(x, batch), jax.device_put(y, batch)


def replicate(params, mesh):
    return jax.device_put(params, NamedSharding(mesh, P()))


@jax.jit
def train_step(params, x, y, lr):
    everywhere = NamedSharding(jax.typeof(x).sharding.mesh, P())
    return sgd_step(params, jax.reshard(x, everywhere), jax.reshard(y, everywhere), lr)


@functools.partial(jax.jit, static_argnames="mesh")
def train_step_shard_map(params, x, y, lr, mesh):
    def per_device(params, x_block, y_block):
        x_all = jax.lax.all_gather(x_block, "data", tiled=True)
        y_all = jax.lax.all_gather(y_block, "data", tiled=True)
        return sgd_step(params, x_all, y_all, lr)   # the same whole-batch step on every device

    return jax.shard_map(per_device, mesh=mesh, in_specs=(P(), P("data", None), P("data", None)),
                         out_specs=(P(), P()), check_vma=False)(params, x, y)


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
