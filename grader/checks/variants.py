"""Naming a wrong result by the known mistake that computes it: a test lists the wrong variants its
exercise knows (the ring turned the other way, softmax before the sum, ...), each computed from the same
inputs, and a result that matches one is told that mistake and its fix, not only where it differs."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from grader.checks.numerics import Tolerance, compare


@dataclass(frozen=True)
class Variant:
    """A mistake the course knows: what it computes on the test's inputs, and what to tell a student
    whose result matches it (what the mistake is and how to mend it)."""

    computes: Callable[[], Any]  # called only when the result is wrong: a variant may be costly
    story: str


def named_mistake(
    actual, variants: Sequence[Variant], *, rtol: float, atol: Tolerance
) -> str | None:
    """The story of the first variant `actual` matches within the tolerance, or None."""
    return next(
        (v.story for v in variants if compare(actual, v.computes(), rtol=rtol, atol=atol) is None),
        None,
    )


def assert_close_or_named(
    actual,
    expected,
    variants: Sequence[Variant],
    *,
    rtol: float = 1e-5,
    atol: Tolerance = 1e-6,
    name: str = "result",
) -> None:
    """assert_close, whose failure first names the known mistake the result matches, if any."""
    problem = compare(actual, expected, rtol=rtol, atol=atol, name=name)
    if problem is None:
        return
    story = named_mistake(actual, variants, rtol=rtol, atol=atol)
    raise AssertionError(f"{name} {story}\n{problem}" if story else problem)
