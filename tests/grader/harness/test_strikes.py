"""Strikes by function: one function that hangs stops its own tests, not its exercise's; strikes no
function is named for, or too many in all, stop the exercise (grader.harness.strikes)."""

from grader.harness.strikes import (
    MAX_STRIKES_PER_EXERCISE,
    MAX_STRIKES_PER_FUNCTION,
    MAX_UNATTRIBUTED_STRIKES,
    Strikes,
)


def test_a_function_with_its_strikes_is_stopped_and_its_neighbours_are_not():
    strikes = Strikes()
    for _ in range(MAX_STRIKES_PER_FUNCTION - 1):
        strikes.add("ex05", "ring_all_reduce")
    assert strikes.function_stopped("ex05", "ring_all_reduce") is None
    strikes.add("ex05", "ring_all_reduce")
    assert strikes.function_stopped("ex05", "ring_all_reduce") == (
        f"not run: your ring_all_reduce timed out in {MAX_STRIKES_PER_FUNCTION} earlier tests"
    )
    assert strikes.function_stopped("ex05", "all_gather") is None
    assert strikes.function_stopped("ex06", "ring_all_reduce") is None  # another exercise's
    assert not strikes.exercise_stopped("ex05")


def test_strikes_no_function_is_named_for_stop_the_exercise():
    strikes = Strikes()
    for _ in range(MAX_UNATTRIBUTED_STRIKES):
        assert not strikes.exercise_stopped("ex04")
        strikes.add("ex04", None)
    assert strikes.exercise_stopped("ex04") and not strikes.exercise_stopped("ex05")


def test_a_submission_whose_every_function_hangs_costs_a_bounded_number_of_strikes():
    """Each function hangs once: no function reaches its strikes, the exercise's cap stops it."""
    strikes = Strikes()
    for n in range(MAX_STRIKES_PER_EXERCISE):
        assert not strikes.exercise_stopped("ex05")
        strikes.add("ex05", f"function_{n}")
    assert strikes.exercise_stopped("ex05")
    assert all(strikes.function_stopped("ex05", f"function_{n}") is None for n in range(4))


def test_strikes_travel_to_the_next_harness():
    strikes = Strikes()
    strikes.add("ex05", "ring_all_reduce")
    strikes.add("ex05", "ring_all_reduce")
    strikes.add("ex04", None)
    again = Strikes(strikes.as_list())
    assert (
        again.as_list()
        == strikes.as_list()
        == [
            "ex04",
            "ex05:ring_all_reduce",
            "ex05:ring_all_reduce",
        ]
    )
    assert again.function_stopped("ex05", "ring_all_reduce") and again.total("ex04") == 1


def test_a_results_strike_function_travels_and_must_be_a_name():
    import pytest

    from grader.core.results import MalformedResult, TestMeta, TestResult

    meta = TestMeta("t::a", "ex05", hidden=False, slow=False, weight=1.0, limit=10)
    result = meta.result("timeout", "m", strike=True)
    result.strike_function = "ring_all_reduce"
    again = TestResult.from_dict(result.to_dict())
    assert again.strike and again.strike_function == "ring_all_reduce"
    with pytest.raises(MalformedResult, match="strike_function must be a name"):
        TestResult.from_dict(result.to_dict() | {"strike_function": 3})
