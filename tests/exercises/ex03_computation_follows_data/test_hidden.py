"""ex03_computation_follows_data, hidden tests.

Mesh sizes: the curriculum's mesh is 2x4 ("x", "y"); functions that receive a placed array or a mesh
are also graded on smaller meshes with the same axis names. On 2 devices the mesh is 1x2, so that a
wrong "replicated" output cannot pass for P("y"), except for the all-reduce check, which needs rows
split over two devices (2x1). The predictions are about the 2x4 Explicit mesh only (the functions
take no mesh), and every answer comes from JAX itself, never from this file.

Points (ex03_computation_follows_data.py's docstring): sin_layer 2, column_sum 4 (1.5 of them for the
all-reduce), predict_add 3.5, predict_matmul 3.5, transpose_layout 2; these hidden tests carry 1, 2.5 (1 of
the all-reduce's), 2, 2.5 and 1 of them, the visible tests the rest.
"""

import itertools

import jax
import numpy as np
import pytest
from jax.sharding import NamedSharding, PartitionSpec as P

from grader.checks import assert_sharded_like, inputs, test_mesh

pytestmark = pytest.mark.hidden

MESH_SHAPES = {2: (1, 2), 4: (2, 2), 8: (2, 4)}
ALL_REDUCE_MESH_SHAPES = {2: (2, 1), 4: (2, 2), 8: (2, 4)}  # rows split over >1 device


def _split_by_both(spec1, spec2):
    """Some dimension is split by both specs (the same way or not)."""
    return any(
        spec1_entry is not None and spec2_entry is not None
        for spec1_entry, spec2_entry in zip(spec1, spec2)
    )


def _add_cases(specs, split_by_both: bool):
    shape = (16, 24)
    return [
        ((b, shape), (c, shape))
        for b, c in itertools.product(specs, specs)
        if _split_by_both(b, c) == split_by_both
    ]


def _matmul_cases(specs, a_splits_contracting: bool):
    return [
        ((a, (8, 16)), (b, (16, 24)))
        for a, b in itertools.product(specs, specs)
        if (a[1] is not None) == a_splits_contracting
    ]


def _placed(data, mesh, spec):
    return jax.device_put(data, NamedSharding(mesh, spec))


# --- sin_layer: the output keeps the input's sharding ----------------------------------------------


@pytest.mark.rules("values", "layouts")
@pytest.mark.parametrize("axis_type", ["auto", "explicit"])
def test_sin_layer_keeps_sharding(impl, n_devices, axis_type):
    mesh = test_mesh(MESH_SHAPES[n_devices], ("x", "y"), axis_type)
    rng = inputs.rng(n_devices)
    cases = [
        ((16, 24), P("x", "y")),
        ((16, 24), P("y", "x")),
        ((16, 24), P(None, "y")),
        ((16, 24), P(("x", "y"), None)),
        ((16, 24), P()),
        ((32,), P(("y", "x"))),
        ((8, 4, 6), P("y", None, "x")),
    ]
    for shape, spec in cases:
        data = rng.uniform(-10, 10, shape).astype(np.float32)
        out = impl.sin_layer(_placed(data, mesh, spec))
        expected = 2 * np.sin(data.astype(np.float64)) ** 2 + 1
        assert_sharded_like(
            out,
            mesh,
            spec,
            expected,
            rtol=1e-5,
            atol=1e-6,
            name=f"sin_layer(x) for x of shape {shape} sharded {spec}",
        )


# --- column_sum: values, P("y"), and the all-reduce the compiler must insert ----------------------


@pytest.mark.points(1.5)
@pytest.mark.rules("values", "layouts")
def test_column_sum_values_and_sharding(impl, n_devices):
    mesh = test_mesh(MESH_SHAPES[n_devices], ("x", "y"), "auto")
    rng = inputs.rng(10 + n_devices)
    for shape in [(16, 32), (6, 12), (64, 8)]:
        data = rng.standard_normal(shape, dtype=np.float32)
        out = impl.column_sum(_placed(data, mesh, P("x", "y")))
        assert_sharded_like(
            out,
            mesh,
            P("y"),
            data.astype(np.float64).sum(axis=0),
            rtol=1e-5,
            atol=1e-4,
            name=f"column_sum(x) for x of shape {shape}",
        )


@pytest.mark.rules("collectives", "values")
def test_column_sum_uses_all_reduce(impl, check_all_reduce, n_devices):
    mesh = test_mesh(ALL_REDUCE_MESH_SHAPES[n_devices], ("x", "y"), "auto")
    check_all_reduce(
        impl, mesh, inputs.rng(20 + n_devices).standard_normal((16, 32), dtype=np.float32)
    )


# --- predictions: compared with what JAX does on every pair of 2-D specs ---------------------------


@pytest.mark.points(0.75)
@pytest.mark.rules("values", branches=("axis-twice",))
def test_predict_add_each_dimension_split_by_one_at_most(impl, check_predictions, every_spec):
    """Pairs in which no dimension is split by both operands."""
    check_predictions(
        "predict_add", impl.predict_add, lambda b, c: b + c, _add_cases(every_spec, False)
    )


@pytest.mark.points(1.25)
@pytest.mark.rules("values", branches=("different-splits",))
def test_predict_add_a_dimension_split_by_both(impl, check_predictions, every_spec):
    """Pairs with a dimension that both operands split, the same way or differently."""
    check_predictions(
        "predict_add", impl.predict_add, lambda b, c: b + c, _add_cases(every_spec, True)
    )


@pytest.mark.points(1.25)
@pytest.mark.rules("values", branches=("axis-twice",))
def test_predict_matmul_contracting_unsplit_in_a(impl, check_predictions, every_spec):
    """Pairs in which a does not split the contracting dimension (b may)."""
    check_predictions(
        "predict_matmul", impl.predict_matmul, lambda a, b: a @ b, _matmul_cases(every_spec, False)
    )


@pytest.mark.points(1.25)
@pytest.mark.rules("values", branches=("contracting-split", "axis-twice"))
def test_predict_matmul_contracting_split_in_a(impl, check_predictions, every_spec):
    """Pairs in which a splits the contracting dimension (b may too)."""
    check_predictions(
        "predict_matmul", impl.predict_matmul, lambda a, b: a @ b, _matmul_cases(every_spec, True)
    )


# --- transpose_layout: same values, P("y", "x") ----------------------------------------------------


@pytest.mark.rules("values", "layouts")
def test_transpose_layout_values_and_sharding(impl, n_devices):
    mesh = test_mesh(MESH_SHAPES[n_devices], ("x", "y"), "explicit")
    rng = inputs.rng(0)
    for shape in [(4, 4), (8, 12), (16, 8)]:
        data = rng.standard_normal(shape).astype(np.float32)
        out = impl.transpose_layout(_placed(data, mesh, P("x", "y")), mesh)
        name = f"transpose_layout(x, mesh) for x of shape {shape}"
        if (
            isinstance(out, jax.Array)
            and out.shape == shape[::-1]
            and np.array_equal(np.asarray(out), data.T)
        ):
            raise AssertionError(
                f"{name} returned x transposed (shape {out.shape}): only the layout "
                "must change, the values stay where they are in the array"
            )
        assert_sharded_like(out, mesh, P("y", "x"), data, rtol=0, atol=0, name=name)
