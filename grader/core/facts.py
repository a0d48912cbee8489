"""Where the checks leave the facts of the running test, for the harness's Recorder to attach to its
result (grader.harness.recording starts each test with `start()` and takes them with `take()`).

One test runs at a time in a harness, so one module-level record is enough. The checks run in the
harness (trusted), never in a student's worker: nothing the student's code runs can write here."""

from __future__ import annotations

from grader.core.results import (
    CollectivesCheck,
    LayoutCheck,
    MemoryCheck,
    ProgramAccount,
    RuleFigure,
    SpeedFigures,
    TestFacts,
)

_current = TestFacts()


def start() -> None:
    """A test starts: nothing recorded yet."""
    global _current
    _current = TestFacts()


def take() -> TestFacts:
    """What the running test's checks recorded so far; recording starts afresh."""
    global _current
    taken, _current = _current, TestFacts()
    return taken


def record_layout(check: LayoutCheck) -> None:
    _current.layouts.append(check)


def record_collectives(check: CollectivesCheck) -> None:
    _current.collectives.append(check)


def record_speedup(figures: SpeedFigures) -> None:
    _current.speedup = figures


def record_memory(check: MemoryCheck) -> None:
    _current.memory.append(check)


def record_program(account: ProgramAccount) -> None:
    """A program a check read: its account, once per test however many rules are judged on it."""
    if all(known.key != account.key for known in _current.programs):
        _current.programs.append(account)


def record_figure(figure: RuleFigure) -> None:
    _current.figures.append(figure)
