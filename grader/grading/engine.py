"""Grading one submission: harness processes (pytest with --isolate) run the chosen exercises' tests,
which reach the student's modules through confined workers, so that a crash or a hang costs only
the test it happened in (the harness or the worker is started again for the rest).

    grade_submission("alice.zip", parallel=2)

With `parallel` N, the exercises are shared among N harnesses running at once (each with its own
worker), balanced by the reference's measured time; a speedup test still measures alone, through the
timing lock (grader.harness.timing_lock). Every harness uses the course's compile cache
(grader.grading.compile_cache) and each test's own time limit (grader.harness.time_limits).

Data flows one way: the catalog names the exercises, the tests produce per-test entries (through the
harness's event stream), grader.grading.results scores them, grader.reports.writers writes them out.
"""

from __future__ import annotations

import dataclasses
import os
import platform
import tempfile
import time
from collections import Counter
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Any

from grader.core.bounds import clipped, last_lines
from grader.core.options import (
    HARNESS_ALLOWANCE_BYTES,
    SANDBOX_DISK_PER_HARNESS_BYTES,
    GradingOptions,
)
from grader.core.results import (
    Category,
    Environment,
    IsolationRecord,
    TestMeta,
    TestResult,
    TimeoutFigures,
)
from grader.course import catalog
from grader.course.devices import HOST_DEVICES, cores
from grader.course.term import Course, default_course
from grader.grading import preflight, process
from grader.grading.collection import GradingError, collect_tests
from grader.grading.compile_cache import CompileCache, refuse_if_visible
from grader.grading.results import GradingResults, score_exercise
from grader.grading.submission import PreparedSubmission, cleanup, prepare_submission
from grader.harness import time_limits as time_limits_module, timing_lock
from grader.harness.strikes import STOPPED, Strikes
from grader.harness.time_limits import WALL_MULTIPLIER, TimeLimits
from grader.sandbox import cgroups, confinement, disk
from grader.worker.failures import describe_death

DEADLINE_REACHED = "not run: the submission's time limit was reached"


def submission_memory_limit(worker_memory_bytes: int | None, harnesses: int) -> int | None:
    """What a submission's harnesses and workers may hold together (resident memory, in its memory cgroup
    where the machine has one; the workers are killed first): per harness, its own allowance and all its
    worker may hold (its address-space limit), so that the student's worker really gets --memory-limit
    (a fixed 4 GiB per harness gave a worker that held 4 GiB under the default 6 GiB limit 0/10, every call
    killed); and what its sandboxes may write, on tmpfs charged to the group (grader.sandbox.disk). None
    (--memory-limit 0: no worker limit): no limit either."""
    if worker_memory_bytes is None:
        return None
    return harnesses * (
        HARNESS_ALLOWANCE_BYTES + SANDBOX_DISK_PER_HARNESS_BYTES + worker_memory_bytes
    )


def environment(
    options: GradingOptions,
    limits: process.Limits,
    isolation: dict[str, Any],
    worker_memory_bytes: int | None = None,
    submission_memory_bytes: int | None = None,
    *,
    worker_disk_bytes: int | None = None,
    compile_cache: dict[str, Any] | None = None,
    time_limits: dict[str, Any] | None = None,
    parallel: int | None = None,
) -> Environment:
    """For report.json: the options as they describe themselves (grader.core.options), with the limits as
    applied. worker_memory_bytes: the worker's address-space limit as read inside a confined worker
    (grader.grading.preflight); the harness's is the one its child process applies;
    submission_memory_bytes: the submission's memory cgroup's limit as the kernel holds it (None: no limit,
    or no memory cgroup here: environment.isolation.memory says which); worker_disk_bytes: the size of the
    tmpfs the preflight's worker found as its folder (None: its folder is on the host's disk)."""
    versions = {}
    for package in ("shardlab", "jax", "jaxlib", "numpy", "pytest", "hypothesis"):
        try:
            versions[package] = metadata.version(package)
        except metadata.PackageNotFoundError:
            versions[package] = None
    described = options.describe()
    described["limits"] |= {
        "worker_memory_bytes": worker_memory_bytes,
        "harness_memory_bytes": limits.harness_memory_bytes,
        "submission_memory_bytes": submission_memory_bytes,
        "worker_disk_bytes": worker_disk_bytes,
    }
    timing, limits_applied, visibility = (
        described.pop(key, None) for key in ("timing", "limits", "hidden_visibility")
    )
    return Environment(
        python=platform.python_version(),
        platform=platform.platform(),
        versions=versions,
        devices=HOST_DEVICES,
        cores=cores(),
        timing=timing,
        limits=limits_applied,
        hidden_visibility=visibility,
        isolation=IsolationRecord(isolation),
        compile_cache=compile_cache,
        time_limits=time_limits,
        parallel=parallel,
        other=described,
    )  # an option Environment lacks


@dataclass(frozen=True)
class HarnessSettings:
    """What every harness of one grading is started with (grader.grading.process.run_pytest_child's)."""

    options: GradingOptions
    limits: process.Limits
    env: dict[str, str]  # added to the harness's environment: the compile cache, a timing lock
    time_limits: Path | None  # each test's limit, as saved for the harnesses


# told (exercise id, its number of tests) as an exercise's last result comes: a long grading's progress
ExerciseDone = Callable[[str, int], None]


class _Run:
    """The tests of the chosen exercises, in harness processes started again until each test has an
    outcome: a harness that dies (a student's compiled program crashed it) or hangs costs one test."""

    def __init__(
        self,
        exercises: list[catalog.Exercise],
        prepared: PreparedSubmission,
        workdir: Path,
        harness: HarnessSettings,
        progress: ExerciseDone | None = None,
    ):
        self.exercises, self.prepared, self.workdir, self.harness = (
            exercises,
            prepared,
            workdir,
            harness,
        )
        self.progress = progress
        self.told: dict[str, set[str]] = {}  # exercise -> its tests whose results came
        workdir.mkdir(parents=True, exist_ok=True)
        self.meta: dict[str, TestMeta] | None = None  # learned from the first harness's collection
        self.done: dict[str, TestResult] = {}
        self.output = ""
        self.strikes = Strikes()  # the tests that timed out or crashed a harness, in any harness
        self.cache_counts: Counter = Counter()  # summed over this run's harnesses
        self.cgroups: list[str] = []  # its harnesses' leaf of the submission's memory group

    def finish(
        self,
        nodeid: str,
        category: Category,
        message: str,
        duration: float = 0.0,
        *,
        strike: bool = False,
        timeout: TimeoutFigures | None = None,
    ) -> None:
        """A result the grading process gives a test its harness could not finish (strike: the test
        counts towards its exercise's strikes, grader.harness.strikes; timeout: what a timeout was
        judged on)."""
        result = self.meta[nodeid].result(category, message, duration, strike=strike)
        self.done[nodeid] = dataclasses.replace(result, timeout=timeout)

    def strike(
        self,
        nodeid: str,
        category: Category,
        message: str,
        duration: float = 0.0,
        timeout: TimeoutFigures | None = None,
    ) -> None:
        """The running test ends in a strike no function is named for (the harness died or was killed);
        once its exercise is stopped (grader.harness.strikes), its tests left are not run."""
        exercise = self.meta[nodeid].exercise
        self.strikes.add(exercise, None)
        self.finish(nodeid, category, message, duration, strike=True, timeout=timeout)
        self._stop_if_struck_out(exercise)

    def _stop_if_struck_out(self, exercise: str) -> None:
        if self.strikes.exercise_stopped(exercise):
            self.finish_all(Category.TIMEOUT, STOPPED, exercise)

    def finish_all(self, category: Category, message: str, exercise: str | None = None) -> None:
        for nodeid, test in self.meta.items():
            if nodeid not in self.done and exercise in (None, test.exercise):
                self.finish(nodeid, category, message)

    def _came(self, result: TestResult, outcome: process.ChildOutcome) -> None:
        """A result came from the harness: once its exercise's every test has one, say so (progress)."""
        tests = self.meta or {t.nodeid: t for t in outcome.collected or ()}
        came = self.told.setdefault(result.exercise, set())
        came.add(result.nodeid)
        if len(came) == sum(t.exercise == result.exercise for t in tests.values()):
            self.progress(result.exercise, len(came))

    def run(self, deadline: float) -> None:
        while self.meta is None or len(self.done) < len(self.meta):
            if time.monotonic() > deadline:
                # listing the tests is the grader's work, not the submission's time
                if self.meta is None:
                    tests = collect_tests(
                        self.exercises, visible_only=self.harness.options.visible_only
                    )
                    self.meta = {t.nodeid: t for t in tests}
                self.finish_all(Category.TIMEOUT, DEADLINE_REACHED)
                return
            outcome = process.run_pytest_child(
                targets=[str(e.tests_dir()) for e in self.exercises],
                modules_dir=self.prepared.modules_dir,
                workdir=self.workdir,
                deselect=sorted(self.done),
                deadline=deadline,
                prior_timeouts=self.strikes.as_list(),
                cgroups=self.cgroups,
                options=self.harness.options,
                limits=self.harness.limits,
                env=self.harness.env,
                time_limits=self.harness.time_limits,
                on_result=self._came if self.progress is not None else None,
            )
            # the harness has ended: its sandboxes' mounts go with it, before the next one starts
            disk.release_within(self.workdir)
            self.output += outcome.output
            self.cache_counts.update(outcome.compile_cache)
            # collection runs no student code: without it, grading itself failed
            if self.meta is None:
                if outcome.collected is None:
                    raise GradingError(
                        "the tests could not be collected:\n" + outcome.output[-3000:]
                    )
                self.meta = {t.nodeid: t for t in outcome.collected}
            fresh = {k: v for k, v in outcome.results.items() if k in self.meta}
            self.done |= fresh
            for result in fresh.values():
                if result.strike:
                    self.strikes.add(result.exercise, result.strike_function)
            if outcome.running in self.meta:
                if outcome.stopped == process.DEADLINE:
                    self.finish_all(Category.TIMEOUT, DEADLINE_REACHED)
                    return
                if outcome.stopped == process.CPU_LIMIT:
                    limit = outcome.limit(outcome.running)
                    self.strike(
                        outcome.running,
                        Category.TIMEOUT,
                        f"timeout: the test used more than {limit:.0f} s of processor time in the "
                        "grader, running your compiled program (an endless loop, or far too much work?)",
                        outcome.duration,
                        outcome.timeout,
                    )
                elif outcome.stopped == process.WALL_CAP:
                    cap = WALL_MULTIPLIER * outcome.limit(outcome.running)
                    self.strike(
                        outcome.running,
                        Category.TIMEOUT,
                        f"timeout: the test ran longer than its wall-clock cap of {cap:.0f} s, time spent "
                        "waiting for a processor not counted (waiting for something that never "
                        "comes, or an endless loop?)",
                        outcome.duration,
                        outcome.timeout,
                    )
                else:
                    # A harness that died ran the student's program: a crash counts as a strike like a
                    # timeout, so a program that corrupts the harness cannot restart it without end.
                    self.strike(
                        outcome.running,
                        Category.CRASHED,
                        f"crashed: {describe_death(outcome.returncode)} during this test",
                    )
            elif len(self.done) < len(self.meta):
                # The harness ended between tests or before running any: nothing to blame on one test.
                self.finish_all(
                    Category.CRASHED,
                    f"crashed: {describe_death(outcome.returncode)} before this "
                    "test ran" + last_lines(outcome.output, 6, "last output"),
                )
                return


def grade_submission(
    submission: str | Path,
    options: GradingOptions | None = None,
    *,
    cache: CompileCache | None = None,
    time_limits: TimeLimits | None = None,
    course: Course | None = None,
    progress: ExerciseDone | None = None,
    **overrides,
) -> GradingResults:
    """Grade a folder or .zip; every exercise of the course (or those named) gets a result, whatever happens.
    course: the term (grader.course.term): its exercises, in its order, with its points (default: the
    catalog's).

    options: how (grader.core.options.GradingOptions; default: its defaults), with `overrides` by field
    name (exercises=["ex01"], timing="skip", parallel=2); parallel None: one harness (the CLI gives the
    cores). cache: the compile cache (default: off); time_limits: each test's limit (default: the
    calibration in the cache's folder, or options.test_timeout for every test when that is set);
    progress: told as each exercise's tests have all run (from the harnesses' threads)."""
    options = dataclasses.replace(options or GradingOptions(), **overrides)
    started = time.monotonic()
    deadline = started + options.time_limit
    parallel = options.parallel or 1
    limits = process.Limits()
    cache = cache or CompileCache(None)
    time_limits = time_limits or time_limits_module.load(cache.folder, options.test_timeout)
    # Before anything is written there (the preflight's proof is): never inside what every worker reads
    # (Python, the system, the grader); the submission's own copy is checked once it is made.
    _refuse_a_visible_cache(cache, [])
    try:  # chosen once here, so every exercise's workers run at the same, recorded level
        level = confinement.choose_isolation(options.isolation)
    except confinement.IsolationUnavailable as exc:
        raise GradingError(str(exc)) from None
    try:  # before the first student: a worker that cannot start here would give every test 0
        proof = preflight.prove_worker(
            level, confinement.worker_limits(options.worker_memory_bytes), cache.folder
        )
    except preflight.PreflightError as exc:
        raise GradingError(str(exc)) from None
    options = dataclasses.replace(options, isolation=level.value)
    confinement.become_subreaper()
    disk.sweep()  # the tmpfs that gradings killed with SIGKILL left (their groups: submission_memory)
    course = course or default_course()
    chosen = (
        [course.exercise(name) for name in options.exercises]
        if options.exercises
        else list(course.exercises)
    )
    harnesses = max(1, min(parallel, len(chosen)))
    with (
        cgroups.submission_memory(submission_memory_limit(proof.memory_bytes, harnesses)) as memory,
        tempfile.TemporaryDirectory(prefix="shardlab-grade-") as tmp,
    ):
        workdir = Path(tmp)
        prepared = prepare_submission(submission, workdir)
        try:
            env = _harness_environment(cache, prepared, workdir, parallel)
            harness = HarnessSettings(
                options, limits, env, time_limits.save(workdir / "time-limits.json")
            )
            # A harness runs no student code, so one serves several exercises; a missing module's tests
            # end at once as not attempted.
            runs = [
                _Run(group, prepared, workdir / f"harness-{i}", harness, progress)
                for i, group in enumerate(_share(chosen, parallel, time_limits))
            ]
            for run in runs:
                run.cgroups = memory.harness()
            with ThreadPoolExecutor(max_workers=len(runs)) as pool:
                for finished in [pool.submit(run.run, deadline) for run in runs]:
                    finished.result()  # a GradingError in any group is the whole grading's
            done = {k: v for run in runs for k, v in run.done.items()}
            meta = {k: v for run in runs for k, v in run.meta.items()}
            results = {}
            for exercise in chosen:
                note = (
                    ""
                    if exercise.id in prepared.found
                    else f"{exercise.module_file} is not in the submission: not attempted"
                )
                entries = [
                    dataclasses.replace(done[nodeid], message=f"not attempted: {note}")
                    if note
                    else done[nodeid]
                    for nodeid, test in meta.items()
                    if test.exercise == exercise.id
                ]
                results[exercise.id] = score_exercise(exercise, entries, note)
        finally:
            disk.release_within(workdir)  # what a killed harness's sandboxes left mounted there
            cleanup(prepared)
    counts = sum((run.cache_counts for run in runs), Counter())
    return GradingResults(
        submission=str(submission),
        exercises=results,
        environment=environment(
            options,
            limits,
            confinement.describe(level) | {"memory": memory.describe()},
            proof.memory_bytes,
            memory.applied,
            worker_disk_bytes=proof.disk_bytes,
            compile_cache=cache.describe(counts),
            time_limits=time_limits.describe(),
            parallel=len(runs),
        ),
        problems=prepared.problems,
        ignored=prepared.ignored,
        refused=prepared.refused,
        # with its end
        output=clipped("".join(run.output for run in runs), limits.output_chars, keep_end=True),
        # A course without hidden tests (a student's handout) grades its visible tests only, and says so.
        duration=time.monotonic() - started,
        visible_only=options.visible_only or not any(test.hidden for test in meta.values()),
    )


def _harness_environment(
    cache: CompileCache, prepared: PreparedSubmission, workdir: Path, parallel: int
) -> dict[str, str]:
    """The compile cache (never where the student's code can read it) and, for harnesses running side by
    side, a timing lock of their own unless a batch's is already set."""
    _refuse_a_visible_cache(cache, [prepared.modules_dir])
    env = cache.environment()
    if parallel > 1 and timing_lock.LOCK_DIR not in os.environ:
        env[timing_lock.LOCK_DIR] = str(workdir / "timing-lock")
    return env


def _refuse_a_visible_cache(cache: CompileCache, readable: list[Path]) -> None:
    if cache.folder is not None:
        try:
            refuse_if_visible(cache.folder, readable)
        except ValueError as exc:
            raise GradingError(str(exc)) from None


def _share(
    chosen: list[catalog.Exercise], parallel: int, limits: TimeLimits
) -> list[list[catalog.Exercise]]:
    """At most `parallel` groups of exercises with about equal reference time (the longest first, each to
    the least loaded group), each group in catalog order."""
    groups: list[list[catalog.Exercise]] = [[] for _ in range(max(1, min(parallel, len(chosen))))]
    load = [0.0] * len(groups)
    seconds = {e.id: limits.exercise_seconds(e.id) or 1.0 for e in chosen}
    for exercise in sorted(chosen, key=lambda e: -seconds[e.id]):
        i = load.index(min(load))
        groups[i].append(exercise)
        load[i] += seconds[exercise.id]
    order = {e.id: i for i, e in enumerate(catalog.EXERCISES)}
    return [sorted(g, key=lambda e: order[e.id]) for g in groups if g]


__all__ = ["GradingError", "grade_submission", "environment"]
