"""ex09 written by a student who has read the grader: the weights' gradients are all-gathered and summed
on every device (no all-reduce, which the program test looks for), each device keeps its own rows, and a
token psum_scatter of a few elements puts a reduce-scatter in the program. The values, the layouts and the
argument bytes are right; the reduce-scatter that makes FSDP is not there: the token one carries none of the
weights' gradients."""

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


def shard_params(params, mesh):
    rows, whole = NamedSharding(mesh, P("data", None)), NamedSharding(mesh, P())
    return [(jax.device_put(W, rows), jax.device_put(b, whole)) for W, b in params]


@functools.partial(jax.jit, static_argnames=("mesh",))
def fsdp_train_step(params, x, y, lr, mesh):
    n = mesh.shape["data"]
    specs = [(P("data", None), P()) for _ in params]

    def per_device(params, x, y, lr):
        i = jax.lax.axis_index("data")
        whole = [(jax.lax.all_gather(W, "data", axis=0, tiled=True), jax.lax.pcast(b, "data", to="varying"))
                 for W, b in params]
        loss, grads = jax.value_and_grad(mse_loss)(whole, x, y)
        new = []
        for (W, b), (gW, gb) in zip(params, grads):
            total = jax.lax.all_gather(gW, "data").sum(axis=0) / n
            mine = jax.lax.dynamic_slice_in_dim(total, i * W.shape[0], W.shape[0], 0)
            new.append((W - lr * mine, b - lr * jax.lax.pmean(gb, "data")))
        token = jax.lax.psum_scatter(jnp.full((n,), x[0, 0]), "data", tiled=True)
        return new, jax.lax.pmean(loss + 0.0 * token[0], "data")

    return jax.shard_map(per_device, mesh=mesh, in_specs=(specs, P("data", None), P("data", None), P()),
                         out_specs=(specs, P()))(params, x, y, lr)
