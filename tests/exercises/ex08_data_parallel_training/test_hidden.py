"""ex08_data_parallel_training, hidden tests: placement, one step and five steps against single-device
SGD on 2, 4 and 8 devices (saying which gradient trap a wrong update fell into), the collectives of a
compiled step, and the speed of both steps against every device training on the whole batch."""

import re

import jax
import pytest
from jax.sharding import NamedSharding, PartitionSpec as P

from grader.checks import (
    assert_collectives,
    assert_computes,
    assert_sharded_like,
    calibration_speedup,
    compiled,
    inspect_collectives,
    test_mesh,
)

pytestmark = pytest.mark.hidden

LR = 0.05                          # the conftest's defaults
TOL = dict(rtol=1e-5, atol=1e-6)
N_BATCH = 192                      # the conftest's default batch: on n devices, 192 / n rows each
# Against every device training on the whole batch, a data-parallel step does 1/n of the work plus
# one all-reduce of the gradients (about 2 ms on these host devices), so it stays below ex04's layer.
# Measured on the shapes below at 8 devices, 2 cores shared with other jobs: the reference 5.7x to
# 7.1x, replicated work 0.8x to 1.0x (tests/grader/test_speedup_flakes.py). 0.4 of n (3.2x)
# leaves room for a loaded machine and none for replicated work.
SPEEDUP_FRACTION_OF_N = 0.4
SPEED_SIZES = (16, 64, 64, 4)
SPEED_BATCH = 16384


def placed(mesh, params, x, y):
    data = NamedSharding(mesh, P("data", None))
    return jax.device_put(params, NamedSharding(mesh, P())), jax.device_put(x, data), jax.device_put(y, data)


def _expected_leaves(reference, params, x, y):
    want, losses = reference(params, x, y, lr=LR)
    return [*jax.tree.leaves(want), losses[0]]


# --- placement -----------------------------------------------------------------------------------

def test_shard_batch_values(impl, n_devices, problem):
    mesh = test_mesh((n_devices,), ("data",), "explicit")
    _, x, y = problem(8 * n_devices, seed=n_devices)
    xs, ys = impl.shard_batch(x, y, mesh)
    assert_sharded_like(xs, mesh, P("data", None), x, rtol=0, atol=0, name="x")
    assert_sharded_like(ys, mesh, P("data", None), y, rtol=0, atol=0, name="y")


def test_replicate_values(impl, n_devices, problem):
    mesh = test_mesh((n_devices,), ("data",), "explicit")
    params, _, _ = problem(8, sizes=(3, 7, 2), seed=n_devices)
    out = impl.replicate(params, mesh)
    assert isinstance(out, (list, tuple)) and len(out) == len(params), (
        f"replicate should return a list of {len(params)} (W, b) pairs, got {type(out).__name__}")
    for i, ((W, b), (W0, b0)) in enumerate(zip(out, params)):
        assert_sharded_like(W, mesh, P(), W0, rtol=0, atol=0, name=f"W of layer {i}")
        assert_sharded_like(b, mesh, P(), b0, rtol=0, atol=0, name=f"b of layer {i}")


# --- values: one step, five steps ----------------------------------------------------------------

def test_train_step_values(impl, n_devices, problem, check_trained):
    mesh = test_mesh((n_devices,), ("data",), "explicit")
    params, x, y = problem(seed=1)
    new, loss = impl.train_step(*placed(mesh, params, x, y), LR)
    check_trained(new, loss, mesh, params, x, y, lr=LR, what="train_step's new params")


def test_train_step_shard_map_values(impl, n_devices, problem, check_trained):
    mesh = test_mesh((n_devices,), ("data",), "explicit")
    params, x, y = problem(seed=2)
    new, loss = impl.train_step_shard_map(*placed(mesh, params, x, y), LR, mesh)
    check_trained(new, loss, mesh, params, x, y, lr=LR, what="train_step_shard_map's new params")


def test_train_values(impl, n_devices, problem, check_trained):
    mesh = test_mesh((n_devices,), ("data",), "explicit")
    params, x, y = problem(seed=3)
    out, losses = impl.train(params, x, y, mesh, steps=5, lr=LR)
    check_trained(out, losses, mesh, params, x, y, lr=LR, steps=5, what="the params train returns")


def test_train_shard_map_values(impl, n_devices, problem, check_trained):
    mesh = test_mesh((n_devices,), ("data",), "explicit")
    params, x, y = problem(seed=4)
    out, losses = impl.train(params, x, y, mesh, steps=5, lr=LR, use_shard_map=True)
    check_trained(out, losses, mesh, params, x, y, lr=LR, steps=5,
                  what="the params train(..., use_shard_map=True) returns")


# --- the compiled step ---------------------------------------------------------------------------

def _result_dims(line: str) -> set[int]:
    """Every dimension of an HLO instruction's result shape(s): `%ag = f32[192,12]{1,0} all-gather(...)`."""
    shapes = line.split("=", 1)[1].split("all-gather", 1)[0]
    return {int(d) for dims in re.findall(r"\[([\d,]*)\]", shapes) for d in dims.split(",") if d}


def _assert_data_parallel_program(step, what, n_devices, problem, reference):
    """The values first (a program that computes nothing has no collectives), then no all-gather of
    anything with the batch's rows, then an all-reduce (the gradients' reduction)."""
    mesh = test_mesh((n_devices,), ("data",), "explicit")
    params, x, y = problem(N_BATCH, seed=5)
    args = placed(mesh, params, x, y)
    program = compiled(lambda p, x, y: jax.tree.leaves(step(mesh, p, x, y)), *args)
    expected = _expected_leaves(reference, params, x, y)
    assert_computes(program(*args), expected, **TOL, what=what)
    gathers = [op.line for op in inspect_collectives(program, what=what)
               if op.kind == "all-gather" and N_BATCH in _result_dims(op.line)]
    if gathers:
        raise AssertionError(
            f"the compiled program of {what} all-gathers an array with all {N_BATCH} rows of the batch: every "
            f"device then holds (and works on) the whole batch instead of its {N_BATCH // n_devices} rows. Data "
            "parallelism moves gradients, never data: each device computes on its own block, and only the "
            f"gradients are reduced.\n  {gathers[0][:300]}")
    assert_collectives(program, *args, present=("all-reduce",), expected=expected, **TOL, what=what)


def test_train_step_program(impl, n_devices, problem, reference):
    _assert_data_parallel_program(lambda mesh, p, x, y: impl.train_step(p, x, y, LR), "train_step", n_devices,
                                  problem, reference)


def test_train_step_shard_map_program(impl, n_devices, problem, reference):
    _assert_data_parallel_program(lambda mesh, p, x, y: impl.train_step_shard_map(p, x, y, LR, mesh),
                                  "train_step_shard_map", n_devices, problem, reference)


# --- speed ---------------------------------------------------------------------------------------

_BASELINES: dict = {}   # the speed tests' baseline programs, jitted once per process per device count


def _speed_setup(problem, reference, sgd_step, n):
    """The mesh, the test's own inputs placed for the step, the reference's leaves, and the two baselines
    on the same inputs (their programs jitted once; the inputs are every test's own)."""
    mesh = test_mesh((n,), ("data",), "explicit")
    if n not in _BASELINES:
        # Every device takes the whole batch's step itself: no communication, n times the work.
        everywhere = jax.jit(jax.shard_map(lambda p, x, y: sgd_step(p, x, y, LR), mesh=mesh,
                                           in_specs=(P(), P(), P()), out_specs=(P(), P())))
        _BASELINES[n] = everywhere, jax.jit(lambda p, x, y: sgd_step(p, x, y, LR))
    everywhere, one_device = _BASELINES[n]
    params, x, y = problem(SPEED_BATCH, sizes=SPEED_SIZES)
    replicated = jax.device_put((params, x, y), NamedSharding(mesh, P()))
    alone = jax.device_put((params, x, y), jax.devices()[0])
    return dict(mesh=mesh, args=placed(mesh, params, x, y), expected=_expected_leaves(reference, params, x, y),
                replicated=lambda: everywhere(*replicated), one_device=lambda: one_device(*alone))


def _candidate(step, setup, what):
    mesh, args = setup["mesh"], setup["args"]
    run = jax.jit(lambda p, x, y: jax.tree.leaves(step(mesh, p, x, y)))
    assert_computes(run(*args), setup["expected"], **TOL, what=what)
    return lambda: run(*args)


def _speedup_over_replicated(step, what, problem, reference, sgd_step, speedup):
    n = 8
    setup = _speed_setup(problem, reference, sgd_step, n)
    speedup(setup["replicated"], _candidate(step, setup, what), threshold=SPEEDUP_FRACTION_OF_N * n,
            label=f"{what} against every device training on the whole batch", devices=n)


def _speedup_over_one_device(step, what, problem, reference, sgd_step, speedup):
    n = 8
    setup = _speed_setup(problem, reference, sgd_step, n)
    speedup(setup["one_device"], _candidate(step, setup, what), threshold=1.0, report_only=True, max_repeats=9,
            calibration=lambda: calibration_speedup(n), label=f"{what} against one device", devices=n)


@pytest.mark.points(2)
def test_train_step_speedup_over_replicated(impl, problem, reference, single_device_step, speedup):
    _speedup_over_replicated(lambda mesh, p, x, y: impl.train_step(p, x, y, LR), "train_step", problem,
                             reference, single_device_step, speedup)


@pytest.mark.points(2)
def test_train_step_shard_map_speedup_over_replicated(impl, problem, reference, single_device_step, speedup):
    _speedup_over_replicated(lambda mesh, p, x, y: impl.train_step_shard_map(p, x, y, LR, mesh),
                             "train_step_shard_map", problem, reference, single_device_step, speedup)


@pytest.mark.points(0)
def test_train_step_speedup_over_one_device(impl, problem, reference, single_device_step, speedup):
    """Reported, not enforced, no points: 8 host devices share this machine's cores and XLA already
    multithreads one device's step, so this figure measures the machine more than the code. The
    calibration kernel's figure beside it says what the machine can give; the replicated-baseline
    tests above are the ones that grade."""
    _speedup_over_one_device(lambda mesh, p, x, y: impl.train_step(p, x, y, LR), "train_step", problem,
                             reference, single_device_step, speedup)


@pytest.mark.points(0)
def test_train_step_shard_map_speedup_over_one_device(impl, problem, reference, single_device_step, speedup):
    """Reported, not enforced, no points (see test_train_step_speedup_over_one_device)."""
    _speedup_over_one_device(lambda mesh, p, x, y: impl.train_step_shard_map(p, x, y, LR, mesh),
                             "train_step_shard_map", problem, reference, single_device_step, speedup)
