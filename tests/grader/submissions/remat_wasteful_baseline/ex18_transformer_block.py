"""ex18 (hostile) whose stack_loss ignores remat and whose remat=False path keeps extra copies of every
block's output for the backward pass (weighted zero in the loss): the same loss, and its remat=True program at
under half of its own remat=False program (measured on the visible stack, 2x4: 719568 against 2124056 bytes,
0.34), but not under half of the course's stack without remat (359784) (the rest is right)."""

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
    def loss_of(p):
        return jnp.mean((block_forward(p, x, mesh, num_heads=num_heads) - y) ** 2)

    loss, grads = jax.value_and_grad(loss_of)(params)
    return jax.tree.map(lambda w, g: w - lr * g, params, grads), loss


def stack_loss(stacked, x, y, mesh, remat: bool, *, num_heads: int = 8):
    def layer(h, p):
        return block_forward(p, h, mesh, num_heads=num_heads), None

    def hoarding(h, p):
        out = block_forward(p, h, mesh, num_heads=num_heads)
        # copies of every block's output kept for the backward pass, their weight zero
        return out, jnp.stack([jnp.sin(out + k) for k in range(COPIES)])

    if remat:  # remat ignored
        out, _ = jax.lax.scan(layer, x, stacked)
        return jnp.mean((out - y) ** 2)
    out, kept = jax.lax.scan(hoarding, x, stacked)
    return jnp.mean((out - y) ** 2) + 0.0 * jnp.sum(kept**2)


COPIES = 32
