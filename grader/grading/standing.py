"""A student's standing: what grading gave (raw), what the late policy took off (penalty), what the
instructor's adjustments changed (override) and what counts (final), per exercise and in all. Every output
that shows a grade to a person or an LMS (grades.csv, the pages, results.json, the exports) shows these;
report.json keeps the raw results and the late penalty, never an adjustment.

Per exercise, in this order: a test's adjustment changes that test's points; the late penalty takes its
percentage off the score that gives; an exercise's adjustment sets or adds to what is left. The final score
stays within 0 and the exercise's points.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from grader.course.adjustments import Adjustment
from grader.course.term import Lateness
from grader.grading.results import NO_TIME, ExerciseResult, GradingResults


@dataclass(frozen=True)
class ExerciseStanding:
    id: str
    title: str
    max_score: float
    bonus: bool
    raw: float  # what the tests earned
    penalty: float  # points the late policy took off
    override: float  # points the adjustments changed, in all (final - raw + penalty)
    final: float
    late: Lateness | None = None
    adjustments: tuple[Adjustment, ...] = ()
    attempted: bool = True
    untimed: bool = (
        False  # a due date applies, no submission time is known: no late penalty applied
    )


@dataclass(frozen=True)
class Standing:
    student: str
    exercises: tuple[ExerciseStanding, ...]
    problems: tuple[str, ...] = ()  # adjustments that could not apply (a test it does not have)
    refused: tuple[str, ...] = ()  # files handed in and not graded, each with why (intake's words)

    def exercise(self, exercise_id: str) -> ExerciseStanding | None:
        return next((e for e in self.exercises if e.id == exercise_id), None)

    @property
    def raw(self) -> float:
        return math.fsum(e.raw for e in self.exercises)

    @property
    def penalty(self) -> float:
        return math.fsum(e.penalty for e in self.exercises)

    @property
    def override(self) -> float:
        return math.fsum(e.override for e in self.exercises)

    @property
    def final(self) -> float:
        return math.fsum(e.final for e in self.exercises)

    @property
    def max_score(self) -> float:
        return math.fsum(e.max_score for e in self.exercises if not e.bonus)

    @property
    def late(self) -> list[str]:
        """Each penalized exercise's reason: "ex04: 2 d 1 h after the due date ...: 20% off", and each one
        with a due date and no submission time: "ex05: no submission time: no late penalty applied"."""
        return [
            f"{e.id}: {e.late.reason}" for e in self.exercises if e.penalty and e.late is not None
        ] + [f"{e.id}: {NO_TIME}" for e in self.exercises if e.untimed]

    @property
    def untimed(self) -> str:
        """The missing-time state of grades.csv's status: "" when every exercise with a due date had a time."""
        missing = [e.id for e in self.exercises if e.untimed]
        if not missing:
            return ""
        if len(missing) == len([e for e in self.exercises if e.attempted]):
            return NO_TIME
        return f"{NO_TIME} to {', '.join(missing)}"

    @property
    def adjusted(self) -> list[str]:
        return [f"{e.id}: {a.describe()}" for e in self.exercises for a in e.adjustments]


def _exercise(
    exercise: ExerciseResult, adjustments: list[Adjustment], problems: list[str]
) -> ExerciseStanding:
    raw = exercise.score
    tests = {t.name: t for t in exercise.tests}
    scored = raw
    applied = []
    for adjustment in (a for a in adjustments if a.test):
        test = tests.get(adjustment.test)
        if test is None:
            problems.append(
                f"line {adjustment.line} of the adjustments: {exercise.id} has no test "
                f"{adjustment.test!r} in this grading: not applied"
            )
            continue
        new = adjustment.set if adjustment.set is not None else test.score + adjustment.add
        scored += min(max(new, 0.0), test.max_score) - test.score
        applied.append(adjustment)
    percent = exercise.late.percent if exercise.late is not None else 0.0
    penalty = scored * percent / 100
    final = scored - penalty
    for adjustment in (a for a in adjustments if not a.test):
        final = adjustment.set if adjustment.set is not None else final + adjustment.add
        applied.append(adjustment)
    final = min(max(final, 0.0), exercise.max_score)
    return ExerciseStanding(
        exercise.id,
        exercise.title,
        exercise.max_score,
        exercise.bonus,
        raw,
        penalty,
        final - raw + penalty,
        final,
        exercise.late,
        tuple(applied),
        not exercise.note,
        exercise.untimed,
    )


def standing(
    results: GradingResults, adjustments: list[Adjustment] = (), student: str | None = None
) -> Standing:
    """`results` with the late penalties it records and the adjustments for `student` (default: the student
    its term names, else its submission's name) applied; adjustments for exercises it did not grade are
    reported, not applied."""
    if student is None:
        student = (
            results.term.student
            if results.term is not None and results.term.student
            else results.submission
        )
    mine = [a for a in adjustments if a.student == student]
    problems: list[str] = []
    for adjustment in mine:
        if adjustment.exercise not in results.exercises:
            problems.append(
                f"line {adjustment.line} of the adjustments: {adjustment.exercise} was not graded "
                "for this student: not applied"
            )
    exercises = tuple(
        _exercise(ex, [a for a in mine if a.exercise == ex.id], problems)
        for ex in results.exercises.values()
    )
    return Standing(student, exercises, tuple(problems), tuple(results.refused))
