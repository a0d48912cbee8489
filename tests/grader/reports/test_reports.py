"""Reports present GradingResults: shardlab's JSON, Gradescope's results.json, JUnit XML and the terminal
summary. The results are built by hand with score_exercise; nothing here runs a grading."""

from __future__ import annotations

import copy
import dataclasses
import io
import json
import math
import os
import re
import xml.etree.ElementTree as ET
from html import escape, unescape

import pytest
from hypothesis import given, settings, strategies as st
from markdown_it import MarkdownIt
from rich.console import Console

from grader.checks.properties import GRADING
from grader.checks.sharding import side_by_side
from grader.core.results import (
    Block,
    Category,
    Collective,
    CollectivesCheck,
    Environment,
    Layout,
    LayoutCheck,
    MalformedResult,
    SpeedFigures,
    TestResult,
)
from grader.course import catalog
from grader.grading.results import GradingResults, score_exercise
from grader.reports import markdown, writers as reports
from grader.reports.feedback_page import feedback_page

# -- sample results ----------------------------------------------------------------------------------

SPEEDUP = {
    "label": "layer_auto vs replicated",
    "speedup": 7.91,
    "spread": [7.62, 8.05],
    "baseline_s": 0.0124,
    "candidate_s": 0.00157,
    "repeats": 21,
    "threshold": 3.0,
    "devices": 8,
    "cores": 2,
    "platform": "cpu",
    "near_threshold": False,
    "calibration": None,
    "clock": "wall",
    "met": True,
    "policy": "enforce",
}
# What student code can put in a message: NUL, ANSI colours, non-ASCII, markup, a lone surrogate.
SPECIAL = "output: wrong sharding\x00 \x1b[31mP('data', None)\x1b[0m ≠ P() — données <b>&</b>\udcff"
SPECIAL_PRINTED = "output: wrong sharding\\x00 P('data', None) ≠ P() — données <b>&</b>\\udcff"
PROBLEM = "[bold]conftest.py[/bold] in the submission was ignored"


def case(
    exercise: str,
    file: str,
    name: str,
    category: Category,
    *,
    hidden: bool = False,
    weight: float = 1.0,
    message: str = "",
    speedup: dict | None = None,
    **facts,
) -> TestResult:
    return TestResult(
        nodeid=f"tests/exercises/{exercise}/{file}.py::{name}",
        exercise=exercise,
        hidden=hidden,
        weight=weight,
        category=category.value,
        message=message,
        duration=0.25,
        speedup=SpeedFigures.from_dict(speedup) if speedup else None,
        **facts,
    )


# The facts of a failed sharding check and of a collectives check, as the checks record them.
ROWS = Layout(
    (8, 4),
    "NamedSharding",
    "P('data', None)",
    ("data",),
    (2,),
    (0, 1),
    (Block(((0, 4), (0, 4)), (0,)), Block(((4, 8), (0, 4)), (1,))),
)
REPLICATED = Layout(
    (8, 4), "NamedSharding", "P()", ("data",), (2,), (0, 1), (Block(((0, 8), (0, 4)), (0, 1)),)
)
LAYOUT = LayoutCheck("output", expected=ROWS, actual=REPLICATED, passed=False)
COLLECTIVES = CollectivesCheck(
    "layer_auto",
    passed=False,
    exactly={},
    absent=("all-gather",),
    found=(Collective("all-reduce", 2, ("data",), "%ar = f32[4]{0} all-reduce(...)"),),
)


def scored(exercise_id: str, tests: list[TestResult], note: str = ""):
    """The tests scored as a course's are: their weights, in these proportions, add up to the exercise's points."""
    exercise = catalog.get(exercise_id)
    total = sum(t.weight for t in tests)
    return score_exercise(
        exercise,
        [dataclasses.replace(t, weight=t.weight * exercise.points / total) for t in tests],
        note,
    )


def sample_results() -> GradingResults:
    """ex01 all passed (10 points); ex04 every category (20 points, shares of 20/3 points); ex02 missing."""
    ex01 = "ex01_meshes"
    ex01_tests = [
        case(ex01, "test_visible", "test_make_mesh[2dev]", Category.PASSED),
        case(ex01, "test_visible", "test_make_mesh[4dev]", Category.PASSED),
        case(ex01, "test_hidden", "test_devices_indices", Category.PASSED, hidden=True),
    ]
    ex04 = "ex04_sharded_layer"
    third = 1 / 3
    ex04_tests = [
        case(ex04, "test_visible", "test_layer_auto_shape[2dev]", Category.PASSED, weight=third),
        case(ex04, "test_visible", "test_layer_auto_shape[4dev]", Category.PASSED, weight=third),
        case(
            ex04,
            "test_visible",
            "test_layer_auto_shape[8dev]",
            Category.FAILED,
            weight=third,
            message=SPECIAL,
            layouts=[LAYOUT],
            collectives=[COLLECTIVES],
        ),
        case(
            ex04,
            "test_visible",
            "test_layer_manual",
            Category.ERROR,
            message="ZeroDivisionError: division by zero\n  raised at ex04_sharded_layer.py:12 in layer: 1 / 0",
        ),
        case(
            ex04,
            "test_hidden",
            "test_layer_auto_values[4dev]",
            Category.TIMEOUT,
            hidden=True,
            message="the test ran longer than 60 s",
            strike=True,
        ),
        case(
            ex04,
            "test_hidden",
            "test_layer_collectives",
            Category.CRASHED,
            hidden=True,
            message="the grading process died (killed: out of memory?)",
        ),
        case(
            ex04,
            "test_hidden",
            "test_layer_features",
            Category.NOT_ATTEMPTED,
            hidden=True,
            message="not attempted: ex04: layer_features",
        ),
        case(
            ex04,
            "test_hidden",
            "test_layer_speedup[8dev]",
            Category.PASSED,
            hidden=True,
            weight=2,
            speedup=SPEEDUP,
        ),
        case(
            ex04,
            "test_hidden",
            "test_layer_large",
            Category.SKIPPED,
            hidden=True,
            message="timing checks are off (--timing=skip)",
        ),
    ]
    ex02 = "ex02_sharding_properties"
    missing = "not attempted: ex02: module missing"
    ex02_tests = [
        case(ex02, "test_visible", "test_sizes", Category.NOT_ATTEMPTED, message=missing),
        case(
            ex02,
            "test_hidden",
            "test_sizes_property",
            Category.NOT_ATTEMPTED,
            hidden=True,
            message=missing,
        ),
    ]
    exercises = {
        ex01: scored(ex01, ex01_tests),
        ex04: scored(ex04, ex04_tests),
        ex02: scored(ex02, ex02_tests, note="module missing: not attempted"),
    }
    return GradingResults(
        "alice",
        exercises,
        environment=Environment.from_dict({"jax": "0.10.2", "devices": 8}),
        problems=[PROBLEM],
        output="student printed this",
        duration=42.4,
    )


@pytest.fixture
def results() -> GradingResults:
    return sample_results()


def by_name(gradescope: dict) -> dict[str, dict]:
    return {test["name"]: test for test in gradescope["tests"]}


# -- Gradescope's results.json, as documented ---------------------------------------------------------
# gradescope-autograders.readthedocs.io/en/latest/specs/ ("Output format", "Controlling Test Case
# Visibility", "Test case status", "Output String Formatting").

VISIBILITY = {"hidden", "after_due_date", "after_published", "visible"}
FORMAT = {"text", "simple_format", "html", "md", "ansi"}
NUMBER, STRING, OBJECT, LIST = "number", "string", "object", "list"
TOP_LEVEL_KEYS = {
    "score": NUMBER,
    "execution_time": NUMBER,
    "output": STRING,
    "output_format": FORMAT,
    "test_output_format": FORMAT,
    "test_name_format": FORMAT,
    "visibility": VISIBILITY,
    "stdout_visibility": VISIBILITY,
    "extra_data": OBJECT,
    "tests": LIST,
    "leaderboard": LIST,
}
TEST_KEYS = {
    "score": NUMBER,
    "max_score": NUMBER,
    "status": {"passed", "failed"},
    "name": STRING,
    "name_format": FORMAT,
    "number": STRING,
    "output": STRING,
    "output_format": FORMAT,
    "tags": LIST,
    "visibility": VISIBILITY,
    "extra_data": OBJECT,
}
# Optional for Gradescope, promised by shardlab.
REQUIRED_TEST_KEYS = {"score", "max_score", "status", "name", "number", "output", "visibility"}


def _type_problem(where: str, value, expected) -> str | None:
    if isinstance(expected, set):
        return None if value in expected else f"{where}: {value!r} is not one of {sorted(expected)}"
    ok = {
        NUMBER: isinstance(value, (int, float))
        and not isinstance(value, bool)
        and math.isfinite(value),
        STRING: isinstance(value, str),
        OBJECT: isinstance(value, dict),
        LIST: isinstance(value, list),
    }[expected]
    return None if ok else f"{where}: {value!r} is not a {expected}"


def _keys_problems(where: str, data: dict, schema: dict) -> list[str]:
    found = [f"{where}: unknown key {key!r}" for key in data if key not in schema]
    found += [
        p
        for key, value in data.items()
        if key in schema
        if (p := _type_problem(f"{where}.{key}", value, schema[key]))
    ]
    return found


def gradescope_problems(data: dict) -> list[str]:
    """Everything in `data` that breaks Gradescope's documented results.json format (or shardlab's
    promise that the top-level score is exactly the sum of the tests' scores)."""
    if not isinstance(data, dict):
        return ["results: not an object"]
    found = _keys_problems("results", data, TOP_LEVEL_KEYS)
    tests = data.get("tests", [])
    if "score" not in data and (
        not tests or any("score" not in t for t in tests if isinstance(t, dict))
    ):
        found.append("results: a score is required at the top level or on every test")
    for i, test in enumerate(tests if isinstance(tests, list) else []):
        if not isinstance(test, dict):
            found.append(f"tests[{i}]: not an object")
            continue
        found += _keys_problems(f"tests[{i}]", test, TEST_KEYS)
        found += [
            f"tests[{i}]: missing {key!r}" for key in sorted(REQUIRED_TEST_KEYS - test.keys())
        ]
        if not all(isinstance(tag, str) for tag in test.get("tags", [])):
            found.append(f"tests[{i}].tags: not all strings")
    scores = [t.get("score") for t in tests if isinstance(t, dict)]
    if "score" in data and scores and all(isinstance(s, (int, float)) for s in scores):
        if not math.isclose(sum(scores), data["score"], rel_tol=0, abs_tol=1e-9):
            found.append(
                f"results.score: {data['score']} is not the sum of the tests' scores {sum(scores)}"
            )
    try:
        if json.loads(json.dumps(data, allow_nan=False)) != data:
            found.append("results: does not survive a JSON round trip")
    except (TypeError, ValueError) as exc:
        found.append(f"results: not JSON: {exc}")
    return found


@pytest.mark.parametrize("hidden_visibility", sorted(VISIBILITY))
def test_gradescope_results_follow_the_documented_format(results, hidden_visibility):
    assert (
        gradescope_problems(reports.gradescope_dict(results, hidden_visibility=hidden_visibility))
        == []
    )


@pytest.mark.parametrize(
    "breakage, problem",
    [
        (lambda d: d["tests"][0].update(status="ok"), "tests[0].status: 'ok' is not one of"),
        (lambda d: d["tests"][1].update(visibility="later"), "tests[1].visibility: 'later'"),
        (lambda d: d.update(stdout_visiblity="visible"), "unknown key 'stdout_visiblity'"),
        (lambda d: d["tests"][2].update(score=True), "tests[2].score: True is not a number"),
        (lambda d: d["tests"][3].update(number=4.4), "tests[3].number: 4.4 is not a string"),
        (lambda d: d["tests"][4].pop("status"), "tests[4]: missing 'status'"),
        (lambda d: d.update(score=d["score"] + 0.0001), "is not the sum of the tests' scores"),
        (lambda d: d["tests"][0].update(extra_data={"x": float("nan")}), "not JSON"),
    ],
)
def test_the_validator_catches_what_gradescope_would_reject(results, breakage, problem):
    data = reports.gradescope_dict(results)
    breakage(data)
    assert any(problem in found for found in gradescope_problems(data)), gradescope_problems(data)


def test_gradescope_has_one_test_per_shardlab_test_in_order(results):
    data = reports.gradescope_dict(results)
    assert [t["name"] for t in data["tests"]] == [
        f"{t.exercise}: {t.name}" for t in results.tests()
    ]
    numbers = [t["number"] for t in data["tests"]]
    assert numbers == ["1.1", "1.2", "1.3"] + [f"4.{i}" for i in range(1, 10)] + ["2.1", "2.2"]
    statuses = [t["status"] for t in data["tests"]]
    assert statuses.count("passed") == 7 and statuses.count("failed") == 7
    assert by_name(data)["ex04_sharded_layer: test_layer_auto_values[4dev]"]["number"] == "4.5"
    # skipped by policy earns
    assert by_name(data)["ex04_sharded_layer: test_layer_large"]["status"] == "passed"


def test_gradescope_scores_add_up_to_the_rounded_total_exactly(results):
    data = reports.gradescope_dict(results)
    assert results.score == pytest.approx(50 / 3 + 2.5) and data["score"] == 19.1667
    assert round(sum(t["score"] for t in data["tests"]) * 10_000) == 191_667
    assert round(sum(t["max_score"] for t in data["tests"]) * 10_000) == 400_000
    for test in data["tests"]:
        assert test["score"] == (test["max_score"] if test["status"] == "passed" else 0)
    tests = by_name(data)
    assert tests["ex04_sharded_layer: test_layer_speedup[8dev]"]["max_score"] == 5.0
    assert tests["ex01_meshes: test_make_mesh[2dev]"]["score"] in (3.3333, 3.3334)
    assert tests["ex04_sharded_layer: test_layer_auto_shape[8dev]"]["max_score"] in (0.8333, 0.8334)


@settings(GRADING, max_examples=150)
@given(
    st.lists(
        st.lists(
            st.tuples(st.sampled_from([1 / 3, 1 / 7, 0.25, 1.0, 2.0, 3.0]), st.booleans()),
            min_size=1,
            max_size=9,
        ),
        min_size=1,
        max_size=len(catalog.EXERCISES),
    )
)
def test_gradescope_scores_add_up_for_any_weights(exercises):
    graded = {}
    for exercise, cases in zip(catalog.EXERCISES, exercises, strict=False):
        tests = [
            case(
                exercise.id,
                "test_visible",
                f"test_{i}",
                Category.PASSED if passed else Category.FAILED,
                weight=weight,
            )
            for i, (weight, passed) in enumerate(cases)
        ]
        graded[exercise.id] = scored(exercise.id, tests)
    results = GradingResults("any", graded)
    data = reports.gradescope_dict(results)
    assert gradescope_problems(data) == []
    assert round(data["score"] * 10_000) == round(sum(t["score"] for t in data["tests"]) * 10_000)
    assert abs(data["score"] - results.score) <= 2e-4
    # A bonus exercise's tests show their points but add nothing to the maximum.
    course_tests = [t for t in data["tests"] if "bonus" not in t["tags"]]
    assert round(sum(t["max_score"] for t in course_tests) * 10_000) == round(
        results.max_score * 10_000
    )
    for test, given_test in zip(data["tests"], results.tests(), strict=True):
        assert abs(test["max_score"] - given_test.max_score) <= 2e-4
        assert test["score"] == (test["max_score"] if given_test.passed else 0)


def fenced(text: str) -> str:
    return f"```\n{text}\n```"


def test_gradescope_outputs_name_the_category_and_show_the_figures(results):
    tests = by_name(reports.gradescope_dict(results))
    output = {name.split(": ", 1)[1]: test["output"] for name, test in tests.items()}
    # a bare verdict stays a word, no empty code block
    assert output["test_make_mesh[2dev]"] == "passed"
    assert output["test_layer_auto_shape[8dev]"].startswith(
        fenced(f"failed: {SPECIAL_PRINTED}") + "\n\n"
    )
    assert output["test_layer_manual"] == fenced(
        "error: ZeroDivisionError: division by zero\n  raised at ex04_sharded_layer.py:12 in layer: 1 / 0"
    )
    assert output["test_layer_auto_values[4dev]"] == fenced(
        "timeout: the test ran longer than 60 s"
    )
    assert output["test_layer_collectives"] == fenced(
        "crashed: the grading process died (killed: out of memory?)"
    )
    # not "not attempted: not"
    assert output["test_layer_features"] == fenced("not attempted: ex04: layer_features")
    assert output["test_layer_large"] == fenced("skipped: timing checks are off (--timing=skip)")
    assert output["test_layer_speedup[8dev]"].startswith(
        fenced(
            "passed\nlayer_auto vs replicated: speedup 7.91x (IQR 7.62-8.05), threshold 3.00x met, enforce; "
            "12.40 ms -> 1.57 ms over 21 interleaved repeats; 8 devices on 2 cores (cpu)"
        )
        + "\n\n"
    )
    speedup_test = tests["ex04_sharded_layer: test_layer_speedup[8dev]"]
    assert speedup_test["extra_data"]["speedup"] == SPEEDUP
    assert speedup_test["tags"] == ["ex04_sharded_layer", "passed", "hidden"]
    assert all(t["output_format"] == "md" and t["name_format"] == "text" for t in tests.values())


# -- Gradescope's Markdown, as a CommonMark renderer with GFM tables reads it ------------------------------
# Raw HTML is on: nothing may depend on the renderer dropping a student's tags.

MARKDOWN = MarkdownIt("commonmark", {"html": True}).enable("table")
_TAG = re.compile(r"<[^>]*>")


def html_of(markdown: str) -> str:
    return MARKDOWN.render(markdown)


def text_of(html: str) -> str:
    """What a reader sees: the tags dropped, the entities read."""
    return unescape(_TAG.sub("", html))


def tables_of(html: str) -> list[list[list[str]]]:
    """Every table's rows, each a list of the cells' text (header row first)."""
    return [
        [
            [text_of(cell) for cell in re.findall(r"<t[hd]>(.*?)</t[hd]>", row, re.S)]
            for row in re.findall(r"<tr>(.*?)</tr>", table, re.S)
        ]
        for table in re.findall(r"<table>(.*?)</table>", html, re.S)
    ]


def code_blocks_of(html: str) -> list[str]:
    return [unescape(block) for block in re.findall(r"<pre><code>(.*?)</code></pre>", html, re.S)]


def test_gradescope_summary_shows_exercise_scores_and_problems(results):
    data = reports.gradescope_dict(results, hidden_visibility="visible")
    assert data["output_format"] == "md" and data["execution_time"] == 42
    html = html_of(data["output"])
    assert html.startswith("<h2>shardlab: 19.17/40 points</h2>\n")
    assert tables_of(html) == [
        [
            ["Exercise", "Result", "Note"],
            ["ex01_meshes (Devices and meshes)", "10/10 points (3 passed)", ""],
            [
                "ex04_sharded_layer (One layer, three ways)",
                "9.17/20 points (3 passed, 1 failed, 1 error, 1 timeout, "
                "1 crashed, 1 not attempted, 1 skipped)",
                "",
            ],
            [
                "ex02_sharding_properties (What a sharding says)",
                "0/10 points (2 not attempted)",
                "module missing: not attempted",
            ],
        ]
    ]
    assert "Only the visible tests were run." not in html
    assert html.endswith(
        f"<p><strong>Problems with the submission:</strong></p>\n<ul>\n<li>{PROBLEM}</li>\n</ul>\n"
    )


def test_gradescope_output_gives_the_student_their_lateness(results):
    """Before: results.json said nothing of the submission time, the due date or why points were taken off
    unless a penalty changed the score. Now the time, where it came from, each exercise's due date and the
    late policy's arithmetic are in the output students read, and in extra_data."""
    from datetime import datetime, timedelta, timezone

    from grader.course.term import LatePolicy
    from grader.grading.results import TermRecord

    due = datetime(2026, 10, 12, 23, 59, tzinfo=timezone.utc)
    submitted = due + timedelta(days=1, hours=2)
    late = LatePolicy(10, "day", 50).judge(submitted, due)
    on_time = LatePolicy(10, "day", 50).judge(submitted, due + timedelta(days=3))
    results.term = TermRecord(
        "autumn",
        "/autograder/source/course.toml",
        "0" * 64,
        "ada",
        submitted.isoformat(),
        "Gradescope's submission_metadata.json",
    )
    ids = list(results.exercises)
    results.exercises[ids[0]].late = late
    results.exercises[ids[1]].late = on_time
    data = reports.gradescope_dict(results, hidden_visibility="after_due_date")
    html = html_of(data["output"])
    assert (
        "<p><strong>Submitted:</strong> 2026-10-14T01:59:00+00:00 (Gradescope's "
        "submission_metadata.json)</p>" in html
    )
    assert tables_of(html)[0] == [
        ["Exercise", "Due", "Late"],
        [
            ids[0],
            "2026-10-12T23:59:00+00:00",
            "1 d 2 h after the due date (2026-10-12T23:59:00+00:00): "
            "2 day(s) started x 10% = 20% off",
        ],
        [ids[1], "2026-10-15T23:59:00+00:00", "on time"],
    ]
    assert data["extra_data"]["late"] == {ids[0]: late.to_dict(), ids[1]: on_time.to_dict()}
    assert data["extra_data"]["term"]["submitted_at"] == submitted.isoformat()
    assert gradescope_problems(data) == []
    # with the grade the penalty changed: the reason is said once, in the table, whoever sees what
    from grader.grading.standing import standing

    for visibility in ("after_due_date", "visible"):
        output = reports.gradescope_dict(
            results, hidden_visibility=visibility, standing=standing(results)
        )["output"]
        assert html_of(output).count("2 day(s) started x 10% = 20% off") == 1, output
    hidden = reports.gradescope_dict(results, standing=standing(results))["output"]
    assert f"{ids[0]}: 20% off for lateness (below)" in html_of(hidden)
    results.term = dataclasses.replace(results.term, submitted_at=None, submitted_from=None)
    html = html_of(reports.gradescope_dict(results)["output"])
    assert "<strong>Submitted:</strong> no submission time: no late penalty applied." in html


@pytest.mark.parametrize("hidden_visibility", ["after_due_date", "after_published", "hidden"])
def test_gradescope_summary_keeps_hidden_outcomes_until_they_are_shown(results, hidden_visibility):
    html = html_of(reports.gradescope_dict(results, hidden_visibility=hidden_visibility)["output"])
    shown = {
        "after_due_date": "after the due date",
        "after_published": "when grades are published",
        "hidden": "to instructors only",
    }[hidden_visibility]
    assert html.startswith("<h2>shardlab</h2>\n")
    rows = tables_of(html)[0]
    assert rows[2] == [
        "ex04_sharded_layer (One layer, three ways)",
        f"2 of 4 visible tests passed; 5 hidden tests shown {shown}",
        "",
    ]
    # Every exercise has hidden tests: no exercise's points, and no total, anywhere.
    assert "points" not in text_of(html) and "9.17" not in html and "19.17" not in html
    assert text_of(html).endswith(f"Problems with the submission:\n\n{PROBLEM}\n\n")


def visible_run() -> GradingResults:
    """A visible-only run of every exercise: two visible tests each, of 1 and 1.5 points, the second failing
    in ex04: never a score out of the 2.5 points they check alone."""
    graded = {
        e.id: score_exercise(
            e,
            [
                case(e.id, "test_visible", "test_a", Category.PASSED),
                case(
                    e.id,
                    "test_visible",
                    "test_b",
                    Category.FAILED if e.id == "ex04_sharded_layer" else Category.PASSED,
                    weight=1.5,
                ),
            ],
        )
        for e in catalog.EXERCISES
    }
    return GradingResults("bob", graded, visible_only=True)


def test_gradescope_summary_says_what_the_visible_tests_check(results):
    results.visible_only = True
    html = html_of(reports.gradescope_dict(results)["output"])
    assert (
        "<p>Only the visible tests were run: visible tests: 19.17 of the 40 points they check pass, of 40 in "
        "all.</p>"
    ) in html
    visible = reports.gradescope_dict(visible_run())
    rows = dict((cells[0], cells[1]) for cells in tables_of(html_of(visible["output"]))[0][1:])
    assert (
        rows["ex04_sharded_layer (One layer, three ways)"]
        == "visible: 2.5 of 20 points checked, 1 pass (1 passed, 1 failed)"
    )
    assert (
        rows["ex09_fsdp (Fully sharded data parallelism)"]
        == "visible: 2.5 of 20 points checked, all pass (2 passed)"
    )
    # each test's points are its weight
    assert [t["max_score"] for t in visible["tests"][:2]] == [1.0, 1.5]
    # every exercise's 2.5 points pass but ex04's 1.5 (the bonus's count too: a score, not the maximum)
    assert visible["score"] == (len(catalog.EXERCISES) - 1) * 2.5 + 1 <= catalog.total_points()


def test_a_visible_run_never_shows_a_total_above_the_maximum():
    console = Console(record=True, width=100, file=io.StringIO())
    reports.print_summary(visible_run(), console)
    lines = console.export_text().splitlines()

    def score(first_cell: str) -> str:  # the score cell, over the lines it may wrap to
        return " ".join(cells[1] for cells in row(lines, first_cell) if cells[1])

    # what passed of the points checked, never read as a fraction of the maximum ("1/2.5 of 20")
    assert score("ex04_sharded_layer") == "1 of 2.5 visible points (of 20)"
    assert score("ex09_fsdp") == "2.5 of 2.5 visible points (of 20)"
    passing, checked = (len(catalog.EXERCISES) - 1) * 2.5 + 1, len(catalog.EXERCISES) * 2.5
    assert (
        score("Total") == f"{passing:g} of {checked:g} visible points (of {catalog.total_points()})"
    )
    assert (
        f"visible tests: {passing:g} of the {checked:g} points they check pass, of "
        f"{catalog.total_points()} in all" in re.sub(r"\s+", " ", " ".join(lines))
    )


def test_a_failed_test_shows_its_layouts_and_collectives(results):
    output = by_name(reports.gradescope_dict(results))[
        "ex04_sharded_layer: test_layer_auto_shape[8dev]"
    ]["output"]
    html = html_of(output)
    assert code_blocks_of(html) == [f"failed: {SPECIAL_PRINTED}\n"]
    assert (
        "<li>output: expected P('data', None) on mesh (data=2), actual P() on mesh (data=2)</li>"
        in html
    )
    assert "<p><strong>Collectives of layer_auto</strong>: the rule did not hold</p>" in html
    assert tables_of(html) == [
        [
            ["collective", "found", "group size", "mesh axes", "rule asks"],
            ["all-reduce", "1", "2", "data", "exactly 0"],
            ["all-gather", "0", "-", "-", "exactly 0; none"],
        ]
    ]
    assert "%ar" not in output  # HLO lines stay in report.json


def test_collectives_and_speed_tables_carry_the_figures():
    found = (
        Collective("all-gather", 4, ("data", "model"), "%ag.1 = all-gather(...)"),
        Collective("all-gather", 2, ("model",), "%ag.2 = all-gather(...)"),
        Collective("all-reduce", None, None, "%ar = all-reduce(...)"),
    )
    rule = CollectivesCheck(
        "train_step",
        found,
        passed=False,
        present=("all-gather", "reduce-scatter"),
        only=("all-gather", "reduce-scatter"),
    )
    own_rule = CollectivesCheck("train_step", found[:1], passed=None)
    speed = SPEEDUP | {"speedup": 2.5, "calibration": 1.8, "policy": "report", "met": False}
    test = case(
        "ex04_sharded_layer",
        "test_hidden",
        "test_speed",
        Category.FAILED,
        message="too slow",
        speedup=speed,
        collectives=[rule, own_rule],
    )
    html = html_of(
        reports.gradescope_dict(
            GradingResults(
                "s",
                {"ex04_sharded_layer": score_exercise(catalog.get("ex04_sharded_layer"), [test])},
            )
        )["tests"][0]["output"]
    )
    assert tables_of(html) == [
        [
            ["collective", "found", "group size", "mesh axes", "rule asks"],
            ["all-gather", "2", "4, 2", "data, model / model", "at least 1; allowed"],
            # found, without its axes: said, not a dash (a dash: none found, nothing to say)
            ["all-reduce", "1", "-", "not recorded", "not allowed"],
            ["reduce-scatter", "0", "-", "-", "at least 1; allowed"],
        ],
        [
            ["collective", "found", "group size", "mesh axes", "rule asks"],
            ["all-gather", "1", "4", "data, model", "-"],
        ],
        [
            ["speedup", "IQR", "threshold", "met", "calibration", "repeats", "devices / cores"],
            [
                "2.50x",
                "7.62-8.05",
                "3.00x",
                "no (report)",
                "1.80x",
                "21",
                "8 devices on 2 cores (cpu)",
            ],
        ],
    ]
    assert "<strong>Collectives of train_step</strong>: judged by the test (see above)" in html
    assert "<strong>Speed: layer_auto vs replicated</strong>" in html
    assert "%ag" not in html and "%ar" not in html


def test_a_message_with_backticks_cannot_close_its_code_block():
    message = "boom\n```\n# not a heading\n[x](http://e)\n`````\n<script>alert(1)</script>\x1b[31m"
    test = case("ex01_meshes", "test_visible", "test_x", Category.ERROR, message=message)
    output = reports.gradescope_dict(
        GradingResults("s", {"ex01_meshes": score_exercise(catalog.get("ex01_meshes"), [test])})
    )["tests"][0]["output"]
    # longer than the longest run (5)
    assert output.startswith("``````\n") and output.endswith("\n``````")
    html = html_of(output)
    # whole, colour dropped
    assert code_blocks_of(html) == [f"error: {message.removesuffix(chr(27) + '[31m')}\n"]
    assert (
        html.count("<pre>") == 1
        and "<h1" not in html
        and "<a" not in html
        and "<script" not in html
    )


def test_a_grid_in_a_message_stays_monospace_and_intact():
    grid = side_by_side(
        ["+-----+-----+", "|  0  |  1  |", "+-----+-----+"],
        ["+-----------+", "|    0,1    |", "+-----------+"],
    )
    message = f"output: wrong sharding\n{grid}"
    test = case("ex04_sharded_layer", "test_visible", "test_x", Category.FAILED, message=message)
    output = reports.gradescope_dict(
        GradingResults(
            "s", {"ex04_sharded_layer": score_exercise(catalog.get("ex04_sharded_layer"), [test])}
        )
    )["tests"][0]["output"]
    assert code_blocks_of(html_of(output)) == [f"failed: {message}\n"]


EVIL = "[x](http://e) ![i](x) <script>alert(1)</script> a|b *em* _u_ `c` ~~s~~ $x$ # h <b>&amp; www.e.com \\|"


def evil_results() -> GradingResults:
    """Text from a submission in every place the Markdown shows it: a problem (file names), a note, a
    layout's name and spec, collectives' program, op and mesh axes, a speedup's label, a message."""
    layout = Layout((8,), "NamedSharding", EVIL, (EVIL,), (2,), (0, 1))
    collectives = CollectivesCheck(
        EVIL,
        (Collective(EVIL, 2, (EVIL, "data"), EVIL),),
        passed=False,
        exactly={EVIL: 1},
        absent=(EVIL,),
    )
    speed = SPEEDUP | {"label": EVIL, "platform": EVIL, "policy": EVIL}
    test = case(
        "ex04_sharded_layer",
        "test_visible",
        f"test_x[{EVIL}]",
        Category.FAILED,
        message=EVIL,
        speedup=speed,
        layouts=[LayoutCheck(EVIL, layout, layout, passed=False)],
        collectives=[collectives],
    )
    exercise = score_exercise(catalog.get("ex04_sharded_layer"), [test], note=f"{EVIL}\n| c |")
    return GradingResults(
        "s", {"ex04_sharded_layer": exercise}, problems=[EVIL, f"two\nlines {EVIL}"]
    )


@pytest.mark.parametrize("hidden_visibility", ["visible", "after_due_date"])
def test_text_from_the_submission_stays_text(hidden_visibility):
    results = evil_results()
    data = reports.gradescope_dict(results, hidden_visibility=hidden_visibility)
    assert gradescope_problems(data) == []
    summary, output = html_of(data["output"]), html_of(data["tests"][0]["output"])
    for html in (summary, output):
        for markup in (
            "<a",
            "<img",
            "<script",
            "<b>",
            "<em",
            "<code>c",
            "<s>",
            "<del",
            "<h1",
            "<input",
        ):
            assert markup not in html, (markup, html)
    # Each written out literally; a | neither ends a cell nor starts one.
    rows = tables_of(summary)[0]
    assert rows[1][2] == f"{EVIL} | c |" and all(len(row) == len(rows[0]) for row in rows)
    assert [unescape(item) for item in re.findall(r"<li>(.*?)</li>", summary)] == [
        EVIL,
        f"two lines {EVIL}",
    ]
    assert code_blocks_of(output) == [reports.feedback(results.tests()[0]) + "\n"]
    assert (
        f"<li>{escape(EVIL)}: expected {escape(EVIL)} on mesh ({escape(EVIL)}=2), actual" in output
    )
    assert f"<strong>Collectives of {escape(EVIL)}</strong>" in output
    collectives, speed = tables_of(output)
    assert collectives[1] == [EVIL, "1", "2", f"{EVIL}, data", "exactly 1; none"]
    assert speed[1][3:] == [f"yes ({EVIL})", "-", "21", f"8 devices on 2 cores ({EVIL})"]
    # 4 in the code block, 5 in the layout line, 1 + 2 for the collectives, 1 + 2 for the speed.
    assert text_of(output).count(EVIL) == 15


def test_markdown_tables_escape_every_bare_pipe():
    table = markdown.table(["a", "b"], [["x | y", "\\\\|z\nw"], ["\\|", ""]])
    assert table.splitlines() == [
        "| a | b |",
        "|---|---|",
        "| x \\| y | \\\\\\|z w |",
        "| \\| |   |",
    ]
    with pytest.raises(ValueError, match="a row of 1 cells in a table of 2 columns"):
        markdown.table(["a", "b"], [["x"]])


def test_the_markdown_of_the_whole_example_renders_clean(results):
    """Every output of the sample parses: each code block holds the whole verdict as `feedback` writes it,
    and no markup comes from the tests' text."""
    data = reports.gradescope_dict(results)
    for test, written in zip(results.tests(), data["tests"], strict=True):
        html = html_of(written["output"])
        verdict = reports.feedback(test)
        assert code_blocks_of(html)[:1] == (
            [] if verdict == str(test.category) else [verdict + "\n"]
        ), html
        assert "<a" not in html and "<img" not in html and "<script" not in html
        assert text_of(html).startswith(verdict)
    assert "<table>" in html_of(data["output"])


def test_gradescope_json_file_holds_the_dict(results, tmp_path):
    path = reports.write_gradescope_json(
        results, tmp_path / "results.json", hidden_visibility="hidden"
    )
    assert json.loads(path.read_text(encoding="utf-8")) == reports.gradescope_dict(
        results, hidden_visibility="hidden"
    )


# -- shardlab's report.json --------------------------------------------------------------------------


def test_report_json_round_trips_through_grading_results(results, tmp_path):
    path = reports.write_report_json(results, tmp_path / "report.json")
    data = json.loads(path.read_text(encoding="utf-8"))
    assert data["score"] == results.score and data["max_score"] == 40
    ex04 = data["exercises"]["ex04_sharded_layer"]
    assert ex04["score"] == pytest.approx(20 / 3 + 2.5) and len(ex04["tests"]) == 9
    speedup_test = ex04["tests"][7]
    assert (speedup_test["name"], speedup_test["hidden"], speedup_test["speedup"]) == (
        "test_layer_speedup[8dev]",
        True,
        SPEEDUP,
    )
    # the full result keeps what the student's code produced
    assert ex04["tests"][2]["message"] == SPECIAL
    assert ex04["tests"][2]["layouts"][0]["actual"]["blocks"] == [
        {"index": [[0, 8], [0, 4]], "devices": [0, 1]}
    ]
    assert ex04["tests"][2]["collectives"][0]["found"][0]["mesh_axes"] == ["data"]
    assert [t["strike"] for t in ex04["tests"]] == [False] * 4 + [True] + [False] * 4
    again = GradingResults.from_dict(data)
    assert again.score == results.score
    assert again.to_dict() == results.to_dict()
    ex04_again, ex04_before = (
        again.exercises["ex04_sharded_layer"].tests,
        results.exercises["ex04_sharded_layer"].tests,
    )
    assert ex04_again[2].layouts == [LAYOUT] and ex04_again[7].speedup == ex04_before[7].speedup


def test_report_json_writes_short_lists_on_one_line(results, tmp_path):
    """A layout's blocks take a line each (a whole course's layouts would otherwise make report.json
    several times larger); the data is what to_dict gives."""
    text = reports.write_report_json(results, tmp_path / "report.json").read_text(encoding="utf-8")
    assert json.loads(text) == json.loads(json.dumps(results.to_dict()))
    assert '{"index": [[0, 8], [0, 4]], "devices": [0, 1]}' in text
    assert '"spread": [7.62, 8.05],' in text and '"layouts": [],' in text
    assert text.startswith('{\n  "submission": "alice",\n') and text.endswith("\n}\n")


def test_report_json_of_an_older_version_still_reads(results):
    """A report.json written before tests had a strike and facts, and speedups a clock: read with none, and
    the clock as elapsed time, which every speedup then was."""
    data = results.to_dict()
    for exercise in data["exercises"].values():
        for test in exercise["tests"]:
            del test["strike"], test["layouts"], test["collectives"]
            if test.get("speedup"):
                del test["speedup"]["clock"]
    again = GradingResults.from_dict(data)
    assert again.score == results.score
    assert all(not t.strike and t.layouts == [] and t.collectives == [] for t in again.tests())
    assert again.exercises["ex04_sharded_layer"].tests[7].speedup.to_dict() == SPEEDUP


@pytest.mark.parametrize(
    "environment",
    [
        {
            "devices": 8,
            "isolation": "bubblewrap",
            "jax": "0.4.30",
        },  # the isolation level alone, a key since gone
        {"timing": "enforce"},  # most keys missing
        {},
        None,
        "bubblewrap on 8 devices",  # not even a dict
    ],
)
def test_report_json_with_an_older_environment_still_reads(results, environment):
    """An older report.json's environment: the isolation a string, keys missing, or no dict at all. It reads,
    the page shows what it says, and it is written back with the same keys (the isolation level as today's
    {"level": ...}; an environment that was a string, under "description")."""
    data = results.to_dict() | {"environment": environment}
    again = GradingResults.from_dict(data)
    assert again.score == results.score
    env = again.environment
    page = feedback_page(again)
    if isinstance(environment, dict):
        level = environment.get("isolation")
        assert env.to_dict() == environment | ({"isolation": {"level": level}} if level else {})
        assert env.devices == environment.get("devices") and env.timing == environment.get("timing")
        assert (
            env.worker_memory_bytes is None
            and env.worker_memory_limited is None
            and env.test_timeout is None
        )
        if "isolation" in environment:
            assert env.isolation.level == "bubblewrap" and env.isolation.not_applied == []
            assert 'data-key="isolation"' in page and "bubblewrap" in page
        else:
            assert env.isolation is None and 'data-key="isolation"' not in page
    else:
        assert env.to_dict() == ({} if environment is None else {"description": environment})
        assert env.isolation is None and env.devices is None
    assert (
        GradingResults.from_dict(json.loads(json.dumps(again.to_dict()))).to_dict()
        == again.to_dict()
    )


@pytest.mark.parametrize("where", ["test", "layout", "speedup"])
def test_report_json_with_an_unknown_key_is_refused(results, where):
    data = results.to_dict()
    tests = data["exercises"]["ex04_sharded_layer"]["tests"]
    target = {
        "test": tests[0],
        "layout": tests[2]["layouts"][0]["expected"],
        "speedup": tests[7]["speedup"],
    }[where]
    target["surprise"] = 1
    with pytest.raises(MalformedResult, match="unknown key.*surprise"):
        GradingResults.from_dict(data)


# -- JUnit XML ----------------------------------------------------------------------------------------


def counts(element: ET.Element) -> dict[str, int]:
    return {key: int(element.get(key)) for key in ("tests", "failures", "errors", "skipped")}


def test_junit_counts_per_exercise_and_in_total(results):
    root = ET.fromstring(reports.junit_xml(results))
    assert root.tag == "testsuites"
    assert counts(root) == {"tests": 14, "failures": 2, "errors": 2, "skipped": 4}
    suites = {suite.get("name"): suite for suite in root.findall("testsuite")}
    assert list(suites) == ["ex01_meshes", "ex04_sharded_layer", "ex02_sharding_properties"]
    assert counts(suites["ex01_meshes"]) == {"tests": 3, "failures": 0, "errors": 0, "skipped": 0}
    assert counts(suites["ex04_sharded_layer"]) == {
        "tests": 9,
        "failures": 2,
        "errors": 2,
        "skipped": 2,
    }
    assert counts(suites["ex02_sharding_properties"]) == {
        "tests": 2,
        "failures": 0,
        "errors": 0,
        "skipped": 2,
    }
    assert len(suites["ex04_sharded_layer"].findall("testcase")) == 9
    assert suites["ex04_sharded_layer"].get("time") == "2.250"
    suite_properties = {
        p.get("name"): p.get("value") for p in suites["ex02_sharding_properties"].find("properties")
    }
    assert suite_properties == {
        "title": "What a sharding says",
        "score": "0.0",
        "max_score": "10.0",
        "note": "module missing: not attempted",
    }


def test_junit_testcases_carry_outcome_and_points(results):
    suite = ET.fromstring(reports.junit_xml(results)).find("testsuite[@name='ex04_sharded_layer']")
    cases = {c.get("name"): c for c in suite.findall("testcase")}
    assert {c.get("classname") for c in cases.values()} == {
        "ex04_sharded_layer.test_visible",
        "ex04_sharded_layer.test_hidden",
    }
    assert (
        cases["test_layer_auto_values[4dev]"].get("classname") == "ex04_sharded_layer.test_hidden"
    )
    assert cases["test_layer_auto_values[4dev]"].get("time") == "0.250"

    def outcome(name):
        children = [c for c in cases[name] if c.tag != "properties"]
        return [(c.tag, c.get("type"), c.get("message")) for c in children]

    assert outcome("test_layer_auto_shape[2dev]") == []
    assert outcome("test_layer_auto_values[4dev]") == [
        ("failure", "timeout", "timeout: the test ran longer than 60 s")
    ]
    assert outcome("test_layer_manual") == [
        ("error", "error", "error: ZeroDivisionError: division by zero")
    ]
    assert outcome("test_layer_collectives")[0][:2] == ("error", "crashed")
    assert outcome("test_layer_features") == [
        ("skipped", "not attempted", "not attempted: ex04: layer_features")
    ]
    assert outcome("test_layer_large") == [
        ("skipped", "skipped", "skipped: timing checks are off (--timing=skip)")
    ]
    assert (
        cases["test_layer_manual"]
        .find("error")
        .text.endswith("raised at ex04_sharded_layer.py:12 in layer: 1 / 0")
    )
    properties = {
        p.get("name"): p.get("value") for p in cases["test_layer_speedup[8dev]"].iter("property")
    }
    assert properties["score"] == properties["max_score"] == "5.0"
    assert properties["category"] == "passed" and properties["hidden"] == "true"
    assert properties["speedup"].startswith("layer_auto vs replicated: speedup 7.91x")


def test_junit_survives_control_characters_from_student_output(results, tmp_path):
    text = reports.junit_xml(results)
    assert "\x00" not in text and "\x1b" not in text and "\udcff" not in text
    path = reports.write_junit_xml(results, tmp_path / "junit.xml")
    root = ET.parse(path).getroot()  # parsed from the UTF-8 bytes on disk, as CI reads it
    failure = root.find(".//testcase[@name='test_layer_auto_shape[8dev]']/failure")
    assert failure.get("message") == f"failed: {SPECIAL_PRINTED}"
    assert failure.text == f"failed: {SPECIAL_PRINTED}"
    raw = path.read_text(encoding="utf-8")  # non-ASCII stays as text, markup is escaped
    assert "≠ P() — données &lt;b&gt;&amp;&lt;/b&gt;" in raw


def test_printable_strips_colours_and_writes_out_what_xml_cannot_hold():
    assert reports.printable("\x1b[1;31mred\x1b[0m \x1b]0;title\x07done") == "red done"
    assert reports.printable("a\x00b\x07c\x1bd\tok\nnew\r") == "a\\x00b\\x07c\\x1bd\tok\nnew\r"
    assert reports.printable("\ud800\ufffe é 中 🙂") == "\\ud800\\ufffe é 中 🙂"


# -- terminal summary --------------------------------------------------------------------------------


def rendered(results: GradingResults) -> list[str]:
    console = Console(record=True, width=120, file=io.StringIO())
    reports.print_summary(results, console)
    return console.export_text().splitlines()


def row(lines: list[str], first_cell: str) -> list[list[str]]:
    """The cells of the table row whose first line starts with first_cell, one list per line of the row
    (a row goes on while its score cell is empty)."""

    def cells(line: str) -> list[str]:
        return [cell.strip() for cell in line.strip("│").split("│")]

    start = next(i for i, line in enumerate(lines) if line.startswith(f"│ {first_cell} "))
    end = start + 1
    while end < len(lines) and lines[end].startswith("│") and cells(lines[end])[1] == "":
        end += 1
    return [cells(line) for line in lines[start:end]]


def test_summary_has_a_row_per_exercise_and_a_total(results):
    lines = rendered(results)
    header = next(line for line in lines if "Exercise" in line)
    assert [cell.strip() for cell in header.strip("┃").split("┃")] == [
        "Exercise",
        "Score",
        "pass",
        "fail",
        "error",
        "t/o",
        "crash",
        "todo",
        "skip",
    ]
    ex01, ex04, ex02 = (
        row(lines, ex) for ex in ("ex01_meshes", "ex04_sharded_layer", "ex02_sharding_properties")
    )
    assert ex01[0] == ["ex01_meshes", "10/10", "3", "0", "0", "0", "0", "0", "0"]
    assert ex01[1][0] == "Devices and meshes"
    assert ex04[0] == ["ex04_sharded_layer", "9.17/20", "3", "1", "1", "1", "1", "1", "1"]
    assert ex04[1][0] == "One layer, three ways"
    assert ex02[0] == ["ex02_sharding_properties", "0/10", "0", "0", "0", "0", "0", "2", "0"]
    assert [cells[0] for cells in ex02[1:]] == [
        "What a sharding says",
        "module missing: not attempted",
    ]
    assert row(lines, "Total") == [["Total", "19.17/40", "6", "1", "1", "1", "1", "3", "1"]]


@pytest.mark.parametrize("width", [80, 120])
def test_summary_of_a_clean_run_fits_the_terminal_uncut(width):
    graded = {
        e.id: score_exercise(
            e, [case(e.id, "test_visible", "test_a", Category.PASSED, weight=e.points)]
        )
        for e in catalog.EXERCISES
    }
    console = Console(record=True, width=width, file=io.StringIO())
    reports.print_summary(GradingResults("bob", graded), console)
    lines = console.export_text().splitlines()
    assert not any("…" in line for line in lines)
    header = next(line for line in lines if "Exercise" in line)
    assert [cell.strip() for cell in header.strip("┃").split("┃")] == ["Exercise", "Score", "pass"]
    for exercise in catalog.EXERCISES:
        assert row(lines, exercise.id)[0] == [
            exercise.id,
            f"{exercise.points}/{exercise.points}",
            "1",
        ]


def test_summary_lists_submission_problems_below_the_table_literally(results):
    lines = rendered(results)
    total = lines.index(next(line for line in lines if line.startswith("│ Total")))
    # markup shown, not applied
    assert lines[total + 2 :] == ["Problems with the submission:", f"  - {PROBLEM}"]
    assert lines[0].strip() == "shardlab: alice"


def test_summary_table_is_a_rich_table(results):
    table = reports.summary_table(results)
    assert table.row_count == 4 and len(table.columns) == 9


# -- writing them all ----------------------------------------------------------------------------------


def test_write_all_creates_the_folder_and_writes_four_reports(results, tmp_path):
    out_dir = tmp_path / "graded" / "alice"
    written = reports.write_all(results, out_dir)
    assert written == {
        "report": out_dir / "report.json",
        "gradescope": out_dir / "results.json",
        "junit": out_dir / "junit.xml",
        "feedback": out_dir / "feedback.html",
    }
    assert sorted(p.name for p in out_dir.iterdir()) == [
        "feedback.html",
        "junit.xml",
        "report.json",
        "results.json",
    ]
    assert written["feedback"].read_text().startswith("<!DOCTYPE html>")
    assert (
        GradingResults.from_dict(json.loads(written["report"].read_text())).score == results.score
    )
    assert gradescope_problems(json.loads(written["gradescope"].read_text())) == []
    assert counts(ET.parse(written["junit"]).getroot())["tests"] == 14
    assert oct(written["junit"].stat().st_mode & 0o777) == oct(0o644)


def test_an_interrupted_write_leaves_the_previous_report_whole(results, tmp_path, monkeypatch):
    target = tmp_path / "report.json"
    target.write_text('{"previous": true}')

    def interrupted(src, dst):
        raise KeyboardInterrupt

    monkeypatch.setattr(os, "replace", interrupted)
    with pytest.raises(KeyboardInterrupt):
        reports.write_report_json(results, target)
    monkeypatch.undo()
    assert json.loads(target.read_text()) == {"previous": True}
    assert [p.name for p in tmp_path.iterdir()] == ["report.json"]  # no half-written temporary left


def test_reports_do_not_change_the_results(results):
    before = copy.deepcopy(results.to_dict())
    reports.gradescope_dict(results)
    reports.junit_xml(results)
    reports.summary_table(results)
    assert results.to_dict() == before


def test_files_that_are_not_exercise_modules_are_listed_as_ignored_not_as_problems():
    graded = GradingResults("bob", {}, ignored=["README.md", "notes/plan.txt"])
    again = GradingResults.from_dict(json.loads(json.dumps(graded.to_dict())))
    assert again.ignored == ["README.md", "notes/plan.txt"] and again.problems == []
    console = Console(record=True, width=120, file=io.StringIO())
    reports.print_summary(again, console)
    text = console.export_text()
    assert "Problems with the submission" not in text
    assert "Ignored, not exercise modules (never loaded): README.md, notes/plan.txt" in text
    output = reports.gradescope_dict(again)["output"]
    assert "Problems" not in output and r"README\.md" in output


def test_a_speedup_of_processor_time_says_so_wherever_its_figures_are_written():
    from grader.core.results import SpeedFigures
    from grader.reports.text import speedup_figures

    wall = SpeedFigures.from_dict(SPEEDUP)
    work = SpeedFigures.from_dict(SPEEDUP | {"clock": "processor"})
    assert "ms of processor time over" in speedup_figures(work)
    assert "processor" not in speedup_figures(wall)
    assert SpeedFigures.from_dict(work.to_dict()) == work
