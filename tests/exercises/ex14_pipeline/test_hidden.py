"""ex14_pipeline, hidden tests: the schedule and bubble fractions on many sizes, every function on 2, 4 and
8 stages with other M, B, F and R (M = S included for the circular pipeline), the training step on 1x2,
2x2 and 4x2 ("data", "stage") meshes.

Points (the module docstring of ex14_pipeline.py): the weights are points out of 20, the visible tests'
included. The compiled programs are checked by the conftest's helpers, which the visible tests sample."""

import math

import pytest

from grader.checks import test_mesh

pytestmark = pytest.mark.hidden


def _stages(S):
    return test_mesh((S,), ("stage",), "explicit")


@pytest.mark.points(1)
@pytest.mark.rules("values")
def test_gpipe_schedule_exact(impl):
    for S in range(1, 10):
        for M in (1, 2, 3, 5, 7, 12):
            want = [[t - s if 0 <= t - s < M else -1 for t in range(M + S - 1)] for s in range(S)]
            got = impl.gpipe_schedule(S, M)
            rows = [list(row) for row in got] if isinstance(got, (list, tuple)) else got
            assert rows == want, f"gpipe_schedule({S}, {M}) returned {got}; expected {want}"


@pytest.mark.points(1)
@pytest.mark.rules("values")
def test_bubble_fraction_exact(impl):
    for S in (1, 2, 3, 4, 8, 16):
        for M in (1, 2, 5, 8, 13):
            for R in (1, 2, 3, 5):
                want = (S - 1) / (R * M + S - 1)
                got = impl.bubble_fraction(S, M, R) if R > 1 else impl.bubble_fraction(S, M)
                assert isinstance(got, float) and math.isclose(got, want, rel_tol=1e-12), (
                    f"bubble_fraction({S}, {M}, {R}) returned {got!r}; expected the float {want!r}, "
                    "(S - 1) / (R*M + S - 1)"
                )


@pytest.mark.points(1)
@pytest.mark.rules("values", "layouts")
def test_pipeline_forward_values(impl, n_devices, weights, microbatches, check_forward):
    S = n_devices
    M, B, F = S + 3, 2, 8
    check_forward(
        impl, "pipeline_forward", _stages(S), weights((S, F, F), 20 + S), microbatches(M, B, F, S)
    )


@pytest.mark.points(2)
@pytest.mark.rules("collectives", "values", "work", "traffic", functions=("pipeline_forward",))
def test_pipeline_forward_sends_one_microbatch_between_neighbours(
    impl, n_devices, weights, microbatches, check_sends
):
    """F > 2 (M + S) B: the sends and one hand-out of the outputs cannot carry another stage's weights;
    M >= 2 (S - 1): the bubble keeps a pipeline within twice its share of the work."""
    S = n_devices
    M, B, F = {2: (5, 3, 48), 4: (8, 1, 32), 8: (20, 1, 64)}[S]
    check_sends(impl, _stages(S), weights((S, F, F), 30 + S), microbatches(M, B, F, 40 + S))


@pytest.mark.points(1)
@pytest.mark.rules("memory", "values")
def test_pipeline_forward_memory_one_stage(impl, n_devices, weights, microbatches, check_memory):
    """(128, 128) stages of 64 KiB; measured with the reference (jax 0.10.2, CPU), arguments plus
    temporaries per device 73016 bytes on 2 and 4 devices, 75064 on 8, against the bound of 131072; a
    scan that stacks every step's result 75056 to 91440; gathering the weights adds at least S stages."""
    S = n_devices
    M, B, F = 3, 2, 128
    check_memory(impl, _stages(S), weights((S, F, F), 50 + S), microbatches(M, B, F, 60 + S))


TRAIN_MESHES = {"1x2": (1, 2), "2x2": (2, 2), "4x2": (4, 2)}


@pytest.mark.points(2.5)
@pytest.mark.rules("values", "layouts")
@pytest.mark.parametrize("shape", list(TRAIN_MESHES), ids=list(TRAIN_MESHES))
def test_pipeline_train_step_values(impl, shape, weights, microbatches, check_train_step):
    data, S = TRAIN_MESHES[shape]
    mesh = test_mesh((data, S), ("data", "stage"), "explicit")
    M, B, F = 5, 2 * data, 8
    seed = 70 + data
    check_train_step(
        impl,
        mesh,
        weights((S, F, F), seed),
        microbatches(M, B, F, seed + 1),
        microbatches(M, B, F, seed + 2),
    )


@pytest.mark.points(1)
@pytest.mark.rules("collectives", "values", "work", "traffic")
@pytest.mark.parametrize("shape", ["2x2", "4x2", "2x4"])
def test_pipeline_train_step_pairs_and_gradient_reduction(
    impl, shape, weights, microbatches, check_train_program
):
    """M = 24 >= 3 (S - 1): the bubble keeps a pipeline, and a remat's recompute, within twice its share."""
    data, S = (int(v) for v in shape.split("x"))
    mesh = test_mesh((data, S), ("data", "stage"), "explicit")
    M, B, F = 24, 2 * data, 32
    seed = 80 + data
    check_train_program(
        impl,
        mesh,
        weights((S, F, F), seed),
        microbatches(M, B, F, seed + 1),
        microbatches(M, B, F, seed + 2),
    )


@pytest.mark.points(1)
@pytest.mark.rules("values", "layouts")
@pytest.mark.parametrize("extra", [0, 3], ids=["M=S", "M>S"])
def test_circular_forward_values(impl, n_devices, extra, weights, microbatches, check_forward):
    S = n_devices
    R, M, B, F = 3, S + extra, 2, 8
    check_forward(
        impl,
        "circular_forward",
        _stages(S),
        weights((R, S, F, F), 90 + S + extra),
        microbatches(M, B, F, 100 + S + extra),
    )


@pytest.mark.points(1)
@pytest.mark.rules("collectives", "values", "work", "traffic", functions=("circular_forward",))
def test_circular_forward_sends_round_one_cycle(
    impl, n_devices, weights, microbatches, check_sends
):
    S = n_devices
    R, M, B, F = {2: (3, 3, 2, 32), 4: (2, 5, 1, 32), 8: (3, 8, 1, 48)}[S]
    check_sends(impl, _stages(S), weights((R, S, F, F), 110 + S), microbatches(M, B, F, 120 + S))
