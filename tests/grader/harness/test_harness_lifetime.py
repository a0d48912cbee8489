"""A harness runs only while its tests need it: one that goes on after its last result (a student's
program still running in it) is killed, not waited for until the submission's time limit."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from types import SimpleNamespace

import msgspec

from grader.core.results import TestMeta
from grader.grading import process
from grader.harness import events

# A stand-in harness: it sends the events given as JSON in argv[2], then keeps running (sleeping, or
# spinning with argv[3] "spin").
STAND_IN = """
import json, os, sys, time
for event in json.loads(sys.argv[2]):
    os.write(int(sys.argv[1]), json.dumps(event).encode() + b"\\n")
while sys.argv[3] == "spin":
    pass
time.sleep(600)
"""
TEST = TestMeta("t::a", "ex01", hidden=False, slow=False, weight=1.0, limit=1)
COLLECTED = events.Collected([TEST.to_dict()])
STARTED = events.Started("t::a")
FINISHED = events.Finished(
    {
        "nodeid": "t::a",
        "exercise": "ex01",
        "hidden": False,
        "weight": 1.0,
        "category": "failed",
        "message": "m",
    }
)


def follow(
    sent: list[events.Event], then: str = "sleep"
) -> tuple[process.ChildOutcome, float, bool]:
    """What the grading process makes of a harness that sent these events and then sleeps or spins
    (`then`): the outcome, the seconds it took, and whether the harness was still running when let go."""
    read, write = os.pipe()
    lines = json.dumps(msgspec.to_builtins(sent))
    child = subprocess.Popen(
        [sys.executable, "-c", STAND_IN, str(write), lines, then], pass_fds=(write,)
    )
    os.close(write)
    try:
        outcome, started = process.ChildOutcome(), time.monotonic()
        process._follow(child, read, outcome, process.Limits(), deadline=time.monotonic() + 30)
        return outcome, time.monotonic() - started, child.poll() is None
    finally:
        child.kill()
        child.wait()
        os.close(read)


def test_a_harness_that_outlives_its_last_test_is_let_go(monkeypatch):
    monkeypatch.setattr(process, "EXIT_SECONDS", 0.5)
    outcome, seconds, lingering = follow([COLLECTED, STARTED, FINISHED])
    assert seconds < 10 and lingering  # let go (run_pytest_child then kills its process group)
    assert outcome.results["t::a"].category == "failed" and outcome.running is None
    assert outcome.stopped is None  # nothing is blamed on a test: each already has its result


def test_a_harness_busy_inside_a_test_is_stopped_by_that_tests_limit():
    """The other side: while a test runs, its own limit of processor time applies (the harness spins
    in a student's compiled program), and that test is the one blamed."""
    outcome, seconds, _ = follow([COLLECTED, STARTED], then="spin")
    assert outcome.stopped == process.CPU_LIMIT and outcome.running == "t::a" and seconds < 10
    assert outcome.duration >= TEST.limit


def test_a_harness_asleep_inside_a_test_is_stopped_by_its_wall_clock_cap():
    """A harness that uses no processor time (it waits for something that never comes) is stopped by
    the test's wall-clock cap, WALL_MULTIPLIER x its limit, and the outcome says which."""
    from grader.harness.time_limits import WALL_MULTIPLIER

    outcome, seconds, _ = follow([COLLECTED, STARTED])
    assert outcome.stopped == process.WALL_CAP and outcome.running == "t::a"
    assert WALL_MULTIPLIER * TEST.limit <= outcome.duration and seconds < 10


def test_two_harness_crashes_end_an_exercise_like_two_timeouts(monkeypatch, tmp_path):
    """A program that corrupts the harness cannot have it started again without end: each crash is a
    strike, and after two the rest of that exercise is not run (another exercise is graded as usual)."""
    from grader.core.options import GradingOptions
    from grader.course import catalog
    from grader.grading import engine
    from grader.harness.strikes import STOPPED

    tests = [
        TestMeta(f"t::{name}", exercise, hidden=False, slow=False, weight=1.0, limit=10)
        for name, exercise in (("a", "ex01"), ("b", "ex01"), ("c", "ex01"), ("d", "ex02"))
    ]
    harnesses = []

    def run_pytest_child(*, deselect, **_):
        left = [t for t in tests if t.nodeid not in deselect]
        harnesses.append([t.nodeid for t in left])
        crash = left[0].exercise == "ex01"  # every harness crashes in ex01's first test left
        passed = [t.result("passed") for t in left]
        results = {} if crash else {result.nodeid: result for result in passed}
        return process.ChildOutcome(
            collected=tests,
            results=results,
            returncode=-11 if crash else 0,
            running=left[0].nodeid if crash else None,
        )

    monkeypatch.setattr(process, "run_pytest_child", run_pytest_child)
    prepared = SimpleNamespace(modules_dir=tmp_path)
    settings = engine.HarnessSettings(GradingOptions(), process.Limits(), env={}, time_limits=None)
    run = engine._Run(
        [catalog.get("ex01"), catalog.get("ex02")],
        prepared=prepared,
        workdir=tmp_path,
        harness=settings,
    )
    run.run(deadline=time.monotonic() + 60)
    assert len(harnesses) == 3, harnesses
    assert {k: v.category for k, v in run.done.items()} == {
        "t::a": "crashed",
        "t::b": "crashed",
        "t::c": "timeout",
        "t::d": "passed",
    }
    assert run.done["t::c"].message == STOPPED
    # a crash is a strike like a timeout; a test left unrun after two strikes is not
    assert {k: v.strike for k, v in run.done.items()} == {
        "t::a": True,
        "t::b": True,
        "t::c": False,
        "t::d": False,
    }
