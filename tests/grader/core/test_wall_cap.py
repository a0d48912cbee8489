"""The wall-clock cap's arithmetic on recorded figures: time spent waiting for a processor is forgiven (up
to WAIT_CREDIT x the cap), time running or asleep is not; and what a timeout was judged on survives
report.json."""

import pytest

from grader.core import wall_cap
from grader.core.results import (
    Category,
    MalformedResult,
    TestResult,
    TimeoutBy,
    TimeoutFigures,
)

CAP = 28.0  # a 10 s limit's cap in the worker: 3 x 10 s, less the 2 s it gives up before the harness's


def figures(**changed) -> TimeoutFigures:
    return TimeoutFigures(
        **{
            "by": "wall-clock cap",
            "limit": 10.0,
            "cap": CAP,
            "cpu": 0.0,
            "wall": 0.0,
            "waited": 0.0,
        }
        | changed
    )


def test_a_call_starved_of_processor_time_is_not_past_its_cap():
    """The failing CI run's first compile of an ex15 test: 40.4 s of wall time at a load of 10-20, of
    which (at that load) most was spent waiting; 8 s of it running."""
    starved = figures(wall=40.4, waited=31.0, cpu=8.0)
    assert not wall_cap.past(starved.wall, starved.waited, CAP)
    assert starved.counted == pytest.approx(9.4)
    # the same call judged on the wall clock alone, as the cap did before, was struck
    assert wall_cap.past(starved.wall, 0.0, CAP)


def test_a_call_asleep_past_its_cap_is_struck():
    asleep = figures(wall=28.3, waited=0.02, cpu=0.01)
    assert wall_cap.past(asleep.wall, asleep.waited, CAP)
    assert asleep.asleep == pytest.approx(28.27)
    # waiting only moves the cap by what was waited: asleep for the whole cap after 5 s of waiting
    assert not wall_cap.past(33.0, 5.0, CAP) and wall_cap.past(33.2, 5.0, CAP)


def test_waiting_is_forgiven_up_to_its_credit_only():
    """A thread kept waiting on purpose (the lowest priority on a busy machine) cannot stretch a call
    that never ends past (1 + WAIT_CREDIT) x the cap."""
    most = (1 + wall_cap.WAIT_CREDIT) * CAP
    assert not wall_cap.past(most, most, CAP)
    assert wall_cap.past(most + 0.1, most + 0.1, CAP)
    assert wall_cap.credited(1e9, CAP) == wall_cap.WAIT_CREDIT * CAP
    assert wall_cap.credited(-1.0, CAP) == 0.0  # a clock read out of order forgives nothing


def test_what_a_timeout_was_judged_on_survives_report_json():
    judged = figures(wall=31.0, waited=1.5, cpu=0.5)
    result = TestResult(
        nodeid="ex01/tests/test_hidden.py::test_x",
        exercise="ex01",
        hidden=True,
        weight=1.0,
        category=Category.TIMEOUT,
        timeout=judged,
    )
    written = result.to_dict()
    assert written["timeout"] == {
        "by": "wall-clock cap",
        "limit": 10.0,
        "cap": CAP,
        "cpu": 0.5,
        "system": 0.0,
        "wall": 31.0,
        "waited": 1.5,
        "asleep": 29.0,
        "counted": 29.5,
    }
    again = TestResult.from_dict(written)
    assert again.timeout == judged and again.timeout.by is TimeoutBy.WALL_CLOCK_CAP
    # a result that did not time out carries no such key
    assert "timeout" not in TestResult.from_dict({**written, "timeout": None}).to_dict()


def test_a_timeout_judged_by_an_unknown_rule_is_refused():
    with pytest.raises(MalformedResult, match="unknown rule 'the moon'"):
        figures(by="the moon")
    with pytest.raises(MalformedResult, match="missing key"):
        TimeoutFigures.from_dict({"by": "processor time", "limit": 1.0})
