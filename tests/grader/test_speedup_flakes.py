"""The speedup test of ex04 must never fail the reference on this machine and never pass a submission
that replicates the work. Each is run REPEATS times (the test itself re-measures near its threshold),
in one process per implementation, so that a flaky threshold shows up here rather than in a grade."""

from pathlib import Path

import pytest

from grader.course import catalog
from grader.harness.runner import run_tests

REPEATS = 20
SPEEDUP_TEST = "test_hidden.py::test_layer_shard_map_speedup_over_replicated"
REPLICATES_WORK = Path(__file__).parent / "submissions" / "replicates_work"


def repeated(impl):
    target = catalog.get("ex04").tests_dir() / SPEEDUP_TEST
    run = run_tests(impl, tests=[target], extra_args=(f"--repeat={REPEATS}",))
    assert len(run.tests) == REPEATS, run.output[-2000:]
    return run


def _figures(run):
    return ", ".join(f"{e['speedup']['speedup']:.2f}x" for e in run.tests if e["speedup"])


@pytest.mark.slow
def test_reference_never_fails_the_speedup_threshold():
    run = repeated("reference")
    outcomes = [e["category"] for e in run.tests]
    print(f"reference over {REPEATS} runs: {_figures(run)}")
    assert outcomes == ["passed"] * REPEATS, f"{outcomes.count('passed')}/{REPEATS} passed: {_figures(run)}"


@pytest.mark.slow
def test_replicated_work_never_passes_the_speedup_threshold():
    run = repeated(REPLICATES_WORK)
    outcomes = [e["category"] for e in run.tests]
    print(f"replicated work over {REPEATS} runs: {_figures(run)}")
    assert outcomes == ["failed"] * REPEATS, f"{outcomes.count('failed')}/{REPEATS} failed: {_figures(run)}"
    assert all("not fast enough" in e["message"] for e in run.tests)
