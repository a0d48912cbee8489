"""One harness process: pytest on one exercise's tests, with limits on time, memory and file size, its
results read from an event stream, and nothing of it (or of its workers) left running afterwards.

The harness runs only trusted code: the student's module is served by a confined worker it starts
(--isolate, grader.worker). It still runs in a process of its own, because it compiles and runs the
student's traced programs, and an XLA program can loop or exhaust memory: that costs the test it
happened in, never the grading.
"""

from __future__ import annotations

import dataclasses
import os
import select
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import psutil

from grader.core import wall_cap
from grader.core.bounds import clipped
from grader.core.options import HARNESS_MEMORY_BYTES, GradingOptions
from grader.core.processor_time import ProcessorTime
from grader.core.results import TestMeta, TestResult, TimeoutBy, TimeoutFigures
from grader.grading import child
from grader.harness import events, phase_profile, runner, timing_lock
from grader.harness.time_limits import FALLBACK_SECONDS, WALL_MULTIPLIER
from grader.sandbox import processor_wait
from grader.sandbox.confinement import reap_orphans
from grader.sandbox.restrictions import Isolation, launcher


@dataclass(frozen=True)
class Limits:
    """The harness process's own limits: the grader's, whatever the grading options (those, the test
    timeout and the worker's memory included, are grader.core.options.GradingOptions)."""

    # its address space (grader.core.options)
    harness_memory_bytes: int | None = HARNESS_MEMORY_BYTES
    file_bytes: int = 256 << 20  # largest file the child may write (pytest's capture included)
    output_chars: int = 20_000  # how much of the child's own stdout/stderr is kept


@dataclass
class ChildOutcome:
    collected: list[TestMeta] | None = None  # every selected test's metadata, once collected
    # by nodeid, as the harness made them
    results: dict[str, TestResult] = field(default_factory=dict)
    running: str | None = None  # the test that had started and not finished
    last: TestResult | None = None  # the latest result that came
    returncode: int | None = None
    # CPU_LIMIT, WALL_CAP or DEADLINE when the parent killed it
    stopped: str | None = None
    duration: float = 0.0  # how long the running test had run then (wall clock)
    timeout: TimeoutFigures | None = None  # with CPU_LIMIT or WALL_CAP: what that was judged on
    output: str = ""
    compile_cache: dict = field(default_factory=dict)  # the harness's cache hits and misses
    # each test's limit, as the harness computed it
    limits: dict[str, float] = field(default_factory=dict)

    def limit(self, nodeid: str) -> float:
        return self.limits.get(nodeid) or FALLBACK_SECONDS


# Why the grading process killed a harness: its running test used its limit of processor time in the
# harness itself (the student's compiled programs run there; the worker's own is held to the limit by the
# harness), or ran out its wall-clock cap (WALL_MULTIPLIER x the limit), or the grading's deadline came.
CPU_LIMIT, WALL_CAP, DEADLINE = "test cpu limit", "test wall-clock cap", "deadline"

# A harness whose tests all have their results exits at once; one still running after this long is
# busy with something no test asked for (a student's program left running), and is killed.
EXIT_SECONDS = 10.0

# Harnesses running now, in any thread: parallel exercise groups of one submission each reap what their
# harness left, and must not take another group's running harness for a stray.
_RUNNING: set[int] = set()
_SPAWNING = threading.Lock()


def _child_environment(workdir: Path, extra: dict[str, str]) -> dict[str, str]:
    home = workdir / "home"
    tmp = workdir / "tmp"
    home.mkdir(exist_ok=True)
    tmp.mkdir(exist_ok=True)
    # No bytecode written (python -B too, since -I ignores PYTHON* variables): grading leaves the checkout,
    # its __pycache__ folders included, as it was.
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": str(home),
        "TMPDIR": str(tmp),
        "LANG": "C.UTF-8",
        "JAX_PLATFORMS": os.environ.get("JAX_PLATFORMS", "cpu"),
        "PYTHONDONTWRITEBYTECODE": "1",
    }
    if timing_lock.LOCK_DIR in os.environ:  # grade-batch's lock must reach the tests that take it
        env[timing_lock.LOCK_DIR] = os.environ[timing_lock.LOCK_DIR]
    if phase_profile.folder():  # the grader's own benchmark profiles its harnesses
        env[phase_profile.PROFILE_DIR] = phase_profile.folder()
    return env | extra


def run_pytest_child(
    *,
    targets: list[str],
    modules_dir: Path,
    workdir: Path,
    options: GradingOptions | None = None,
    deselect: list[str] = (),
    collect_only: bool = False,
    limits: Limits | None = None,
    deadline: float = float("inf"),
    time_limits: Path | None = None,
    prior_timeouts: list[str] = (),
    env: dict[str, str] | None = None,
    cgroups: list[str] = (),
    on_result: Callable[[TestResult, ChildOutcome], None] | None = None,
    **overrides,
) -> ChildOutcome:
    """Run pytest on `targets` against the modules in `modules_dir`; `deadline` is a time.monotonic().
    options: the grading options the harness takes (timing, visible_only, isolation, test_timeout, the
    worker's memory), with `overrides` by field name (visible_only=True); time_limits: the file of per-test
    limits (grader.harness.time_limits) unless options.test_timeout overrides it; env: added to the
    harness's environment (the compile cache, a timing lock); cgroups: the cgroup.procs files the harness
    joins before it starts (the submission's memory group); on_result: told of each test's result as it
    comes, with the outcome so far (its collection: how many tests each exercise has)."""
    options = dataclasses.replace(options or GradingOptions(), **overrides)
    limits = limits or Limits()
    cwd = workdir / "cwd"
    cwd.mkdir(parents=True, exist_ok=True)
    events_r, events_w = os.pipe()
    # Results travel as events (runner.read_result_event), not in a results file: see grader.harness.runner.
    # messages travel as events; tracebacks would show hidden tests' source in the output
    extra = ["--tb=no"]
    extra += [f"--time-limits={time_limits}"] if time_limits is not None else []
    extra += [f"--prior-timeouts={exercise}" for exercise in prior_timeouts]
    extra += [f"--deselect={nodeid}" for nodeid in deselect]
    extra += ["--collect-only"] if collect_only else []
    # The child lowers its own RLIMIT_AS to the harness's and keeps the worker's as its hard limit, and starts
    # the worker's zygote before anything else (a level chosen already: the engine's, never "auto").
    early = (
        [options.isolation, str(modules_dir)]
        if not collect_only and options.isolation in {level.value for level in Isolation}
        else [child.NO_WORKER, child.NO_WORKER]
    )
    command = [
        sys.executable,
        "-I",
        "-B",
        "-m",
        "grader.grading.child",
        str(limits.harness_memory_bytes or 0),
        str(options.worker_memory_bytes or 0),
        str(limits.file_bytes),
        *early,
        "--",
        *runner.pytest_arguments(
            targets, impl=modules_dir, options=options, isolate=True, extra=extra
        ),
    ]
    # joined by the launcher, before the harness runs anything: all it starts is counted there
    if cgroups:
        command = launcher({"cgroups": list(cgroups)}, command)
    child_env = _child_environment(workdir, {**(env or {}), events.EVENTS_FD: str(events_w)})
    output_path = workdir / "child-output.txt"
    outcome = ChildOutcome()
    with _SPAWNING, open(output_path, "wb") as output:
        keep = {child.pid for child in psutil.Process().children()}
        process = subprocess.Popen(
            command,
            cwd=cwd,
            env=child_env,
            stdin=subprocess.DEVNULL,
            stdout=output,
            stderr=subprocess.STDOUT,
            pass_fds=(events_w,),
            start_new_session=True,
        )
        _RUNNING.add(process.pid)
    os.close(events_w)
    try:
        _follow(process, events_r, outcome, limits, deadline, on_result)
    finally:
        os.close(events_r)
        try:
            os.killpg(process.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        outcome.returncode = process.wait()
        with _SPAWNING:
            _RUNNING.discard(process.pid)
            reap_orphans(keep | _RUNNING)
    # Its start and its end: a crash's last words.
    outcome.output = clipped(
        output_path.read_text(errors="replace"), limits.output_chars, keep_end=True
    )
    return outcome


def _follow(
    process,
    fd,
    outcome: ChildOutcome,
    limits: Limits,
    deadline: float,
    on_result: Callable[[TestResult, ChildOutcome], None] | None = None,
) -> None:
    """Read events until the child ends, killing it when a test or the whole run takes too long."""

    def harness_tree() -> list[int]:  # the harness, its worker and whatever else the test started
        return processor_wait.tree(process.pid)

    buffer, started_at, finished_at = b"", time.monotonic(), None
    cpu_at_start, waits = _processor_time(process.pid), processor_wait.NoWaits()
    while True:
        readable, _, _ = select.select([fd], [], [], 0.25)
        chunk = os.read(fd, 1 << 16) if readable else b""
        buffer += chunk
        *lines, buffer = buffer.split(b"\n")
        for line in lines:
            for event in events.parse(line):
                if _apply_event(event, outcome):
                    started_at, cpu_at_start = time.monotonic(), _processor_time(process.pid)
                    waits = processor_wait.Waits(harness_tree)
                if on_result is not None and isinstance(event, events.Finished):
                    on_result(outcome.last, outcome)
        now = time.monotonic()
        if readable and not chunk or process.poll() is not None and not readable:
            return  # EOF, or the child is gone (a grandchild may still hold the pipe open)
        if (
            finished_at is None
            and outcome.collected is not None
            and not outcome.running
            and len(outcome.results) >= len(outcome.collected)
        ):
            finished_at = now
        if finished_at is not None and now - finished_at > EXIT_SECONDS:
            return  # every test has its result: whatever still runs in the harness is killed, not waited for
        if outcome.running:
            limit, outcome.duration = outcome.limit(outcome.running), now - started_at
            cpu, cap = _processor_time(process.pid) - cpu_at_start, WALL_MULTIPLIER * limit
            if cpu.user > limit:
                outcome.stopped = CPU_LIMIT
                outcome.timeout = _figures(
                    TimeoutBy.PROCESSOR_TIME, limit, cap, cpu, outcome, waits
                )
                return
            # the waiting is read only once the cap has passed on the wall clock
            if outcome.duration > cap:
                timeout = _figures(TimeoutBy.WALL_CLOCK_CAP, limit, cap, cpu, outcome, waits)
                if wall_cap.past(timeout.wall, timeout.waited, cap):
                    outcome.stopped, outcome.timeout = WALL_CAP, timeout
                    return
        if now > deadline:
            outcome.stopped = DEADLINE
            return


def _figures(by, limit, cap, cpu: ProcessorTime, outcome: ChildOutcome, waits) -> TimeoutFigures:
    return TimeoutFigures(
        by=by,
        limit=limit,
        cap=cap,
        cpu=cpu.user,
        system=cpu.system,
        wall=outcome.duration,
        waited=waits.since(),
    )


def _processor_time(pid: int) -> ProcessorTime:
    """The harness process's own processor time, all its threads (its worker's is not: the harness
    holds that to the test's limit itself); nothing once it is gone."""
    try:
        times = psutil.Process(pid).cpu_times()
    except psutil.Error:
        return ProcessorTime()
    return ProcessorTime(times.user, times.system)


def _apply_event(event: events.Event, outcome: ChildOutcome) -> bool:
    """Update the outcome; True when a test's clock starts (again)."""
    match event:
        case events.Collected(tests):
            outcome.collected = [TestMeta.from_dict(test) for test in tests]
            outcome.limits = {test.nodeid: test.limit for test in outcome.collected}
        case events.Started(nodeid):
            outcome.running = nodeid
            return True
        case events.Running():
            return True  # the timing lock was acquired: waiting for it does not count
        case events.Finished():
            # A malformed result is the grader's own bug (MalformedResult): it stops grading.
            result = runner.read_result_event(event)
            outcome.results[result.nodeid] = result
            outcome.running, outcome.last = None, result
        case events.CacheCounts(hits, misses):
            outcome.compile_cache = {"hits": hits, "misses": misses}
    return False
