"""ex12_multi_controller, visible tests: 2 processes of 4 host devices each. Run them with `shardlab check ex12`.

All tests read one run, in which every process calls your functions in order; the first test to ask
starts it (a few seconds: every process imports jax). Every test first checks that the tests saw each
process join the others (the module docstring says how), exactly as the hidden tests do with 4 processes.

Points (ex12_multi_controller.py's docstring): these tests carry 6 of the 15; the hidden ones check the same
with 4 processes of 2 devices, for 9."""

import pytest

PROCESSES, DEVICES = 2, 4


@pytest.fixture
def run(cluster):
    return cluster(PROCESSES, DEVICES)


@pytest.mark.points(0.5)
@pytest.mark.rules("joins", functions=("initialize",))
def test_initialize(run, check):
    check.initialize(run)


@pytest.mark.points(1)
@pytest.mark.rules("values", "joins", functions=("process_summary",))
def test_process_summary(run, check):
    check.process_summary(run)


@pytest.mark.points(1.5)
@pytest.mark.rules("values", "joins", functions=("global_from_local",))
def test_global_from_local(run, check):
    check.global_from_local(run)


@pytest.mark.points(1)
@pytest.mark.rules("values", "joins", functions=("global_sum",))
def test_global_sum(run, check):
    check.global_sum(run)


@pytest.mark.points(1)
@pytest.mark.rules("values", "joins", functions=("gather_to_host",))
def test_gather_to_host(run, check):
    check.gather_to_host(run)


@pytest.mark.points(1)
@pytest.mark.rules("properties", "joins", functions=("barrier",))
def test_barrier(run, check):
    check.barrier(run)
