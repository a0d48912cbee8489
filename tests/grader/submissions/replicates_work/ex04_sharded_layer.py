"""ex04 in which every function replicates the work: every device gets the whole batch (or all of x and W),
computes the whole layer, and keeps its own part. Values, output shardings and layer_explicit's types are
right; each program executes about n times its share of the multiply-adds and sends inputs it should
have left where they were. layer_auto (which constrains x to be replicated inside its jit) and
layer_shard_map gather x, an all-gather where none belongs; layer_explicit reshards x inside its jit,
after the types are read, so that only its work and traffic give it away; layer_feature_sharded hides
its gather of x and W in the one all-reduce it is allowed, summing zero-padded copies of them.

Replicating by placement cannot be caught in layer_auto: a layer_auto that places x replicated before its
jitted layer (and puts the output back P("data", None)) compiles, on the inputs the tests place, to the
honest program, since the placement inside the tests' jit is dropped."""

import jax
import jax.numpy as jnp
from jax.sharding import NamedSharding, PartitionSpec as P


def layer(x, W, b):
    return jax.nn.softmax(x @ W + b)


def layer_auto(x, W, b, mesh):
    rows, everywhere = NamedSharding(mesh, P("data", None)), NamedSharding(mesh, P())
    x = jax.device_put(x, rows)
    W, b = (jax.device_put(v, everywhere) for v in (W, b))

    def whole_batch(x, W, b):
        whole = layer(jax.lax.with_sharding_constraint(x, everywhere), W, b)
        return jax.lax.with_sharding_constraint(whole, everywhere)  # computed on every device

    return jax.jit(whole_batch, out_shardings=rows)(x, W, b)


def layer_explicit(x, W, b, mesh):
    types = {}

    def traced(x, W, b):
        types.update(x=str(jax.typeof(x)), W=str(jax.typeof(W)), b=str(jax.typeof(b)))
        whole = layer(jax.sharding.reshard(x, NamedSharding(mesh, P())), W, b)
        out = jax.sharding.reshard(whole, NamedSharding(mesh, P("data", None)))
        types["out"] = str(jax.typeof(out))
        return out

    x = jax.device_put(x, NamedSharding(mesh, P("data", None)))
    W, b = (jax.device_put(v, NamedSharding(mesh, P())) for v in (W, b))
    return jax.jit(traced)(x, W, b), types


def layer_shard_map(x, W, b, mesh):
    def per_device(x_rows, W, b):
        everything = layer(jax.lax.all_gather(x_rows, "data", tiled=True), W, b)
        rows = x_rows.shape[0]
        return jax.lax.dynamic_slice_in_dim(everything, jax.lax.axis_index("data") * rows, rows)

    return jax.shard_map(per_device, mesh=mesh, in_specs=(P("data", None), P(), P()),
                         out_specs=P("data", None))(x, W, b)


def layer_feature_sharded(x, W, b, mesh):
    n = mesh.shape["data"]

    def per_device(x_cols, W_rows, b):
        # x's columns and W's rows, each device's in their place among zeros: summed, all of x and W
        f = x_cols.shape[1]
        mine = jnp.concatenate([x_cols, W_rows.T])  # (B + O, F / n)
        padded = jnp.zeros((n,) + mine.shape, mine.dtype).at[jax.lax.axis_index("data")].set(mine)
        whole = jax.lax.psum(padded, "data")  # (n, B + O, F / n)
        both = jnp.concatenate(list(whole), axis=1)  # (B + O, F)
        rows = x_cols.shape[0]
        assert both.shape[1] == n * f
        return layer(both[:rows], both[rows:].T, b)

    return jax.shard_map(per_device, mesh=mesh, in_specs=(P(None, "data"), P("data", None), P()),
                         out_specs=P())(x, W, b)
