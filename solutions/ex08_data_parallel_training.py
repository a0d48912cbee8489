"""ex08_data_parallel_training: data-parallel training of a small MLP.

Data parallelism is the first thing anyone parallelizes in training: every device holds a full copy
of the parameters and one block of the batch, computes the gradient of the loss on its block, and
the devices *average* their gradients so that every copy takes the same step. The result must be the
step one device would take on the whole batch.

The model, the loss and one plain SGD step on one device are given below (do not change them: the
hidden tests use their own copy). You will train the MLP on the 1-D mesh `mesh` with one axis named
"data", whose axis type is Explicit (`jax.make_mesh((n,), ("data",), axis_types=(AxisType.Explicit,))`):
every value's sharding is then part of its type, so `jax.typeof` shows, while tracing, that the batch
is split and the params stay replicated, and shard_map refuses inputs whose sharding differs from its
in_specs. You will train in two ways:

  1. `train_step`: single-device code under `jax.jit`, given a sharded batch and replicated
     parameters. The compiler splits the work and inserts the gradient reduction itself.
  2. `train_step_shard_map`: per-device code with `jax.shard_map`, with the averaging of the
     gradients written out by you.

Layouts: the batch x (n_batch, n_in) and targets y (n_batch, n_out) are split along the batch (first)
dimension, P("data", None); every parameter is replicated, P(), before and after a step; the loss is
a replicated scalar. The batch always divides evenly among the devices.

Tolerance: after one step and after several (5 in the hidden tests), the parameters and losses must
match the single-device `sgd_step` on the whole batch (float32) at rtol=1e-5, atol=1e-6; graded on
meshes of 2, 4 and 8 devices. The tests also compile each step and read, from the program each
device runs, its collectives (an all-reduce must be there, and no all-gather of anything
batch-sized: gathering the batch means every device trains on all of it), how many multiply-adds it
executes and how many bytes it sends to other devices: each step's docstring bounds the last two by
a formula of the batch B, the layer widths n_0, n_1, ... and the n devices. They also time the steps
on a large batch, on 8 devices, against every device training on the whole batch: a data-parallel
step must be at least 3.2 times faster than that (0.4 n). These tests check the values of the
program they read or time too. The visible tests check each rule on 8 devices (the speed of both
steps); the hidden ones on 2, 4 and 8 devices with other inputs, and time both steps on a larger
batch.

Grading: 20 points. shard_batch and replicate 4 (1 each in the visible tests, 1 each in the hidden
ones). One step of train_step and of train_step_shard_map 4 (the same). Training over several steps
4 (the visible worked example's 10 steps both ways 1; `train`'s 5 steps both ways 3, hidden). The
compiled steps' collectives, work and traffic 3 (1 visible, 2 hidden). The speed against every device
training on the whole batch 5 (1.5 visible: train_step's 0.5, train_step_shard_map's 1; 3.5 hidden).
"""

import jax
import jax.numpy as jnp
from jax.sharding import NamedSharding, PartitionSpec as P  # noqa: F401  (for your code)


def init_mlp(key, sizes):
    """Parameters of an MLP with layer widths `sizes` (e.g. (12, 20, 16, 5)): a list of (W, b) with
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


def shard_batch(x, y, mesh):
    """Place x and y split along their batch (first) dimension over the "data" axis of `mesh`.

    x (n_batch, n_in) and y (n_batch, n_out) arrive as plain arrays. Returns (x, y), both sharded
    P("data", None) on `mesh`: device i holds rows i * n_batch / n to (i + 1) * n_batch / n.
    """
    ### BEGIN SOLUTION
    batch = NamedSharding(mesh, P("data", None))
    return jax.device_put(x, batch), jax.device_put(y, batch)
    ### END SOLUTION


def replicate(params, mesh):
    """A copy of every leaf of `params` (a list of (W, b)) on every device of `mesh`.

    Returns the same structure (a list of (W, b) tuples), every array sharded P() on `mesh`.
    Hint: jax.device_put takes a whole pytree of arrays and one sharding for all of them.
    """
    ### BEGIN SOLUTION
    return jax.device_put(params, NamedSharding(mesh, P()))
    ### END SOLUTION


@jax.jit
def train_step(params, x, y, lr):
    """One data-parallel SGD step, parallelized by the compiler: returns (new params, loss).

    params arrive replicated (P()) and x, y sharded P("data", None) on an Explicit mesh (see the
    module docstring); there is no mesh argument, because the inputs' shardings say it all. The new
    params must come back replicated and the loss as a replicated scalar, with the values of
    `sgd_step` on one device. The tests compile this step: its program must contain an all-reduce
    and no all-gather of the batch. Each device executes at most 2 x B (3 S - n_0 n_1) / n
    multiply-adds, S being the sum over the layers of n_in x n_out (its share of the step's matmuls:
    its B/n rows through each layer's forward matmul and two backward ones, none for the input), and
    sends at most 1.25 x 2 (n - 1)/n x the bytes of all the parameters (what one all-reduce of the
    gradients sends, and a quarter more).
    Hint: under jax.jit the computation follows the data: what does the single-device step need to
    become a data-parallel one?
    """
    ### BEGIN SOLUTION
    return sgd_step(params, x, y, lr)
    ### END SOLUTION


def train_step_shard_map(params, x, y, lr, mesh):
    """The same step as per-device code with `jax.shard_map` over the "data" axis of `mesh`.

    Same inputs, outputs, layouts and tolerance as `train_step`. Each device sees its own block of
    the batch and a full copy of the parameters; you write out how the per-device gradients become
    the gradient of the whole batch's loss (the mean of the per-device gradients, when each device's
    loss is the mean over its block). The tests call it directly on placed arrays, and compile it
    under jax.jit (so it must be traceable with `mesh` and `lr` fixed), expecting an all-reduce and no
    all-gather of the batch, and the same bounds on the work and the bytes sent as `train_step`. If JAX
    asks you to enter a mesh context when it is called directly, run your step under jax.jit.

    THE TRAP. Inside shard_map, the parameters are replicated: their type says they are *invariant*
    over "data". `jax.grad` with respect to an invariant value already sums the per-device gradients
    over the devices (it has to: the same value was used on every device). So the classic recipe
    "take jax.grad of the local loss, then jax.lax.pmean the gradients" gives n times the true
    gradient on n devices, silently: it compiles, runs and trains, with a learning rate n times too
    large. Two correct ways out: take jax.grad, from outside, of a shard_mapped loss whose body
    averages the local losses with pmean; or, inside shard_map, make the params device-varying with
    `jax.lax.pcast(params, "data", to="varying")` so that their gradients stay local, and pmean those.
    (Turning the checks off with check_vma=False brings its own trap: then nothing is summed for you
    and each device would keep its own, different, parameters if you never average.)
    """

    ### BEGIN SOLUTION
    def local_loss(params, x, y):
        return jax.lax.pmean(mse_loss(params, x, y), "data")

    loss_dp = jax.shard_map(
        local_loss, mesh=mesh, in_specs=(P(), P("data", None), P("data", None)), out_specs=P()
    )

    def step(params, x, y, lr):
        loss, grads = jax.value_and_grad(loss_dp)(params, x, y)
        return jax.tree.map(lambda p, g: p - lr * g, params, grads), loss

    return jax.jit(step)(params, x, y, lr)
    ### END SOLUTION


def train(params, x, y, mesh, steps: int, lr: float, use_shard_map: bool = False):
    """Train for `steps` steps of data-parallel SGD on the whole batch (x, y) on `mesh`.

    params (a list of (W, b), e.g. from init_mlp), x and y arrive as plain, unplaced arrays. Place
    them (shard_batch, replicate), then take `steps` steps with `train_step`, or with
    `train_step_shard_map` when `use_shard_map` is true. Returns (params, losses): the params after
    the last step, replicated on `mesh`, and a 1-D array of the `steps` losses, losses[i] being the
    loss before step i + 1 (so they should decrease). Matches `steps` calls of `sgd_step` on one
    device at the module's tolerance.
    """
    ### BEGIN SOLUTION
    params = replicate(params, mesh)
    x, y = shard_batch(x, y, mesh)
    step = (
        train_step
        if not use_shard_map
        else jax.jit(lambda p, x, y, lr: train_step_shard_map(p, x, y, lr, mesh))
    )
    losses = []
    for _ in range(steps):
        params, loss = step(params, x, y, lr)
        losses.append(loss)
    return params, jnp.stack(losses)
    ### END SOLUTION
