"""ex10_tensor_parallel, visible tests (a 4 x 2 ("data", "model") mesh). Run them with `shardlab check ex10`.

Points (ex10_tensor_parallel.py's docstring): these tests carry 7 of the 20. The hidden ones check the same on
4 x 2, 2 x 4 and 2 x 2 meshes with other inputs, and three steps in a row on each."""

import jax
import numpy as np
import pytest
from jax.sharding import PartitionSpec as P

from grader.checks import assert_sharded_like, compiled

SHAPE = (4, 2)
LR = 0.1  # the conftest's
SPECS = {"W1": P(None, "model"), "b1": P("model"), "W2": P("model", None), "b2": P()}


@pytest.mark.points(1)
@pytest.mark.rules("values", "layouts")
def test_shard_mlp_params(impl, tp_mesh, problem):
    mesh = tp_mesh(SHAPE)
    params, _, _ = problem()
    out = impl.shard_mlp_params(params, mesh)
    assert isinstance(out, dict) and sorted(out) == sorted(SPECS), (
        f"shard_mlp_params should return a dict with the keys {sorted(SPECS)}, got "
        f"{sorted(out) if isinstance(out, dict) else type(out).__name__}"
    )
    for name, spec in SPECS.items():
        assert_sharded_like(out[name], mesh, spec, params[name], rtol=0, atol=0, name=name)


@pytest.mark.points(1)
@pytest.mark.rules("values", "layouts")
def test_tp_forward(impl, tp_mesh, place, problem, check_forward):
    mesh = tp_mesh(SHAPE)
    params, x, _ = problem()
    out = impl.tp_forward(*place(mesh, params, x), mesh)
    check_forward(out, mesh, params, x)


@pytest.mark.points(1)
@pytest.mark.rules("collectives", "values", "work", "traffic")
def test_tp_forward_program(
    impl, tp_mesh, place, problem, reference_forward, assert_forward_program
):
    """The compiled forward: exactly one all-reduce, over "model" (no all-gather of the weights), the
    program read computes the forward, and each device executes at most twice its share of the layer's
    matmuls and sends at most that all-reduce (and a quarter more)."""
    mesh = tp_mesh(SHAPE)
    params, x, _ = problem()
    args = place(mesh, params, x)
    program = compiled(lambda p, x: impl.tp_forward(p, x, mesh), *args)
    assert_forward_program(program, args, reference_forward(params, x), mesh)


@pytest.mark.points(1)
@pytest.mark.rules("values", "layouts")
def test_tp_train_step(impl, tp_mesh, place, problem, reference_steps, check_step):
    mesh = tp_mesh(SHAPE)
    params, x, y = problem()
    new, loss = impl.tp_train_step(*place(mesh, params, x, y), LR, mesh)
    check_step(
        new,
        loss,
        mesh,
        params,
        x,
        y,
        step=1,
        expected=reference_steps(params, x, y, 1)[0],
        what="tp_train_step's new params",
    )


@pytest.mark.points(1)
@pytest.mark.rules("collectives", "values", "work", "traffic")
def test_tp_train_step_program(impl, tp_mesh, place, problem, reference_steps, assert_step_program):
    """The compiled step: the activations' all-reduce over "model", the gradients' over "data", the
    program read computes the step, and each device executes at most twice its share of the step's matmuls
    and sends at most those all-reduces (and a quarter more)."""
    mesh = tp_mesh(SHAPE)
    params, x, y = problem()
    args = place(mesh, params, x, y)
    program = compiled(
        lambda p, x, y: jax.tree.leaves(impl.tp_train_step(p, x, y, LR, mesh)), *args
    )
    new, loss = reference_steps(params, x, y, 1)[0]
    assert_step_program(program, args, [*jax.tree.leaves(new), loss], mesh)


@pytest.mark.points(2)
@pytest.mark.rules("training", "values", "layouts")
def test_worked_example(impl, tp_mesh, place, problem, reference_steps, check_step):
    """The lab's worked example: five steps on the 4 x 2 mesh, the loss going down like one device's."""
    mesh = tp_mesh(SHAPE)
    params0, x, y = problem()
    expected = reference_steps(params0, x, y, 5)
    params, xs, ys = place(mesh, params0, x, y)
    losses = []
    for step in range(1, 6):
        params, loss = impl.tp_train_step(params, xs, ys, LR, mesh)
        check_step(
            params,
            loss,
            mesh,
            params0,
            x,
            y,
            step=step,
            expected=expected[step - 1],
            what="the params",
        )
        losses.append(float(np.asarray(loss)))
    assert losses[-1] < losses[0], f"the loss should go down over five steps: {losses}"
