"""ex17_zero1_accumulation: gradient accumulation and a sharded optimizer state (ZeRO-1).

Two memory savers of large-scale training, on ex08's MLP. Gradient accumulation: a batch too large for
one pass is cut into MB microbatches of equal size, the gradients of the microbatches are summed on
each device, and the devices reduce them ONCE per step, not once per microbatch (a reduction inside the
loop moves MB times the bytes). ZeRO stage 1: Adam keeps two moments (m and v) per parameter, twice the
weights' memory; with n data-parallel devices each device keeps only 1/n of each moment, reduces the
gradient with a reduce-scatter (so it receives only the part of the sum it updates), runs Adam on its
shard and all-gathers the updated parameters.

The model and the loss are given below, identical to ex08's (do not change them: the hidden tests use
their own copy). The mesh is 1-D with one axis named "data", of axis type Explicit
(`jax.make_mesh((n,), ("data",), axis_types=(AxisType.Explicit,))`).

Layouts. params: a list of (W, b), W (n_in, n_out), b (n_out,), replicated, P(), in and out. The
microbatches xs (MB, B, n_in) and ys (MB, B, n_out) are split along the batch dimension, P(None,
"data"): device i holds rows i * B / n to (i + 1) * B / n of every microbatch. The optimizer state is a
dict {"m": ..., "v": ..., "t": ...}: m and v have params' structure, every leaf split along its first
dimension, P("data") (so each device holds 1/n of each), and t is an int32 scalar, replicated. The
tests choose layer sizes whose every leading dimension (each n_in, and each b's n_out) divides by n.

The step's gradient is the mean over all MB microbatches and all devices of the per-microbatch gradient
of `mse_loss`: the gradient of the whole batch's loss, with every microbatch weighing the same. Adam:
b1 = 0.9, b2 = 0.999, eps = 1e-8; with t the step count after the increment (1 at the first step),
m = b1 m + (1 - b1) g, v = b2 v + (1 - b2) g ** 2, p = p - lr * m_hat / (sqrt(v_hat) + eps), where
m_hat = m / (1 - b1 ** t) and v_hat = v / (1 - b2 ** t).

Tolerances (float32 against the tests' single-device float64 references): accumulate_grads at
rtol=1e-5, atol=1e-6. zero1_adam_step runs three times, each step checked against one float64 Adam
step from the params and state your previous step returned: params and loss at rtol=1e-4, atol=1e-5
(an entry whose gradient is within float32's rounding of zero, or of cancelling m, moves by
lr * m_hat / sqrt(v_hat), a ratio of tiny numbers: it is allowed what that rounding can move it, up to
2 lr at the first step), m at rtol=1e-4, atol=1e-6, v at rtol=1e-4, atol=1e-9, and t exactly.
Graded on meshes of 2, 4 and 8 devices with MB in {1, 2, 4}; the visible tests use 8 devices.

What the tests read in the compiled programs (each rule earned only by a program that also computes
the right values). Loops around collectives must have static trip counts (a Python loop, or fori_loop /
scan over the MB microbatches), so that what runs can be counted. A collective counts once per array it
carries, each time it runs: XLA may combine the reductions of several leaves into one instruction.
  - accumulate_grads: exactly one all-reduced array per parameter leaf per call (2 per layer), not one
    per microbatch; every gradient's full size goes through those all-reduces; no all-gather of
    anything as large as a device's block of a microbatch (the data stays where it is).
  - zero1_adam_step: exactly one reduce-scattered array per leaf (the gradients, whole, in) and exactly
    one all-gathered array per leaf (the updated shards, out); no all-reduce larger than a few scalars
    (the loss's mean is one); each device's arguments hold the params whole but m and v at 1/n.

Grading: 20 points. accumulate_grads 6 (values and layout 1 visible, 2 hidden; its program 1 visible,
2 hidden). zero1_init 3 (1 visible, 2 hidden). zero1_adam_step 11: three steps' values and layouts 4
(1 visible, 3 hidden); its program's collectives 4 (1 visible, 3 hidden); its argument bytes 3 (1
visible, 2 hidden).
"""

import jax
import jax.numpy as jnp
from jax.sharding import NamedSharding, PartitionSpec as P  # noqa: F401  (for your code)

B1, B2, EPS = 0.9, 0.999, 1e-8


def init_mlp(key, sizes):
    """Parameters of an MLP with layer widths `sizes` (e.g. (16, 32, 16, 8)): a list of (W, b) with
    W of shape (n_in, n_out) and b of shape (n_out,). Given: do not change it."""
    keys = jax.random.split(key, len(sizes) - 1)
    params = []
    for k, n_in, n_out in zip(keys, sizes[:-1], sizes[1:]):
        w_key, b_key = jax.random.split(k)
        params.append(
            (
                0.1 * jax.random.normal(w_key, (n_in, n_out)),
                0.1 * jax.random.normal(b_key, (n_out,)),
            )
        )
    return params


def mlp_forward(params, x):
    """tanh after every layer but the last, which is linear. Given: do not change it."""
    for W, b in params[:-1]:
        x = jnp.tanh(x @ W + b)
    W, b = params[-1]
    return x @ W + b


def mse_loss(params, x, y):
    """The mean squared error over the whole batch. Given: do not change it."""
    return jnp.mean((mlp_forward(params, x) - y) ** 2)


def accumulate_grads(params, xs, ys, mesh):
    """The mean gradient of `mse_loss` over the MB microbatches and all devices, replicated.

    params: a list of (W, b), replicated, P(). xs (MB, B, n_in), ys (MB, B, n_out): P(None, "data").
    Returns the gradients in params' structure, every leaf replicated, P(): the mean over the MB
    microbatches of the gradient of each whole microbatch's loss.

    Sum the gradients of the microbatches locally, in a loop with a static trip count (fori_loop or
    scan over the MB microbatches, or a Python loop), and reduce across the devices ONCE, after the
    loop: the compiled program must all-reduce one array per parameter leaf, not MB times that.

    Traps (measured, jax 0.10.2): inside shard_map, jax.grad with respect to replicated (invariant)
    params sums over the devices by itself, inside the loop, once per microbatch: make the params
    device-varying first (jax.lax.pcast(params, "data", to="varying")). With Explicit sharding and no
    shard_map, a gradient with respect to replicated params of a split batch is "unreduced"; it cannot
    be divided (`g / MB` fails: "unreduced rule for div is not implemented"): reduce it first.
    """
    # YOUR CODE HERE
    raise NotImplementedError("ex17: accumulate_grads")


def zero1_init(params, mesh):
    """Adam's state for ZeRO-1: {"m": zeros like params, "v": zeros like params, "t": 0}.

    params: a list of (W, b) (plain arrays, or placed on `mesh`). m and v have params' structure,
    shapes and dtype (float32), and every leaf is split along its first dimension over "data",
    P("data"): each device holds 1/n of each moment. t is an int32 scalar 0, replicated, P().
    """
    # YOUR CODE HERE
    raise NotImplementedError("ex17: zero1_init")


def zero1_adam_step(params, opt_state, xs, ys, lr, mesh):
    """One Adam step, ZeRO-1 style, with `jax.shard_map`: returns (params, opt_state, loss).

    params: replicated, P(). opt_state: as zero1_init returns it (m, v P("data"), t P()). xs, ys: P(None,
    "data") microbatches, as in accumulate_grads. Returns the new params replicated, the new opt_state in
    the same layouts (t + 1), and the loss at the old params (the mean over the microbatches and the
    devices of mse_loss), a replicated scalar.

    On each device: sum the gradients of its blocks of the microbatches (a loop with a static trip
    count, as in accumulate_grads), then reduce each leaf's gradient with one jax.lax.psum_scatter
    (scatter_dimension=0, tiled=True): each device receives the sum for its own rows only (divide by MB
    * n for the mean). Run Adam on those rows (the device's shard of m and v, and the matching rows of
    the params: jax.lax.axis_index tells which), then all_gather each updated leaf (tiled=True). Pass
    to="invarying": out_specs P() needs a value the same on every device, and a plain all_gather's
    result is typed device-varying. No gradient is all-reduced: a psum then a slice computes the same
    numbers, but every device receives all of every gradient.
    """
    # YOUR CODE HERE
    raise NotImplementedError("ex17: zero1_adam_step")
