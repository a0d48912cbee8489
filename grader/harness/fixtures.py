"""The fixtures exercise tests take: `exercise`, `impl` (the module under test), `run_processes` (a
multi-process exercise's run) and `speedup` (a timed comparison under the session's timing policy)."""

from __future__ import annotations

import hashlib
import time

import pytest

from grader.course import catalog
from grader.harness import timing_lock
from grader.harness.events import Running
from grader.harness.selection import exercise_of
from grader.harness.session import META, session_of


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
    return session_of(request.config).load(exercise)


class ProcessRuns:
    """Runs of several processes by (exercise, driver, module source, isolation, options): once per module
    and configuration in this Python process, not per pytest session, so that a notebook's test cells,
    each its own pytest session in one kernel, share them."""

    def __init__(self):
        self._runs: dict[tuple, object] = {}

    def get(self, session, exercise, driver_path, **options):
        from grader.cluster.driver import load_driver
        from grader.cluster.run import LIMIT_SECONDS
        from grader.cluster.run_cluster import run_cluster

        driver = load_driver(driver_path)  # the course's, beside the exercise's tests
        path = session.impl / exercise.module_file
        source = hashlib.sha256(path.read_bytes()).hexdigest() if path.is_file() else None
        key = (
            exercise.id,
            driver.digest,
            source,
            str(session.isolation),
            tuple(sorted(options.items())),
        )
        if key not in self._runs:
            limit = min(LIMIT_SECONDS, session.deadline - time.monotonic())
            try:
                self._runs[key] = run_cluster(
                    driver,
                    path,
                    isolation=session.isolation,
                    limit_seconds=limit,
                    limits=session.worker_limits,
                    **options,
                )
            except Exception as exc:  # NotAttempted: every test of the run reports it
                self._runs[key] = exc
        found = self._runs[key]
        if isinstance(found, Exception):
            raise found.with_traceback(None)
        return found


PROCESS_RUNS = ProcessRuns()


@pytest.fixture(scope="session")
def run_processes(request):
    """run(exercise, driver_path, processes=2, devices_per_process=4) -> grader.cluster.run.ClusterRun:
    the exercise's module run by several processes (a multi-process exercise), each running the exercise's
    driver (driver_path: a file beside its tests, see grader.cluster.driver), confined like the
    worker with --isolate, in a plain process tree of its own otherwise, or as one srun step's tasks with
    --launcher srun. Each configuration runs once; a run that failed to start raises again in every test
    that asks for it."""
    session = session_of(request.config)
    launcher = request.config.getoption("--launcher")
    return lambda exercise, driver_path, **options: PROCESS_RUNS.get(
        session, exercise, driver_path, **{"launcher": launcher, **options}
    )


@pytest.fixture
def speedup(request):
    """check(baseline, candidate, threshold=..., label=..., devices=...) under the session's policy
    (report_only=True never fails); the figures go into the test's output and its recorded
    properties whatever the outcome. `calibration` may be a function, measured only when timing is on."""
    import jax

    from grader.checks.speedup import TimingPolicy, judge, measure_speedup, record

    policy = TimingPolicy(request.config.getoption("--timing"))
    session = session_of(request.config)

    def restart_clock():
        session.events.send(Running(request.node.nodeid))
        session.start_clock(request.node.stash[META].limit)

    def check(baseline, candidate, *, report_only: bool = False, **kwargs):
        if policy is TimingPolicy.SKIP:
            pytest.skip("timing checks are off (--timing=skip)")
        # Any tracing and compiling happens now, beside other tests (with --isolate the worker exports the
        # student's program); then the cores are this measurement's alone, the worker stopped while the
        # harness times its own copy.
        jax.block_until_ready(baseline())
        jax.block_until_ready(candidate())
        with timing_lock.alone(restart_clock), session.worker_paused():
            if callable(kwargs.get("calibration")):
                kwargs["calibration"] = kwargs["calibration"]()
            result = measure_speedup(baseline, candidate, **kwargs)
        applied = TimingPolicy.REPORT if report_only else policy
        figures = record(result, applied)  # the test's result carries them (grader.core.facts)
        request.node.user_properties.append(("speedup", figures.to_dict()))
        print(result.summary())
        judge(result, applied)
        return result

    return check
