"""ex18 whose block_train_step psums each weight gradient over "data" (the whole gradient on every
device) and then slices its own part: the same step, and all-reduces of a weight's size (the rest is right)."""

import math

import jax
import jax.numpy as jnp
from jax.sharding import NamedSharding, PartitionSpec as P

IN_PROJ, OUT_PROJ = P("data", "model"), P("model", "data")
SPECS = {"wq": IN_PROJ, "wk": IN_PROJ, "wv": IN_PROJ, "wo": OUT_PROJ, "w1": IN_PROJ, "w2": OUT_PROJ}
X_SPEC = P("data", "model", None)


def shard_block_params(params, mesh):
    return {name: jax.device_put(w, NamedSharding(mesh, SPECS[name])) for name, w in params.items()}


def _rms(h):
    return h * jax.lax.rsqrt(jnp.mean(h * h, axis=-1, keepdims=True) + 1e-6)


def _attend(a, wq, wk, wv, heads):
    b, t, _ = a.shape
    q, k, v = ((a @ w).reshape(b, t, heads, -1) for w in (wq, wk, wv))
    scores = jnp.einsum("bthd,bshd->bhts", q, k) / math.sqrt(q.shape[-1])
    scores = jnp.where(jnp.tril(jnp.ones((t, t), bool)), scores, -jnp.inf)
    return jnp.einsum("bhts,bshd->bthd", jax.nn.softmax(scores, axis=-1), v).reshape(b, t, -1)


def block_forward(params, x, mesh, *, num_heads: int = 8):
    def weight(p, name):
        return jax.lax.all_gather(p[name], "data", axis=int(SPECS[name] == OUT_PROJ), tiled=True)

    def spread(h):
        return jax.lax.all_gather(_rms(h), "model", axis=1, tiled=True)

    def back(partial):
        return jax.lax.psum_scatter(partial, "model", scatter_dimension=1, tiled=True)

    def local(p, xs):
        heads = num_heads // jax.lax.axis_size("model")
        att = _attend(spread(xs), weight(p, "wq"), weight(p, "wk"), weight(p, "wv"), heads)
        h = xs + back(att @ weight(p, "wo"))
        return h + back(jax.nn.relu(spread(h) @ weight(p, "w1")) @ weight(p, "w2"))

    return jax.shard_map(local, mesh=mesh, in_specs=(SPECS, X_SPEC), out_specs=X_SPEC)(params, x)


def block_train_step(params, x, y, lr, mesh, *, num_heads: int = 8):
    count = x.size

    def local(p, xs, ys):
        heads = num_heads // jax.lax.axis_size("model")
        gathered = {
            n: jax.lax.all_gather(w, "data", axis=int(SPECS[n] == OUT_PROJ), tiled=True)
            for n, w in p.items()
        }

        def spread(h):
            return jax.lax.all_gather(_rms(h), "model", axis=1, tiled=True)

        def back(partial):
            return jax.lax.psum_scatter(partial, "model", scatter_dimension=1, tiled=True)

        def local_loss(w):
            att = _attend(spread(xs), w["wq"], w["wk"], w["wv"], heads)
            h = xs + back(att @ w["wo"])
            out = h + back(jax.nn.relu(spread(h) @ w["w1"]) @ w["w2"])
            return jnp.sum((out - ys) ** 2) / count

        loss, grads = jax.value_and_grad(local_loss)(gathered)
        i = jax.lax.axis_index("data")
        new = {}
        for n, g in grads.items():
            g = jax.lax.psum(g, "data")  # the whole gradient on every device
            dim = int(SPECS[n] == OUT_PROJ)
            size = p[n].shape[dim]
            new[n] = p[n] - lr * jax.lax.dynamic_slice_in_dim(g, i * size, size, axis=dim)
        return new, jax.lax.psum(loss, ("data", "model"))

    return jax.shard_map(
        local, mesh=mesh, in_specs=(SPECS, X_SPEC, X_SPEC), out_specs=(SPECS, P())
    )(params, x, y)


def stack_loss(stacked, x, y, mesh, remat: bool, *, num_heads: int = 8):
    def layer(h, p):
        return block_forward(p, h, mesh, num_heads=num_heads), None

    out, _ = jax.lax.scan(jax.checkpoint(layer) if remat else layer, x, stacked)
    return jnp.mean((out - y) ** 2)
