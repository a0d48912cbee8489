"""The single-device reference that the MLP training exercises (ex08, ex09) are checked against: the
tests' own copy of the given model, loss and SGD step (a student's module cannot change them), the
training problem, the reference run on one device, and the check that trained parameters equal it,
which names the known mistake a wrong update made."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from grader.checks import inputs
from grader.checks.numerics import compare


def mlp_forward(params, x):
    """tanh after every layer but the last, which is linear (as the exercises give it)."""
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


def make_problem(n_batch: int, sizes: tuple[int, ...], seed: int = 0):
    """(params, x, y) as float32 NumPy arrays: params drawn like init_mlp's (0.1 * normal; NumPy here, which
    costs no compilation), and a regression target y = sin(x @ A) that the MLP can learn."""
    rng = inputs.rng(seed)
    params = [
        (
            (0.1 * rng.standard_normal((n_in, n_out))).astype(np.float32),
            (0.1 * rng.standard_normal(n_out)).astype(np.float32),
        )
        for n_in, n_out in zip(sizes[:-1], sizes[1:])
    ]
    x = rng.standard_normal((n_batch, sizes[0]), dtype=np.float32)
    A = rng.standard_normal((sizes[0], sizes[-1]), dtype=np.float32) / np.sqrt(sizes[0])
    return params, x, np.sin(x @ A).astype(np.float32)


def sgd_reference(params, x, y, lr: float, steps: int = 1):
    """`steps` single-device SGD steps on the whole batch: (params, losses) as NumPy."""
    device = jax.devices()[0]
    params, x, y = jax.device_put((params, x, y), device)
    losses = []
    for _ in range(steps):
        params, loss = _one_device_step(params, x, y, lr)
        losses.append(loss)
    return jax.tree.map(np.asarray, params), np.array([float(v) for v in losses], dtype=np.float32)


def sgd_step_work(n_batch: int, sizes: tuple[int, ...]) -> int:
    """The multiply-adds of the matmuls of one SGD step of the MLP on n_batch rows, on one device: per layer
    the forward x @ W, the weight's gradient x.T @ g and the gradient passed down g @ W.T, each n_batch x
    n_in x n_out, but none passed down from the first layer (nothing needs the gradient of the input).
    What a device's share of a step is made of when the batch is split (ex08, ex09)."""
    layers = [n_in * n_out for n_in, n_out in zip(sizes[:-1], sizes[1:])]
    return n_batch * (3 * sum(layers) - layers[0])


def parameter_bytes(sizes: tuple[int, ...]) -> int:
    """The bytes of all the MLP's float32 parameters, every W and b: what one all-reduce of the gradients
    carries (ex08), and what FSDP's gathers and scatters carry in all (ex09)."""
    return 4 * sum(n_in * n_out + n_out for n_in, n_out in zip(sizes[:-1], sizes[1:]))


def leaf_name(i: int) -> str:
    return f"{'W' if i % 2 == 0 else 'b'} of layer {i // 2}"


def param_leaves(params, like, what: str) -> list:
    """The arrays of `params`, checked to have the structure and shapes of `like` (a list of (W, b))."""
    leaves, want = jax.tree.leaves(params), jax.tree.leaves(like)
    shapes = [tuple(np.shape(v)) for v in leaves]
    expected = [np.shape(v) for v in want]
    if not isinstance(params, (list, tuple)) or shapes != expected:
        raise AssertionError(
            f"{what} should be a list of (W, b) pairs like the params given, with shapes "
            f"{expected}; got {type(params).__name__} with shapes {shapes}"
        )
    return leaves


def _close(leaves, want, tol) -> bool:
    return all(
        compare(np.asarray(g), w, **tol) is None for g, w in zip(leaves, jax.tree.leaves(want))
    )


def sgd_mistake(
    leaves, params0, x, y, *, lr: float, steps: int, n: int, tol: dict, stories: dict[str, str]
) -> str | None:
    """The story of the known mistake whose update `leaves` (the new params, flat) match, or None:
    "n times" (n x the gradient), "1/n" (1/n of it) or "one block" (device 0's block alone)."""
    rows = x.shape[0] // n
    known = [
        (lambda: sgd_reference(params0, x, y, lr * n, steps)[0], stories["n times"]),
        (lambda: sgd_reference(params0, x, y, lr / n, steps)[0], stories["1/n"]),
        (lambda: sgd_reference(params0, x[:rows], y[:rows], lr, steps)[0], stories["one block"]),
    ]
    return next((story for candidate, story in known if _close(leaves, candidate(), tol)), None)


def assert_trains_like_sgd(
    params,
    params0,
    x,
    y,
    *,
    lr: float,
    steps: int,
    n: int,
    what: str,
    tol: dict,
    diagnosis_tol: dict,
    stories: dict[str, str],
    hint: str,
):
    """Raise unless `params` equal `steps` single-device SGD steps from `params0` on the whole batch; the
    message tells which known mistake a wrong update made. `stories` says, in the exercise's terms, what
    each means: "n times" (n x the gradient), "1/n" (1/n of it) and "one block" (device 0's block alone);
    `hint` what to check when it is none of them. Returns (leaves, the reference's params and losses)."""
    want, want_losses = sgd_reference(params0, x, y, lr, steps)
    leaves = param_leaves(params, want, what)
    if _close(leaves, want, tol):
        return leaves, want, want_losses
    story = sgd_mistake(
        leaves, params0, x, y, lr=lr, steps=steps, n=n, tol=diagnosis_tol, stories=stories
    )
    first = next(
        p
        for i, (g, w) in enumerate(zip(leaves, jax.tree.leaves(want)))
        if (p := compare(np.asarray(g), w, **tol, name=leaf_name(i)))
    )
    raise AssertionError(
        f"{what} after {steps} step(s) on {n} devices differ from single-device SGD on the whole batch: "
        + (
            story
            or "the update matches none of the usual mistakes (n times or 1/n of the gradient, or one "
            f"device's block alone). {hint}"
        )
        + f"\nThe first array that differs: {first}"
    )


def assert_losses(losses, want_losses, *, steps: int, tol: dict) -> None:
    """Several steps' losses: a 1-D array, losses[i] the loss before step i + 1."""
    if np.shape(losses) != (steps,):
        raise AssertionError(
            f"losses should be a 1-D array of the {steps} losses, got shape {np.shape(losses)}"
        )
    if problem := compare(np.asarray(losses), want_losses, **tol, name="losses"):
        raise AssertionError(
            f"{problem}\nlosses[i] is the loss before step i + 1 (at the old params)."
        )
