"""report.json's environment.time_limits says what a test's limit counts and what caps it."""

from grader.harness.time_limits import WALL_MULTIPLIER, TimeLimits


def test_report_json_says_what_a_limit_counts_and_its_wall_clock_cap():
    described = TimeLimits(override=4.0).describe()
    assert described["measures"].startswith("processor time")
    assert described["wall_clock_cap_multiplier"] == WALL_MULTIPLIER
