"""ex09_fsdp, hidden tests: the placement, one step and five steps against single-device SGD on 2, 4 and 8
devices (values and layouts), the collectives of a compiled step (all-gather, reduce-scatter, and no
all-reduce of full weight gradients), and XLA's per-device memory figures against a replicated
data-parallel step's. Every structure and memory test checks the values of the program it measured.

Points (the module docstring of ex09_fsdp.py): the weights are points out of 20, the visible tests'
included. The compiled step's collectives, work and traffic weigh most (8: 6 here, 2 in the visible sample on
8 devices): the reduce-scatter is what makes FSDP, and a step that all-reduces each weight's gradient and keeps
its own rows computes the same values, layouts and argument bytes. The collectives and the argument bytes are checked by
the conftest's helpers, which the visible tests sample."""

import numpy as np
import pytest

from grader.checks import (
    NotReported,
    assert_computes,
    assert_memory,
    memory_per_device,
    test_mesh,
)

pytestmark = pytest.mark.hidden

LR = 0.05  # the conftest's defaults
TOL = dict(rtol=1e-5, atol=1e-6)
TEMP_REPORT_DEVICES = 8
PROGRAM_BATCH = 2048  # the conftest's: the compiled step's batch


def _mesh(n):
    return test_mesh((n,), ("data",), "explicit")


# --- placement -----------------------------------------------------------------------------------


@pytest.mark.points(1)
@pytest.mark.rules("values", "layouts")
def test_shard_params_values(impl, n_devices, problem, check_layout):
    mesh = _mesh(n_devices)
    # Every width divides by 8, so that a W split along the wrong dimension is a wrong layout, not an error.
    params, _, _ = problem(8, sizes=(24, 16, 40, 8), seed=n_devices)
    check_layout(impl.shard_params(params, mesh), mesh, params, what="shard_params's result")


# --- values: one step, five steps ----------------------------------------------------------------


@pytest.mark.points(2)
@pytest.mark.rules("values", "layouts")
def test_fsdp_train_step_values(impl, n_devices, problem, fsdp_placed, check_trained):
    mesh = _mesh(n_devices)
    params, x, y = problem(seed=1)
    new, loss = impl.fsdp_train_step(*fsdp_placed(mesh, params, x, y), LR, mesh)
    check_trained(new, loss, mesh, params, x, y, lr=LR, what="fsdp_train_step's new params")


@pytest.mark.points(2)
@pytest.mark.rules("values", "layouts", "training")
def test_fsdp_train_step_five_steps(impl, n_devices, problem, fsdp_placed, check_trained):
    mesh = _mesh(n_devices)
    params0, x, y = problem(seed=2)
    params, xs, ys = fsdp_placed(mesh, params0, x, y)
    losses = []
    for _ in range(5):
        params, loss = impl.fsdp_train_step(params, xs, ys, LR, mesh)
        losses.append(np.asarray(loss))
    check_trained(
        params,
        np.asarray(losses),
        mesh,
        params0,
        x,
        y,
        lr=LR,
        steps=5,
        what="fsdp_train_step's params",
    )


# --- the compiled step ---------------------------------------------------------------------------


@pytest.mark.points(6)
@pytest.mark.rules("collectives", "values", "work", "traffic")
def test_fsdp_train_step_program(impl, n_devices, problem, check_program):
    """Weights all-gathered, their gradients reduce-scattered: no device ever receives a weight's whole
    gradient. The biases' gradients and the loss may be all-reduced: they are far smaller than any W. Each
    device executes at most twice its share of the step's matmuls and sends at most what the weights'
    gathers and their gradients' scatters send (and a quarter more)."""
    params, x, y = problem(PROGRAM_BATCH, seed=3)
    check_program(impl, _mesh(n_devices), params, x, y)


@pytest.mark.points(2)
@pytest.mark.rules("memory", "layouts", "values")
def test_fsdp_argument_bytes(impl, n_devices, problem, check_argument_bytes):
    """XLA's own figure for the bytes of each device's arguments: with the params placed by the student's
    shard_params, 1/n of the weights, against all of them in a replicated data-parallel step. Both hold the
    biases whole and one block of the batch, which is the slack allowed."""
    # The params go through a direct call (the worker sees them) before the step is traced on them: the
    # batch the traced step also takes comes from a stream of its own, which no direct call has shown.
    params, _, _ = problem(seed=4)
    _, x, y = problem(seed=14)
    check_argument_bytes(impl, _mesh(n_devices), params, x, y)


@pytest.mark.points(0)
@pytest.mark.rules("memory", "values")
def test_fsdp_temp_bytes_report(
    impl, problem, fsdp_placed, step_program, replicated_baseline, expected_leaves
):
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
    program = step_program(impl, mesh, args)
    assert_computes(program(*args), expected_leaves(params, x, y), **TOL, what="fsdp_train_step")
    try:
        replicated = memory_per_device(replicated_baseline(mesh, params, args[1], args[2]))
        # no bound: the figures are drawn beside the replicated step's, for the reader
        assert_memory(
            program,
            what="fsdp_train_step",
            shown_against={
                "a replicated data-parallel step (temporaries)": replicated.temp_bytes,
                "all the weights": sum(W.nbytes for W, _ in params),
            },
        )
    except NotReported as exc:
        pytest.skip(str(exc))
