"""Strikes: the tests that timed out (or crashed the grader), counted against the student's function
whose call did it, so that one function that hangs costs its own tests, not its exercise's.

- MAX_STRIKES_PER_FUNCTION (2): the exercise's later calls of that function are not made; a test that
  calls it ends there, not run (function_stopped's message names the function). The exercise's other
  functions are still called and graded.
- MAX_UNATTRIBUTED_STRIKES (2): strikes no function is named for (the harness crashed or was killed by
  the grading process, a compiled program of the student looped in it, an import hung) end the exercise.
- MAX_STRIKES_PER_EXERCISE (4): every strike of the exercise together ends it (STOPPED), so that a
  submission whose every function hangs costs four limits per exercise, not two per function.

A strike is carried from one harness to the next (the grading process restarts a harness that died) as
"exercise" or "exercise:function" (as_list, from_list).
"""

from __future__ import annotations

from collections import Counter

MAX_STRIKES_PER_FUNCTION = 2
MAX_UNATTRIBUTED_STRIKES = 2
MAX_STRIKES_PER_EXERCISE = 4
STOPPED = "not run: earlier tests of this exercise timed out or crashed the grader"


def function_stopped_message(function: str, strikes: int) -> str:
    return f"not run: your {function} timed out in {strikes} earlier tests"


class Strikes:
    """The strikes of one grading so far, by exercise and by the function each was attributed to."""

    def __init__(self, prior: list[str] = ()):
        self._counts: Counter[tuple[str, str | None]] = Counter()
        for entry in prior:
            exercise, _, function = entry.partition(":")
            self.add(exercise, function or None)

    def add(self, exercise: str, function: str | None) -> None:
        self._counts[(exercise, function)] += 1

    def total(self, exercise: str) -> int:
        return sum(n for (e, _), n in self._counts.items() if e == exercise)

    def exercise_stopped(self, exercise: str) -> bool:
        """Whether the exercise's tests left are not run (STOPPED)."""
        return (
            self._counts[(exercise, None)] >= MAX_UNATTRIBUTED_STRIKES
            or self.total(exercise) >= MAX_STRIKES_PER_EXERCISE
        )

    def function_stopped(self, exercise: str, function: str) -> str | None:
        """The message of a test whose call of `function` is not made, or None: it may be called."""
        strikes = self._counts[(exercise, function)]
        if strikes >= MAX_STRIKES_PER_FUNCTION:
            return function_stopped_message(function, strikes)
        return None

    def as_list(self) -> list[str]:
        """Every strike as "exercise" or "exercise:function", for the next harness (--prior-timeouts)."""
        return sorted(
            f"{exercise}:{function}" if function else exercise
            for (exercise, function), n in self._counts.items()
            for _ in range(n)
        )
