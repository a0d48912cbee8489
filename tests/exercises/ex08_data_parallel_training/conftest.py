"""What ex08's visible and hidden tests share: the tests' own copy of the single-device MLP and SGD step
(a student's module cannot change them), the training problem, the reference run on one device, and
the check of trained parameters that says which gradient trap a wrong update fell into."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import PartitionSpec as P

from grader.checks import assert_sharded_like, compare

SIZES = (12, 20, 16, 5)   # no width is a batch size of the tests: an all-gather of n_batch rows is the batch
N_BATCH = 192             # every mesh size's tests use this batch (8 devices: 24 rows each): one reference compile
LR = 0.05
# Parameters after one or five steps of data-parallel SGD against the single-device step (float32): the
# per-device means and their all-reduce add up the batch in another order than one device does.
TOL = dict(rtol=1e-5, atol=1e-6)
# How close a wrong update must be to a known mistake's update for the message to name that mistake.
DIAGNOSIS_TOL = dict(rtol=1e-3, atol=1e-5)


# --- the tests' copy of the given functions (exactly as in the exercise module) -------------------

def mlp_forward(params, x):
    for W, b in params[:-1]:
        x = jnp.tanh(x @ W + b)
    W, b = params[-1]
    return x @ W + b


def mse_loss(params, x, y):
    return jnp.mean((mlp_forward(params, x) - y) ** 2)


def sgd_step(params, x, y, lr):
    loss, grads = jax.value_and_grad(mse_loss)(params, x, y)
    return jax.tree.map(lambda p, g: p - lr * g, params, grads), loss


_one_device_step = jax.jit(sgd_step)


def _numpy(tree):
    return jax.tree.map(np.asarray, tree)


# --- the problem and the reference ---------------------------------------------------------------

def _problem(n_batch=N_BATCH, *, sizes=SIZES, seed=0):
    """(params, x, y) as float32 NumPy arrays: params drawn like init_mlp's (0.1 * normal; NumPy here, which
    costs no compilation), and a regression target y = sin(x @ A) that the MLP can learn."""
    rng = np.random.default_rng(seed)
    params = [((0.1 * rng.standard_normal((n_in, n_out))).astype(np.float32),
               (0.1 * rng.standard_normal(n_out)).astype(np.float32)) for n_in, n_out in zip(sizes[:-1], sizes[1:])]
    x = rng.standard_normal((n_batch, sizes[0]), dtype=np.float32)
    A = rng.standard_normal((sizes[0], sizes[-1]), dtype=np.float32) / np.sqrt(sizes[0])
    return params, x, np.sin(x @ A).astype(np.float32)


def _reference(params, x, y, lr=LR, steps=1):
    """`steps` single-device SGD steps on the whole batch: (params, losses) as NumPy."""
    device = jax.devices()[0]
    params, x, y = jax.device_put((params, x, y), device)
    losses = []
    for _ in range(steps):
        params, loss = _one_device_step(params, x, y, lr)
        losses.append(loss)
    return _numpy(params), np.array([float(v) for v in losses], dtype=np.float32)


@pytest.fixture
def problem():
    """problem(n_batch=N_BATCH, sizes=SIZES, seed=0) -> (params, x, y) as float32 NumPy arrays."""
    return _problem


@pytest.fixture
def single_device_step():
    """The tests' copy of the given sgd_step(params, x, y, lr) -> (params, loss), to build baselines with."""
    return sgd_step


@pytest.fixture
def reference():
    """reference(params, x, y, lr=LR, steps=1) -> (params, losses): sgd_step on one device, in NumPy."""
    return _reference


# --- checking trained parameters ----------------------------------------------------------------

def _leaves(params, like, what):
    """The arrays of `params`, checked to have the structure and shapes of `like` (a list of (W, b))."""
    leaves, want = jax.tree.leaves(params), jax.tree.leaves(like)
    shapes = [tuple(np.shape(v)) for v in leaves]
    expected = [v.shape for v in want]
    if not isinstance(params, (list, tuple)) or shapes != expected:
        raise AssertionError(f"{what} should be a list of (W, b) pairs like the params given, with shapes "
                             f"{expected}; got {type(params).__name__} with shapes {shapes}")
    return leaves


def _close(leaves, want, tol):
    return all(compare(np.asarray(g), w, **tol) is None for g, w in zip(leaves, jax.tree.leaves(want)))


def _diagnosis(leaves, params0, x, y, lr, steps, n):
    """Which known mistake, if any, these parameters are the result of."""
    rows = x.shape[0] // n
    known = [
        (_reference(params0, x, y, lr * n, steps)[0],
         f"they match SGD with {n} times the true gradient (n = {n} devices), as if the learning rate were "
         f"{n} times larger. That is the "
         "\"grad then pmean\" trap: inside shard_map, jax.grad with respect to replicated (invariant) "
         "params already sums the per-device gradients over the devices, and a pmean of that sum changes "
         "nothing. (A psum of local gradients instead of a pmean gives the same.) Take jax.grad of a "
         "shard_mapped loss that pmeans the local losses, or pcast the params to device-varying before "
         "taking local gradients and pmean those."),
        (_reference(params0, x, y, lr / n, steps)[0],
         f"they match SGD with 1/{n} of the true gradient (n = {n} devices): the gradients were "
         "averaged twice (e.g. the loss was pmean'd and the gradients pmean'd again), or divided by the "
         "device count once too often."),
        (_reference(params0, x[:rows], y[:rows], lr, steps)[0],
         f"they match SGD on device 0's block of the batch alone (its first {rows} rows): the "
         "gradients were never averaged over the devices, so each device took its own step with the "
         "gradient of its own block, and the copies of the params now differ (out_specs=P() with "
         "check_vma=False does not check that they agree; it returns one device's copy). Average the "
         "gradients over \"data\" before the update."),
    ]
    for want, story in known:
        if _close(leaves, want, DIAGNOSIS_TOL):
            return story
    return None


def _leaf_name(i):
    return f"{'W' if i % 2 == 0 else 'b'} of layer {i // 2}"


def _check_trained(params, losses, mesh, params0, x, y, *, lr=LR, steps=1, what="the new params"):
    """Values first (saying which trap a wrong update fell into), then the layouts: every parameter
    replicated on `mesh` with the reference's values on every device; the loss(es) likewise."""
    want, want_losses = _reference(params0, x, y, lr, steps)
    leaves = _leaves(params, want, what)
    if not _close(leaves, want, TOL):
        n = mesh.devices.size
        story = _diagnosis(leaves, params0, x, y, lr, steps, n)
        first = next(p for i, (g, w) in enumerate(zip(leaves, jax.tree.leaves(want)))
                     if (p := compare(np.asarray(g), w, **TOL, name=_leaf_name(i))))
        where = f"after {steps} step(s) on {n} devices"
        raise AssertionError(
            f"{what} {where} differ from single-device SGD on the whole batch: "
            + (story if story else "the update matches none of the usual mistakes (n times or 1/n of the "
               "gradient, or one device's block alone); check the gradient and the update p - lr * g.")
            + f"\nThe first array that differs: {first}")
    for i, (leaf, value) in enumerate(zip(leaves, jax.tree.leaves(want))):
        assert_sharded_like(leaf, mesh, P(), value, **TOL, name=f"{what}: {_leaf_name(i)}")
    if steps == 1:
        assert_sharded_like(losses, mesh, P(), want_losses[0], **TOL, name="the loss (a replicated scalar)")
    else:
        if np.shape(losses) != (steps,):
            raise AssertionError(f"losses should be a 1-D array of the {steps} losses, got shape {np.shape(losses)}")
        if problem := compare(np.asarray(losses), want_losses, **TOL, name="losses"):
            raise AssertionError(f"{problem}\nlosses[i] is the loss before step i + 1 (at the old params).")


@pytest.fixture
def check_trained():
    """check_trained(params, loss_or_losses, mesh, params0, x, y, lr=LR, steps=1, what=...)"""
    return _check_trained
