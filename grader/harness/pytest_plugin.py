"""shardlab's pytest plugin: the catalog's markers and device counts, the implementation under test,
the timing policy, and a grading category for every test (written as JSON for the runner).

The implementation is the student's module itself (plain pytest, `shardlab check`: a student's own
laptop needs no sandbox) or, with --isolate (how `shardlab grade` runs), a stand-in whose functions
run in a confined worker process (grader.worker.remote): then this process, the harness, never
imports, calls or traces student code, and decides every verdict itself.

Loaded by the root conftest.py, after the host devices are forced and before any test imports jax.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import time
from collections import Counter
from pathlib import Path

import pytest

from grader.core.results import Category
from grader.course import catalog, paths
from grader.course.devices import DeviceCountError, verify_host_devices
from grader.course.implementations import NotAttempted, load_module, resolve_source
from grader.harness import compile_counts, timing_lock
from grader.harness.events import EventStream
from grader.harness.outcomes import categorize, student_message
from grader.harness.time_limits import MAX_TIMEOUTS_PER_EXERCISE, STOPPED, TimeLimits, is_strike

# The worker gives up this long before the grader stops the whole test, so a hung call is reported
# as this test's timeout while the harness lives on.
TIMEOUT_MARGIN = 2.0

IMPL = pytest.StashKey[Path]()
RECORDER = pytest.StashKey["Recorder"]()
MODULES = pytest.StashKey[dict]()
EVENTS = pytest.StashKey[EventStream]()
META = pytest.StashKey[dict]()   # what the grader must know of a test before it runs
ISOLATION = pytest.StashKey[object]()   # the worker's confinement level with --isolate, else None
WORKER = pytest.StashKey[object]()      # with --isolate, the worker serving the implementation's modules
LIMITS = pytest.StashKey[TimeLimits]()
CACHE_COUNTS = pytest.StashKey[object]()   # the compile cache's hits and misses, when the cache is on
DEADLINE = pytest.StashKey[float]()     # when the running test must end (time.monotonic())


def pytest_addoption(parser):
    group = parser.getgroup("shardlab")
    # A student handout has no solutions/: there the student's exercises/ are what is under test.
    group.addoption("--impl", default="reference" if paths.SOLUTIONS_DIR.is_dir() else "exercises",
                    help="implementation under test: 'reference' (solutions/, the default in the course), "
                         "'exercises' (the student's modules, the default in a handout) or the path of a "
                         "submission folder")
    group.addoption("--timing", default=os.environ.get("SHARDLAB_TIMING", "enforce"),
                    choices=["enforce", "report", "skip"],
                    help="speedup tests: enforce thresholds, report figures only, or skip (default: "
                         "$SHARDLAB_TIMING or enforce)")
    group.addoption("--slow", action="store_true", help="also run the tests marked slow")
    group.addoption("--visible-only", action="store_true", help="leave out the hidden tests")
    group.addoption("--shardlab-results", metavar="PATH", help="write every test's category as JSON")
    group.addoption("--repeat", type=int, default=1, metavar="N",
                    help="run every selected test N times, to show that a (timing) test does not flake")
    group.addoption("--isolate", action="store_true",
                    help="run the implementation in a confined worker process and only data crosses back "
                         "(how grading runs)")
    group.addoption("--isolation", default="auto",
                    help="with --isolate: auto (the best this machine has), strict (refuse without a sandbox), "
                         "bubblewrap, landlock or process")
    group.addoption("--test-timeout", type=float, default=None, metavar="SECONDS",
                    help="with --isolate: how long every test may run (default: from --time-limits, else "
                         "120 s)")
    group.addoption("--time-limits", metavar="PATH",
                    help="with --isolate: each test's limit from the reference's durations "
                         "(grader.harness.time_limits; the grading process writes this file)")
    group.addoption("--prior-timeouts", action="append", default=[], metavar="ID",
                    help="an exercise one of whose tests timed out in an earlier harness (repeatable)")
    group.addoption("--worker-memory", type=int, default=None, metavar="BYTES",
                    help="with --isolate: the worker's address-space limit, 0 for none (default: "
                         "grader.worker.confinement.WorkerLimits; `shardlab grade --memory-limit` sets it)")


def pytest_configure(config):
    config.addinivalue_line("markers", "hidden: a hidden test, never shown to students before grading")
    config.addinivalue_line("markers", "slow: a slow test, run with --slow")
    config.addinivalue_line("markers", "points(weight): this test function's share of its exercise's points "
                                       "(default 1), split equally among its parametrized cases")
    for exercise in catalog.EXERCISES:
        config.addinivalue_line("markers", f"{exercise.id}: tests of {exercise.title}")
    try:
        verify_host_devices()
    except DeviceCountError as exc:
        raise pytest.UsageError(str(exc)) from None
    try:
        config.stash[IMPL] = resolve_source(config.getoption("--impl"))
    except FileNotFoundError as exc:
        raise pytest.UsageError(f"--impl: {exc}") from None
    config.stash[EVENTS] = EventStream.from_environment()
    config.stash[ISOLATION] = None
    if config.getoption("--isolate"):
        from grader.checks import inputs
        from grader.worker import confinement

        inputs.use_secret()   # before the tests are imported: what they draw, the student cannot foresee

        try:
            config.stash[ISOLATION] = confinement.choose_isolation(config.getoption("--isolation"))
        except confinement.IsolationUnavailable as exc:
            raise pytest.UsageError(str(exc)) from None
        confinement.become_subreaper()   # a worker's daemon comes back here to be killed
    config.stash[LIMITS] = TimeLimits.for_harness(config.getoption("--time-limits"),
                                                  config.getoption("--test-timeout"))
    if os.environ.get("JAX_COMPILATION_CACHE_DIR"):   # set by the grading process (grader.grading.compile_cache)
        config.stash[CACHE_COUNTS] = compile_counts.Counter().install()
    config.stash[RECORDER] = Recorder(config.stash[EVENTS], config.getoption("--prior-timeouts"),
                                      config.stash.get(CACHE_COUNTS, None))
    config.pluginmanager.register(config.stash[RECORDER], "shardlab-recorder")
    config.stash[MODULES] = {}
    if config.stash[ISOLATION] is not None and not config.getoption("collectonly") \
            and any(config.stash[IMPL].glob("ex[0-9][0-9]_*.py")):
        _worker(config).prestart()   # it imports jax while pytest collects


def exercise_of(path: Path) -> catalog.Exercise | None:
    """Exercise tests live in a folder named by the exercise's id."""
    try:
        return catalog.get(path.parent.name)
    except KeyError:
        return None


def pytest_collection_modifyitems(config, items):
    run_slow = config.getoption("--slow")
    visible_only = config.getoption("--visible-only")
    kept, dropped = [], []
    for item in items:
        exercise = exercise_of(item.path)
        if exercise is not None:
            item.add_marker(exercise.id)
        if item.get_closest_marker("slow") and not run_slow:
            item.add_marker(pytest.mark.skip(reason="slow test: run with --slow"))
        (dropped if visible_only and item.get_closest_marker("hidden") else kept).append(item)
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = kept
    if config.getoption("--isolate"):
        # Visible tests first: no worker that served a hidden test (and could have noted its calls)
        # serves a visible one, whose messages a student sees before the due date.
        items.sort(key=lambda item: item.get_closest_marker("hidden") is not None)
    from grader.checks.inputs import grading_secret

    secret = grading_secret()
    if secret is not None:   # property tests draw their examples from the grading's secret too
        for function in {item.obj for item in items if hasattr(getattr(item, "obj", None), "hypothesis")}:
            digest = hashlib.sha256(f"{secret}:{function.__module__}.{function.__qualname__}".encode()).digest()
            function._hypothesis_internal_use_seed = int.from_bytes(digest[:8], "big")
    # A test function's points(weight) is shared equally by its parametrized cases.
    cases = Counter(_function_id(item) for item in items)
    for item in items:
        marker = item.get_closest_marker("points")
        exercise = exercise_of(item.path)
        item.stash[META] = {
            "nodeid": item.nodeid, "exercise": exercise.id if exercise else None,
            "hidden": item.get_closest_marker("hidden") is not None,
            "slow": item.get_closest_marker("slow") is not None,
            "weight": (float(marker.args[0]) if marker else 1.0) / cases[_function_id(item)],
            "limit": config.stash[LIMITS].limit(item.nodeid),
        }


def _function_id(item) -> str:
    return item.nodeid.split("[", 1)[0]


def pytest_generate_tests(metafunc):
    """`n_devices` takes every mesh size the catalog grades the exercise at; --repeat N runs N copies."""
    if "n_devices" in metafunc.fixturenames:
        exercise = exercise_of(Path(metafunc.definition.path))
        counts = exercise.devices if exercise else (2, 4, 8)
        metafunc.parametrize("n_devices", counts, ids=[f"{n}dev" for n in counts])
    repeat = metafunc.config.getoption("--repeat")
    if repeat > 1:
        metafunc.fixturenames.append("_shardlab_repeat")
        metafunc.parametrize("_shardlab_repeat", range(repeat), ids=[f"repeat{i}" for i in range(repeat)])


@pytest.fixture
def _shardlab_repeat(request):
    return request.param


@pytest.fixture
def exercise(request) -> catalog.Exercise:
    found = exercise_of(request.node.path)
    if found is None:
        raise LookupError(f"{request.node.path} is not in a folder named by a catalog exercise id")
    return found


@pytest.fixture
def impl(request, exercise):
    """The module under test for this test's exercise (or its import error): the module itself, or with
    --isolate a stand-in served by a confined worker. Loaded once per session."""
    modules = request.config.stash[MODULES]
    if exercise.id not in modules:
        try:
            modules[exercise.id] = _load(request.config, exercise)
        except Exception as exc:   # NotAttempted, ImplementationImportError: every test reports it
            modules[exercise.id] = exc
    found = modules[exercise.id]
    if isinstance(found, Exception):
        raise found.with_traceback(None)   # else every test would add its frames to one traceback
    return found


def _load(config, exercise):
    source = config.stash[IMPL]
    if config.stash[ISOLATION] is None:
        return load_module(exercise, source)
    from grader.worker.remote import RemoteModule

    path = source / exercise.module_file
    if not path.is_file():
        raise NotAttempted(f"{exercise.number}: {exercise.module_file} is missing from {source}")
    return RemoteModule(path, _worker(config))


def _worker(config):
    """With --isolate, the one confined worker that serves the implementation's modules."""
    if WORKER not in config.stash:
        from grader.worker.confinement import WorkerLimits, worker_limits
        from grader.worker.remote import Worker

        memory = config.getoption("--worker-memory")
        limits = WorkerLimits() if memory is None else worker_limits(memory)
        config.stash[WORKER] = Worker(config.stash[IMPL], isolation=config.stash[ISOLATION], limits=limits)
    return config.stash[WORKER]


# Runs of several processes by (exercise, module source, isolation, options): once per module and
# configuration in a process, so that a notebook's test cells, each its own pytest session, share them.
_CLUSTER_RUNS: dict[tuple, object] = {}


@pytest.fixture(scope="session")
def run_processes(request):
    """run(exercise, processes=2, devices_per_process=4) -> grader.worker.cluster.ClusterRun: the
    exercise's module run by several processes (a multi-controller exercise), each confined like the
    worker with --isolate, in a plain process tree of its own otherwise. Each configuration runs once;
    a run that failed to start raises again in every test that asks for it."""
    config = request.config

    def run(exercise, **options):
        path = config.stash[IMPL] / exercise.module_file
        source = hashlib.sha256(path.read_bytes()).hexdigest() if path.is_file() else None
        key = (exercise.id, source, str(config.stash[ISOLATION]), tuple(sorted(options.items())))
        if key not in _CLUSTER_RUNS:
            from grader.worker.cluster import LIMIT_SECONDS, run_cluster

            limit = min(LIMIT_SECONDS, config.stash.get(DEADLINE, float("inf")) - time.monotonic())
            try:
                _CLUSTER_RUNS[key] = run_cluster(path, isolation=config.stash[ISOLATION], limit_seconds=limit,
                                                 **options)
            except Exception as exc:   # NotAttempted: every test of the run reports it
                _CLUSTER_RUNS[key] = exc
        found = _CLUSTER_RUNS[key]
        if isinstance(found, Exception):
            raise found.with_traceback(None)
        return found

    return run


def pytest_unconfigure(config):
    if WORKER in config.stash:
        config.stash[WORKER].stop()


@contextlib.contextmanager
def _worker_paused(config):
    """While a speedup test measures (in this process), the worker is stopped: whatever the student's
    code left running there takes no core from the measurement."""
    worker = config.stash.get(WORKER, None)
    if worker is not None:
        worker.suspend()
    try:
        yield
    finally:
        if worker is not None:
            worker.resume()


def _start_clock(item) -> None:
    """The test's deadline, for the worker and for runs of several processes (ex12's start in a fixture):
    the grading process's clock for the test runs from its setup, and starts again once the timing lock
    is held."""
    deadline = time.monotonic() + item.stash[META]["limit"] - TIMEOUT_MARGIN
    item.config.stash[DEADLINE] = deadline
    if WORKER in item.config.stash:
        item.config.stash[WORKER].deadline = deadline


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item):
    _start_clock(item)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item):
    """Speedup tests measure alone: other graders sharing the machine wait at their next test. Only
    exercise tests take the lock: a test of the grader itself may start a grader whose tests take it."""
    hold = timing_lock.hold(exclusive="speedup" in item.fixturenames) if exercise_of(item.path) \
        else contextlib.nullcontext()
    exercise = exercise_of(item.path)
    if exercise is not None and item.config.stash[RECORDER].timeouts[exercise.id] >= MAX_TIMEOUTS_PER_EXERCISE:
        from grader.worker.remote import WorkerTimeout

        raise WorkerTimeout(STOPPED)
    with hold:
        item.config.stash[EVENTS].send({"e": "running", "nodeid": item.nodeid})
        _start_clock(item)   # after the lock: waiting for it is never charged
        try:
            return (yield)
        finally:
            if exercise is not None and item.config.stash[ISOLATION] is not None:
                from grader.harness.device_work import wait_until_idle

                wait_until_idle()   # a program the test left running is this test's: it times out here


@pytest.fixture
def speedup(request):
    """check(baseline, candidate, threshold=..., label=..., devices=...) under the session's policy
    (report_only=True never fails); the figures go into the test's output and its recorded
    properties whatever the outcome. `calibration` may be a function, measured only when timing is on."""
    import jax

    from grader.checks.speedup import TimingPolicy, judge, measure_speedup

    policy = TimingPolicy(request.config.getoption("--timing"))

    def check(baseline, candidate, *, report_only: bool = False, **kwargs):
        if policy is TimingPolicy.SKIP:
            pytest.skip("timing checks are off (--timing=skip)")
        if callable(kwargs.get("calibration")):
            kwargs["calibration"] = kwargs["calibration"]()
        # Any tracing happens now (with --isolate the worker exports the student's program), then the
        # worker is stopped while the harness times its own copy.
        jax.block_until_ready(baseline())
        jax.block_until_ready(candidate())
        with _worker_paused(request.config):
            result = measure_speedup(baseline, candidate, **kwargs)
        applied = TimingPolicy.REPORT if report_only else policy
        request.node.user_properties.append(("speedup", result.as_dict() | {"policy": applied.value}))
        print(result.summary())
        judge(result, applied)
        return result

    return check


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item, call):
    report = yield
    exc = call.excinfo.value if call.excinfo else None
    if report.skipped:
        category, message = Category.SKIPPED, str(report.longrepr[-1]) if isinstance(report.longrepr, tuple) else ""
    elif exc is not None and report.failed:
        category = categorize(exc, item.config.stash[IMPL])
        message = student_message(exc, item.config.stash[IMPL])
        if category is Category.NOT_ATTEMPTED or call.when == "setup":
            report.longrepr = message   # the stub's traceback teaches nothing
    else:
        category, message = Category.PASSED, ""
    report.shardlab = {"category": category.value, "message": message}
    return report


_RANK = [Category.PASSED, Category.SKIPPED, Category.FAILED, Category.NOT_ATTEMPTED, Category.ERROR, Category.TIMEOUT,
         Category.CRASHED]


class Recorder:
    """One entry per test, merged over its setup, call and teardown phases (the worst phase wins);
    each finished entry is also sent to the grader's event stream, if there is one, with the compile
    cache's counts so far. It counts each exercise's timed-out tests (two, and the rest is not run)."""

    def __init__(self, events: EventStream, prior_timeouts: list[str] = (), cache_counts=None):
        self.entries: dict[str, dict] = {}
        self.events = events
        self.timeouts = Counter(prior_timeouts)
        self.cache_counts = cache_counts

    def pytest_collection_finish(self, session):
        self.events.send({"e": "collected", "tests": [item.stash[META] for item in session.items]})

    def pytest_runtest_logstart(self, nodeid, location):
        self.events.send({"e": "start", "nodeid": nodeid})

    def pytest_runtest_logfinish(self, nodeid, location):
        entry = self.entries.get(nodeid)
        if entry is None:
            return
        if is_strike(entry):
            self.timeouts[entry["exercise"]] += 1
        self.events.send({"e": "result", **entry})
        if self.cache_counts is not None:
            self.events.send({"e": "compile_cache", **self.cache_counts.as_dict()})

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtest_setup(self, item):
        self.entries[item.nodeid] = {
            **item.stash[META], "category": Category.PASSED.value, "message": "", "duration": 0.0,
            "speedup": None, "output": "",
        }

    def pytest_runtest_logreport(self, report):
        entry = self.entries.get(report.nodeid)
        outcome = getattr(report, "shardlab", None)
        if entry is None or outcome is None:
            return
        entry["duration"] += report.duration
        if report.when == "call" and (report.capstdout or report.capstderr):
            entry["output"] = _truncated(report.capstdout + report.capstderr, 2000)
        for name, value in report.user_properties:
            if name == "speedup":
                entry["speedup"] = value
        if _RANK.index(Category(outcome["category"])) > _RANK.index(Category(entry["category"])):
            entry.update(outcome)


def _truncated(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[:limit] + f"\n... ({len(text) - limit} more characters)"


def pytest_sessionfinish(session):
    target = session.config.getoption("--shardlab-results")
    if not target:
        return
    level = session.config.stash[ISOLATION]
    payload = {
        "isolation": _isolation_report(level),
        "implementation": str(session.config.stash[IMPL]),
        "timing": session.config.getoption("--timing"),
        "tests": list(session.config.stash[RECORDER].entries.values()),
    }
    Path(target).write_text(json.dumps(payload, indent=1))


def _isolation_report(level) -> dict:
    if level is None:
        return {"level": "in-process", "detail": "the implementation ran inside the test process"}
    from grader.worker import confinement

    return confinement.describe(level)


def pytest_terminal_summary(terminalreporter, config):
    entries = config.stash[RECORDER].entries.values() if RECORDER in config.stash else []
    figures = [e["speedup"] for e in entries if e.get("speedup")]
    if figures:
        terminalreporter.section("shardlab speedup figures")
        for fig in figures:
            terminalreporter.write_line(
                f"{fig['label']}: {fig['speedup']:.2f}x (IQR {fig['spread'][0]:.2f}-{fig['spread'][1]:.2f}) "
                f"threshold {fig['threshold']:.2f}x, {fig['repeats']} repeats, {fig['devices']} devices / "
                f"{fig['cores']} cores [{fig['policy']}: {'met' if fig['met'] else 'NOT met'}]")
