"""ex03_computation_follows_data, visible tests: run them with `shardlab check ex03` (or pytest on this file).

The prediction tests do not contain answers: they ask JAX itself (jax.eval_shape on sharded
jax.ShapeDtypeStruct values, on an Explicit 2x4 mesh) and compare your prediction with what it says,
on their examples and on pairs of specs drawn for the test.

Points (ex03_computation_follows_data.py's docstring): sin_layer 2, column_sum 4 (1.5 of them for the
all-reduce), predict_add 3.5, predict_matmul 3.5, transpose_layout 2; these visible tests carry 1, 1.5 (0.5
of the all-reduce's), 1.5 (0.5 for pairs JAX refuses because a mesh axis would split two dimensions),
1 and 1 of them, the hidden tests the rest. column_sum's all-reduce is checked here
as the hidden tests check it (conftest.py's check_all_reduce), on the 2x4 mesh only.
"""

import jax
import numpy as np
import pytest
from jax.sharding import NamedSharding, PartitionSpec as P

from grader.checks import assert_close_or_named, assert_sharded_like, inputs, test_mesh


@pytest.mark.rules("values", "layouts")
def test_sin_layer_example(impl):
    mesh = test_mesh((2, 4), ("x", "y"), "explicit")
    data = inputs.rng(0).uniform(-10, 10, (16, 32)).astype(np.float32)
    x = jax.device_put(data, NamedSharding(mesh, P("x", "y")))
    out = impl.sin_layer(x)
    expected = 2 * np.sin(data.astype(np.float64)) ** 2 + 1
    assert_sharded_like(out, mesh, P("x", "y"), expected, rtol=1e-5, atol=1e-6, name="sin_layer(x)")


@pytest.mark.rules("values", "layouts")
def test_column_sum_example(impl, column_sum_mistakes):
    mesh = test_mesh((2, 4), ("x", "y"), "auto")
    data = inputs.rng(1).standard_normal((16, 32), dtype=np.float32)
    x = jax.device_put(data, NamedSharding(mesh, P("x", "y")))
    out = impl.column_sum(x)
    expected = data.astype(np.float64).sum(axis=0)
    if isinstance(
        out, jax.Array
    ):  # a known mistake named first; the layout and shards then checked
        mistakes = column_sum_mistakes(data, 16 // mesh.shape["x"])
        assert_close_or_named(
            np.asarray(out), expected, mistakes, rtol=1e-5, atol=1e-4, name="column_sum(x)"
        )
    assert_sharded_like(out, mesh, P("y"), expected, rtol=1e-5, atol=1e-4, name="column_sum(x)")


@pytest.mark.points(0.5)
@pytest.mark.rules("collectives", "values")
def test_column_sum_uses_all_reduce_example(impl, check_all_reduce):
    mesh = test_mesh((2, 4), ("x", "y"), "auto")
    check_all_reduce(impl, mesh, inputs.rng(3).standard_normal((16, 32), dtype=np.float32))


def drawn_pairs(every_spec, count):
    rng = inputs.rng(0)
    return [
        (every_spec[i], every_spec[j]) for i, j in rng.integers(len(every_spec), size=(count, 2))
    ]


@pytest.mark.rules("values", branches=("different-splits",))
def test_predict_add_examples(impl, check_predictions, every_spec):
    shape = (16, 16)
    pairs = [
        (P("x", None), P("x", None)),
        (P("x", None), P(None, "y")),
        (P("x", "y"), P()),
        (P("x", None), P("y", None)),
    ]
    check_predictions(
        "predict_add",
        impl.predict_add,
        lambda b, c: b + c,
        [((b, shape), (c, shape)) for b, c in pairs + drawn_pairs(every_spec, 4)],
    )


@pytest.mark.points(0.5)
@pytest.mark.rules("values", branches=("axis-twice",))
def test_predict_add_refuses_an_axis_used_twice(impl, check_predictions):
    """Pairs whose per-dimension answers would split two dimensions of the result over one mesh axis."""
    shape = (16, 16)
    pairs = [
        (P("x", None), P(None, "x")),
        (P(("x", "y"), None), P(None, "y")),
        (P(None, "y"), P(("y", "x"), None)),
    ]
    check_predictions(
        "predict_add",
        impl.predict_add,
        lambda b, c: b + c,
        [((b, shape), (c, shape)) for b, c in pairs],
    )


@pytest.mark.rules("values", branches=("contracting-split", "axis-twice"))
def test_predict_matmul_examples(impl, check_predictions, every_spec):
    pairs = [
        (P("x", None), P(None, "y")),
        (P(None, None), P(None, "x")),
        (P("x", "y"), P("y", None)),
        (P("x", None), P(None, "x")),  # "x" would split both dimensions of the result
    ]
    check_predictions(
        "predict_matmul",
        impl.predict_matmul,
        lambda a, b: a @ b,
        [((a, (16, 8)), (b, (8, 24))) for a, b in pairs + drawn_pairs(every_spec, 4)],
    )


@pytest.mark.rules("values", "layouts")
def test_transpose_layout_example(impl):
    mesh = test_mesh((2, 4), ("x", "y"), "explicit")
    data = inputs.rng(2).standard_normal((8, 12)).astype(np.float32)
    x = jax.device_put(data, NamedSharding(mesh, P("x", "y")))
    out = impl.transpose_layout(x, mesh)
    assert_sharded_like(
        out, mesh, P("y", "x"), data, rtol=0, atol=0, name="transpose_layout(x, mesh)"
    )
