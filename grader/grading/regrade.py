"""Grading again into an existing report without losing what it holds.

`grade --exercise ex04 --out OUT` (and `grade-batch --force --exercise ex04`, on one machine or on Slurm,
which runs `grade` per student) grades ex04 alone: its result replaces ex04's in OUT/report.json and every
other exercise's results, scores, facts and submission times stay as they were (so their lateness is never
judged again from the time of what was graded after them). Each exercise graded again is recorded with when,
and its score before and after. Each exercise records the digest of the submission it was graded from
(the ones kept, the files they were graded from), so grade-batch grades again exactly those whose submission
changed since.
"""

from __future__ import annotations

import dataclasses
from datetime import datetime, timezone
from pathlib import Path

from grader.grading.results import GradingResults, Regrade, read_report


def earlier_report(out: Path, submission: str) -> GradingResults | None:
    """The report a grading of the same submission left in `out`, if any (another's, or an unreadable one: None)."""
    earlier = read_report(Path(out) / "report.json")
    return (
        earlier
        if earlier is not None and Path(earlier.submission).name == Path(submission).name
        else None
    )


def merge(
    earlier: GradingResults, new: GradingResults, *, partial: bool, at: datetime | None = None
) -> GradingResults:
    """`new` graded into `earlier`: with `partial` (some exercises only), the others are kept as they were;
    otherwise `new` is the whole grading. Either way each exercise both hold is recorded as regraded."""
    at = at or datetime.now(timezone.utc)
    digest = new.term.course_digest if new.term is not None else None
    regrades = list(earlier.regrades) + [
        Regrade(
            ex_id,
            at.isoformat(timespec="seconds"),
            earlier.exercises[ex_id].score,
            exercise.score,
            digest,
        )
        for ex_id, exercise in new.exercises.items()
        if ex_id in earlier.exercises
    ]
    if not partial:
        return dataclasses.replace(new, regrades=regrades)
    exercises = dict(earlier.exercises)
    exercises.update(new.exercises)
    return dataclasses.replace(
        new,
        exercises=exercises,
        regrades=regrades,
        problems=list(dict.fromkeys([*earlier.problems, *new.problems])),
        # The earlier grading ran every test of the exercises kept: the whole is visible-only if either was.
        visible_only=earlier.visible_only or new.visible_only,
        duration=earlier.duration + new.duration,
    )


def regraded(earlier: GradingResults | None, now: GradingResults) -> list[str]:
    """What grading `now` into `earlier` changed, a line per exercise graded again: "ex05: 8 -> 10", and
    what counts after a late penalty where one applies: " (after the late penalty: 8 -> 9)"."""
    lines = []
    for record in now.regrades[len(earlier.regrades) :] if earlier is not None else []:
        line = f"{record.exercise}: {_points(record.before)} -> {_points(record.after)}"
        before, after = earlier.exercises.get(record.exercise), now.exercises.get(record.exercise)
        if before is not None and after is not None and (before.penalty or after.penalty):
            line += f" (after the late penalty: {_points(before.final)} -> {_points(after.final)})"
        lines.append(line)
    return lines


def _points(value: float) -> str:
    return f"{round(value, 2):g}"
