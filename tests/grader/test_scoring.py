"""How an exercise's points are shared: by weight, earned by a passed test or one skipped by policy or
platform, never by a failure, and never by a report-only test (weight 0)."""

import pytest

from grader.course import catalog
from grader.grading.results import TestResult, score_exercise
from grader.harness.outcomes import Category

EX04 = catalog.get("ex04_sharded_layer")


def result(name: str, category: Category, weight: float = 1.0) -> TestResult:
    return TestResult(nodeid=f"test_hidden.py::{name}", exercise=EX04.id, hidden=True, weight=weight,
                      category=category.value)


@pytest.mark.parametrize("category, earns", [(Category.PASSED, True), (Category.SKIPPED, True),
                                             (Category.FAILED, False), (Category.ERROR, False),
                                             (Category.TIMEOUT, False), (Category.CRASHED, False),
                                             (Category.NOT_ATTEMPTED, False)])
def test_what_earns_a_share(category, earns):
    scored = score_exercise(EX04, [result("a", category), result("b", Category.FAILED, weight=3)])
    first = scored.tests[0]
    assert first.max_score == pytest.approx(EX04.points / 4)
    assert first.score == (first.max_score if earns else 0.0)


def test_a_report_only_test_carries_no_points():
    scored = score_exercise(EX04, [result("figure", Category.PASSED, weight=0), result("rule", Category.FAILED)])
    assert scored.tests[0].max_score == 0 and scored.score == 0
    assert scored.tests[1].max_score == EX04.points
