"""Where a process's time goes, by exercise and phase: a sampling profile for the grader's own benchmark
(bench/grading_phases.py), off unless $SHARDLAB_PHASE_PROFILE names a folder.

A thread looks at the main thread's stack every few milliseconds and charges the time since its last look to
the phase that stack is in, under the running test. A phase is decided by the frames on the
stack, in PRECEDENCE order: a speed measurement is one whatever it runs, waiting for the worker is that,
whatever asked; otherwise the innermost of jax's own activities (tracing, lowering, compiling, running)
decides. jax's monitoring events count the traces, lowerings and compiles beside it, and how many of them
asked for a program this process had already compiled.

The harness starts it from its plugin (grader.harness.pytest_plugin) when the variable is set; the grading
process passes the variable on to its harnesses, never to a worker. Each process writes
`<folder>/<role>-<pid>.json` as it ends. Sampling costs about 1% of a core; unset, nothing runs.
"""

from __future__ import annotations

import json
import os
import re
import sys
import threading
import time
from collections import Counter, defaultdict
from pathlib import Path

PROFILE_DIR = "SHARDLAB_PHASE_PROFILE"
INTERVAL_SECONDS = 0.002
OUTSIDE_TESTS = "(no test)"

# The phases, in the order tables show them.
# from the process's creation to the harness's configuration (imports)
PROCESS_START = "process start"
TIMING_LOCK = "waiting for a speed measurement"  # the timing lock, held by another's measurement
COLLECTION = "collection"
WORKER_START = "worker start"  # the fork server and the worker, waited for before the first test
WORKER_CALLS = "worker: student's calls"  # a direct call, answered with data
WORKER_EXPORTS = "worker: tracing, exporting"  # the student's function traced and exported there
CALLBACKS = "tests' functions traced for the worker"
STUDENT_IN_PROCESS = "student's code (in process)"  # a plain pytest run: the module imported here
CLUSTER_RUNS = "runs of several processes"  # ex12's processes, waited for
DESERIALIZE = "deserializing, vetting"  # the student's exported programs, in the harness
REFERENCES = "references, baselines"  # what a test computes to compare with
SPEED = "speed measurements"
TRACE, LOWER, COMPILE, RUN = "tracing", "lowering", "compiling", "running"
DEVICE_PUT = "placing arrays"
CHECKS = "comparisons, checks"  # grader.checks: numerics, layouts, HLO text
TEST_CODE = "test code"
OTHER = "pytest, harness"

PHASES = (
    PROCESS_START,
    TIMING_LOCK,
    COLLECTION,
    WORKER_START,
    WORKER_CALLS,
    WORKER_EXPORTS,
    CALLBACKS,
    CLUSTER_RUNS,
    STUDENT_IN_PROCESS,
    DESERIALIZE,
    REFERENCES,
    SPEED,
    TRACE,
    LOWER,
    COMPILE,
    RUN,
    DEVICE_PUT,
    CHECKS,
    TEST_CODE,
    OTHER,
)

_GRADER = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_CHECKS = os.path.join(_GRADER, "checks") + os.sep
_JAX = os.sep + os.path.join("jax", "_src") + os.sep
_EXERCISE_TESTS = os.sep + os.path.join("tests", "exercises") + os.sep
_REFERENCE_NAME = re.compile(r"reference|expected|baseline|single_device")

# (file ending, function name or None for any): a phase that holds for everything below it on the stack.
_MARKERS = {
    ("checks/speedup.py", "measure_speedup"): SPEED,
    ("checks/speedup.py", "calibration_speedup"): SPEED,
    ("worker/supervisor.py", "warm_up"): WORKER_START,
    ("worker/supervisor.py", "prestart"): WORKER_START,
    ("worker/stand_in.py", "answer"): CALLBACKS,
    ("worker/programs.py", "checked_program"): DESERIALIZE,
    ("_pytest/main.py", "perform_collect"): COLLECTION,
    ("harness/timing_lock.py", "hold"): TIMING_LOCK,
    ("harness/timing_lock.py", "alone"): TIMING_LOCK,
    ("cluster/run_cluster.py", "run_cluster"): CLUSTER_RUNS,
}
_WAITING = ("worker/supervisor.py", "request")  # the worker's answer, waited for
_EXPORTING = ("worker/stand_in.py", "_traced_call")  # a traced program asked for (then run here)
_MARKER_FILES = {m[0] for m in (*_MARKERS, _WAITING, _EXPORTING)}
# Precedence among the marked phases (and those found otherwise): the first present decides.
PRECEDENCE = (
    TIMING_LOCK,
    SPEED,
    WORKER_START,
    CALLBACKS,
    WORKER_CALLS,
    WORKER_EXPORTS,
    CLUSTER_RUNS,
    DESERIALIZE,
    STUDENT_IN_PROCESS,
    REFERENCES,
    COLLECTION,
)
# jax's activities, by the file (and function) of the innermost frame that names one.
_JAX_FILES = {
    "interpreters/partial_eval.py": TRACE,
    "interpreters/mlir.py": LOWER,
    "compiler.py": COMPILE,
    "compilation_cache.py": COMPILE,
    "export/_export.py": LOWER,
}
_JAX_FUNCTIONS = {
    ("interpreters/pxla.py", "lower_sharding_computation"): LOWER,
    ("interpreters/pxla.py", "_cached_lowering_to_hlo"): LOWER,
    ("interpreters/pxla.py", "from_hlo"): COMPILE,
    ("interpreters/pxla.py", "__call__"): RUN,
    ("array.py", "_value"): RUN,
    ("array.py", "block_until_ready"): RUN,
    ("api.py", "block_until_ready"): RUN,
    ("api.py", "device_put"): DEVICE_PUT,
    ("dispatch.py", "_device_put_impl"): DEVICE_PUT,
}


class Classifier:
    """A stack's phase. student_folder: where the student's modules are, when this process imports them."""

    def __init__(self, student_folder: str | Path | None = None):
        self.student = (
            os.path.realpath(student_folder) + os.sep if student_folder is not None else None
        )
        self._files: dict[str, tuple] = {}  # co_filename -> what it says of its frames

    def _kind(self, filename: str) -> tuple:
        """(marker file ending or None, jax file ending or None, is checks, is exercise tests, is student)."""
        found = self._files.get(filename)
        if found is None:
            marker = next((m for m in _MARKER_FILES if filename.endswith(m)), None)
            inside = filename.split(_JAX, 1)[1] if _JAX in filename else None
            found = self._files[filename] = (
                marker,
                inside,
                filename.startswith(_CHECKS),
                _EXERCISE_TESTS in filename,
                self.student is not None and os.path.realpath(filename).startswith(self.student),
            )
        return found

    def phase(self, frame) -> str:
        marked: set[str] = set()
        activity = checks = test_code = None
        waiting = exporting = False  # on the worker's answer; to a request for a traced program
        while frame is not None:
            code = frame.f_code
            marker, inside, in_checks, in_tests, in_student = self._kind(code.co_filename)
            if marker is not None:
                where = (marker, code.co_name)
                if where in _MARKERS:
                    marked.add(_MARKERS[where])
                waiting = waiting or where == _WAITING
                exporting = exporting or where == _EXPORTING
            if in_student:
                marked.add(STUDENT_IN_PROCESS)
            if in_tests and not code.co_name.startswith("test_"):
                if _REFERENCE_NAME.search(code.co_name):
                    marked.add(REFERENCES)
            if activity is None and inside is not None:
                activity = _JAX_FUNCTIONS.get((inside, code.co_name)) or _JAX_FILES.get(inside)
            if checks is None and in_checks:
                checks = CHECKS
            if test_code is None and in_tests:
                test_code = TEST_CODE
            frame = frame.f_back
        if waiting:
            marked.add(WORKER_EXPORTS if exporting else WORKER_CALLS)
        for phase in PRECEDENCE:
            if phase in marked:
                return phase
        return activity or checks or test_code or OTHER


class JaxCounts:
    """jax's own durations and counts of traces, lowerings and compiles (jax.monitoring), by exercise; and
    compiles of a program this process compiled before (a persistent-cache hit in one grading)."""

    EVENTS = {
        "/jax/core/compile/jaxpr_trace_duration": TRACE,
        "/jax/core/compile/jaxpr_to_mlir_module_duration": LOWER,
        "/jax/core/compile/backend_compile_duration": COMPILE,
    }

    def __init__(self, label, classifier: Classifier):
        self.label = label  # a callable: the running test's node id
        self.classifier = classifier
        self.seconds: dict[str, Counter] = defaultdict(Counter)
        self.counts: dict[str, Counter] = defaultdict(Counter)

    def install(self) -> JaxCounts:
        import jax

        jax.monitoring.register_event_duration_secs_listener(self._duration)
        jax.monitoring.register_event_listener(self._event)
        return self

    def _duration(self, name: str, seconds: float, **kwargs) -> None:
        what = self.EVENTS.get(name)
        if what is not None:
            if self.classifier.phase(sys._getframe()) == STUDENT_IN_PROCESS:
                what = f"{what} ({STUDENT_IN_PROCESS})"
            self.seconds[self.label()][what] += seconds
            self.counts[self.label()][what] += 1

    def _event(self, name: str, **kwargs) -> None:
        if name == "/jax/compilation_cache/cache_hits":
            self.counts[self.label()]["cache hits"] += 1


class Sampler:
    """Samples the main thread's stack every INTERVAL_SECONDS in a daemon thread; `label` is the exercise the
    time goes to: the running test's node id (set by the harness as each test runs)."""

    def __init__(self, classifier: Classifier, role: str):
        self.classifier = classifier
        self.role = role
        self.label = OUTSIDE_TESTS
        self.seconds: dict[str, Counter] = defaultdict(Counter)
        self.jax = JaxCounts(lambda: self.label, classifier)
        self.created = _created()
        self.started = time.time()
        self._stop = threading.Event()
        self._main = threading.main_thread().ident
        self._thread = threading.Thread(target=self._run, name="phase-profile", daemon=True)

    def start(self) -> Sampler:
        self.seconds[OUTSIDE_TESTS][PROCESS_START] += max(0.0, self.started - self.created)
        self._thread.start()
        return self

    def _run(self) -> None:
        last = time.perf_counter()
        while not self._stop.wait(INTERVAL_SECONDS):
            frame = sys._current_frames().get(self._main)
            now = time.perf_counter()
            phase = self.classifier.phase(frame) if frame is not None else OTHER
            self.seconds[self.label][phase] += now - last
            last = now
            del frame

    def stop(self, folder: str | Path) -> Path:
        self._stop.set()
        self._thread.join()
        path = Path(folder) / f"{self.role}-{os.getpid()}.json"
        path.write_text(
            json.dumps(
                {
                    "role": self.role,
                    "created": self.created,
                    "ended": time.time(),
                    "seconds": self.seconds,
                    "jax_seconds": self.jax.seconds,
                    "jax_counts": self.jax.counts,
                },
                indent=1,
            )
        )
        return path


def _created() -> float:
    try:
        import psutil

        return psutil.Process().create_time()
    except Exception:
        return time.time()


def folder() -> str | None:
    """Where profiles go, when profiling is on."""
    return os.environ.get(PROFILE_DIR) or None


class PhasePlugin:
    """The harness's part: a sampler from configuration to the end, each test's time under its node id."""

    def __init__(self, sampler: Sampler, target: str):
        self.sampler, self.target = sampler, target

    @classmethod
    def start(cls, target: str, student_folder: Path | None) -> PhasePlugin:
        sampler = Sampler(Classifier(student_folder), "harness").start()
        sampler.jax.install()
        return cls(sampler, target)

    def pytest_runtest_protocol(self, item, nextitem):
        self.sampler.label = item.nodeid

    def pytest_runtest_logfinish(self, nodeid, location):
        self.sampler.label = OUTSIDE_TESTS

    def pytest_unconfigure(self, config):
        self.sampler.stop(self.target)
