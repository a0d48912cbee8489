"""ex17's moment tolerance: an honest program's m and v after three Adam steps are graded against a float64
reference whose params it does not exactly follow (where a gradient is near zero, float32's rounding moves
an update by up to lr), so the tolerance carries that difference through the gradient, and no more."""

from __future__ import annotations

import importlib.util

import jax
import numpy as np
import pytest

from grader.course import catalog

SIZES, MICROBATCHES, BATCH, STEPS = (24, 16, 40, 8), 2, 16, 3


@pytest.fixture(scope="module")
def ex17():
    """ex17's conftest, loaded as a module of its own (its helpers are plain functions)."""
    where = catalog.get("ex17").tests_dir() / "conftest.py"
    spec = importlib.util.spec_from_file_location("ex17_shared_checks", where)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _moments(ex17, pr, moved_after_first_step=None):
    """m and v (flat, float64) after STEPS Adam steps, the params moved after the first step when given."""
    params = jax.tree.map(lambda a: np.asarray(a, np.float64), pr.params)
    m = jax.tree.map(np.zeros_like, params)
    v = jax.tree.map(np.zeros_like, params)
    for t in range(1, STEPS + 1):
        _, g = ex17._mean_grads(params, pr.xs, pr.ys)
        m = jax.tree.map(lambda m, g: ex17.B1 * m + (1 - ex17.B1) * g, m, g)
        v = jax.tree.map(lambda v, g: ex17.B2 * v + (1 - ex17.B2) * g * g, v, g)
        scale = (1 - ex17.B1**t, 1 - ex17.B2**t)
        params = [
            tuple(ex17._update(p, mm, vv, lr=ex17.LR, scale=scale) for p, mm, vv in zip(*layer))
            for layer in zip(params, m, v)
        ]
        if t == 1 and moved_after_first_step is not None:
            leaves = ex17._leaves_of(ex17._flat(params) + moved_after_first_step, pr)
            params = jax.tree.unflatten(jax.tree.structure(pr.params), leaves)
    return ex17._flat(m), ex17._flat(v)


def _beyond(got, want, atol, rtol) -> float:
    """The worst element's error as a share of what it is allowed (over 1: outside the tolerance)."""
    return float(np.max(np.abs(got - want) / (atol + rtol * np.abs(want))))


@pytest.mark.parametrize("seed", [4, 5, 6])
def test_moments_of_params_moved_within_their_tolerance_pass_and_wrong_moments_fail(ex17, seed):
    pr = ex17._problem(SIZES, MICROBATCHES, BATCH, seed)
    want_m, want_v = _moments(ex17, pr)
    tolerances = ex17._moment_tolerances(pr, STEPS)
    m_tol, v_tol = (ex17._flat(tolerances[key]) for key in ("m", "v"))
    rtol = {key: ex17.MOMENT_TOL[key]["rtol"] for key in ("m", "v")}
    # an honest program: where the first step's gradient is near zero, its update landed elsewhere, by
    # up to the params' tolerance after one step (each such element at its bound, with a random sign)
    after_one = ex17._flat(ex17._param_tolerances(pr, 1))
    ill_conditioned = after_one > ex17.ADAM_TOL["atol"]
    assert ill_conditioned.any()
    signs = np.random.default_rng(seed).choice([-1.0, 1.0], after_one.size)
    honest_m, honest_v = _moments(ex17, pr, np.where(ill_conditioned, after_one * signs, 0.0))
    assert _beyond(honest_m, want_m, m_tol, rtol["m"]) < 1
    assert _beyond(honest_v, want_v, v_tol, rtol["v"]) < 1
    # which the float32 allowance alone fails: the new tolerance is needed
    assert _beyond(honest_m, want_m, ex17.MOMENT_TOL["m"]["atol"], rtol["m"]) > 1
    # mistakes still fail: the bias-corrected m stored as m, and m off by 2 percent
    assert _beyond(want_m / (1 - ex17.B1**STEPS), want_m, m_tol, rtol["m"]) > 1
    assert _beyond(want_m * 1.02, want_m, m_tol, rtol["m"]) > 1
    assert _beyond(want_v * 1.02, want_v, v_tol, rtol["v"]) > 1
