"""Points as a student reads them: exact for every weight a test of the course has (0.125 is "0.125", never
"0.12"), the same words on the page, in the Markdown and in the terminal; a visible-only score reads as what
passed of the visible points, never as a fraction of the maximum ("6/7 of 20"). The machine formats
(Gradescope's numbers, JUnit's properties) keep their own precision."""

from __future__ import annotations

import importlib.util
import io
import json
import math
import re
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from rich.console import Console

import grader.platforms
from grader.core.results import Category, TestResult
from grader.course import catalog
from grader.grading.collection import collect_tests
from grader.grading.results import GradingResults, score_exercise
from grader.reports import writers
from grader.reports.feedback_page import feedback_page
from grader.reports.text import points


@pytest.fixture(scope="module")
def weights() -> list[float]:
    """Every distinct weight a test of the course has (a function's points over its parametrized cases)."""
    found: list[float] = []
    for test in collect_tests():
        if not any(math.isclose(test.weight, w, abs_tol=1e-9) for w in found):
            found.append(test.weight)
    return sorted(found)


def test_every_weight_of_the_course_is_shown_exactly_and_apart(weights):
    assert len(weights) > 3  # the collection found the course's tests
    shown = {w: points(w) for w in weights}
    # no two weights read the same; a weight five decimals hold is shown exactly, any other to 0.5%
    assert len(set(shown.values())) == len(weights), shown
    for weight, text in shown.items():
        if abs(round(weight, 5) - weight) < 1e-9:
            assert abs(float(text) - weight) < 1e-9, (weight, text)
        else:
            assert abs(float(text) - weight) < 0.005 * weight, (weight, text)


def test_points_keep_the_short_forms():
    values = (20.0, 0.125, 0.03125, 1 / 36, 2.5, 20 / 3, 0.0, 1 / 3, 0.1 + 0.2, 195.0)
    assert [points(v) for v in values] == [
        "20",
        "0.125",
        "0.03125",
        "0.0278",
        "2.5",
        "6.67",
        "0",
        "0.333",
        "0.3",
        "195",
    ]


def test_the_handout_ci_shows_points_as_the_grader_does(weights):
    """The handout's .github/grade_summary.py runs without the grader, so it has its own copy."""
    path = Path(grader.platforms.__file__).parent / "templates" / "handout" / "grade_summary.py"
    spec = importlib.util.spec_from_file_location("handout_grade_summary", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    values = [*weights, 20 / 3, 0.875, 195.0, 48.5, 1e-7]
    assert [module.points(v) for v in values] == [points(v) for v in values]


def eighths() -> GradingResults:
    """ex01 graded on its visible tests only: eight cases of one point, 0.125 each, the last failing."""
    ex = catalog.get("ex01")
    tests = [
        TestResult(
            nodeid=f"tests/exercises/{ex.id}/test_visible.py::test_case[{i}]",
            exercise=ex.id,
            hidden=False,
            weight=0.125,
            category=str(Category.FAILED if i == 7 else Category.PASSED),
            message="wrong" if i == 7 else "",
        )
        for i in range(8)
    ]
    return GradingResults("alice", {ex.id: score_exercise(ex, tests)}, visible_only=True)


def test_the_page_markdown_and_terminal_say_the_same_exact_points():
    results = eighths()
    ex = catalog.get("ex01")
    page = re.sub(r"<[^>]+>", "", feedback_page(results))
    assert "0.875 of 1 visible points (of " + points(ex.points) + ")" in page
    assert "0/0.125 points" in page and "0.125/0.125 points" in page
    assert "0.12/" not in page and "6/7 of" not in page
    markdown = writers.gradescope_dict(results)["output"].replace("\\", "")  # Markdown's escapes
    assert "visible tests: 0.875 of the 1 points they check pass" in markdown
    assert "visible: 1 of 10 points checked, 0.875 pass" in markdown
    console = Console(record=True, width=120, file=io.StringIO())
    writers.print_summary(results, console)
    terminal = re.sub(r"\s+", " ", console.export_text())
    assert "0.875 of 1 visible points" in terminal


def test_machine_formats_keep_their_numbers():
    results = eighths()
    gradescope = writers.gradescope_dict(results)
    assert [t["max_score"] for t in gradescope["tests"]] == [0.125] * 8
    assert gradescope["score"] == 0.875
    junit = ET.fromstring(writers.junit_xml(results))
    scores = [
        p.get("value")
        for case in junit.iter("testcase")
        for p in case.iter("property")
        if p.get("name") == "score"
    ]
    assert scores == ["0.125"] * 7 + ["0.0"]
    json.dumps(gradescope)  # numbers, not text
