"""ex04 -- one layer, three (four) ways."""

import jax
from jax.sharding import NamedSharding, PartitionSpec as P


def layer(x, W, b):
    """The reference layer, for one device. Use it; do not change it."""
    return jax.nn.softmax(x @ W + b)


def layer_auto(x, W, b, mesh):
    replicated = NamedSharding(mesh, P())
    W = jax.device_put(W, replicated)
    b = jax.device_put(b, replicated)
    # jit figures out the rest from where the data is
    return jax.jit(layer)(x, W, b)


def layer_explicit(x, W, b, mesh):
    seen = {}

    def layer_and_types(x, W, b):
        y = layer(x, W, b)
        for key, value in (("x", x), ("W", W), ("b", b), ("out", y)):
            seen[key] = str(jax.typeof(value))
        return y

    x = jax.device_put(x, NamedSharding(mesh, P("data", None)))
    W, b = jax.device_put((W, b), NamedSharding(mesh, P()))
    out = jax.jit(layer_and_types)(x, W, b)
    return out, seen


def layer_shard_map(x, W, b, mesh):
    # every device just runs the normal layer on its own rows
    f = jax.shard_map(layer, mesh=mesh, in_specs=(P("data", None), P(), P()), out_specs=P("data", None))
    return f(x, W, b)


def layer_feature_sharded(x, W, b, mesh):
    def local(x_part, W_part, b):
        z = jax.lax.psum(x_part @ W_part, axis_name="data")   # add up everyone's piece of x @ W
        return jax.nn.softmax(z + b)

    f = jax.shard_map(local, mesh=mesh, in_specs=(P(None, "data"), P("data", None), P()), out_specs=P())
    return f(x, W, b)
