"""ex08_data_parallel_training, hidden tests: placement, one step and five steps against single-device
SGD on 2, 4 and 8 devices (saying which gradient trap a wrong update fell into), the collectives of a
compiled step, and the speed of both steps against every device training on the whole batch.

Points (the module docstring of ex08_data_parallel_training.py): the weights are points out of 20, the
visible tests' included. The compiled step and the speed are checked by the conftest's helpers, which the
visible tests sample on 8 devices."""

import jax
import pytest
from jax.sharding import NamedSharding, PartitionSpec as P

from grader.checks import assert_sharded_like, calibration_speedup, test_mesh

pytestmark = pytest.mark.hidden

LR = 0.05  # the conftest's defaults
N_BATCH = 192  # the conftest's default batch: on n devices, 192 / n rows each
PROGRAM_BATCH = 384  # the conftest's: the compiled steps' batch
SPEED_BATCH = 16384  # the visible speed test's is 8192


def placed(mesh, params, x, y):
    data = NamedSharding(mesh, P("data", None))
    return (
        jax.device_put(params, NamedSharding(mesh, P())),
        jax.device_put(x, data),
        jax.device_put(y, data),
    )


# --- placement -----------------------------------------------------------------------------------


@pytest.mark.points(1)
@pytest.mark.rules("values", "layouts")
def test_shard_batch_values(impl, n_devices, problem):
    mesh = test_mesh((n_devices,), ("data",), "explicit")
    _, x, y = problem(8 * n_devices, seed=n_devices)
    xs, ys = impl.shard_batch(x, y, mesh)
    assert_sharded_like(xs, mesh, P("data", None), x, rtol=0, atol=0, name="x")
    assert_sharded_like(ys, mesh, P("data", None), y, rtol=0, atol=0, name="y")


@pytest.mark.points(1)
@pytest.mark.rules("values", "layouts")
def test_replicate_values(impl, n_devices, problem):
    mesh = test_mesh((n_devices,), ("data",), "explicit")
    params, _, _ = problem(8, sizes=(3, 7, 2), seed=n_devices)
    out = impl.replicate(params, mesh)
    assert isinstance(out, (list, tuple)) and len(out) == len(params), (
        f"replicate should return a list of {len(params)} (W, b) pairs, got {type(out).__name__}"
    )
    for i, ((W, b), (W0, b0)) in enumerate(zip(out, params)):
        assert_sharded_like(W, mesh, P(), W0, rtol=0, atol=0, name=f"W of layer {i}")
        assert_sharded_like(b, mesh, P(), b0, rtol=0, atol=0, name=f"b of layer {i}")


# --- values: one step, five steps ----------------------------------------------------------------


@pytest.mark.points(1)
@pytest.mark.rules("values", "layouts")
def test_train_step_values(impl, n_devices, problem, check_trained):
    mesh = test_mesh((n_devices,), ("data",), "explicit")
    params, x, y = problem(seed=1)
    new, loss = impl.train_step(*placed(mesh, params, x, y), LR)
    check_trained(new, loss, mesh, params, x, y, lr=LR, what="train_step's new params")


@pytest.mark.points(1)
@pytest.mark.rules("values", "layouts")
def test_train_step_shard_map_values(impl, n_devices, problem, check_trained):
    mesh = test_mesh((n_devices,), ("data",), "explicit")
    params, x, y = problem(seed=2)
    new, loss = impl.train_step_shard_map(*placed(mesh, params, x, y), LR, mesh)
    check_trained(new, loss, mesh, params, x, y, lr=LR, what="train_step_shard_map's new params")


@pytest.mark.points(1.5)
@pytest.mark.rules("values", "layouts", "training")
def test_train_values(impl, n_devices, problem, check_trained):
    mesh = test_mesh((n_devices,), ("data",), "explicit")
    params, x, y = problem(seed=3)
    out, losses = impl.train(params, x, y, mesh, steps=5, lr=LR)
    check_trained(out, losses, mesh, params, x, y, lr=LR, steps=5, what="the params train returns")


@pytest.mark.points(1.5)
@pytest.mark.rules("values", "layouts", "training")
def test_train_shard_map_values(impl, n_devices, problem, check_trained):
    mesh = test_mesh((n_devices,), ("data",), "explicit")
    params, x, y = problem(seed=4)
    out, losses = impl.train(params, x, y, mesh, steps=5, lr=LR, use_shard_map=True)
    check_trained(
        out,
        losses,
        mesh,
        params,
        x,
        y,
        lr=LR,
        steps=5,
        what="the params train(..., use_shard_map=True) returns",
    )


# --- the compiled step ---------------------------------------------------------------------------


@pytest.mark.points(1)
@pytest.mark.rules("collectives", "values", "work", "traffic")
def test_train_step_program(impl, n_devices, problem, check_program):
    params, x, y = problem(PROGRAM_BATCH, seed=5)
    check_program(
        lambda mesh, p, x, y: impl.train_step(p, x, y, LR),
        "train_step",
        test_mesh((n_devices,), ("data",), "explicit"),
        params,
        x,
        y,
    )


@pytest.mark.points(1)
@pytest.mark.rules("collectives", "values", "work", "traffic")
def test_train_step_shard_map_program(impl, n_devices, problem, check_program):
    params, x, y = problem(PROGRAM_BATCH, seed=5)
    check_program(
        lambda mesh, p, x, y: impl.train_step_shard_map(p, x, y, LR, mesh),
        "train_step_shard_map",
        test_mesh((n_devices,), ("data",), "explicit"),
        params,
        x,
        y,
    )


# --- speed ---------------------------------------------------------------------------------------


def _speedup_over_one_device(step, what, speed_setup, speed_candidate, speedup):
    setup = speed_setup(SPEED_BATCH)
    n = setup["mesh"].devices.size
    speedup(
        setup["one_device"],
        speed_candidate(step, setup, what),
        threshold=1.0,
        report_only=True,
        max_repeats=9,
        calibration=lambda: calibration_speedup(n),
        label=f"{what} against one device",
        devices=n,
    )


@pytest.mark.points(1.5)
@pytest.mark.rules("speedup", "values")
def test_train_step_speedup_over_replicated(impl, check_speedup_over_replicated):
    check_speedup_over_replicated(
        lambda mesh, p, x, y: impl.train_step(p, x, y, LR), "train_step", SPEED_BATCH
    )


@pytest.mark.points(2)
@pytest.mark.rules("speedup", "values")
def test_train_step_shard_map_speedup_over_replicated(impl, check_speedup_over_replicated):
    check_speedup_over_replicated(
        lambda mesh, p, x, y: impl.train_step_shard_map(p, x, y, LR, mesh),
        "train_step_shard_map",
        SPEED_BATCH,
    )


@pytest.mark.points(0)
@pytest.mark.rules("speedup", "values")
def test_train_step_speedup_over_one_device(impl, speed_setup, speed_candidate, speedup):
    """Reported, not enforced, no points: 8 host devices share this machine's cores and XLA already
    multithreads one device's step, so this figure measures the machine more than the code. The
    calibration kernel's figure beside it says what the machine can give; the replicated-baseline
    tests above are the ones that grade."""
    _speedup_over_one_device(
        lambda mesh, p, x, y: impl.train_step(p, x, y, LR),
        "train_step",
        speed_setup,
        speed_candidate,
        speedup,
    )


@pytest.mark.points(0)
@pytest.mark.rules("speedup", "values")
def test_train_step_shard_map_speedup_over_one_device(impl, speed_setup, speed_candidate, speedup):
    """Reported, not enforced, no points (see test_train_step_speedup_over_one_device)."""
    _speedup_over_one_device(
        lambda mesh, p, x, y: impl.train_step_shard_map(p, x, y, LR, mesh),
        "train_step_shard_map",
        speed_setup,
        speed_candidate,
        speedup,
    )
