"""Grading one submission: each exercise in a fresh pytest child, so that a crash or a hang costs only
that exercise (and, within it, only the test that crashed: the child is started again for the rest).

    grade_submission("alice.zip", out="graded/alice")

Data flows one way: the catalog names the exercises, the tests produce per-test entries (through the
sandbox's event stream), grader.results scores them, grader.reports writes them out.
"""

from __future__ import annotations

import platform
import tempfile
import time
from importlib import metadata
from pathlib import Path

from grader import catalog, sandbox
from grader.collection import GradingError, collect_tests
from grader.devices import HOST_DEVICES, cores
from grader.outcomes import Category
from grader.results import GradingResults, TestResult, score_exercise
from grader.submission import PreparedSubmission, cleanup, prepare_submission

MAX_TIMEOUTS_PER_EXERCISE = 2   # after two hung tests the rest of the exercise is not run


def environment(timing: str, limits: sandbox.Limits) -> dict:
    versions = {}
    for package in ("shardlab", "jax", "jaxlib", "numpy", "pytest", "hypothesis"):
        try:
            versions[package] = metadata.version(package)
        except metadata.PackageNotFoundError:
            versions[package] = None
    return {"python": platform.python_version(), "platform": platform.platform(), "versions": versions,
            "devices": HOST_DEVICES, "cores": cores(), "timing": timing,
            "limits": {"test_timeout": limits.test_timeout, "memory_bytes": limits.memory_bytes}}


class _ExerciseRun:
    """The tests of one exercise, run until each has an outcome."""

    def __init__(self, exercise: catalog.Exercise, tests: list[dict] | None, prepared: PreparedSubmission,
                 workdir: Path, options: dict):
        """`tests` None: learn them from the first child's collection."""
        self.exercise, self.prepared, self.workdir, self.options = exercise, prepared, workdir, options
        self.meta = None if tests is None else {t["nodeid"]: t for t in tests}
        self.done: dict[str, dict] = {}
        self.output = ""

    def finish(self, nodeid: str, category: Category, message: str) -> None:
        self.done[nodeid] = self.meta[nodeid] | {"category": category.value, "message": message}

    def finish_all(self, category: Category, message: str) -> None:
        for nodeid in self.meta:
            if nodeid not in self.done:
                self.finish(nodeid, category, message)

    def run(self, deadline: float) -> None:
        timeouts = 0
        while self.meta is None or len(self.done) < len(self.meta):
            if time.monotonic() > deadline:
                if self.meta is None:   # listing the tests is the grader's work, not the submission's time
                    tests = collect_tests([self.exercise], visible_only=self.options["visible_only"])
                    self.meta = {t["nodeid"]: t for t in tests}
                self.finish_all(Category.TIMEOUT, "not run: the submission's time limit was reached")
                return
            outcome = sandbox.run_pytest_child(
                targets=[str(self.exercise.tests_dir())], modules_dir=self.prepared.modules_dir,
                workdir=self.workdir, deselect=sorted(self.done), deadline=deadline, **self.options)
            self.output += outcome.output
            if self.meta is None:   # collection runs no student code: without it, grading itself failed
                if outcome.collected is None:
                    raise GradingError(f"the tests of {self.exercise.id} could not be collected:\n"
                                       + outcome.output[-3000:])
                self.meta = {t["nodeid"]: t for t in outcome.collected}
            if outcome.rejected_lines:
                self.prepared.problems.append(
                    f"{self.exercise.id}: {outcome.rejected_lines} result line(s) not written by the grader "
                    "were ignored")
            self.done |= {k: v for k, v in outcome.results.items() if k in self.meta}
            if outcome.running in self.meta:
                if outcome.stopped == "test timeout":
                    timeouts += 1
                    self.finish(outcome.running, Category.TIMEOUT,
                                f"timeout: the test ran longer than {self.options['limits'].test_timeout:.0f} s "
                                "(an endless loop, or far too much work?)")
                    if timeouts >= MAX_TIMEOUTS_PER_EXERCISE:
                        self.finish_all(Category.TIMEOUT, "not run: earlier tests of this exercise timed out")
                        return
                elif outcome.stopped == "deadline":
                    self.finish_all(Category.TIMEOUT, "not run: the submission's time limit was reached")
                    return
                elif outcome.importing:
                    self.finish_all(Category.CRASHED, f"crashed: the process ended while importing "
                                    f"{self.exercise.module_file} ({_death(outcome.returncode)})")
                    return
                else:
                    self.finish(outcome.running, Category.CRASHED, f"crashed: {_death(outcome.returncode)} "
                                "during this test")
            elif len(self.done) < len(self.meta):
                # The child ended between tests or before running any: nothing to blame on one test.
                self.finish_all(Category.CRASHED, f"crashed: {_death(outcome.returncode)} before this test ran"
                                + _tail(outcome.output))
                return


def _death(returncode: int | None) -> str:
    if returncode is None:
        return "the process did not report how it ended"
    if returncode < 0:
        name = {9: "SIGKILL (out of memory, or killed)", 11: "SIGSEGV (segmentation fault)",
                6: "SIGABRT (aborted)"}.get(-returncode, f"signal {-returncode}")
        return f"the process was killed by {name}"
    return f"the process exited with status {returncode} (does the code call exit()?)"


def _tail(output: str) -> str:
    lines = [line for line in output.strip().splitlines() if line.strip()][-6:]
    return ("\n  last output:\n    " + "\n    ".join(lines)) if lines else ""


def grade_submission(submission: str | Path, *, visible_only: bool = False, timing: str = "enforce",
                     limits: sandbox.Limits | None = None, time_limit: float = 1800.0,
                     exercises: list[str] | None = None) -> GradingResults:
    """Grade a folder or .zip; every catalog exercise (or those named) gets a result, whatever happens."""
    started = time.monotonic()
    deadline = started + time_limit
    limits = limits or sandbox.Limits()
    sandbox.become_subreaper()
    chosen = [catalog.get(name) for name in exercises] if exercises else list(catalog.EXERCISES)
    options = {"timing": timing, "visible_only": visible_only, "limits": limits}
    with tempfile.TemporaryDirectory(prefix="shardlab-grade-") as tmp:
        workdir = Path(tmp)
        prepared = prepare_submission(submission, workdir)
        try:
            # Tests of exercises the submission lacks are only collected, to be listed as not attempted.
            missing = [e for e in chosen if e.id not in prepared.found]
            collected = collect_tests(missing, visible_only=visible_only) if missing else []
            results, outputs = {}, []
            for exercise in chosen:
                if exercise in missing:
                    run = _ExerciseRun(exercise, [t for t in collected if t["exercise"] == exercise.id], prepared,
                                       workdir, options)
                    note = f"{exercise.module_file} is not in the submission: not attempted"
                    run.finish_all(Category.NOT_ATTEMPTED, f"not attempted: {note}")
                else:
                    run = _ExerciseRun(exercise, None, prepared, workdir, options)
                    run.run(deadline)
                    note = ""
                outputs.append(run.output)
                entries = [TestResult(**_fields(run.done[nodeid])) for nodeid in run.meta]
                results[exercise.id] = score_exercise(exercise, entries, note)
        finally:
            cleanup(prepared)
    return GradingResults(
        submission=str(submission), exercises=results, environment=environment(timing, limits),
        problems=prepared.problems, output=sandbox.truncate("".join(outputs), limits.output_chars),
        duration=time.monotonic() - started, visible_only=visible_only)


def _fields(entry: dict) -> dict:
    known = TestResult.__dataclass_fields__
    return {k: v for k, v in entry.items() if k in known and k not in ("score", "max_score")}


__all__ = ["GradingError", "grade_submission", "environment"]
