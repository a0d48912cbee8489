"""ex09_fsdp, visible tests (8 devices). Run them with `shardlab check ex09`.

Points (ex09_fsdp.py's docstring): these tests carry 7 of the 20; the hidden ones check the same on 2, 4 and
8 devices with other inputs, and five steps of training."""

import numpy as np
import pytest

from grader.checks import test_mesh

LR = 0.05  # the conftest's defaults
N = 8
N_BATCH = 32  # 4 rows per device
PROGRAM_BATCH = 2048  # the conftest's: the compiled step's batch, 256 rows per device


@pytest.mark.points(1)
@pytest.mark.rules("values", "layouts")
def test_shard_params(impl, problem, check_layout):
    mesh = test_mesh((N,), ("data",), "explicit")
    params, _, _ = problem(N_BATCH)
    check_layout(impl.shard_params(params, mesh), mesh, params, what="shard_params's result")


@pytest.mark.points(1.5)
@pytest.mark.rules("values", "layouts")
def test_fsdp_train_step(impl, problem, fsdp_placed, check_trained):
    mesh = test_mesh((N,), ("data",), "explicit")
    params, x, y = problem(N_BATCH)
    new, loss = impl.fsdp_train_step(*fsdp_placed(mesh, params, x, y), LR, mesh)
    check_trained(new, loss, mesh, params, x, y, lr=LR, what="fsdp_train_step's new params")


@pytest.mark.points(1.5)
@pytest.mark.rules("values", "layouts", "training")
def test_fsdp_worked_example(impl, problem, check_layout, fsdp_placed, check_trained):
    """The lab's worked example: place the params with shard_params, then 10 FSDP steps, the losses going
    down like one device's and every W still split over the devices."""
    mesh = test_mesh((N,), ("data",), "explicit")
    params0, x, y = problem(N_BATCH)
    params = impl.shard_params(params0, mesh)
    check_layout(params, mesh, params0, what="shard_params's result")
    _, xs, ys = fsdp_placed(mesh, [], x, y)
    losses = []
    for _ in range(10):
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
        steps=10,
        what="fsdp_train_step's params",
    )


@pytest.mark.points(2)
@pytest.mark.rules("collectives", "values", "work", "traffic")
def test_fsdp_compiled_step(impl, problem, check_program):
    """The step compiled inside the test's own jax.jit: it computes single-device SGD's step, all-gathers
    (the weights), reduce-scatters every weight's gradient, and all-reduces nothing as large as a weight's
    whole gradient (the biases' gradients and the loss are small and may be all-reduced); each device
    executes at most twice its share of the step's matmuls and sends at most what the weights' gathers and
    their gradients' scatters send (and a quarter more)."""
    params, x, y = problem(PROGRAM_BATCH, seed=1)
    check_program(impl, test_mesh((N,), ("data",), "explicit"), params, x, y)


@pytest.mark.points(1)
@pytest.mark.rules("memory", "layouts", "values")
def test_fsdp_step_argument_bytes(impl, problem, check_argument_bytes):
    """With the params placed by shard_params, each device's arguments of the compiled step (XLA's memory
    analysis) take at most 1/8 of a replicated data-parallel step's, plus the biases and one block of the
    batch, which both hold whole."""
    params, _, _ = problem(N_BATCH, seed=2)
    _, x, y = problem(N_BATCH, seed=3)
    check_argument_bytes(impl, test_mesh((N,), ("data",), "explicit"), params, x, y)
