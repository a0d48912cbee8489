"""The harness's state for one pytest session, in one object: what is under test, how it is confined,
the worker serving it, the time limits and the running test's deadline, and where results go."""

from __future__ import annotations

import contextlib
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

import pytest

from grader.core.results import TestResult
from grader.harness import compile_counts
from grader.harness.events import EventStream
from grader.harness.strikes import Strikes
from grader.harness.time_limits import WALL_MULTIPLIER, TimeLimits

if TYPE_CHECKING:
    from grader.sandbox.restrictions import Isolation
    from grader.worker.supervisor import Worker

# The worker gives up this long before the grading process's wall-clock cap stops the whole test, so a
# hung call is reported as this test's timeout while the harness lives on.
TIMEOUT_MARGIN = 2.0


class Tally(Protocol):
    """What the session's recorder keeps (grader.harness.recording.Recorder, which imports this module)."""

    entries: dict[str, TestResult]  # nodeid -> its result so far
    strikes: Strikes  # the timed-out tests, by exercise and function


@dataclass
class HarnessSession:
    impl: Path  # the folder of modules under test
    events: EventStream  # to the grading process, when there is one
    limits: TimeLimits
    isolation: Isolation | None = None  # the worker's confinement level with --isolate, else None
    # --worker-memory: the worker's address space (None: its default)
    worker_memory: int | None = None
    # the compile cache's hits and misses, when it is on
    cache_counts: compile_counts.Counter | None = None
    recorder: Tally | None = None  # grader.harness.recording.Recorder
    # exercise id -> module, stand-in or the error loading it
    modules: dict = field(default_factory=dict)
    worker: Worker | None = None  # with --isolate, the worker serving the implementation's modules
    # when the running test must end whatever its processor time (time.monotonic()): its wall-clock cap
    deadline: float = float("inf")
    cpu_limit: float = float("inf")  # the processor time the worker may use in the running test

    def load(self, exercise):
        """The module under test for `exercise` (or the error loading it, raised again), loaded once."""
        if exercise.id not in self.modules:
            try:
                self.modules[exercise.id] = self._load(exercise)
            # NotAttempted, ImplementationImportError: every test reports it
            except Exception as exc:
                self.modules[exercise.id] = exc
        found = self.modules[exercise.id]
        if isinstance(found, Exception):
            # else every test would add its frames to one traceback
            raise found.with_traceback(None)
        return found

    def _load(self, exercise):
        from grader.course.implementations import NotAttempted, load_module

        if self.isolation is None:
            return load_module(exercise, self.impl)
        from grader.worker.stand_in import RemoteModule

        path = self.impl / exercise.module_file
        if not path.is_file():
            raise NotAttempted(
                f"{exercise.number}: {exercise.module_file} is missing from {self.impl}"
            )
        # a function that timed out in two tests is not called again (grader.harness.strikes)
        return RemoteModule(
            path,
            self.the_worker(),
            stopped=lambda function: self.recorder.strikes.function_stopped(exercise.id, function),
        )

    @property
    def worker_limits(self):
        """The limits of every process that runs the student's code: the worker, and each process of a run of
        several (--worker-memory, from --memory-limit)."""
        from grader.sandbox.confinement import WorkerLimits, worker_limits

        return WorkerLimits() if self.worker_memory is None else worker_limits(self.worker_memory)

    def the_worker(self):
        """With --isolate, the one confined worker that serves the implementation's modules."""
        if self.worker is None:
            from grader.worker.supervisor import Worker

            self.worker = Worker.take_early(
                self.impl, isolation=self.isolation, limits=self.worker_limits
            )
            self.worker.start_clock(self.cpu_limit, self.deadline)  # asked for during a test
        return self.worker

    def ready_worker(self, items: list) -> None:
        """Before the first test's clock: the worker started during collection (prestart) is waited for and
        forked, so that no test pays for the worker's start, only for the student's import and calls (when
        one of the tests to run, `items`, has its exercise's module here: else none will ask for it)."""
        if self.worker is None:
            return
        from grader.course import catalog

        exercises = {e for item in items if (e := item.stash[META].exercise)}
        if any((self.impl / catalog.get(e).module_file).is_file() for e in exercises):
            self.worker.warm_up()

    def start_clock(self, limit: float) -> None:
        """The running test's clock: `limit` seconds of the worker's processor time from now, within a
        wall-clock cap of WALL_MULTIPLIER x `limit` (which runs of several processes take too), time waiting
        for a processor not counted (grader.core.wall_cap: the deadline moves as it is read)."""
        self.cpu_limit = limit
        self.deadline = time.monotonic() + WALL_MULTIPLIER * limit - TIMEOUT_MARGIN
        if self.worker is not None:
            self.worker.start_clock(self.cpu_limit, self.deadline)

    @contextlib.contextmanager
    def worker_paused(self):
        """While a speedup test measures (in this process), the worker is stopped: whatever the student's
        code left running there takes no core from the measurement."""
        if self.worker is not None:
            self.worker.suspend()
        try:
            yield
        finally:
            if self.worker is not None:
                self.worker.resume()

    def stop(self) -> None:
        if self.worker is not None:
            self.worker.stop()


SESSION = pytest.StashKey[HarnessSession]()
# what the grader must know of a test before it runs (grader.core.results)
META = pytest.StashKey["TestMeta"]()


def session_of(config) -> HarnessSession:
    return config.stash[SESSION]
