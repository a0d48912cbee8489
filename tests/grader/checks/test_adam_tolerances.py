"""ex17's Adam steps, each judged against one float64 step from the params and state the program's previous
step returned. Where a gradient is near zero, float32's rounding may turn an honest program's update the
other way (2 lr); judged against the end of a float64 path instead, that one entry moved every later
gradient, and an honest program failed elements far from it. Each step's tolerance covers what its own
rounding can move, and no more: wrong steps fail."""

from __future__ import annotations

import importlib.util

import jax
import numpy as np
import pytest
from jax.sharding import NamedSharding, PartitionSpec as P

from grader.course import catalog

SIZES, MICROBATCHES, BATCH, STEPS, N = (24, 16, 40, 8), 2, 16, 3, 2
SEEDS = [4, 5, 6]


def _module(name, where):
    spec = importlib.util.spec_from_file_location(name, where)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def ex17():
    """ex17's conftest, loaded as a module of its own (its helpers are plain functions)."""
    return _module("ex17_shared_checks", catalog.get("ex17").tests_dir() / "conftest.py")


def _as64(tree):
    return jax.tree.map(lambda a: np.asarray(a, np.float64), tree)


def _flat(tree) -> np.ndarray:
    return np.concatenate([np.ravel(a) for a in jax.tree.leaves(tree)])


def _unflat(flat: np.ndarray, like):
    """A flat vector back in `like`'s structure and shapes."""
    shapes = [np.shape(a) for a in jax.tree.leaves(like)]
    parts = np.split(flat, np.cumsum([int(np.prod(s)) for s in shapes])[:-1])
    return jax.tree.unflatten(
        jax.tree.structure(like), [p.reshape(s) for p, s in zip(parts, shapes)]
    )


def _honest(ex17, pr, going_in, t, rng, *, lr_factor=1.0, bias_correction=True, gradient_at=None):
    """What a float32 program returns from going_in (params, m, v): Adam on the mean gradient off by up to
    float32's noise (GRAD_NOISE x its leaf's largest, each element at random within it), rounded to
    float32: (params, {"m", "v", "t"}, loss). The keywords make it one of the mistakes below."""
    params, m, v = (_as64(x) for x in going_in)
    loss, g = ex17._mean_grads(params, pr.xs, pr.ys)
    if gradient_at is not None:
        g = ex17._mean_grads(_as64(gradient_at), pr.xs, pr.ys)[1]
    g = jax.tree.map(
        lambda g: g + ex17.GRAD_NOISE * np.abs(g).max() * rng.uniform(-1, 1, g.shape), g
    )
    m = jax.tree.map(lambda m, g: ex17.B1 * m + (1 - ex17.B1) * g, m, g)
    v = jax.tree.map(lambda v, g: ex17.B2 * v + (1 - ex17.B2) * g * g, v, g)
    scale = (1 - ex17.B1**t, 1 - ex17.B2**t) if bias_correction else (1, 1)
    lr = ex17.LR * lr_factor
    params = jax.tree.map(lambda p, m, v: p - lr * ex17._direction(m, v, scale), params, m, v)
    as32 = jax.tree.map(lambda a: np.asarray(a, np.float32), (params, m, v))
    return as32[0], {"m": as32[1], "v": as32[2], "t": np.int32(t)}, np.float32(loss)


def _placed(mesh, returned):
    """`returned` laid out as the step returns it: params and loss P(), m and v P("data"), t P()."""
    params, state, loss = returned
    whole, split = NamedSharding(mesh, P()), NamedSharding(mesh, P("data"))
    state = {
        "m": jax.device_put(state["m"], split),
        "v": jax.device_put(state["v"], split),
        "t": jax.device_put(state["t"], whole),
    }
    return jax.device_put(params, whole), state, jax.device_put(loss, whole)


def _case(ex17, seed):
    """The problem of `seed`, the mesh, and the honest program's own noise."""
    return (
        ex17._problem(SIZES, MICROBATCHES, BATCH, seed),
        ex17._mesh(N),
        np.random.default_rng(seed),
    )


def _going_in(returned):
    params, state, _ = returned
    return params, state["m"], state["v"]


def _start(pr):
    zeros = jax.tree.map(np.zeros_like, pr.params)
    return pr.params, zeros, zeros


def _fragile_first_update(ex17, pr):
    """The test's start with the first step taken, float64, except at the entry whose gradient is nearest
    zero: its update went the other way, as a sign turned by rounding sends it (2 lr from the float64 one)."""
    first = ex17._first_step(pr)
    g = _flat(ex17._mean_grads(_as64(pr.params), pr.xs, pr.ys)[1])
    moved = _flat(first.params)
    j = int(np.argmin(np.abs(g)))
    moved[j] += 2 * ex17.LR * np.sign(g[j])
    params = _unflat(moved, pr.params)
    return params, first.m, first.v


@pytest.mark.parametrize("seed", SEEDS)
def test_an_honest_step_passes_from_wherever_the_previous_one_left_it(ex17, seed):
    pr, mesh, rng = _case(ex17, seed)
    # its own path from the test's start, its gradients' noise at random each step
    going_in = _start(pr)
    for t in range(1, STEPS + 1):
        returned = _placed(mesh, _honest(ex17, pr, going_in, t, rng))
        ex17._check_step(pr, mesh, t, going_in, returned, of=STEPS)
        going_in = _going_in(returned)
    # and after a first step whose most fragile entry went the other way: the float64 path's end is then
    # far from it (the way an honest program failed), but each of its steps is right from where it was
    going_in = _fragile_first_update(ex17, pr)
    for t in (2, 3):
        returned = _placed(mesh, _honest(ex17, pr, going_in, t, rng))
        ex17._check_step(pr, mesh, t, going_in, returned, of=STEPS)
        going_in = _going_in(returned)


def test_the_reference_passes_where_a_first_update_near_zero_moves_a_later_gradient(ex17):
    """Found among 2,000 problems of the hidden test's shape (2 devices, 4 microbatches): one entry's first
    gradient is -1.3e-10, so float32's first update there differs from float64's by 4.8e-4; at the next
    step that moves another entry's gradient, and its update by 2.5e-5. Against the end of the float64
    path, the reference failed (1.15 x its tolerance), as reduce_per_microbatch failed in CI."""
    reference = _module("ex17_reference", catalog.get("ex17").solution_path())
    ex17._check_steps(reference, 2, ex17._problem(SIZES, 4, BATCH, 5895))


@pytest.mark.parametrize("seed", SEEDS)
def test_a_step_that_ignores_where_the_previous_one_left_it_fails(ex17, seed):
    """The float64 path's second step, returned after a first step that went another way: right for the
    path, wrong for the program's own state."""
    pr = ex17._problem(SIZES, MICROBATCHES, BATCH, seed)
    mesh = ex17._mesh(N)
    first = ex17._first_step(pr)
    on_the_path = _honest(
        ex17, pr, (first.params, first.m, first.v), 2, np.random.default_rng(seed)
    )
    with pytest.raises(AssertionError, match=r"step 2 of 3 .*the params: W of layer"):
        ex17._check_step(
            pr, mesh, 2, _fragile_first_update(ex17, pr), _placed(mesh, on_the_path), of=STEPS
        )


def _mistakes(ex17, pr, going_in, previous_params, rng):
    """Step 2 taken wrongly from going_in, each with what its failure names."""

    def step(**mistake):
        return _honest(ex17, pr, going_in, 2, rng, **mistake)

    def with_state(returned, key, change):
        params, state, loss = returned
        return params, {**state, key: change(state)}, loss

    right = step()
    bias_corrected_m = jax.tree.map(lambda m: m / (1 - ex17.B1**2), right[1]["m"])
    new_params = _as64(right[0])
    return {
        "a learning rate 1 percent high": (step(lr_factor=1.01), "the params: W of layer 0"),
        "no bias correction": (step(bias_correction=False), "WITHOUT bias correction"),
        "the previous step's gradient": (step(gradient_at=previous_params), "the params: "),
        "m stored bias-corrected": (
            with_state(right, "m", lambda _: bias_corrected_m),
            'the opt_state["m"]',
        ),
        "m 2 percent high": (
            with_state(right, "m", lambda s: jax.tree.map(lambda m: 1.02 * m, s["m"])),
            'the opt_state["m"]',
        ),
        "v 2 percent high": (
            with_state(right, "v", lambda s: jax.tree.map(lambda v: 1.02 * v, s["v"])),
            'the opt_state["v"]',
        ),
        "t not counted": (with_state(right, "t", lambda _: np.int32(1)), 'the opt_state["t"]'),
        "the loss at the new params": (
            (right[0], right[1], np.float32(ex17._mean_grads(new_params, pr.xs, pr.ys)[0])),
            "the loss",
        ),
    }


@pytest.mark.parametrize("seed", SEEDS)
def test_wrong_steps_fail_and_say_where(ex17, seed):
    pr, mesh, rng = _case(ex17, seed)
    start = _start(pr)
    going_in = _going_in(_honest(ex17, pr, start, 1, rng))
    for mistake, (returned, says) in _mistakes(ex17, pr, going_in, start[0], rng).items():
        with pytest.raises(AssertionError) as failure:
            ex17._check_step(pr, mesh, 2, going_in, _placed(mesh, returned), of=STEPS)
        assert says in str(failure.value), (mistake, str(failure.value)[:300])


@pytest.mark.parametrize("seed", SEEDS)
def test_an_entry_gets_more_than_the_floor_only_where_its_update_is_fragile(ex17, seed):
    """Along the float64 path: nearly every entry keeps ADAM_TOL's atol; none is allowed more than the
    update can move (2 lr, a first update's sign); the larger ones sit where the gradient is near zero."""
    pr = ex17._problem(SIZES, MICROBATCHES, BATCH, seed)
    going_in = _start(pr)
    for t in range(1, STEPS + 1):
        step = ex17._adam_step(pr, *going_in, t)
        tolerances = _flat(step.tolerances)
        floor = ex17.ADAM_TOL["atol"]
        assert np.mean(tolerances == floor) > 0.95, (t, np.mean(tolerances == floor))
        assert tolerances.max() <= 2.02 * ex17.LR, (t, tolerances.max())
        g = np.abs(_flat(ex17._mean_grads(_as64(going_in[0]), pr.xs, pr.ys)[1]))
        if (tolerances > floor).any():
            assert np.median(g[tolerances > floor]) < np.median(g), t
        going_in = (step.params, step.m, step.v)
