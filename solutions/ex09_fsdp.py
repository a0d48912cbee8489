"""ex09_fsdp: fully sharded data parallelism (FSDP).

In ex08 every device held a full copy of the parameters. That copy is what stops data parallelism
from scaling to large models: with n devices there are n copies of every weight (and, in real
training, of every optimizer state). Fully sharded data parallelism keeps the batch split exactly as
before, but also splits every weight matrix: each device *stores* only 1/n of each W. A weight is
gathered whole just before it is used, and the gradient of that whole weight, which every device
computes from its own block of the batch, is summed over the devices and *scattered*: each device
receives only the part of the sum that belongs to its own slice, and updates only that slice.

The model, the loss and one plain SGD step on one device are given below, identical to ex08's (do
not change them: the hidden tests use their own copy). The mesh is 1-D with one axis named "data",
of axis type Explicit (`jax.make_mesh((n,), ("data",), axis_types=(AxisType.Explicit,))`), so
`jax.shard_map` refuses inputs whose sharding differs from its in_specs.

Layouts. Each weight W (n_in, n_out) is split along its first dimension over "data", P("data", None):
device i holds rows i * n_in / n to (i + 1) * n_in / n. The biases b (n_out,) are small and stay
replicated, P(). The batch x (n_batch, n_in) and targets y (n_batch, n_out) are split along the batch
dimension, P("data", None), as in ex08. The new params come back in the same layouts, and the loss as a
replicated scalar. Every n_in and the batch divide evenly among the devices.

Tolerance: after one step and after five, the parameters and losses must match the single-device
`sgd_step` on the whole batch (float32) at rtol=1e-5, atol=1e-6; graded on meshes of 2, 4 and 8
devices. The tests also compile one step and read its program: it must all-gather (the weights) and
reduce-scatter (their gradients), and must not all-reduce anything as large as a weight's full
gradient (the biases' gradients and the loss are small and may be all-reduced), and they read how
many multiply-adds each device executes and how many bytes it sends to other devices, which
fsdp_train_step's docstring bounds by a formula of the batch B, the layer widths n_0, n_1, ... and
the n devices. They read XLA's per-device memory figures too: the bytes of the arguments (params
placed by your `shard_params`, plus the batch) must be at most 1/n of a replicated data-parallel
step's, plus the biases and the batch block, which both versions hold whole. The hidden tests report
the temporary bytes beside them, for information. The visible tests check each rule on 8 devices;
the hidden ones on 2, 4 and 8 with other inputs.

Grading: 20 points. shard_params 2 (1 visible, 1 hidden). fsdp_train_step's values and layouts 7 (one
step, five and the ten of the worked example, against one device: 3 visible, 4 hidden). Its compiled
program 8 (2 visible, 6 hidden): the weights all-gathered, every weight's gradient reduce-scattered
(each device receives its 1/n of each), no weight's whole gradient all-reduced, and each device's
work and traffic within the bounds. This is what makes FSDP: a step that all-reduces the gradients
and then keeps its own rows computes the same values and layouts, and earns none of these 8; nor does
one in which every device trains on the whole batch. Its argument bytes 3 (1 visible, 2 hidden). Both the
program and the memory tests check the values of the program they read.
"""

import functools

import jax
import jax.numpy as jnp
from jax.sharding import NamedSharding, PartitionSpec as P  # noqa: F401  (for your code)


def init_mlp(key, sizes):
    """Parameters of an MLP with layer widths `sizes` (e.g. (16, 64, 64, 8)): a list of (W, b) with
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


def sgd_step(params, x, y, lr):
    """One step of plain SGD on one device: returns (new params, the loss at the old params).
    Given: do not change it."""
    loss, grads = jax.value_and_grad(mse_loss)(params, x, y)
    return jax.tree.map(lambda p, g: p - lr * g, params, grads), loss


def shard_params(params, mesh):
    """Place `params` (a list of (W, b), plain arrays) on `mesh` for FSDP.

    Returns the same structure, a list of (W, b) tuples: every W sharded P("data", None) (split along
    its first dimension over "data"), every b replicated, P(). Each device then stores 1/n of every
    weight matrix.
    """
    ### BEGIN SOLUTION
    rows, whole = NamedSharding(mesh, P("data", None)), NamedSharding(mesh, P())
    return [(jax.device_put(W, rows), jax.device_put(b, whole)) for W, b in params]
    ### END SOLUTION


@functools.partial(jax.jit, static_argnames=("mesh",))
def fsdp_train_step(params, x, y, lr, mesh):
    """One FSDP step of SGD with `jax.shard_map` over the "data" axis of `mesh`: returns (params, loss).

    params arrive as `shard_params` leaves them (W P("data", None), b P()), and x, y split P("data",
    None). Each device sees its slice of every W, the biases and its block of the batch. Gather each
    W whole where it is used, compute the gradients of the loss on your block, and reduce the weights'
    gradients with `jax.lax.psum_scatter` so that each device receives only the gradient of its own
    slice (and of the *whole batch's* loss: the mean over the devices), then update that slice. The
    new params keep the input layouts; the loss is the whole batch's, a replicated scalar.

    It is jitted for you (with `mesh` static), as the tests also compile it inside their own jax.jit:
    write it as traceable code. Tolerance and the hidden checks: see the module docstring. Each device
    executes at most 2 x B (3 S - n_0 n_1) / n multiply-adds, S being the sum over the layers of
    n_in x n_out (its share of the step's matmuls: its B/n rows through each layer's forward matmul and
    two backward ones, none for the input), and sends at most 1.25 x 2 (n - 1)/n x the bytes of all the
    parameters: what gathering each W ((n - 1)/n of its bytes), scattering its gradient (as much again)
    and all-reducing the biases' gradients (2 (n - 1)/n of theirs) send, and a quarter more.

    Hint: in all_gather and psum_scatter, `tiled=True` concatenates (or splits) along an existing
    dimension instead of adding one. And remember ex08's trap: inside shard_map, jax.grad with
    respect to a replicated (invariant) value already sums over the devices.
    """
    ### BEGIN SOLUTION
    n = mesh.shape["data"]
    specs = [(P("data", None), P()) for _ in params]

    def per_device(params, x, y, lr):
        # Each W gathered whole (the result is device-varying); the biases made device-varying too, so
        # that the gradients below are this device's own, of its block's loss.
        whole = [
            (
                jax.lax.all_gather(W, "data", axis=0, tiled=True),
                jax.lax.pcast(b, "data", to="varying"),
            )
            for W, b in params
        ]
        loss, grads = jax.value_and_grad(mse_loss)(whole, x, y)
        # The mean over the devices of the per-block gradients: for W, each device keeps only its rows.
        grads = [
            (
                jax.lax.psum_scatter(gW, "data", scatter_dimension=0, tiled=True) / n,
                jax.lax.pmean(gb, "data"),
            )
            for gW, gb in grads
        ]
        new = jax.tree.map(lambda p, g: p - lr * g, params, grads)
        return new, jax.lax.pmean(loss, "data")

    return jax.shard_map(
        per_device,
        mesh=mesh,
        in_specs=(specs, P("data", None), P("data", None), P()),
        out_specs=(specs, P()),
    )(params, x, y, lr)
    ### END SOLUTION
