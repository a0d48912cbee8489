"""ex10_tensor_parallel: tensor parallelism on a 2-D ("data", "model") mesh.

Data parallelism (ex08) gives every device a full copy of the weights. When the weights are too big
for one device, split them too: *tensor parallelism*. Here the devices form a 2-D mesh, e.g. 4 x 2,
with axes ("data", "model"): the batch is split over "data" and the weights over "model", so each
device holds one block of the batch and one slice of the hidden layer.

The block is a two-layer MLP (given below; do not change it, the tests keep their own copy):

    h = relu(x @ W1 + b1)        x (n_batch, n_in), W1 (n_in, n_hidden), b1 (n_hidden,)
    y = h @ W2 + b2              W2 (n_hidden, n_out), b2 (n_out,)
    loss = mean((y - target) ** 2)

params is a dict {"W1": W1, "b1": b1, "W2": W2, "b2": b2} (see `init_params`). The tensor-parallel
layout (Megatron's) splits W1 by columns and W2 by rows over "model":

    W1: P(None, "model")   b1: P("model")   W2: P("model", None)   b2: P()
    x, target: P("data", None)

A device of "model" group j then computes its own columns of h from its block of x, with no
communication at all (relu acts element by element), and multiplies them by its own rows of W2:
a *partial sum* of h @ W2. The partial sums are added up over "model" only; the "data" axis holds
other rows of the batch, which must never be mixed.

You will write

  1. `shard_mlp_params`: place the params in that layout;
  2. `tp_forward`: the forward pass with `jax.shard_map` over both axes, one psum over "model";
  3. `tp_train_step`: one step of SGD, data parallel over "data" and tensor parallel over "model".

The mesh's axis types are Explicit (`jax.make_mesh(shape, ("data", "model"), axis_types=...)`), so
shard_map refuses inputs whose sharding differs from its in_specs. `tp_forward` and `tp_train_step`
are given already wrapped in `jax.jit` with the mesh a static argument (one compilation per mesh).

Tolerance: forward outputs against a float64 NumPy forward, params and losses after one and after
three steps against single-device SGD (float32), at rtol=1e-5, atol=1e-6. Graded on 4 x 2, 2 x 4 and
2 x 2 meshes. The tests also compile your functions and read, from the compiled program, the device
groups of every all-reduce: the forward's must run over "model" (groups of |model| devices), the
gradients' over "data" (groups of |data| devices); a program that gathers the weights instead does
not count, whatever it computes, and the program read must also compute the right values. They read
from the same programs how many multiply-adds each device executes and how many bytes it sends to
other devices, which `tp_forward`'s and `tp_train_step`'s docstrings bound by a formula of the shapes
(B = n_batch, H = n_hidden, n = |data| x |model| devices): a program in which every device computes
the whole layer meets neither.

Grading: 20 points. shard_mlp_params 2. tp_forward's values and layout 3, its compiled program (one
all-reduce, over "model", and the work and traffic bounds) 3. tp_train_step's values and layouts 7
(one step and the worked example's five on 4 x 2, visible; three steps on each mesh, hidden), its
compiled program (activations over "model", gradients over "data", the work and traffic bounds) 5.
The visible tests (4 x 2) carry 7 of these points, one of them for each compiled program.
"""

from functools import partial

import jax
import jax.numpy as jnp
from jax.sharding import NamedSharding, PartitionSpec as P  # noqa: F401  (for your code)


def init_params(key, n_in, n_hidden, n_out):
    """The MLP's params: {"W1": (n_in, n_hidden), "b1": (n_hidden,), "W2": (n_hidden, n_out), "b2": (n_out,)}.
    Given: do not change it."""
    k1, k2, k3, k4 = jax.random.split(key, 4)
    return {
        "W1": jax.random.normal(k1, (n_in, n_hidden)) / jnp.sqrt(n_in),
        "b1": 0.1 * jax.random.normal(k2, (n_hidden,)),
        "W2": jax.random.normal(k3, (n_hidden, n_out)) / jnp.sqrt(n_hidden),
        "b2": 0.1 * jax.random.normal(k4, (n_out,)),
    }


def forward(params, x):
    """relu(x @ W1 + b1) @ W2 + b2 on one device. Given: do not change it."""
    h = jax.nn.relu(x @ params["W1"] + params["b1"])
    return h @ params["W2"] + params["b2"]


def mse_loss(params, x, y):
    """The mean squared error over the whole batch. Given: do not change it."""
    return jnp.mean((forward(params, x) - y) ** 2)


def sgd_step(params, x, y, lr):
    """One step of plain SGD on one device: returns (new params, the loss at the old params).
    Given: do not change it."""
    loss, grads = jax.value_and_grad(mse_loss)(params, x, y)
    return jax.tree.map(lambda p, g: p - lr * g, params, grads), loss


def shard_mlp_params(params, mesh):
    """Place `params` (a dict of plain arrays, as from init_params) on the 2-D mesh `mesh` in the
    tensor-parallel layout: W1 P(None, "model") (split by columns), b1 P("model"), W2 P("model", None)
    (split by rows), b2 P() (replicated). Nothing is split over "data": the devices of one "model"
    group hold the same slices. Returns a dict with the same keys.
    """
    ### BEGIN SOLUTION
    specs = {"W1": P(None, "model"), "b1": P("model"), "W2": P("model", None), "b2": P()}
    return {
        name: jax.device_put(value, NamedSharding(mesh, specs[name]))
        for name, value in params.items()
    }
    ### END SOLUTION


@partial(jax.jit, static_argnames="mesh")
def tp_forward(params, x, mesh):
    """The forward pass, tensor parallel, with `jax.shard_map` over both axes of `mesh`.

    params arrive in the layout of `shard_mlp_params`, x (n_batch, n_in) split P("data", None).
    Returns y (n_batch, n_out) split P("data", None), equal to `forward(params, x)`. The compiled
    program must contain exactly one all-reduce, over "model" (one psum). Each device executes at most
    2 x B (n_in H + H n_out) / n multiply-adds (its share: its B/|data| rows through its H/|model|
    hidden units, in both matmuls) and sends at most 1.25 x 2 (|model| - 1)/|model| x B/|data| x n_out
    x 4 bytes (one all-reduce over "model" of a float32 (B/|data|, n_out) array, and a quarter more).
    Hint: after its two matmuls, what does one device of a "model" group hold? Which devices hold
    the other pieces of the same rows, and what about b2, which every device holds whole?
    """

    ### BEGIN SOLUTION
    def per_device(params, x):
        # this device's columns of h: no communication
        h = jax.nn.relu(x @ params["W1"] + params["b1"])
        partial_sum = h @ params["W2"]  # its share of h @ W2, for its rows of the batch
        return jax.lax.psum(partial_sum, "model") + params["b2"]  # b2 once, after the sum

    specs = {"W1": P(None, "model"), "b1": P("model"), "W2": P("model", None), "b2": P()}
    return jax.shard_map(
        per_device, mesh=mesh, in_specs=(specs, P("data", None)), out_specs=P("data", None)
    )(params, x)
    ### END SOLUTION


@partial(jax.jit, static_argnames="mesh")
def tp_train_step(params, x, y, lr, mesh):
    """One step of SGD on the whole batch, data parallel over "data" and tensor parallel over "model".

    params arrive in the layout of `shard_mlp_params`, x and y split P("data", None). Returns
    (new params, loss): the new params in the same layout as the old ones, the loss (at the old params)
    a replicated scalar, P(); the values of `sgd_step` on one device. Each device's W1, b1 and W2
    slices get the gradient of the whole batch's loss: summed (averaged) over the batch blocks of
    "data", never over "model", whose devices hold *different* slices of the weights. Each device
    executes at most 2 x B (2 n_in H + 3 H n_out) / n multiply-adds (its share: its rows through its
    hidden units, forward and backward, no gradient for x) and sends at most 1.25 x (the forward's
    bytes, and 2 (|data| - 1)/|data| x 4 x the n_in H/|model| + H/|model| + H n_out/|model| + n_out
    floats of the slices it holds: one all-reduce over "data" of their gradients).
    Hint: ex08's trap is still here: inside shard_map, jax.grad with respect to params invariant over
    "data" already sums over "data" for you. jax.grad taken from outside, of a loss built on a
    shard_mapped forward, gets the true gradient with no bookkeeping.
    """

    ### BEGIN SOLUTION
    def loss_fn(params):
        # tp_forward's output is split P("data", None) like y; the mean over the batch then needs an
        # all-reduce over "data", and jax.grad through its shard_map sums the weights' gradients over
        # "data" (the weights are invariant there) and keeps each "model" slice's gradient its own.
        return jnp.mean((tp_forward(params, x, mesh) - y) ** 2)

    loss, grads = jax.value_and_grad(loss_fn)(params)
    return jax.tree.map(lambda p, g: p - lr * g, params, grads), loss
    ### END SOLUTION
