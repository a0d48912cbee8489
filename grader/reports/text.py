"""How a result reads as text, wherever it is shown: the terminal, results.json, JUnit XML, the HTML pages.

Text that may come from student code (messages, names) goes through `printable` first: ANSI colours and
characters that XML 1.0 forbids would otherwise garble a report or make it unreadable by its consumer.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable
from pathlib import Path

from grader.core.options import VISIBILITIES
from grader.core.results import Category, SpeedFigures, TestResult

# The count columns, in the order a student meets them.
COUNTED = (
    Category.PASSED,
    Category.FAILED,
    Category.ERROR,
    Category.TIMEOUT,
    Category.CRASHED,
    Category.NOT_ATTEMPTED,
    Category.SKIPPED,
)


# CSI sequences (colours, cursor moves), OSC sequences (titles, links), and the other two-byte escapes.
_ANSI = re.compile(r"\x1b(?:\[[0-?]*[ -/]*[@-~]|\][^\x07\x1b]*(?:\x07|\x1b\\)|[@-_])")
# Everything XML 1.0 does not allow (https://www.w3.org/TR/xml/#charsets): C0 controls but tab, newline
# and carriage return, lone surrogates, U+FFFE and U+FFFF.
_NOT_XML = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ud800-\udfff\ufffe\uffff]")


def printable(text: str) -> str:
    """`text` without ANSI escape sequences, and with every other character XML cannot hold written
    out as `\\xNN` / `\\uNNNN`, so that the student still sees that something was there."""
    text = _ANSI.sub("", text)
    return _NOT_XML.sub(
        lambda m: f"\\x{ord(m[0]):02x}" if ord(m[0]) < 0x100 else f"\\u{ord(m[0]):04x}", text
    )


def points(value: float) -> str:
    """20.0 -> "20", 0.125 -> "0.125", 0.03125 -> "0.03125": exact when five decimals hold it, as they hold
    every share of a test function's points over its 2, 4, 8, 16 or 32 cases; else three significant
    digits, at least two decimals: 20/3 -> "6.67", 1/36 -> "0.0278" (two decimals drew 1/36 and 1/32 alike)."""
    text = f"{value:.5f}"
    if abs(float(text) - value) > 1e-9:
        size = math.floor(math.log10(abs(value))) + 1  # digits before the point; below 0 for 0.0x
        text = f"{value:.{max(2, 3 - size)}f}"
    return text.rstrip("0").rstrip(".")


def visible_share(exercise) -> str:
    """A visible-only run's word on an exercise (a grader.grading.results.ExerciseResult): how many of its
    points its visible tests check, and whether they pass: "visible: 4 of 20 points checked, all pass"."""
    checked = f"visible: {points(exercise.checked)} of {points(exercise.max_score)} points checked"
    if not exercise.tests:
        return f"{checked}: no test ran"
    if all(test.earns for test in exercise.tests):
        return f"{checked}, all pass"
    return f"{checked}, {points(exercise.score)} pass"


def ignored_line(names: list[str]) -> str:
    """The files of a submission that are not exercise modules: never loaded, and no fault of the student's."""
    return f"Ignored, not exercise modules (never loaded): {', '.join(names)}"


def score_text(scored, visible_only: bool) -> str:
    """An exercise's or a grading's score (an ExerciseResult or GradingResults): "15/20"; in a visible-only run
    "4 of 7 visible points (of 20)", what passed of the points its tests check, of the maximum, never a
    score out of those alone, nor one that reads as a fraction of the maximum ("4/7 of 20")."""
    if visible_only:
        return (
            f"{points(scored.score)} of {points(scored.checked)} visible points "
            f"(of {points(scored.max_score)})"
        )
    return f"{points(scored.score)}/{points(scored.max_score)}"


def reachable(scored, visible_only: bool) -> float:
    """What the score could have reached: the points checked in a visible-only run, else the maximum."""
    return scored.checked if visible_only else scored.max_score


def visible_total(results) -> str:
    """A whole visible-only run (a GradingResults), never a score out of the checked points alone:
    "visible tests: 48.5 of the 60 points they check pass, of 195 in all"."""
    return (
        f"visible tests: {points(results.score)} of the {points(results.checked)} points they check pass, of "
        f"{points(results.max_score)} in all"
    )


def speedup_figures(fig: SpeedFigures) -> str:
    """One line with a speedup test's measured figures."""
    low, high = fig.spread
    calibration = (
        f", calibration kernel {fig.calibration:.2f}x" if fig.calibration is not None else ""
    )
    policy = f", {fig.policy}" if fig.policy else ""
    of = " of processor time" if fig.clock == "processor" else ""
    medians = (
        f"{fig.baseline_s * 1e3:.2f} ms -> {fig.candidate_s * 1e3:.2f} ms{of} over "
        if fig.baseline_s is not None and fig.candidate_s is not None
        else ""
    )
    return (
        f"{fig.label}: speedup {fig.speedup:.2f}x (IQR {low:.2f}-{high:.2f}), threshold "
        f"{fig.threshold:.2f}x {'met' if fig.met else 'NOT met'}{policy}; "
        f"{medians}{fig.repeats} interleaved repeats; {fig.devices} devices on {fig.cores} cores "
        f"({fig.platform}){calibration}"
    )


def verdict(test: TestResult) -> str:
    """The category and the student's message: "timeout: ...". Messages of stubs already start with
    their category ("not attempted: ex04: ..."), which is not repeated."""
    message = printable(test.message).strip()
    if not message:
        return str(test.category)
    already_named = message.startswith((f"{test.category}:", f"{test.category} ("))
    return message if already_named else f"{test.category}: {message}"


def feedback(test: TestResult) -> str:
    """What a student reads about one test on its own (a Gradescope or JUnit test case): its verdict, what a
    known JAX error in it means and, for a speedup test, the measured figures."""
    lines = [verdict(test)]
    if test.explanation:
        lines.append(printable(test.explanation))
    if test.speedup:
        lines.append(printable(speedup_figures(test.speedup)))
    return "\n".join(lines)


def file_stem(test: TestResult) -> str:
    """ "tests/exercises/ex04_sharded_layer/test_hidden.py::test_x[4dev]" -> "test_hidden"."""
    path = test.nodeid.split("::", 1)[0] if "::" in test.nodeid else ""
    return Path(path).stem


def exercise_number(exercise_id: str, position: int) -> int:
    """ "ex04_sharded_layer" -> 4; an id without a number takes its position among the exercises."""
    found = re.match(r"ex(\d+)", exercise_id)
    return int(found[1]) if found else position


def category_counts(tests: Iterable[TestResult]) -> dict[Category, int]:
    found = [t.category for t in tests]
    return {category: found.count(category) for category in COUNTED}


def counts_text(tests: Iterable[TestResult]) -> str:
    """ "25 passed, 4 failed": the categories the tests fell into, in the order a student meets them."""
    return (
        ", ".join(f"{n} {category}" for category, n in category_counts(tests).items() if n)
        or "no tests"
    )


# When students see hidden tests, for each of Gradescope's visibilities.
SHOWN_WHEN = {
    "hidden": "to instructors only",
    "after_due_date": "after the due date",
    "after_published": "when grades are published",
    "visible": "at once",
}


def shown_when(visibility: str) -> str:
    """What `visibility` means for a student, or a ValueError naming the values it can take."""
    if visibility not in VISIBILITIES:
        raise ValueError(
            f"hidden_visibility must be one of {', '.join(VISIBILITIES)}, not {visibility!r}"
        )
    return SHOWN_WHEN[visibility]


def signed_points(value: float) -> str:
    """2 -> "+2", -3.5 -> "-3.5": points added or taken off."""
    return ("-" if value < 0 else "+") + points(abs(value))


def changes_score(standing) -> bool:
    """Whether a grader.grading.standing.Standing differs from what the tests gave: a late penalty or an
    adjustment."""
    return standing is not None and any(e.penalty or e.adjustments for e in standing.exercises)


def standing_words(exercise) -> str:
    """An ExerciseStanding as one line: "18 from the tests, -3.6 late, +2 adjusted: 16.4/20"."""
    parts = [f"{points(exercise.raw)} from the tests"]
    if exercise.penalty:
        parts.append(f"-{points(exercise.penalty)} late")
    if exercise.adjustments:
        parts.append(f"{signed_points(exercise.override)} adjusted")
    return ", ".join(parts) + f": {points(exercise.final)}/{points(exercise.max_score)}"


def standing_reasons(exercise) -> list[str]:
    """Why an exercise's final score is not its raw one: the late policy's reason, each adjustment's."""
    reasons = (
        [f"late: {exercise.late.reason}"] if exercise.penalty and exercise.late is not None else []
    )
    return reasons + [f"adjusted: {adjustment.describe()}" for adjustment in exercise.adjustments]


def explained_once(tests: Iterable[TestResult]) -> dict[str, str]:
    """What each test (by nodeid) that met a known JAX error says of it, `tests` in the order they are
    shown: the explanation under the first test that met it, and under each later one a line naming that
    test, so that one mistake made in several functions is explained once."""
    first: dict[str, str] = {}
    said: dict[str, str] = {}
    for test in tests:
        if not test.explanation:
            continue
        if test.explanation in first:
            said[test.nodeid] = (
                f"What this JAX error means is said under {first[test.explanation]} above."
            )
        else:
            first[test.explanation] = test.name
            said[test.nodeid] = printable(test.explanation)
    return said
