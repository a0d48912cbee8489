"""ex10_tensor_parallel, hidden tests on 4 x 2, 2 x 4 and 2 x 2 meshes: the layout of the params, the
forward's values and its one all-reduce over "model", three training steps against single-device SGD,
and the device groups of the step's all-reduces (activations over "model", gradients over "data"),
read from the compiled program and compared with the mesh's axes, with each device's work and traffic
read from the same programs.

Points (the module docstring of ex10_tensor_parallel.py): the weights are points out of 20; these tests carry
13 of them. What the compiled programs' all-reduces run over is what makes tensor parallelism: a forward that
gathers the weights computes the same values and layouts."""

import jax
import pytest
from jax.sharding import PartitionSpec as P

from grader.checks import assert_sharded_like, compiled

pytestmark = pytest.mark.hidden

MESHES = pytest.mark.parametrize("shape", [(4, 2), (2, 4), (2, 2)], ids=["4x2", "2x4", "2x2"])
STEPS = 3
LR = 0.1  # the conftest's
SPECS = {"W1": P(None, "model"), "b1": P("model"), "W2": P("model", None), "b2": P()}


def _seed(shape):
    return 10 * shape[0] + shape[1]


@pytest.mark.points(1)
@pytest.mark.rules("values", "layouts")
@MESHES
def test_shard_mlp_params_layouts(impl, tp_mesh, problem, shape):
    mesh = tp_mesh(shape)
    params, _, _ = problem(_seed(shape))
    out = impl.shard_mlp_params(params, mesh)
    assert isinstance(out, dict) and sorted(out) == sorted(SPECS), (
        f"shard_mlp_params should return a dict with the keys {sorted(SPECS)}, got "
        f"{sorted(out) if isinstance(out, dict) else type(out).__name__}"
    )
    for name, spec in SPECS.items():
        assert_sharded_like(out[name], mesh, spec, params[name], rtol=0, atol=0, name=name)


@pytest.mark.points(2)
@pytest.mark.rules("values", "layouts")
@MESHES
def test_tp_forward_values(impl, tp_mesh, place, problem, check_forward, shape):
    mesh = tp_mesh(shape)
    params, x, _ = problem(_seed(shape) + 1)
    check_forward(impl.tp_forward(*place(mesh, params, x), mesh), mesh, params, x)


@pytest.mark.points(2)
@pytest.mark.rules("collectives", "values", "work", "traffic")
@MESHES
def test_tp_forward_all_reduces_over_model(
    impl, tp_mesh, place, problem, reference_forward, assert_forward_program, shape
):
    mesh = tp_mesh(shape)
    params, x, _ = problem(_seed(shape) + 2)
    args = place(mesh, params, x)
    program = compiled(lambda p, x: impl.tp_forward(p, x, mesh), *args)
    assert_forward_program(program, args, reference_forward(params, x), mesh)


@pytest.mark.points(4)
@pytest.mark.rules("training", "values", "layouts")
@MESHES
def test_tp_train_step_values(impl, tp_mesh, place, problem, reference_steps, check_step, shape):
    """Three steps, each taking the previous step's params: they keep their layout from step to step."""
    mesh = tp_mesh(shape)
    params0, x, y = problem(_seed(shape) + 3)
    expected = reference_steps(params0, x, y, STEPS)
    params, xs, ys = place(mesh, params0, x, y)
    for step in range(1, STEPS + 1):
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
            what="tp_train_step's params",
        )


@pytest.mark.points(4)
@pytest.mark.rules("collectives", "values", "work", "traffic")
@MESHES
def test_tp_train_step_all_reduce_groups(
    impl, tp_mesh, place, problem, reference_steps, assert_step_program, shape
):
    mesh = tp_mesh(shape)
    params, x, y = problem(_seed(shape) + 4)
    args = place(mesh, params, x, y)
    program = compiled(
        lambda p, x, y: jax.tree.leaves(impl.tp_train_step(p, x, y, LR, mesh)), *args
    )
    new, loss = reference_steps(params, x, y, 1)[0]
    assert_step_program(program, args, [*jax.tree.leaves(new), loss], mesh)
