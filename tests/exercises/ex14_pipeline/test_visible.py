"""ex14_pipeline, visible tests (8 devices; the training step on a 2x4 ("data", "stage") mesh). Run them
with `shardlab check ex14`.

Points (ex14_pipeline.py's docstring): these tests carry 8.5 of the 20. The hidden ones check the schedule
and bubble fractions on many other sizes, every function on 2, 4 and 8 stages with other M, B, F and R, and
the training step on 1x2, 2x2 and 4x2 meshes."""

import math

import pytest

from grader.checks import test_mesh

LR = 0.5  # the conftest's


def _stages(S=8):
    return test_mesh((S,), ("stage",), "explicit")


def _expected_table(S, M):
    return [[t - s if 0 <= t - s < M else -1 for t in range(M + S - 1)] for s in range(S)]


def check_table(got, S, M):
    want = _expected_table(S, M)
    rows = [list(row) for row in got] if isinstance(got, (list, tuple)) else got
    assert rows == want, (
        f"gpipe_schedule({S}, {M}) returned {got}; expected {want}: {S} rows (one per stage) of "
        f"{M + S - 1} steps, stage s working on microbatch t - s at step t and -1 where it idles"
    )


def check_bubble(got, S, M, R):
    want = (S - 1) / (R * M + S - 1)
    assert isinstance(got, float) and math.isclose(got, want, rel_tol=1e-12, abs_tol=0.0), (
        f"bubble_fraction({S}, {M}, {R}) returned {got!r}; expected the float {want!r}, "
        f"(S - 1) / (R*M + S - 1): {S - 1} idle steps of {R * M + S - 1} per stage"
    )


@pytest.mark.points(1)
@pytest.mark.rules("values")
def test_schedule_and_bubble(impl):
    for S, M in [(4, 6), (3, 2), (8, 1)]:
        check_table(impl.gpipe_schedule(S, M), S, M)
    for S, M, R in [(4, 6, 1), (8, 3, 2), (2, 5, 3)]:
        check_bubble(impl.bubble_fraction(S, M, R), S, M, R)
    check_bubble(impl.bubble_fraction(4, 6), 4, 6, 1)


@pytest.mark.points(1)
@pytest.mark.rules("values", "layouts")
def test_pipeline_forward(impl, weights, microbatches, check_forward):
    S, M, B, F = 8, 6, 3, 16
    check_forward(
        impl, "pipeline_forward", _stages(S), weights((S, F, F), 1), microbatches(M, B, F, 2)
    )


@pytest.mark.points(1)
@pytest.mark.rules("collectives", "values", "work", "traffic", functions=("pipeline_forward",))
def test_pipeline_forward_sends(impl, weights, microbatches, check_sends):
    """16 microbatches through 8 stages: 22 or 23 sends of one (2, 128) microbatch between neighbours
    s -> s+1, no weights moving, each device at most twice its share of the work (its layer on 16
    microbatches; 23 steps with the bubble) and of the bytes, and the right outputs."""
    S, M, B, F = 8, 16, 2, 128
    check_sends(impl, _stages(S), weights((S, F, F), 3), microbatches(M, B, F, 4))


@pytest.mark.points(1)
@pytest.mark.rules("memory", "values")
def test_pipeline_forward_memory(impl, weights, microbatches, check_memory):
    """(128, 128) stages (64 KiB each) and 4 KiB of microbatches: a device holds one stage's weights."""
    S, M, B, F = 8, 4, 2, 128
    check_memory(impl, _stages(S), weights((S, F, F), 5), microbatches(M, B, F, 6))


@pytest.mark.points(1.5)
@pytest.mark.rules("values", "layouts")
def test_pipeline_train_step(impl, weights, microbatches, check_train_step):
    mesh = test_mesh((2, 4), ("data", "stage"), "explicit")
    S, M, B, F = 4, 3, 4, 16
    check_train_step(
        impl, mesh, weights((S, F, F), 7), microbatches(M, B, F, 8), microbatches(M, B, F, 9)
    )


@pytest.mark.points(1)
@pytest.mark.rules("collectives", "values", "work", "traffic")
def test_pipeline_train_step_program(impl, weights, microbatches, check_train_program):
    """On a 2x4 mesh: sends along "stage" within each data row, forward and back; the gradient's all-reduce
    over "data" only; each device at most twice its share of the step's work and its bytes (a row's
    activations and one gradient all-reduce); and the right new ws and loss."""
    mesh = test_mesh((2, 4), ("data", "stage"), "explicit")
    S, M, B, F = 4, 24, 4, 64
    check_train_program(
        impl, mesh, weights((S, F, F), 10), microbatches(M, B, F, 11), microbatches(M, B, F, 12)
    )


@pytest.mark.points(1)
@pytest.mark.rules("values", "layouts")
def test_circular_forward(impl, weights, microbatches, check_forward):
    S, R, M, B, F = 8, 2, 10, 2, 16
    check_forward(
        impl, "circular_forward", _stages(S), weights((R, S, F, F), 13), microbatches(M, B, F, 14)
    )


@pytest.mark.points(1)
@pytest.mark.rules("collectives", "values", "work", "traffic", functions=("circular_forward",))
def test_circular_forward_sends(impl, weights, microbatches, check_sends):
    """9 microbatches twice round 8 stages: 24 or 25 sends of one microbatch round one cycle (7 -> 0
    included), no weights moving, each device at most twice its share of the work and of the bytes, and
    the right outputs."""
    S, R, M, B, F = 8, 2, 9, 2, 64
    check_sends(impl, _stages(S), weights((R, S, F, F), 15), microbatches(M, B, F, 16))
