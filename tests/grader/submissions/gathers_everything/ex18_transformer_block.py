"""ex18 that gathers every weight and the whole batch and sequence onto every device, computes the whole block
there, and hands back its own rows through decoy psum_scatters over "model" of 1/|model| of the residual and of
the MLP's output (two reduce-scatters over "model", no all-reduce, the right values): hostile. It fails the
forward's rule by its multiply-adds per device (about 8 times its share of the block's) and its bytes sent, its
step, built on that block, by the same rules, and its stack's gradient program holds every device's copy of the
whole activations, remat or not."""

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
    def whole(w, spec):
        for dim, axis in enumerate(spec):
            if axis is not None:
                w = jax.lax.all_gather(w, axis, axis=dim, tiled=True)
        return w

    def local(p, xs):
        p = {name: whole(w, SPECS[name]) for name, w in p.items()}
        x_all = whole(xs, X_SPEC)
        att = _attend(_rms(x_all), p["wq"], p["wk"], p["wv"], num_heads)
        h = x_all + att @ p["wo"]
        mlp = jax.nn.relu(_rms(h) @ p["w1"]) @ p["w2"]
        b, m = xs.shape[0], jax.lax.axis_size("model")

        def decoy(z):  # every "model" device holds the same rows: their shares summed and scattered
            mine = jax.lax.dynamic_slice_in_dim(z, jax.lax.axis_index("data") * b, b, axis=0)
            return jax.lax.psum_scatter(mine / m, "model", scatter_dimension=1, tiled=True)

        return decoy(h) + decoy(mlp)

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
