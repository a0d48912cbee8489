"""shardlab's pytest plugin: the catalog's markers and device counts, the implementation under test,
the timing policy, and a grading category for every test (sent to the grading process as events, or
written as JSON for the runner).

The implementation is the student's module itself (plain pytest, `shardlab check`: a student's own
laptop needs no sandbox) or, with --isolate (how `shardlab grade` runs), a stand-in whose functions
run in a confined worker process (grader.worker.stand_in): then this process, the harness, never
imports, calls or traces student code, and decides every verdict itself.

Each job is a module of its own, registered below: its options (grader.harness.options), which tests
run and what is known of them (selection), the fixtures tests take (fixtures), and what every test
did (recording). This module starts and ends the session (grader.harness.session holds its state) and
runs each test under its clock and the timing lock.

Loaded by the root conftest.py, after the host devices are forced and before any test imports jax.
"""

from __future__ import annotations

import contextlib
import os

import pytest

from grader.course import catalog
from grader.course.devices import DeviceCountError, verify_host_devices
from grader.course.implementations import resolve_source
from grader.harness import compile_counts, phase_profile, timing_lock
from grader.harness.events import EventStream, Running
from grader.harness.session import META, SESSION, HarnessSession, session_of
from grader.harness.strikes import STOPPED
from grader.harness.time_limits import TimeLimits

# Imported here only by pytest (through this list), so that it may rewrite their asserts.
pytest_plugins = [
    "grader.harness.options",
    "grader.harness.selection",
    "grader.harness.fixtures",
    "grader.harness.recording",
]


def pytest_configure(config):
    config.addinivalue_line(
        "markers", "hidden: a hidden test, never shown to students before grading"
    )
    config.addinivalue_line("markers", "slow: a slow test, run with --slow")
    config.addinivalue_line(
        "markers",
        "points(weight): this test function's points out of its exercise's "
        "(default 1), split equally among its parametrized cases",
    )
    config.addinivalue_line(
        "markers",
        "rules(*kinds, functions=(), branches=()): the kinds of rule the test grades "
        "(grader.core.rules), the functions and branches (grader.harness.graded)",
    )
    for exercise in catalog.EXERCISES:
        config.addinivalue_line("markers", f"{exercise.id}: tests of {exercise.title}")
    try:
        verify_host_devices()
    except DeviceCountError as exc:
        raise pytest.UsageError(f"set-up error: {exc}") from None
    from grader.checks.speedup import TimingPolicy

    if TimingPolicy(config.getoption("--timing")) is TimingPolicy.SKIP:
        from grader.checks.compile_policy import compile_quickly

        compile_quickly()  # nothing is timed: each program compiles quickly, the same program
    try:
        impl = resolve_source(config.getoption("--impl"))
    except FileNotFoundError as exc:
        raise pytest.UsageError(f"--impl: {exc}") from None
    isolation = None
    if config.getoption("--isolate"):
        from grader.checks import inputs
        from grader.sandbox import confinement

        inputs.use_secret()  # before the tests are imported: what they draw, the student cannot foresee

        from grader.worker import supervisor

        requested = config.getoption("--isolation")
        try:
            isolation = supervisor.early_isolation(requested) or confinement.choose_isolation(
                requested
            )
        except confinement.IsolationUnavailable as exc:
            raise pytest.UsageError(str(exc)) from None
        confinement.become_subreaper()  # a worker's daemon comes back here to be killed
    from grader.harness.recording import Recorder

    # set by the grading process (grader.grading.compile_cache)
    counts = (
        compile_counts.Counter().install() if os.environ.get("JAX_COMPILATION_CACHE_DIR") else None
    )
    session = HarnessSession(
        impl=impl,
        events=EventStream.from_environment(),
        isolation=isolation,
        limits=TimeLimits.for_harness(
            config.getoption("--time-limits"), config.getoption("--test-timeout")
        ),
        worker_memory=config.getoption("--worker-memory"),
        cache_counts=counts,
    )
    session.recorder = Recorder(session.events, config.getoption("--prior-timeouts"), counts)
    if phase_profile.folder():  # the grader's own benchmark (bench/grading_phases.py)
        profile = phase_profile.PhasePlugin.start(
            phase_profile.folder(), None if isolation is not None else impl
        )
        config.pluginmanager.register(profile, "shardlab-phase-profile")
    config.stash[SESSION] = session
    config.pluginmanager.register(session.recorder, "shardlab-recorder")
    if (
        isolation is not None
        and not config.getoption("collectonly")
        and any(impl.glob("ex[0-9][0-9]_*.py"))
    ):
        session.the_worker().prestart()  # it imports jax while pytest collects


@pytest.hookimpl(tryfirst=True)
def pytest_runtestloop(session):
    # The worker prestarted above is ready before the first test's clock starts: its start is the grader's.
    if not session.config.option.collectonly:
        session_of(session.config).ready_worker(session.items)


def pytest_unconfigure(config):
    if SESSION in config.stash:
        config.stash[SESSION].stop()


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item):
    # The grading process's clock for the test runs from its setup, and starts again once the timing
    # lock is held; runs of several processes (ex12's start in a fixture) take the same deadline.
    session_of(item.config).start_clock(item.stash[META].limit)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item):
    """Every exercise test holds the timing lock shared; a speed measurement takes it alone (the speedup
    fixture), so other graders sharing the machine wait at their next test while it measures. Only
    exercise tests take the lock: a test of the grader itself may start a grader whose tests take it."""
    from grader.harness.selection import exercise_of

    session = session_of(item.config)
    exercise = exercise_of(item.path)
    hold = timing_lock.hold(exclusive=False) if exercise else contextlib.nullcontext()
    if exercise is not None and session.recorder.strikes.exercise_stopped(exercise.id):
        from grader.worker.failures import WorkerTimeout

        raise WorkerTimeout(STOPPED)
    with hold:
        session.events.send(Running(item.nodeid))
        # after the lock: waiting for it is never charged
        session.start_clock(item.stash[META].limit)
        try:
            return (yield)
        finally:
            if exercise is not None and session.isolation is not None:
                from grader.harness.device_work import wait_until_idle

                wait_until_idle()  # a program the test left running is this test's: it times out here
