"""ex18 whose every mesh function replicates the work, with the right values and the collectives the rules
name (hostile): each device gathers every weight over both axes and the whole batch and sequence, computes the
whole block (and, in the step, the whole gradient) itself, and keeps its own part through decoy
psum_scatters: over "model" in the forward (1/|model| of its rows, summed back), over "data" in the step
(1/|data| of each weight gradient's column of blocks, one per weight). All-gathers over "data" and "model",
reduce-scatters where the rules ask for them, no all-reduce; each device executes |data| |model| times its
share of the work and sends every weight's other blocks. stack_loss scans that block, remat as asked."""

import math

import jax
import jax.numpy as jnp
from jax.sharding import NamedSharding, PartitionSpec as P

IN_PROJ, OUT_PROJ = P("data", "model"), P("model", "data")
SPECS = {"wq": IN_PROJ, "wk": IN_PROJ, "wv": IN_PROJ, "wo": OUT_PROJ, "w1": IN_PROJ, "w2": OUT_PROJ}
X_SPEC = P("data", "model", None)


def shard_block_params(params, mesh):
    return {name: jax.device_put(w, NamedSharding(mesh, SPECS[name])) for name, w in params.items()}


def _block(p, x, heads):
    """The whole block on one device, in two parts whose sum is its output."""

    def rms(h):
        return h * jax.lax.rsqrt(jnp.mean(h * h, axis=-1, keepdims=True) + 1e-6)

    a = rms(x)
    b, t, _ = a.shape
    q, k, v = ((a @ p[n]).reshape(b, t, heads, -1) for n in ("wq", "wk", "wv"))
    scores = jnp.einsum("bthd,bshd->bhts", q, k) / math.sqrt(q.shape[-1])
    scores = jnp.where(jnp.tril(jnp.ones((t, t), bool)), scores, -jnp.inf)
    att = jnp.einsum("bhts,bshd->bthd", jax.nn.softmax(scores, axis=-1), v).reshape(b, t, -1)
    h = x + att @ p["wo"]
    return h, jax.nn.relu(rms(h) @ p["w1"]) @ p["w2"]  # the residual stream, the MLP's output


def _whole(a, spec):
    """Every block of a, gathered over each mesh axis its spec splits."""
    for dim, axis in enumerate(spec):
        if axis is not None:
            a = jax.lax.all_gather(a, axis, axis=dim, tiled=True)
    return a


def _rows(z, b):
    """This device's batch rows of a whole-batch array."""
    return jax.lax.dynamic_slice_in_dim(z, jax.lax.axis_index("data") * b, b, axis=0)


def _local_forward(p, xs, heads):
    parts = _block({n: _whole(w, SPECS[n]) for n, w in p.items()}, _whole(xs, X_SPEC), heads)
    m = jax.lax.axis_size("model")

    def decoy(z):  # every "model" device holds the same rows: 1/m of them summed and scattered
        return jax.lax.psum_scatter(_rows(z, xs.shape[0]) / m, "model", scatter_dimension=1, tiled=True)

    return decoy(parts[0]) + decoy(parts[1])


def block_forward(params, x, mesh, *, num_heads: int = 8):
    return jax.shard_map(
        lambda p, xs: _local_forward(p, xs, num_heads),
        mesh=mesh,
        in_specs=(SPECS, X_SPEC),
        out_specs=X_SPEC,
    )(params, x)


def block_train_step(params, x, y, lr, mesh, *, num_heads: int = 8):
    def local(p, xs, ys):
        whole = {n: _whole(w, SPECS[n]) for n, w in p.items()}
        x_all, y_all = _whole(xs, X_SPEC), _whole(ys, X_SPEC)

        def loss_of(w):
            return jnp.mean((sum(_block(w, x_all, num_heads)) - y_all) ** 2)

        loss, grads = jax.value_and_grad(loss_of)(whole)  # the whole gradient, on every device
        d, j = jax.lax.axis_size("data"), jax.lax.axis_index("model")
        new = {}
        for n, g in grads.items():
            model_dim, data_dim = (1, 0) if SPECS[n] == IN_PROJ else (0, 1)
            size = p[n].shape[model_dim]
            column = jax.lax.dynamic_slice_in_dim(g, j * size, size, axis=model_dim)
            # every "data" device holds the same column: 1/d of it summed and scattered
            mine = jax.lax.psum_scatter(column / d, "data", scatter_dimension=data_dim, tiled=True)
            new[n] = p[n] - lr * mine
        return new, jax.lax.pmean(loss, ("data", "model"))  # the same on every device: marked so

    return jax.shard_map(
        local, mesh=mesh, in_specs=(SPECS, X_SPEC, X_SPEC), out_specs=(SPECS, P())
    )(params, x, y)


def stack_loss(stacked, x, y, mesh, remat: bool, *, num_heads: int = 8):
    def layer(h, p):
        return block_forward(p, h, mesh, num_heads=num_heads), None

    out, _ = jax.lax.scan(jax.checkpoint(layer) if remat else layer, x, stacked)
    return jnp.mean((out - y) ** 2)
