"""Grading one submission: a harness process (pytest with --isolate) runs every chosen exercise's tests,
which reach the student's modules through confined workers, so that a crash or a hang costs only
the test it happened in (the harness or the worker is started again for the rest).

    grade_submission("alice.zip", out="graded/alice")

Data flows one way: the catalog names the exercises, the tests produce per-test entries (through the
harness's event stream), grader.grading.results scores them, grader.reports.writers writes them out.
"""

from __future__ import annotations

import dataclasses
import platform
import tempfile
import time
from collections import Counter
from importlib import metadata
from pathlib import Path

from grader.course import catalog
from grader.course.devices import HOST_DEVICES, cores
from grader.grading import process
from grader.grading.results import GradingResults, TestResult, score_exercise
from grader.grading.submission import PreparedSubmission, cleanup, prepare_submission
from grader.harness.collection import GradingError, collect_tests
from grader.harness.outcomes import Category
from grader.worker import confinement
from grader.worker.remote import describe_death

MAX_TIMEOUTS_PER_EXERCISE = 2   # after two hung tests the rest of the exercise is not run


def environment(timing: str, limits: process.Limits, isolation: dict) -> dict:
    versions = {}
    for package in ("shardlab", "jax", "jaxlib", "numpy", "pytest", "hypothesis"):
        try:
            versions[package] = metadata.version(package)
        except metadata.PackageNotFoundError:
            versions[package] = None
    return {"python": platform.python_version(), "platform": platform.platform(), "versions": versions,
            "devices": HOST_DEVICES, "cores": cores(), "timing": timing,
            "limits": {"test_timeout": limits.test_timeout, "memory_bytes": limits.memory_bytes},
            "isolation": isolation}


class _Run:
    """The tests of the chosen exercises, in harness processes started again until each test has an
    outcome: a harness that dies (a student's compiled program crashed it) or hangs costs one test."""

    def __init__(self, exercises: list[catalog.Exercise], prepared: PreparedSubmission, workdir: Path,
                 options: dict):
        self.exercises, self.prepared, self.workdir, self.options = exercises, prepared, workdir, options
        self.meta: dict[str, dict] | None = None   # learned from the first harness's collection
        self.done: dict[str, dict] = {}
        self.output = ""
        self.timeouts: Counter = Counter()         # per exercise

    def finish(self, nodeid: str, category: Category, message: str) -> None:
        self.done[nodeid] = self.meta[nodeid] | {"category": category.value, "message": message}

    def finish_all(self, category: Category, message: str, exercise: str | None = None) -> None:
        for nodeid, test in self.meta.items():
            if nodeid not in self.done and exercise in (None, test["exercise"]):
                self.finish(nodeid, category, message)

    def run(self, deadline: float) -> None:
        while self.meta is None or len(self.done) < len(self.meta):
            if time.monotonic() > deadline:
                if self.meta is None:   # listing the tests is the grader's work, not the submission's time
                    tests = collect_tests(self.exercises, visible_only=self.options["visible_only"])
                    self.meta = {t["nodeid"]: t for t in tests}
                self.finish_all(Category.TIMEOUT, "not run: the submission's time limit was reached")
                return
            outcome = process.run_pytest_child(
                targets=[str(e.tests_dir()) for e in self.exercises], modules_dir=self.prepared.modules_dir,
                workdir=self.workdir, deselect=sorted(self.done), deadline=deadline, **self.options)
            self.output += outcome.output
            if self.meta is None:   # collection runs no student code: without it, grading itself failed
                if outcome.collected is None:
                    raise GradingError("the tests could not be collected:\n" + outcome.output[-3000:])
                self.meta = {t["nodeid"]: t for t in outcome.collected}
            self.done |= {k: v for k, v in outcome.results.items() if k in self.meta}
            if outcome.running in self.meta:
                exercise = self.meta[outcome.running]["exercise"]
                if outcome.stopped == "test timeout":
                    self.timeouts[exercise] += 1
                    self.finish(outcome.running, Category.TIMEOUT,
                                f"timeout: the test ran longer than {self.options['limits'].test_timeout:.0f} s "
                                "(an endless loop, or far too much work?)")
                    if self.timeouts[exercise] >= MAX_TIMEOUTS_PER_EXERCISE:
                        self.finish_all(Category.TIMEOUT, "not run: earlier tests of this exercise timed out",
                                        exercise)
                elif outcome.stopped == "deadline":
                    self.finish_all(Category.TIMEOUT, "not run: the submission's time limit was reached")
                    return
                else:
                    self.finish(outcome.running, Category.CRASHED,
                                f"crashed: {describe_death(outcome.returncode)} during this test")
            elif len(self.done) < len(self.meta):
                # The harness ended between tests or before running any: nothing to blame on one test.
                self.finish_all(Category.CRASHED, f"crashed: {describe_death(outcome.returncode)} before this "
                                "test ran" + _tail(outcome.output))
                return


def _tail(output: str) -> str:
    lines = [line for line in output.strip().splitlines() if line.strip()][-6:]
    return ("\n  last output:\n    " + "\n    ".join(lines)) if lines else ""


def grade_submission(submission: str | Path, *, visible_only: bool = False, timing: str = "enforce",
                     limits: process.Limits | None = None, time_limit: float = 1800.0,
                     exercises: list[str] | None = None) -> GradingResults:
    """Grade a folder or .zip; every catalog exercise (or those named) gets a result, whatever happens."""
    started = time.monotonic()
    deadline = started + time_limit
    limits = limits or process.Limits()
    try:   # chosen once here, so every exercise's workers run at the same, recorded level
        level = confinement.choose_isolation(limits.isolation)
    except confinement.IsolationUnavailable as exc:
        raise GradingError(str(exc)) from None
    limits = dataclasses.replace(limits, isolation=level.value)
    process.become_subreaper()
    chosen = [catalog.get(name) for name in exercises] if exercises else list(catalog.EXERCISES)
    options = {"timing": timing, "visible_only": visible_only, "limits": limits}
    with tempfile.TemporaryDirectory(prefix="shardlab-grade-") as tmp:
        workdir = Path(tmp)
        prepared = prepare_submission(submission, workdir)
        try:
            # One harness for every chosen exercise: it runs no student code, so it need not be one per
            # exercise; a missing module's tests end at once as not attempted.
            run = _Run(chosen, prepared, workdir, options)
            run.run(deadline)
            results = {}
            for exercise in chosen:
                note = "" if exercise.id in prepared.found else \
                    f"{exercise.module_file} is not in the submission: not attempted"
                entries = [TestResult(**_fields(run.done[nodeid] | ({"message": f"not attempted: {note}"}
                                                                      if note else {})))
                           for nodeid, test in run.meta.items() if test["exercise"] == exercise.id]
                results[exercise.id] = score_exercise(exercise, entries, note)
        finally:
            cleanup(prepared)
    return GradingResults(
        submission=str(submission), exercises=results,
        environment=environment(timing, limits, confinement.describe(level)),
        problems=prepared.problems, output=process.truncate(run.output, limits.output_chars),
        duration=time.monotonic() - started, visible_only=visible_only)


def _fields(entry: dict) -> dict:
    known = TestResult.__dataclass_fields__
    return {k: v for k, v in entry.items() if k in known and k not in ("score", "max_score")}


__all__ = ["GradingError", "grade_submission", "environment"]
