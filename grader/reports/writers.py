"""What an instructor gets from a grading: shardlab's own JSON, Gradescope's results.json, JUnit XML for CI,
a terminal summary, and the student's feedback page (grader.reports.feedback_page).

Reports present the scores grader.grading.results computed; they never score anything themselves. How a
result reads as text (and how text from student code is made printable) is grader.reports.text.
"""

from __future__ import annotations

import json
import math
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table
from rich.text import Text

from grader.core.results import Category, TestResult
from grader.grading.results import NO_TIME, ExerciseResult, GradingResults
from grader.grading.standing import Standing
from grader.reports import feedback_page, markdown
from grader.reports.files import write_atomically
from grader.reports.text import (
    COUNTED,
    category_counts,
    changes_score,
    counts_text,
    exercise_number,
    feedback,
    file_stem,
    ignored_line,
    points,
    printable,
    reachable,
    score_text,
    shown_when,
    speedup_figures,
    standing_reasons,
    standing_words,
    verdict,
    visible_share,
    visible_total,
)

REPORT_FILES = {
    "report": "report.json",
    "gradescope": "results.json",
    "junit": "junit.xml",
    "feedback": feedback_page.FILE_NAME,
}


def _json_text(data: dict[str, Any]) -> str:
    # ensure_ascii (the default) keeps the file valid UTF-8 whatever the student printed, lone surrogates included.
    return json.dumps(data, indent=2) + "\n"


_ONE_LINE = 100  # characters


def _compact_json_text(value: Any, indent: int = 0) -> str:
    """Like json.dumps(indent=2), but a list or object that holds no object and fits in _ONE_LINE characters
    is written on one line: a layout's blocks ({"index": [[0, 4], [0, 3]], "devices": [0]}) take one line
    each instead of twelve, which keeps report.json about half as large. The data is the same."""
    if not isinstance(value, (list, dict)) or not value:
        return json.dumps(value)
    items = list(value.values()) if isinstance(value, dict) else value
    one_line = json.dumps(value)
    if len(one_line) <= _ONE_LINE and not any(_holds_object(item) for item in items):
        return one_line
    pad = " " * (indent + 2)
    if isinstance(value, dict):
        lines = [
            f"{pad}{json.dumps(key)}: {_compact_json_text(item, indent + 2)}"
            for key, item in value.items()
        ]
        opening, closing = "{", "}"
    else:
        lines = [pad + _compact_json_text(item, indent + 2) for item in value]
        opening, closing = "[", "]"
    return opening + "\n" + ",\n".join(lines) + "\n" + " " * indent + closing


def _holds_object(value: Any) -> bool:
    return (
        isinstance(value, dict)
        or isinstance(value, list)
        and any(_holds_object(item) for item in value)
    )


# -- shardlab's full result --------------------------------------------------------------------------


def write_report_json(results: GradingResults, path: str | Path) -> Path:
    """Everything grading found, as GradingResults.to_dict() (GradingResults.from_dict reads it back): with
    each test's strike and facts (its layouts, collectives and speedup figures)."""
    return write_atomically(path, _compact_json_text(results.to_dict()) + "\n")


# -- Gradescope ----------------------------------------------------------------------------------------

_UNITS = 10_000  # Gradescope scores are written to 4 decimals


def _apportion(values: list[float], total_units: int) -> list[int]:
    """Each value in whole units, rounded so that they add up to total_units (largest remainder)."""
    exact = [value * _UNITS for value in values]
    units = [math.floor(x) for x in exact]
    by_remainder = sorted(range(len(units)), key=lambda i: exact[i] - units[i], reverse=True)
    for i in by_remainder[: max(total_units - sum(units), 0)]:
        units[i] += 1
    return units


def _rounded(tests: list[TestResult]) -> list[tuple[int, int]]:
    score_units = _apportion([t.score for t in tests], round(sum(t.score for t in tests) * _UNITS))
    lost = [t.max_score - t.score for t in tests]
    lost_units = round(sum(t.max_score for t in tests) * _UNITS) - sum(score_units)
    partial = [i for i, value in enumerate(lost) if value > 0]
    lost_rounded = dict(
        zip(partial, _apportion([lost[i] for i in partial], lost_units), strict=True)
    )
    return [(score_units[i], score_units[i] + lost_rounded.get(i, 0)) for i in range(len(tests))]


def rounded_points(results: GradingResults) -> list[tuple[float, float]]:
    """(score, max_score) of every test to 4 decimals, such that the scores add up to the rounded total
    exactly and a test with full marks keeps score == max_score (Gradescope marks it passed by that).
    Rounding each on its own would not do: three tests of 20/3 points each add up to 20.0001. The
    course's tests and a bonus exercise's are rounded apart, so the course's maximums add up exactly."""
    units: dict[int, tuple[int, int]] = {}
    for bonus in (False, True):
        group = [t for e in results.exercises.values() if e.bonus == bonus for t in e.tests]
        units.update(zip(map(id, group), _rounded(group), strict=True))
    return [(units[id(t)][0] / _UNITS, units[id(t)][1] / _UNITS) for t in results.tests()]


def _gradescope_test(
    exercise: ExerciseResult,
    number: str,
    test: TestResult,
    score: float,
    max_score: float,
    hidden_visibility: str,
) -> dict[str, Any]:
    extra: dict[str, Any] = {
        "nodeid": test.nodeid,
        "category": str(test.category),
        "duration": test.duration,
    }
    if test.speedup:
        extra["speedup"] = test.speedup.to_dict()
    return {
        "score": score,
        "max_score": max_score,
        "status": "passed" if test.earns else "failed",
        "name": printable(f"{exercise.id}: {test.name}"),
        "name_format": "text",
        "number": number,
        # Markdown: the verdict in a code block (sharding grids stay monospace), the checks' facts as tables.
        "output": markdown.test_output(test),
        "output_format": "md",
        "tags": [
            exercise.id,
            str(test.category),
            *(["hidden"] if test.hidden else []),
            *(["bonus"] if exercise.bonus else []),
        ],
        "visibility": hidden_visibility if test.hidden else "visible",
        "extra_data": extra,
    }


def _exercise_row(
    exercise: ExerciseResult, reveal_hidden: bool, hidden_visibility: str, visible_only: bool
) -> list[str]:
    """The exercise, how it went, and its note, as Markdown cells of the summary's table."""
    hidden = [t for t in exercise.tests if t.hidden]
    if visible_only:
        result = f"{visible_share(exercise)} ({counts_text(exercise.tests)})"
    elif reveal_hidden or not hidden:
        result = f"{points(exercise.score)}/{points(exercise.max_score)} points ({counts_text(exercise.tests)})"
    else:
        # Per-exercise points would tell how the hidden tests went before Gradescope shows them.
        visible = [t for t in exercise.tests if not t.hidden]
        passed = sum(t.passed for t in visible)
        result = (
            f"{passed} of {len(visible)} visible tests passed; {len(hidden)} hidden tests "
            f"shown {shown_when(hidden_visibility)}"
        )
    return [
        markdown.text(f"{exercise.id} ({exercise.title})"),
        result,
        markdown.text(exercise.note),
    ]


def late_part(results: GradingResults) -> list[str]:
    """When the submission came in and what each exercise's due date made of it (the reason says the
    arithmetic), for the student; a term's submission without a time says no late penalty was applied."""
    term = results.term
    if term is None or term.submitted_at is None:
        if term is not None and term.course_file is not None:
            return ["**Submitted:** no submission time: no late penalty applied."]
        return []
    # an exercise kept from a grading of another assignment keeps the time it was judged with
    times = {e.submitted for e in results.exercises.values() if e.submitted is not None}
    each = len(times) > 1
    rows = [
        [
            markdown.text(exercise.id),
            *([markdown.text(exercise.submitted.at if exercise.submitted else "")] if each else []),
            markdown.text(exercise.late.due or "no due date" if exercise.late else ""),
            markdown.text(exercise.late.reason if exercise.late else NO_TIME),
        ]
        for exercise in results.exercises.values()
        if exercise.late is not None or exercise.untimed
    ]
    came = (
        f"{term.submitted_at} ({term.submitted_from})" if term.submitted_from else term.submitted_at
    )
    parts = [f"**Submitted:** {markdown.text('each exercise when it came in' if each else came)}"]
    if rows:
        header = ["Exercise", *(["Submitted"] if each else []), "Due", "Late"]
        parts.append(markdown.table(header, rows))
    return parts


def gradescope_output(
    results: GradingResults,
    hidden_visibility: str = "after_due_date",
    standing: Standing | None = None,
) -> str:
    """The top-level Markdown: a table with the score of every exercise (or, while hidden tests are not
    shown, how the visible ones went), a late penalty's or an adjustment's reason, then whatever was wrong
    with the submission as a whole."""
    reveal = hidden_visibility == "visible"
    parts = [
        f"## shardlab: {points(results.score)}/{points(results.max_score)} points"
        if reveal and not results.visible_only
        else "## shardlab"
    ]
    if changes_score(standing):
        parts.append(
            "**Your grade:** "
            + markdown.text(
                f"{points(standing.final)}/{points(standing.max_score)} "
                f"points ({points(standing.raw)} from the tests)"
            )
        )
        # An exercise's figures would tell how its hidden tests went: with them shown only (its percentage
        # off tells nothing of them). A late penalty's reason is in the table of lateness below, said once.
        parts.append(
            markdown.bullet_list(
                markdown.text(
                    f"{e.id}: "
                    + "; ".join(
                        ([standing_words(e)] if reveal else [])
                        + (
                            [f"{e.late.percent:g}% off for lateness (below)"]
                            if e.penalty and e.late is not None and not reveal
                            else []
                        )
                        + [f"adjusted: {a.describe()}" for a in e.adjustments]
                    )
                )
                for e in standing.exercises
                if e.penalty or e.adjustments
            )
        )
    parts += late_part(results)
    if results.visible_only:
        parts.append(f"Only the visible tests were run: {markdown.text(visible_total(results))}.")
    if results.exercises:
        rows = [
            _exercise_row(exercise, reveal, hidden_visibility, results.visible_only)
            for exercise in results.exercises.values()
        ]
        columns = 3 if any(row[2] for row in rows) else 2  # a Note column only when there is a note
        parts.append(
            markdown.table(
                ["Exercise", "Result", "Note"][:columns], [row[:columns] for row in rows]
            )
        )
    if results.problems:
        parts += [
            "**Problems with the submission:**",
            markdown.bullet_list(map(markdown.text, results.problems)),
        ]
    if results.ignored:
        parts.append(markdown.text(ignored_line(results.ignored)))
    return "\n\n".join(parts)


def gradescope_dict(
    results: GradingResults,
    *,
    hidden_visibility: str = "after_due_date",
    standing: Standing | None = None,
) -> dict[str, Any]:
    """Gradescope's results.json: one test per shardlab test, hidden ones shown per `hidden_visibility`; with a
    `standing` that a late penalty or an adjustment changes, its final score is the submission's ("score" wins
    over the tests' sum on Gradescope) and the output says why.

    Not "hidden" by default: Gradescope expects hidden tests to carry no points, and ours carry most."""
    shown_when(hidden_visibility)  # a ValueError for a visibility Gradescope does not know
    points = rounded_points(results)
    rounded = iter(points)
    tests = []
    for position, exercise in enumerate(results.exercises.values(), start=1):
        major = exercise_number(exercise.id, position)
        for minor, test in enumerate(exercise.tests, start=1):
            score, max_score = next(rounded)
            tests.append(
                _gradescope_test(
                    exercise, f"{major}.{minor}", test, score, max_score, hidden_visibility
                )
            )
    total = standing.final if changes_score(standing) else sum(score for score, _ in points)
    return {
        "score": round(total * _UNITS) / _UNITS,
        "execution_time": round(results.duration),
        "output": gradescope_output(results, hidden_visibility, standing),
        "output_format": "md",
        "visibility": "visible",
        # The grader's stdout can name hidden tests and show student prints: instructors only.
        "stdout_visibility": "hidden",
        "extra_data": {
            "submission": results.submission,
            "max_score": results.max_score,
            "visible_only": results.visible_only,
            # the submission time, its source and each exercise's lateness, as report.json has them
            "term": results.term.to_dict() if results.term is not None else None,
            "late": {
                ex.id: ex.late.to_dict() for ex in results.exercises.values() if ex.late is not None
            },
            "environment": results.environment.to_dict(),
        },
        "tests": tests,
    }


def write_gradescope_json(
    results: GradingResults,
    path: str | Path,
    *,
    hidden_visibility: str = "after_due_date",
    standing: Standing | None = None,
) -> Path:
    return write_atomically(
        path,
        _json_text(
            gradescope_dict(results, hidden_visibility=hidden_visibility, standing=standing)
        ),
    )


# -- JUnit XML -------------------------------------------------------------------------------------

# How each category reads in JUnit: the element under <testcase>, or None for a pass.
_JUNIT_ELEMENT = {
    Category.PASSED: None,
    Category.FAILED: "failure",
    Category.TIMEOUT: "failure",
    Category.ERROR: "error",
    Category.CRASHED: "error",
    Category.NOT_ATTEMPTED: "skipped",
    Category.SKIPPED: "skipped",
}


def _seconds(value: float) -> str:
    return f"{value:.3f}"


def _properties(parent: ET.Element, values: dict[str, Any]) -> None:
    element = ET.SubElement(parent, "properties")
    for name, value in values.items():
        value = round(value, 4) if isinstance(value, float) else value
        ET.SubElement(element, "property", name=name, value=printable(str(value)))


def _junit_case(exercise: ExerciseResult, test: TestResult) -> ET.Element:
    case = ET.Element(
        "testcase",
        classname=f"{exercise.id}.{file_stem(test)}".rstrip("."),
        name=printable(test.name),
        time=_seconds(test.duration),
    )
    values: dict[str, Any] = {
        "score": test.score,
        "max_score": test.max_score,
        "category": test.category,
        "hidden": str(test.hidden).lower(),
    }
    if test.speedup:
        values["speedup"] = speedup_figures(test.speedup)
    _properties(case, values)
    tag = _JUNIT_ELEMENT[Category(test.category)]
    if tag is not None:
        outcome = ET.SubElement(
            case, tag, message=verdict(test).splitlines()[0], type=str(test.category)
        )
        outcome.text = feedback(test)
    return case


def _junit_counts(tests: list[TestResult]) -> dict[str, str]:
    tags = [_JUNIT_ELEMENT[Category(t.category)] for t in tests]
    return {
        "tests": str(len(tests)),
        "failures": str(tags.count("failure")),
        "errors": str(tags.count("error")),
        "skipped": str(tags.count("skipped")),
        "time": _seconds(sum(t.duration for t in tests)),
    }


def _junit_suite(exercise: ExerciseResult) -> ET.Element:
    suite = ET.Element("testsuite", name=exercise.id, **_junit_counts(exercise.tests))
    values: dict[str, Any] = {
        "title": exercise.title,
        "score": exercise.score,
        "max_score": exercise.max_score,
    }
    if exercise.note:
        values["note"] = exercise.note
    _properties(suite, values)
    suite.extend(_junit_case(exercise, test) for test in exercise.tests)
    return suite


def junit_xml(results: GradingResults) -> str:
    """One <testsuite> per exercise, one <testcase> per test; failed and timeout are failures, error and
    crashed are errors, not attempted and skipped are skipped."""
    root = ET.Element(
        "testsuites",
        name=printable(f"shardlab: {results.submission}"),
        **_junit_counts(results.tests()),
    )
    root.extend(_junit_suite(exercise) for exercise in results.exercises.values())
    ET.indent(root)
    return ET.tostring(root, encoding="unicode", xml_declaration=True) + "\n"


def write_junit_xml(results: GradingResults, path: str | Path) -> Path:
    return write_atomically(path, junit_xml(results))


# -- terminal summary --------------------------------------------------------------------------------


def _score_style(score: float, max_score: float) -> str:
    if max_score and math.isclose(score, max_score):
        return "green"
    return "red" if score == 0 else "yellow"


def _exercise_cell(exercise: ExerciseResult) -> Text:
    """The id, and below it the title and any note: ids are never cut, titles wrap."""
    cell = Text(exercise.id, style="bold")
    cell.append(f"\n{exercise.title}", style="default")
    if exercise.note:
        cell.append(f"\n{printable(exercise.note)}", style="dim")
    return cell


SHORT_HEADERS = {
    Category.PASSED: "pass",
    Category.FAILED: "fail",
    Category.ERROR: "error",
    Category.TIMEOUT: "t/o",
    Category.CRASHED: "crash",
    Category.NOT_ATTEMPTED: "todo",
    Category.SKIPPED: "skip",
}


def summary_table(results: GradingResults) -> Table:
    """One row per exercise (score and the count of each category), then a total row. Categories no
    test fell into are left out, so that the table fits an 80-column terminal."""
    counts = {ex_id: category_counts(ex.tests) for ex_id, ex in results.exercises.items()}
    totals = {c: sum(per[c] for per in counts.values()) for c in COUNTED}
    shown = [c for c in COUNTED if c is Category.PASSED or totals[c]]
    # Text, not str, for anything that is not ours: rich would read a str as markup.
    table = Table(title=Text(f"shardlab: {printable(results.submission)}"), title_justify="left")
    # Ids are never cut; titles and notes wrap, so the table fits an 80-column terminal.
    table.add_column(
        "Exercise",
        min_width=max(len(ex_id) for ex_id in results.exercises) if results.exercises else 8,
    )
    # A visible-only run shows what passed of the points its tests check, of the maximum: never a total above it.
    table.add_column(
        "Visible pts" if results.visible_only else "Score", justify="right", no_wrap=True
    )
    for category in shown:
        table.add_column(SHORT_HEADERS[category], justify="right", no_wrap=True)
    for ex_id, exercise in results.exercises.items():
        score = Text(
            score_text(exercise, results.visible_only),
            style=_score_style(exercise.score, reachable(exercise, results.visible_only)),
        )
        table.add_row(_exercise_cell(exercise), score, *(str(counts[ex_id][c]) for c in shown))
    table.add_section()
    table.add_row(
        Text("Total", style="bold"),
        Text(score_text(results, results.visible_only), style="bold"),
        *(str(totals[c]) for c in shown),
    )
    return table


def print_summary(
    results: GradingResults, console: Console | None = None, standing: Standing | None = None
) -> None:
    """The summary table, the grade when a late penalty or an adjustment changes it, then what was wrong with
    the submission as a whole."""
    console = console or Console()
    console.print(summary_table(results))
    if changes_score(standing):
        console.print(
            Text(
                f"Grade: {points(standing.final)}/{points(standing.max_score)} "
                f"({points(standing.raw)} from the tests)",
                style="bold",
            )
        )
        for exercise in standing.exercises:
            if exercise.penalty or exercise.adjustments:
                console.print(
                    Text(
                        printable(
                            f"  {exercise.id}: {standing_words(exercise)}; "
                            + "; ".join(standing_reasons(exercise))
                        )
                    )
                )
    if results.visible_only:
        console.print(
            Text(
                f"Only the visible tests were run: {visible_total(results)}; the hidden tests check "
                "the rest when you are graded.",
                style="dim",
            )
        )
    if results.problems:
        console.print(Text("Problems with the submission:", style="bold red"))
        for problem in results.problems:
            console.print(Text(f"  - {printable(problem)}"))
    if results.ignored:
        console.print(Text(printable(ignored_line(results.ignored)), style="dim"))


# -- all of them ---------------------------------------------------------------------------------------


def write_all(
    results: GradingResults,
    out_dir: str | Path,
    *,
    hidden_visibility: str = "after_due_date",
    standing: Standing | None = None,
) -> dict[str, Path]:
    """report.json, results.json (Gradescope), junit.xml and the student's feedback.html in out_dir, created if
    missing. hidden_visibility: when students see hidden tests (grader.core.options), in results.json and the page.
    standing: the grade with late penalties and the instructor's adjustments (grader.grading.standing), shown in
    results.json and the page; report.json keeps the raw results (and the late penalties), never an adjustment."""
    out_dir = Path(out_dir)
    return {
        "report": write_report_json(results, out_dir / REPORT_FILES["report"]),
        **publish(results, out_dir, hidden_visibility=hidden_visibility, standing=standing),
        "junit": write_junit_xml(results, out_dir / REPORT_FILES["junit"]),
    }


def publish(
    results: GradingResults,
    out_dir: str | Path,
    *,
    hidden_visibility: str = "after_due_date",
    standing: Standing | None = None,
) -> dict[str, Path]:
    """What shows a grade to people: results.json and feedback.html, written again when the adjustments or the
    course file change (grade-batch, override) without grading again."""
    out_dir = Path(out_dir)
    return {
        "gradescope": write_gradescope_json(
            results,
            out_dir / REPORT_FILES["gradescope"],
            hidden_visibility=hidden_visibility,
            standing=standing,
        ),
        "feedback": feedback_page.write_feedback_html(
            results,
            out_dir / REPORT_FILES["feedback"],
            hidden_visibility=hidden_visibility,
            standing=standing,
        ),
    }
