"""ex18 whose block_forward keeps the whole sequence on every "model" device: it gathers x over
"model", sums the heads' and hidden units' partial outputs with psum (all-reduces) and slices its own positions at
the end. The right values; no reduce-scatter in the forward, whose all-reduces send more than the forward's
bound, and so do its step and its stack's gradient, built on that block (the rest is right)."""

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

    def local(p, xs):
        heads = num_heads // jax.lax.axis_size("model")
        x_all = jax.lax.all_gather(xs, "model", axis=1, tiled=True)  # the whole sequence, kept
        att = _attend(_rms(x_all), weight(p, "wq"), weight(p, "wk"), weight(p, "wv"), heads)
        h = x_all + jax.lax.psum(att @ weight(p, "wo"), "model")
        out = h + jax.lax.psum(jax.nn.relu(_rms(h) @ weight(p, "w1")) @ weight(p, "w2"), "model")
        t = xs.shape[1]
        return jax.lax.dynamic_slice_in_dim(out, jax.lax.axis_index("model") * t, t, axis=1)

    return jax.shard_map(local, mesh=mesh, in_specs=(SPECS, X_SPEC), out_specs=X_SPEC)(params, x)


def block_train_step(params, x, y, lr, mesh, *, num_heads: int = 8):
    def loss_of(p):
        return jnp.mean((block_forward(p, x, mesh, num_heads=num_heads) - y) ** 2)

    loss, grads = jax.value_and_grad(loss_of)(params)
    return jax.tree.map(lambda w, g: w - lr * g, params, grads), loss


def stack_loss(stacked, x, y, mesh, remat: bool, *, num_heads: int = 8):
    def layer(h, p):
        return block_forward(p, h, mesh, num_heads=num_heads), None

    out, _ = jax.lax.scan(jax.checkpoint(layer) if remat else layer, x, stacked)
    return jnp.mean((out - y) ** 2)
