"""ex17_zero1_accumulation, hidden tests: the same rules as the visible ones on 2, 4 and 8 devices, with 1,
2 and 4 microbatches, other layer sizes and inputs. Every structure and memory rule checks the values of the
program it read.

Points (the module docstring of ex17_zero1_accumulation.py): out of 20, the visible tests' included."""

import pytest

pytestmark = pytest.mark.hidden

SIZES = (24, 16, 40, 8)  # every n_in and n_out divides by 8
BATCH = 16
MICROBATCHES = {2: 4, 4: 1, 8: 2}  # each mesh size with another MB


def _case(problem, n, seed, mb=None):
    return problem(SIZES, MICROBATCHES[n] if mb is None else mb, BATCH, seed=100 * n + seed)


@pytest.mark.points(2)
@pytest.mark.rules("values", "layouts", functions=("accumulate_grads",))
def test_accumulate_grads_values(impl, n_devices, problem, checks):
    checks["accumulate"](impl, n_devices, _case(problem, n_devices, 1))


@pytest.mark.points(2)
@pytest.mark.rules("collectives", "values", "work", "traffic", functions=("accumulate_grads",))
def test_accumulate_grads_program(impl, n_devices, problem, checks):
    checks["accumulate_program"](impl, n_devices, _case(problem, n_devices, 2, mb=4))


@pytest.mark.points(2)
@pytest.mark.rules("values", "layouts", functions=("zero1_init",))
def test_zero1_init_values(impl, n_devices, problem, checks):
    checks["init"](impl, n_devices, _case(problem, n_devices, 3))


@pytest.mark.points(3)
@pytest.mark.rules("values", "layouts", "training", functions=("zero1_init", "zero1_adam_step"))
def test_zero1_adam_steps(impl, n_devices, problem, checks):
    checks["steps"](impl, n_devices, _case(problem, n_devices, 4))


@pytest.mark.points(3)
@pytest.mark.rules("collectives", "values", "work", "traffic", functions=("zero1_adam_step",))
def test_zero1_adam_step_program(impl, n_devices, problem, checks):
    checks["step_program"](impl, n_devices, _case(problem, n_devices, 5, mb=4))


@pytest.mark.points(2)
@pytest.mark.rules("memory", "layouts", "values", functions=("zero1_adam_step",))
def test_zero1_argument_bytes(impl, n_devices, problem, checks):
    checks["argument_bytes"](impl, n_devices, _case(problem, n_devices, 6))
