"""Numerical comparison with a report of how far off, and where."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np


def _as_numpy(value, name: str) -> np.ndarray:
    try:
        return np.asarray(value)
    except Exception as exc:  # a student may return something that is not an array at all
        raise AssertionError(
            f"{name} is not an array: got {type(value).__name__} ({exc})"
        ) from None


Tolerance = float | np.ndarray  # an absolute tolerance: one for every element, or one per element


def _shown(atol: Tolerance) -> str:
    if np.ndim(atol) == 0:
        return f"{float(atol):g}"
    return f"{float(np.min(atol)):g} to {float(np.max(atol)):g} by element"


def compare(actual, expected, *, rtol: float, atol: Tolerance, name: str = "result") -> str | None:
    """None when `actual` matches `expected` within atol + rtol * |expected|, otherwise a report. `atol` may
    be an array of `expected`'s shape: an element whose reference is ill-conditioned (an Adam update where
    the gradient is near zero) gets the tolerance its conditioning allows, the others keep theirs."""
    got, want = _as_numpy(actual, name), _as_numpy(expected, "expected")
    if got.shape != want.shape:
        return f"{name} has shape {got.shape}, expected {want.shape}"
    if got.size == 0:
        return None
    if not np.issubdtype(got.dtype, np.number) and got.dtype != np.bool_:
        return f"{name} has dtype {got.dtype}, expected numbers like {want.dtype}"
    if np.ndim(atol) and np.shape(atol) != want.shape:
        raise ValueError(f"atol has shape {np.shape(atol)}, the reference {want.shape}")
    got64, want64 = got.astype(np.float64), want.astype(np.float64)
    both_nan = np.isnan(got64) & np.isnan(want64)
    abs_err = np.where(both_nan, 0.0, np.abs(got64 - want64))
    bad = ~both_nan & ~(abs_err <= atol + rtol * np.abs(want64))  # NaN against a number is bad
    if not bad.any():
        return None
    rel_err = abs_err / np.maximum(np.abs(want64), np.finfo(np.float64).tiny)
    # A NaN against a number is the worst error there is (and an array of NaN only has no other).
    worst = lambda err: np.argmax(np.where(bad, np.nan_to_num(err, nan=np.inf), -np.inf))  # noqa: E731
    worst_abs = np.unravel_index(worst(abs_err), got.shape)
    worst_rel = np.unravel_index(worst(rel_err), got.shape)
    at = lambda idx: tuple(int(i) for i in idx)  # noqa: E731
    return (
        f"{name} differs from the reference in {int(bad.sum())} of {got.size} elements "
        f"(tolerance: atol={_shown(atol)}, rtol={rtol:g})\n"
        f"  max abs error {abs_err[worst_abs]:.3g} at index {at(worst_abs)}: "
        f"got {got64[worst_abs]:.6g}, expected {want64[worst_abs]:.6g}\n"
        f"  max rel error {rel_err[worst_rel]:.3g} at index {at(worst_rel)}: "
        f"got {got64[worst_rel]:.6g}, expected {want64[worst_rel]:.6g}"
    )


def assert_close(
    actual, expected, *, rtol: float = 1e-5, atol: Tolerance = 1e-6, name: str = "result"
) -> None:
    problem = compare(actual, expected, rtol=rtol, atol=atol, name=name)
    if problem:
        raise AssertionError(problem)


def assert_computes(
    actual,
    expected,
    *,
    rtol: float = 1e-5,
    atol: Tolerance | Sequence[Tolerance] = 1e-6,
    what: str = "your function",
) -> None:
    """For structure, memory and speed rules: the program that was measured must also compute the right
    values, else a function that does nothing (no collectives, no work, fast) would earn them. `atol` is
    one tolerance for every result, or a list of one per result (each a number or an array)."""
    actual = actual if isinstance(actual, (tuple, list)) else (actual,)
    expected = expected if isinstance(expected, (tuple, list)) else (expected,)
    if len(actual) != len(expected):
        raise AssertionError(
            f"{what} returns {len(actual)} value(s), expected {len(expected)}: this rule is "
            "earned only by a function that computes the right result"
        )
    tolerances = list(atol) if isinstance(atol, (list, tuple)) else [atol] * len(expected)
    if len(tolerances) != len(expected):
        raise ValueError(f"{len(tolerances)} tolerances for {len(expected)} results")
    for i, (got, want, tol) in enumerate(zip(actual, expected, tolerances)):
        name = what if len(actual) == 1 else f"{what}'s result {i}"
        if problem := compare(got, want, rtol=rtol, atol=tol, name=name):
            raise AssertionError(
                f"{problem}\nThis rule (collectives, work per device, memory or speed) is earned "
                "only by a function that also computes the right values."
            )
