"""Recording what every test did: its category and the message a student sees (from the exception),
merged over its phases, with the facts its checks recorded; each finished test sent to the grading
process's event stream as a TestResult, written to the --shardlab-results file, and the speedup figures
in the terminal summary."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from grader.core import facts
from grader.core.bounds import OUTPUT_CHARS, clipped
from grader.core.results import Category, TestResult, TimeoutFigures
from grader.harness.events import CacheCounts, Collected, EventStream, Finished, Started
from grader.harness.outcomes import categorize, student_explanation, student_message
from grader.harness.session import META, SESSION as SESSION_KEY, session_of
from grader.harness.strikes import Strikes

_RANK = [
    Category.PASSED,
    Category.SKIPPED,
    Category.FAILED,
    Category.NOT_ATTEMPTED,
    Category.ERROR,
    Category.TIMEOUT,
    Category.CRASHED,
]


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item, call):
    report = yield
    exc = call.excinfo.value if call.excinfo else None
    impl = session_of(item.config).impl
    explanation = ""
    if report.skipped:
        category, message = (
            Category.SKIPPED,
            str(report.longrepr[-1]) if isinstance(report.longrepr, tuple) else "",
        )
    elif exc is not None and report.failed:
        category = categorize(exc, impl)
        message = student_message(exc, impl)
        explanation = student_explanation(exc, impl)
        if category is Category.NOT_ATTEMPTED or call.when == "setup":
            # the stub's traceback teaches nothing
            report.longrepr = "\n".join(filter(None, (message, explanation)))
        elif explanation:  # pytest's own output says it too, under the traceback
            report.sections.append(("What this JAX error means", explanation))
    else:
        category, message = Category.PASSED, ""
    report.shardlab = {
        "category": category.value,
        "message": message,
        "explanation": explanation,
    } | _strike_of(exc)
    return report


def _strike_of(exc: BaseException | None) -> dict:
    """What a timeout's strike is counted against: {"function": the student's function whose call
    timed out (None: not known), "timeout": what it was judged on (TimeoutFigures, or None)};
    {"refused": True} for a call not made (no strike of its own)."""
    from grader.worker.failures import FunctionStopped, WorkerTimeout

    seen = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        if isinstance(exc, FunctionStopped):
            return {"refused": True}
        if isinstance(exc, WorkerTimeout):
            return {"function": exc.function, "timeout": exc.figures}
        exc = exc.__cause__ or exc.__context__
    return {}


class Recorder:
    """One result per test, merged over its setup, call and teardown phases (the worst phase wins), with
    the facts its checks recorded (grader.core.facts); each finished result is also sent to the grader's
    event stream, if there is one, with the compile cache's counts so far. It counts the strikes, the
    timed-out tests, by exercise and by the student's function that timed out (grader.harness.strikes)."""

    def __init__(self, events: EventStream, prior_timeouts: list[str] = (), cache_counts=None):
        self.entries: dict[str, TestResult] = {}
        self.events = events
        self.strikes = Strikes(prior_timeouts)
        self.cache_counts = cache_counts
        # tests that start with their exercise already stopped, or whose call of a stopped function was
        # not made
        self._not_run: set[str] = set()
        self._functions: dict[str, str | None] = {}  # nodeid -> the function its timeout names
        self._timeouts: dict[
            str, TimeoutFigures | None
        ] = {}  # nodeid -> what its timeout was judged on

    def pytest_collection_finish(self, session):
        self.events.send(Collected([item.stash[META].to_dict() for item in session.items]))

    def pytest_runtest_logstart(self, nodeid, location):
        self.events.send(Started(nodeid))

    def pytest_runtest_logfinish(self, nodeid, location):
        entry = self.entries.get(nodeid)
        if entry is None:
            return
        # A timeout is a strike unless the test was not run at all (its exercise had had its strikes).
        strike = (
            entry.category == Category.TIMEOUT
            and bool(entry.exercise)
            and nodeid not in self._not_run
        )
        function = self._functions.pop(nodeid, None)
        entry = self.entries[nodeid] = dataclasses.replace(
            entry.with_facts(facts.take()),
            strike=strike,
            strike_function=function if strike else None,
            timeout=self._timeouts.pop(nodeid, None),
        )
        if entry.strike:
            self.strikes.add(entry.exercise, function)
        self.events.send(Finished(entry.to_dict()))
        if self.cache_counts is not None:
            self.events.send(CacheCounts(**self.cache_counts.as_dict()))

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtest_setup(self, item):
        meta = item.stash[META]
        facts.start()
        if meta.exercise and self.strikes.exercise_stopped(meta.exercise):
            self._not_run.add(item.nodeid)  # grader.harness.pytest_plugin stops it (STOPPED)
        self.entries[item.nodeid] = meta.result(Category.PASSED.value)

    def pytest_runtest_logreport(self, report):
        entry = self.entries.get(report.nodeid)
        outcome = getattr(report, "shardlab", None)
        if entry is None or outcome is None:
            return
        entry.duration += report.duration
        if report.when == "call" and (report.capstdout or report.capstderr):
            entry.output = clipped(report.capstdout + report.capstderr, OUTPUT_CHARS)
        if _RANK.index(Category(outcome["category"])) > _RANK.index(Category(entry.category)):
            entry.category, entry.message = outcome["category"], outcome["message"]
            entry.explanation = outcome["explanation"]
            if outcome.get("refused"):
                self._not_run.add(report.nodeid)
            self._functions[report.nodeid] = outcome.get("function")
            self._timeouts[report.nodeid] = outcome.get("timeout")


def pytest_sessionfinish(session):
    target = session.config.getoption("--shardlab-results")
    if not target:
        return
    harness = session_of(session.config)
    payload = {
        "isolation": _isolation_report(harness.isolation),
        "implementation": str(harness.impl),
        "timing": session.config.getoption("--timing"),
        "tests": [entry.to_dict() for entry in harness.recorder.entries.values()],
    }
    Path(target).write_text(json.dumps(payload, indent=1))


def _isolation_report(level) -> dict:
    if level is None:
        return {"level": "in-process", "detail": "the implementation ran inside the test process"}
    from grader.sandbox import confinement

    return confinement.describe(level)


def pytest_terminal_summary(terminalreporter, config):
    harness = config.stash.get(SESSION_KEY, None)
    entries = (
        harness.recorder.entries.values()
        if harness is not None and harness.recorder is not None
        else []
    )
    figures = [e.speedup for e in entries if e.speedup is not None]
    if figures:
        terminalreporter.section("shardlab speedup figures")
        for fig in figures:
            terminalreporter.write_line(
                f"{fig.label}: {fig.speedup:.2f}x (IQR {fig.spread[0]:.2f}-{fig.spread[1]:.2f}) "
                f"threshold {fig.threshold:.2f}x, {fig.repeats} repeats, {fig.devices} devices / "
                f"{fig.cores} cores [{fig.policy}: {'met' if fig.met else 'NOT met'}]"
            )
