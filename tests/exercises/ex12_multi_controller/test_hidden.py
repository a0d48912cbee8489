"""ex12_multi_controller, hidden tests: 4 processes of 2 host devices each (the visible tests run 2 of 4), with
the same checks (the conftest's), the join of every process included.

Points (the module docstring of ex12_multi_controller.py): the weights are points out of 15; these tests carry
9 of them, each function's share 1.5 times its visible test's."""

import pytest

pytestmark = pytest.mark.hidden

PROCESSES, DEVICES = 4, 2


@pytest.fixture
def run(cluster):
    return cluster(PROCESSES, DEVICES)


@pytest.mark.points(0.75)
@pytest.mark.rules("joins", functions=("initialize",))
def test_initialize_4_processes(run, check):
    check.initialize(run)


@pytest.mark.points(1.5)
@pytest.mark.rules("values", "joins", functions=("process_summary",))
def test_process_summary_4_processes(run, check):
    check.process_summary(run)


@pytest.mark.points(2.25)
@pytest.mark.rules("values", "joins", functions=("global_from_local",))
def test_global_from_local_4_processes(run, check):
    check.global_from_local(run)


@pytest.mark.points(1.5)
@pytest.mark.rules("values", "joins", functions=("global_sum",))
def test_global_sum_4_processes(run, check):
    check.global_sum(run)


@pytest.mark.points(1.5)
@pytest.mark.rules("values", "joins", functions=("gather_to_host",))
def test_gather_to_host_4_processes(run, check):
    check.gather_to_host(run)


@pytest.mark.points(1.5)
@pytest.mark.rules("properties", "joins", functions=("barrier",))
def test_barrier_4_processes(run, check):
    check.barrier(run)
