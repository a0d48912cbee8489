"""The figures of a training step's pictures, from the real harness to report.json and the page: ex16's
tests call assert_executed (the ring's collective-permutes, ulysses' all-to-alls) and assert_memory (the
ring's temporaries below the whole K and V), so grading its reference records ExecutedRule and MemoryCheck
facts in the harness, which travel to the grading process and back out of report.json unchanged."""

from __future__ import annotations

import json

import pytest

from grader.core.results import TestResult
from grader.course import catalog, paths
from grader.grading.engine import grade_submission
from grader.reports import feedback_page
from grader.reports.writers import write_report_json

# One grading of an exercise (tens of seconds on 2 cores): slow.
pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("test_step_facts")]

EX16 = catalog.get("ex16_context_parallel")


@pytest.fixture(scope="module")
def reference():
    # the visible tests sample every rule kind the hidden ones grade: the ring's memory and counts among them
    return grade_submission(
        paths.SOLUTIONS_DIR, exercises=[EX16.id], timing="skip", visible_only=True
    )


def test_the_step_figures_reach_report_json_and_the_page(reference, tmp_path):
    tests = reference.exercises[EX16.id].tests
    rules = [c.executed_rule for t in tests for c in t.collectives if c.executed_rule is not None]
    memory = [m for t in tests for m in t.memory]
    assert rules and memory
    assert all(
        r.actual is not None and r.actual > 0 for r in rules
    )  # the reference's loops are static
    assert all(
        m.passed and m.temp_below is not None and m.temp_bytes < m.temp_below for m in memory
    )
    data = json.loads(write_report_json(reference, tmp_path / "report.json").read_text())
    again = [TestResult.from_dict(t, ignore=("name",)) for t in data["exercises"][EX16.id]["tests"]]
    assert again == tests
    card = "".join(feedback_page.test_card(t) for t in tests if t.memory)
    assert card.count('class="memory-check"') == len(memory) and 'data-over="true"' not in card
    steps = "".join(feedback_page.test_card(t) for t in tests if t.collectives)
    assert 'class="rule-row held"' in steps and 'class="rule-row failed"' not in steps
    # one table per program, however many checks read it
    assert steps.count('class="program-check"') == sum(
        len(t.programs) for t in tests if t.collectives
    )
