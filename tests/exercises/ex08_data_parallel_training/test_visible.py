"""ex08_data_parallel_training, visible tests (8 devices). Run them with `shardlab check ex08`.

Points (ex08_data_parallel_training.py's docstring): these tests carry 7.5 of the 20. The hidden ones check the
same on 2, 4 and 8 devices with other inputs, five steps of training, the compiled steps on 2, 4 and 8
devices, and both steps' speed on a batch twice as large."""

import jax
import numpy as np
import pytest
from jax.sharding import NamedSharding, PartitionSpec as P

from grader.checks import assert_close_or_named, assert_sharded_like, test_mesh

LR = 0.05  # the conftest's default
N = 8
N_BATCH = 192  # 24 rows per device
PROGRAM_BATCH = 384  # the conftest's: the compiled steps' batch, 48 rows per device
SPEED_BATCH = 8192  # the timed step's batch (the hidden speed tests' is 16384)


def placed(mesh, params, x, y):
    data = NamedSharding(mesh, P("data", None))
    return (
        jax.device_put(params, NamedSharding(mesh, P())),
        jax.device_put(x, data),
        jax.device_put(y, data),
    )


@pytest.mark.points(1)
@pytest.mark.rules("values", "layouts")
def test_shard_batch(impl, problem, dealt_rows):
    mesh = test_mesh((N,), ("data",), "explicit")
    _, x, y = problem(N_BATCH)
    xs, ys = impl.shard_batch(x, y, mesh)
    if isinstance(
        xs, jax.Array
    ):  # rows dealt like cards named first; then the layout and the shards
        assert_close_or_named(np.asarray(xs), x, [dealt_rows(x, N)], rtol=0, atol=0, name="x")
    assert_sharded_like(xs, mesh, P("data", None), x, rtol=0, atol=0, name="x")
    assert_sharded_like(ys, mesh, P("data", None), y, rtol=0, atol=0, name="y")


@pytest.mark.points(1)
@pytest.mark.rules("values", "layouts")
def test_replicate(impl, problem):
    mesh = test_mesh((N,), ("data",), "explicit")
    params, _, _ = problem(N_BATCH)
    out = impl.replicate(params, mesh)
    assert isinstance(out, list) and len(out) == len(params), (
        f"replicate should return a list of {len(params)} (W, b)"
    )
    for i, ((W, b), (W0, b0)) in enumerate(zip(out, params)):
        assert_sharded_like(W, mesh, P(), W0, rtol=0, atol=0, name=f"W of layer {i}")
        assert_sharded_like(b, mesh, P(), b0, rtol=0, atol=0, name=f"b of layer {i}")


@pytest.mark.points(1)
@pytest.mark.rules("values", "layouts")
def test_train_step(impl, problem, check_trained):
    mesh = test_mesh((N,), ("data",), "explicit")
    params, x, y = problem(N_BATCH)
    new, loss = impl.train_step(*placed(mesh, params, x, y), LR)
    check_trained(new, loss, mesh, params, x, y, lr=LR, what="train_step's new params")


@pytest.mark.points(1)
@pytest.mark.rules("values", "layouts")
def test_train_step_shard_map(impl, problem, check_trained):
    mesh = test_mesh((N,), ("data",), "explicit")
    params, x, y = problem(N_BATCH)
    new, loss = impl.train_step_shard_map(*placed(mesh, params, x, y), LR, mesh)
    check_trained(new, loss, mesh, params, x, y, lr=LR, what="train_step_shard_map's new params")


@pytest.mark.points(1)
@pytest.mark.rules("values", "layouts", "training")
def test_train_worked_example(impl, problem, check_trained):
    """The lab's worked example: the same 10 steps both ways, the losses going down like one device's."""
    mesh = test_mesh((N,), ("data",), "explicit")
    params, x, y = problem(N_BATCH)
    for use_shard_map in (False, True):
        out, losses = impl.train(params, x, y, mesh, steps=10, lr=LR, use_shard_map=use_shard_map)
        check_trained(
            out,
            losses,
            mesh,
            params,
            x,
            y,
            lr=LR,
            steps=10,
            what=f"the params train(..., use_shard_map={use_shard_map}) returns",
        )


STEPS = {
    "train_step": lambda impl: lambda mesh, p, x, y: impl.train_step(p, x, y, LR),
    "train_step_shard_map": lambda impl: (
        lambda mesh, p, x, y: impl.train_step_shard_map(p, x, y, LR, mesh)
    ),
}


@pytest.mark.points(1)
@pytest.mark.rules("collectives", "values", "work", "traffic", functions=("{what}",))
@pytest.mark.parametrize("what", list(STEPS))
def test_compiled_step(impl, what, problem, check_program):
    """The step compiled inside the test's own jax.jit: it computes single-device SGD's step, its program
    all-reduces (the gradients) and all-gathers nothing with the batch's rows, and each device executes at
    most twice its share of the step's matmuls and sends at most one all-reduce of the gradients (and a
    quarter more)."""
    params, x, y = problem(PROGRAM_BATCH, seed=1)
    check_program(STEPS[what](impl), what, test_mesh((N,), ("data",), "explicit"), params, x, y)


@pytest.mark.points(0.5)
@pytest.mark.rules("speedup", "values", functions=("train_step",))
def test_train_step_speedup(impl, check_speedup_over_replicated):
    """train_step (the compiler's partitioning), timed like train_step_shard_map below."""
    check_speedup_over_replicated(STEPS["train_step"](impl), "train_step", SPEED_BATCH)


@pytest.mark.points(1)
@pytest.mark.rules("speedup", "values", functions=("train_step_shard_map",))
def test_train_step_shard_map_speedup(impl, check_speedup_over_replicated):
    """train_step_shard_map, timed on a large batch against every device taking the whole batch's step
    itself: it must be at least 3.2 times faster on 8 devices."""
    check_speedup_over_replicated(
        STEPS["train_step_shard_map"](impl), "train_step_shard_map", SPEED_BATCH
    )
