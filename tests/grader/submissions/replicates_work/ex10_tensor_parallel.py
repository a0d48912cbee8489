"""ex10 in which every device computes the whole layer: its forward and its step gather the batch over "data"
and W1, b1 and W2 whole over "model" (jax.reshard to P()), compute everything there and keep their own part
(jax.reshard back). There is no psum over "model", only all-gathers; every device executes |data| x |model|
times its share of the matmuls and sends the batch and the weights. Values, placement and the layouts of the
outputs and the updated params are right."""

from functools import partial

import jax
import jax.numpy as jnp
from jax.sharding import NamedSharding, PartitionSpec as P

SPECS = {"W1": P(None, "model"), "b1": P("model"), "W2": P("model", None), "b2": P()}


def init_params(key, n_in, n_hidden, n_out):
    k1, k2, k3, k4 = jax.random.split(key, 4)
    return {"W1": jax.random.normal(k1, (n_in, n_hidden)) / jnp.sqrt(n_in),
            "b1": 0.1 * jax.random.normal(k2, (n_hidden,)),
            "W2": jax.random.normal(k3, (n_hidden, n_out)) / jnp.sqrt(n_hidden),
            "b2": 0.1 * jax.random.normal(k4, (n_out,))}


def forward(params, x):
    h = jax.nn.relu(x @ params["W1"] + params["b1"])
    return h @ params["W2"] + params["b2"]


def mse_loss(params, x, y):
    return jnp.mean((forward(params, x) - y) ** 2)


def sgd_step(params, x, y, lr):
    loss, grads = jax.value_and_grad(mse_loss)(params, x, y)
    return jax.tree.map(lambda p, g: p - lr * g, params, grads), loss


def shard_mlp_params(params, mesh):
    return {k: jax.device_put(v, NamedSharding(mesh, SPECS[k])) for k, v in params.items()}


def _everywhere(mesh, tree):
    return jax.tree.map(lambda v: jax.reshard(v, NamedSharding(mesh, P())), tree)


@partial(jax.jit, static_argnames="mesh")
def tp_forward(params, x, mesh):
    out = forward(*_everywhere(mesh, (params, x)))   # the whole batch through the whole layer, everywhere
    return jax.reshard(out, NamedSharding(mesh, P("data", None)))


@partial(jax.jit, static_argnames="mesh")
def tp_train_step(params, x, y, lr, mesh):
    new, loss = sgd_step(*_everywhere(mesh, (params, x, y)), lr)
    return {k: jax.reshard(v, NamedSharding(mesh, SPECS[k])) for k, v in new.items()}, loss
