"""ex09_fsdp, hidden tests: the placement, one step and five steps against single-device SGD on 2, 4 and 8
devices (values and layouts), the collectives of a compiled step (all-gather, reduce-scatter, and no
all-reduce of full weight gradients), and XLA's per-device memory figures against a replicated
data-parallel step's. Every structure and memory test checks the values of the program it measured.

Points (the module docstring of ex09_fsdp.py): the weights are points out of 20. The compiled step's collectives
weigh most: the reduce-scatter is what makes FSDP, and a step that all-reduces each weight's gradient and keeps its
own rows computes the same values, layouts and argument bytes."""

import math
import re

import jax
import numpy as np
import pytest
from jax.sharding import NamedSharding, PartitionSpec as P

from grader.checks import (
    NotReported,
    assert_collectives,
    assert_computes,
    compiled,
    inspect_collectives,
    memory_per_device,
    test_mesh,
)

pytestmark = pytest.mark.hidden

LR = 0.05                          # the conftest's defaults
TOL = dict(rtol=1e-5, atol=1e-6)
SIZES = (16, 64, 64, 8)
TEMP_REPORT_DEVICES = 8


def _mesh(n):
    return test_mesh((n,), ("data",), "explicit")


def _expected_leaves(reference, params, x, y):
    want, losses = reference(params, x, y, lr=LR)
    return [*jax.tree.leaves(want), losses[0]]


def _step_program(impl, mesh, args):
    """The student's step compiled by the test (inside its own jax.jit), its results as a flat list."""
    return compiled(lambda p, x, y: jax.tree.leaves(impl.fsdp_train_step(p, x, y, LR, mesh)), *args)


_BASELINES: dict = {}   # the replicated data-parallel step compiled per device count (shapes are fixed)


def _replicated_baseline(mesh, params, xs, ys, single_device_step):
    """ex08's data-parallel step, written here: every parameter replicated, the batch split. Its
    per-device memory is what FSDP divides."""
    replicated = jax.device_put(params, NamedSharding(mesh, P()))
    n = mesh.devices.size
    if n not in _BASELINES:
        _BASELINES[n] = compiled(lambda p, x, y: jax.tree.leaves(single_device_step(p, x, y, LR)), replicated, xs, ys)
    return _BASELINES[n]


# --- placement -----------------------------------------------------------------------------------

@pytest.mark.points(1)
def test_shard_params_values(impl, n_devices, problem, check_layout):
    mesh = _mesh(n_devices)
    # Every width divides by 8, so that a W split along the wrong dimension is a wrong layout, not an error.
    params, _, _ = problem(8, sizes=(24, 16, 40, 8), seed=n_devices)
    check_layout(impl.shard_params(params, mesh), mesh, params, what="shard_params's result")


# --- values: one step, five steps ----------------------------------------------------------------

@pytest.mark.points(2)
def test_fsdp_train_step_values(impl, n_devices, problem, fsdp_placed, check_trained):
    mesh = _mesh(n_devices)
    params, x, y = problem(seed=1)
    new, loss = impl.fsdp_train_step(*fsdp_placed(mesh, params, x, y), LR, mesh)
    check_trained(new, loss, mesh, params, x, y, lr=LR, what="fsdp_train_step's new params")


@pytest.mark.points(2)
def test_fsdp_train_step_five_steps(impl, n_devices, problem, fsdp_placed, check_trained):
    mesh = _mesh(n_devices)
    params0, x, y = problem(seed=2)
    params, xs, ys = fsdp_placed(mesh, params0, x, y)
    losses = []
    for _ in range(5):
        params, loss = impl.fsdp_train_step(params, xs, ys, LR, mesh)
        losses.append(np.asarray(loss))
    check_trained(params, np.asarray(losses), mesh, params0, x, y, lr=LR, steps=5,
                  what="fsdp_train_step's params")


# --- the compiled step ---------------------------------------------------------------------------

def _elements(line: str, kind: str = "all-reduce") -> int:
    """Elements of a collective's result (summed over a tuple): `%ar = (f32[64]{0}, f32[]) all-reduce(...)`."""
    shapes = line.split("=", 1)[1].split(kind, 1)[0]
    return sum(math.prod(int(d) for d in dims.split(",") if d) for dims in re.findall(r"\w+\[([\d,]*)\]", shapes))


@pytest.mark.points(8)
def test_fsdp_train_step_program(impl, n_devices, problem, fsdp_placed, reference):
    """Weights all-gathered, their gradients reduce-scattered: no device ever receives a weight's whole
    gradient. The biases' gradients and the loss may be all-reduced: they are far smaller than any W."""
    mesh = _mesh(n_devices)
    params, x, y = problem(seed=3)
    args = fsdp_placed(mesh, params, x, y)
    program = _step_program(impl, mesh, args)
    expected = _expected_leaves(reference, params, x, y)
    assert_computes(program(*args), expected, **TOL, what="fsdp_train_step")
    ops = inspect_collectives(program, what="fsdp_train_step")
    all_reduces = [op.line for op in ops if op.kind == "all-reduce"]
    moved = sum(_elements(line) for line in all_reduces)
    smallest = min(W.size for W, _ in params)
    small_stuff = sum(b.size for _, b in params) + 1
    if moved >= smallest:
        biggest = max(all_reduces, key=_elements)
        raise AssertionError(
            f"the compiled program of fsdp_train_step all-reduces {moved} elements per step in all; the biases' "
            f"gradients and the loss are only {small_stuff}, and the smallest weight's full gradient alone has "
            f"{smallest}: a full weight gradient is all-reduced, so every device receives all of it (and, if it "
            "then keeps only its own rows, throws the rest away). FSDP reduces each weight's gradient with a "
            "reduce-scatter (jax.lax.psum_scatter): each device receives only its own slice of the sum, "
            f"1/{n_devices} of it, and no device ever holds a whole reduced gradient.\n  {biggest[:300]}")
    assert_collectives(program, *args, present=("all-gather", "reduce-scatter"), expected=expected, **TOL,
                       what="fsdp_train_step (the weights gathered where they are used, their gradients "
                            "reduce-scattered)")
    # Every weight's gradient goes through a reduce-scatter: each device receives its 1/n of each (a token
    # reduce-scatter beside gradients reduced another way does not count).
    scatters = [op.line for op in ops if op.kind == "reduce-scatter"]
    scattered = sum(_elements(line, "reduce-scatter") for line in scatters)
    slices = sum(W.size for W, _ in params) // n_devices
    assert scattered >= slices, (
        f"the reduce-scatters of the compiled fsdp_train_step give each device {scattered} elements in all; its "
        f"slices of the weights' gradients alone have {slices} (1/{n_devices} of every W's gradient). Reduce "
        "every weight's gradient with jax.lax.psum_scatter, not only a part of them.")


@pytest.mark.points(3)
def test_fsdp_argument_bytes(impl, n_devices, problem, fsdp_placed, reference, single_device_step, check_layout):
    """XLA's own figure for the bytes of each device's arguments: with the params placed by the student's
    shard_params, 1/n of the weights, against all of them in a replicated data-parallel step. Both hold the
    biases whole and one block of the batch, which is the slack allowed."""
    mesh = _mesh(n_devices)
    # The params go through a direct call (the worker sees them) before the step is traced on them: the
    # batch the traced step also takes comes from a stream of its own, which no direct call has shown.
    params, _, _ = problem(seed=4)
    _, x, y = problem(seed=14)
    placed = impl.shard_params(params, mesh)
    check_layout(placed, mesh, params, what="shard_params's result (the params this test compiles the step on)")
    _, xs, ys = fsdp_placed(mesh, [], x, y)
    args = (placed, xs, ys)
    program = _step_program(impl, mesh, args)
    assert_computes(program(*args), _expected_leaves(reference, params, x, y), **TOL, what="fsdp_train_step")
    baseline = _replicated_baseline(mesh, params, xs, ys, single_device_step)
    try:
        fsdp, replicated = memory_per_device(program), memory_per_device(baseline)
    except NotReported as exc:
        pytest.skip(str(exc))
    biases = sum(b.nbytes for _, b in params)
    block = (x.nbytes + y.nbytes) // n_devices
    bound = replicated.argument_bytes / n_devices + biases + block
    ratio = fsdp.argument_bytes / replicated.argument_bytes
    print(f"argument bytes per device on {n_devices} devices: fsdp_train_step {fsdp.argument_bytes}, replicated "
          f"data-parallel step {replicated.argument_bytes} (ratio {ratio:.3f}, bound {bound:.0f})")
    assert fsdp.argument_bytes <= bound, (
        f"each device's arguments of the compiled fsdp_train_step take {fsdp.argument_bytes} bytes; a replicated "
        f"data-parallel step's take {replicated.argument_bytes}, and FSDP on {n_devices} devices should need at "
        f"most 1/{n_devices} of that plus the biases ({biases} bytes) and one block of the batch ({block} bytes), "
        f"which both hold: {bound:.0f}. Does every device still receive whole weights?")


@pytest.mark.points(0)
def test_fsdp_temp_bytes_report(impl, problem, fsdp_placed, reference, single_device_step):
    """Reported, not enforced, no points: XLA's temporary bytes per device, against the replicated
    data-parallel step's. Measured on the CPU backend (jax 0.10.2) they do not drop with n: the backward pass
    keeps every gathered weight, and each device's whole-weight gradient exists before it is scattered, so
    FSDP's temporaries stay about one copy of the weights, like the replicated step's (whose weights are
    arguments, not temporaries). The saving FSDP guarantees is in what stays between steps: the arguments
    and outputs."""
    n = TEMP_REPORT_DEVICES
    mesh = _mesh(n)
    params, x, y = problem(seed=5)
    args = fsdp_placed(mesh, params, x, y)
    program = _step_program(impl, mesh, args)
    assert_computes(program(*args), _expected_leaves(reference, params, x, y), **TOL, what="fsdp_train_step")
    try:
        fsdp = memory_per_device(program)
        replicated = memory_per_device(_replicated_baseline(mesh, params, args[1], args[2], single_device_step))
    except NotReported as exc:
        pytest.skip(str(exc))
    weights = sum(W.nbytes for W, _ in params)
    print(f"per device on {n} devices (bytes): fsdp_train_step arguments {fsdp.argument_bytes}, outputs "
          f"{fsdp.output_bytes}, temporaries {fsdp.temp_bytes}; replicated data-parallel step arguments "
          f"{replicated.argument_bytes}, outputs {replicated.output_bytes}, temporaries {replicated.temp_bytes}; "
          f"all the weights {weights}")
