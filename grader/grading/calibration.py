"""`shardlab calibrate`: grade the reference on this machine, as students are graded, and keep each test's
duration; grader.harness.time_limits turns those durations into limits.

With a term (a course file), only its exercises are timed: a term of five exercises does not wait for the
other eight. The calibration file keeps each test's duration, so a later calibration of other exercises
(another term, same course version and machine) adds theirs to it and keeps the ones it did not time."""

from __future__ import annotations

import dataclasses
import time
from pathlib import Path

from grader.core.options import GradingOptions
from grader.course import paths
from grader.course.term import Course
from grader.grading.compile_cache import CompileCache
from grader.grading.engine import ExerciseDone, grade_submission
from grader.harness.time_limits import (
    FALLBACK_SECONDS,
    FILE_NAME,
    HERE,
    CalibrationError,
    TimeLimits,
    load,
)


def calibrate(
    folder: Path,
    options: GradingOptions | None = None,
    *,
    cache: CompileCache | None = None,
    course: Course | None = None,
    progress: ExerciseDone | None = None,
    **overrides,
) -> TimeLimits:
    """Grade the reference here as students are graded (same cache, isolation and parallelism) and keep
    each test's duration. Speedup tests measure as in grading but only report (a noisy measurement must
    not stop a calibration); every other test must pass: a reference that fails on this machine has no
    limits to give, and grading on it would be wrong anyway. course: the term whose exercises are timed
    (default: every exercise); the durations of other exercises an earlier calibration here measured (same
    course version and machine) are kept. progress: told as each exercise is timed."""
    if not paths.SOLUTIONS_DIR.is_dir():
        raise CalibrationError(
            "there is no solutions/ folder here: time limits are calibrated on the reference"
        )
    started = time.strftime("%Y-%m-%d %H:%M")
    options = dataclasses.replace(options or GradingOptions(), **{"timing": "report", **overrides})
    results = grade_submission(
        paths.SOLUTIONS_DIR,
        options,
        cache=cache,
        course=course,
        time_limits=load(None, override=FALLBACK_SECONDS),
        progress=progress,
    )
    failing = [
        t.nodeid
        for e in results.exercises.values()
        for t in e.tests
        if t.category not in ("passed", "skipped")
    ]
    if failing:
        raise CalibrationError(
            f"the reference does not pass {len(failing)} test(s) here, e.g. {failing[:3]}"
        )
    measured = {t.nodeid: round(t.duration, 3) for e in results.exercises.values() for t in e.tests}
    kept = {
        nodeid: seconds
        for nodeid, seconds in load(Path(folder)).reference.items()
        if not any(f"/{exercise_id}/" in nodeid for exercise_id in results.exercises)
    }
    limits = TimeLimits(
        reference=kept | measured,
        source=f"calibrated {started} {HERE}: the reference took "
        f"{results.duration:.0f} s, {len(measured)} tests of "
        f"{', '.join(e.split('_', 1)[0] for e in results.exercises)}"
        + (f"; {len(kept)} tests of other exercises from an earlier calibration" if kept else ""),
    )
    limits.save(Path(folder) / FILE_NAME)
    return limits
