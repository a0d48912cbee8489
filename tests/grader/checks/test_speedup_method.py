"""The speedup method on workloads whose ratio is known: durations on a stopwatch the workload moves, and
sleeps of fixed lengths where the real clock is the point."""

import time

import pytest

from grader.checks import (
    SpeedupResult,
    TimingPolicy,
    calibration_speedup,
    judge,
    measure_speedup,
    speedup,
)
from grader.checks.speedup import Clock


def sleeper(seconds):
    return lambda: time.sleep(seconds)


class Stopwatch:
    """A wall clock that moves only when a workload says it took time: the method's figures then do not
    depend on how busy the machine is (a 12 ms sleep measured 18 ms beside the suite's other worker)."""

    def __init__(self):
        self.now = 0.0

    def __call__(self) -> float:
        return self.now

    def taking(self, seconds):
        def work():
            self.now += seconds

        return work


@pytest.fixture
def stopwatch(monkeypatch):
    watch = Stopwatch()
    monkeypatch.setitem(speedup._CLOCKS, Clock.WALL, watch)
    return watch


def test_ratio_of_known_durations(stopwatch):
    result = measure_speedup(
        stopwatch.taking(0.048), stopwatch.taking(0.012), threshold=2.0, label="known", devices=8
    )
    assert result.speedup == pytest.approx(4.0)
    assert result.spread == pytest.approx((4.0, 4.0))  # quartiles of the pairwise ratios
    assert result.baseline_s == pytest.approx(0.048) and result.candidate_s == pytest.approx(0.012)
    assert result.met and not result.near_threshold
    assert result.repeats == 9  # far from the threshold: no extra repeats


def test_quartiles_are_of_the_pairwise_ratios(stopwatch):
    """Every third baseline run takes twice as long: the median ratio stays 2, the upper quartile is 4."""
    runs = iter(range(1000))
    durations = lambda: 0.02 if next(runs) % 3 == 2 else 0.01  # noqa: E731

    def baseline():
        stopwatch.now += durations()

    result = measure_speedup(
        baseline, stopwatch.taking(0.005), threshold=1.2, label="uneven", devices=2, warmup=0
    )
    low, high = result.spread
    assert result.speedup == pytest.approx(2.0) and low == pytest.approx(2.0)
    assert high == pytest.approx(4.0)


@pytest.mark.parametrize(
    ("baseline", "candidate", "repeats", "near"),
    [(0.048, 0.048, 15, True), (0.03, 0.01, 5, False)],
    ids=["near: measured to the most repeats", "far: one batch"],
)
def test_repeats_are_added_only_near_the_threshold(stopwatch, baseline, candidate, repeats, near):
    result = measure_speedup(
        stopwatch.taking(baseline),
        stopwatch.taking(candidate),
        threshold=1.0,
        label="equal" if near else "far",
        devices=2,
        repeats=5,
        max_repeats=15,
    )
    assert result.repeats == repeats
    assert result.near_threshold == near


def test_summary_carries_every_figure():
    result = measure_speedup(
        sleeper(0.004), sleeper(0.002), threshold=1.5, label="halved", devices=4, calibration=1.9
    )
    text = result.summary()
    for part in (
        "halved: speedup",
        "IQR",
        "ms ->",
        "interleaved repeats",
        "threshold 1.50x",
        "the machine gives 1.90x",
        "4 devices on",
        "cores (cpu)",
    ):
        assert part in text
    assert result.as_dict()["met"] is True


def test_warmup_and_compilation_are_not_timed():
    calls = []

    def slow_first_call():
        time.sleep(0.2 if not calls else 0.002)
        calls.append(1)

    result = measure_speedup(
        sleeper(0.002),
        slow_first_call,
        threshold=0.5,
        label="warm",
        devices=2,
        warmup=1,
        repeats=5,
        max_repeats=5,
    )
    assert result.candidate_s < 0.05


def _result(speedup, threshold):
    return SpeedupResult(
        "x", speedup, (speedup, speedup), 1.0, 1.0 / speedup, 9, threshold, 8, 2, "cpu", False
    )


def test_policy_enforce_fails_below_the_threshold_with_the_figures():
    with pytest.raises(
        AssertionError, match=r"not fast enough: x: speedup 1.00x .* threshold 4.00x"
    ):
        judge(_result(1.0, 4.0), TimingPolicy.ENFORCE)
    judge(_result(5.0, 4.0), TimingPolicy.ENFORCE)


def test_policy_report_never_fails():
    judge(_result(1.0, 4.0), TimingPolicy.REPORT)


def test_calibration_is_measured_once_per_device_count():
    from grader.checks import speedup

    speedup._CALIBRATIONS.pop(2, None)
    first = calibration_speedup(2)
    assert first > 0 and speedup._CALIBRATIONS[2] == first
    assert calibration_speedup(2) == first
