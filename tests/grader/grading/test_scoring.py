"""A test's points are its weight, earned by a passed test or one skipped by policy or platform, never by a
failure, and never by a report-only test (weight 0); some of an exercise's tests carry only their own points,
and tests that weigh more than their exercise share its points."""

import pytest

from grader.core.results import Category, TestResult
from grader.course import catalog
from grader.grading.results import score_exercise

EX04 = catalog.get("ex04_sharded_layer")


def result(name: str, category: Category, weight: float = 1.0) -> TestResult:
    return TestResult(
        nodeid=f"test_hidden.py::{name}",
        exercise=EX04.id,
        hidden=True,
        weight=weight,
        category=category.value,
    )


@pytest.mark.parametrize(
    "category, earns",
    [
        (Category.PASSED, True),
        (Category.SKIPPED, True),
        (Category.FAILED, False),
        (Category.ERROR, False),
        (Category.TIMEOUT, False),
        (Category.CRASHED, False),
        (Category.NOT_ATTEMPTED, False),
    ],
)
def test_what_earns_a_share(category, earns):
    scored = score_exercise(EX04, [result("a", category), result("b", Category.FAILED, weight=3)])
    first = scored.tests[0]
    assert first.max_score == 1.0
    assert first.score == (first.max_score if earns else 0.0)


def test_a_report_only_test_carries_no_points():
    scored = score_exercise(
        EX04, [result("figure", Category.PASSED, weight=0), result("rule", Category.FAILED)]
    )
    assert scored.tests[0].max_score == 0 and scored.score == 0
    assert scored.tests[1].max_score == 1.0


def test_the_visible_tests_alone_carry_their_own_points():
    """A visible-only run: 4 of the exercise's 20 points are checked, never the 20 shared among the four."""
    tests = [result(name, Category.PASSED, weight=1.0) for name in "abcd"]
    scored = score_exercise(EX04, tests)
    assert (scored.score, scored.checked, scored.max_score) == (4.0, 4.0, EX04.points)


def test_tests_that_weigh_more_than_their_exercise_share_its_points():
    scored = score_exercise(
        EX04, [result("a", Category.PASSED, weight=30), result("b", Category.FAILED, weight=10)]
    )
    assert [t.max_score for t in scored.tests] == [pytest.approx(15.0), pytest.approx(5.0)]
    assert scored.score == pytest.approx(15.0) and scored.checked == pytest.approx(EX04.points)


def test_a_bonus_exercise_adds_to_the_score_and_not_to_the_maximum():
    from grader.grading.results import GradingResults
    from grader.reports.writers import gradescope_dict

    bonus = next(e for e in catalog.EXERCISES if e.bonus)
    earned = score_exercise(
        bonus,
        [
            TestResult(
                nodeid="test_visible.py::t",
                exercise=bonus.id,
                hidden=False,
                weight=bonus.points,
                category="passed",
            )
        ],
    )
    lost = score_exercise(EX04, [result("rule", Category.FAILED, weight=EX04.points)])
    results = GradingResults("s", {EX04.id: lost, bonus.id: earned})
    assert (results.score, results.max_score) == (bonus.points, EX04.points)
    again = GradingResults.from_dict(results.to_dict())
    assert (again.score, again.max_score) == (bonus.points, EX04.points)
    gradescope = gradescope_dict(results)
    assert (
        gradescope["score"] == bonus.points and gradescope["extra_data"]["max_score"] == EX04.points
    )
    assert "bonus" in gradescope["tests"][1]["tags"]
    assert bonus.bonus and catalog.total_points() == sum(e.points for e in catalog.EXERCISES) - sum(
        e.points for e in catalog.EXERCISES if e.bonus
    )
