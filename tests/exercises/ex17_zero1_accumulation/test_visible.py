"""ex17_zero1_accumulation, visible tests (8 devices). Run them with `shardlab check ex17`.

Points (ex17_zero1_accumulation.py's docstring): these tests carry 6 of the 20; the hidden ones check the
same rules on 2, 4 and 8 devices, with 1, 2 and 4 microbatches and other layer sizes and inputs."""

import pytest

N = 8
MB = 4
SIZES = (16, 32, 16, 8)  # every n_in and n_out divides by 8
BATCH = 16  # per microbatch: 2 rows per device


@pytest.mark.points(1)
@pytest.mark.rules("values", "layouts", functions=("accumulate_grads",))
def test_accumulate_grads(impl, problem, checks):
    checks["accumulate"](impl, N, problem(SIZES, MB, BATCH, seed=1))


@pytest.mark.points(1)
@pytest.mark.rules("collectives", "values", "work", "traffic", functions=("accumulate_grads",))
def test_accumulate_grads_reduces_once(impl, problem, checks):
    """One all-reduced array per parameter leaf (6), not per microbatch (24); the whole gradients reduced;
    no all-gather; each device executes at most 2 x its share of the step's multiply-adds (3 MB B W / 8)
    and sends at most 2 (n - 1)/n = 1.75 x the gradients' bytes (and a few scalars)."""
    checks["accumulate_program"](impl, N, problem(SIZES, MB, BATCH, seed=2))


@pytest.mark.points(1)
@pytest.mark.rules("values", "layouts", functions=("zero1_init",))
def test_zero1_init(impl, problem, checks):
    checks["init"](impl, N, problem(SIZES, MB, BATCH, seed=3))


@pytest.mark.points(1)
@pytest.mark.rules("values", "layouts", "training", functions=("zero1_init", "zero1_adam_step"))
def test_zero1_adam_three_steps(impl, problem, checks):
    """Three steps, each against one Adam step on one device, on the mean gradient, from the params and
    state the step before returned: params, loss, m, v and t."""
    checks["steps"](impl, N, problem(SIZES, MB, BATCH, seed=4))


@pytest.mark.points(1)
@pytest.mark.rules("collectives", "values", "work", "traffic", functions=("zero1_adam_step",))
def test_zero1_adam_step_collectives(impl, problem, checks):
    """One reduce-scatter and one all-gather per leaf (6 each), whole gradients in and whole shards out; no
    all-reduce larger than a few scalars (the loss's mean); each device executes at most 2 x its share of
    the step's multiply-adds and sends at most 2 (n - 1)/n = 1.75 x the gradients' bytes (and a few
    scalars)."""
    checks["step_program"](impl, N, problem(SIZES, MB, BATCH, seed=5))


@pytest.mark.points(1)
@pytest.mark.rules("memory", "layouts", "values", functions=("zero1_adam_step",))
def test_zero1_adam_step_argument_bytes(impl, problem, checks):
    """With zero1_init's state: params whole, m and v at 1/8 on each device."""
    checks["argument_bytes"](impl, N, problem(SIZES, MB, BATCH, seed=6))
