"""ex02_sharding_properties, visible tests: run them with `shardlab check ex02` (or pytest on this file)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import NamedSharding, PartitionSpec as P

from grader.checks import assert_sharded_like, inputs, test_mesh

# Points (ex02_sharding_properties.py's docstring): describe 2, shard_shape 4, bytes_per_device 1,
# replicate_along 3, of which these visible tests carry 0.5, 1.25, 0.25 and 1; the hidden tests the rest.
# Of shard_shape's 4 points, 1.5 are for its ValueError: 0.75 here (0.5 for a dimension that does not divide,
# 0.25 for a mesh axis used twice), checked as the hidden tests check it (conftest.py).
# A function that raises ValueError everywhere is right on every error case: the error tests first check
# the same function on a valid layout, and pay only when that is right too. Each test also checks a
# layout drawn for it (every function here answers from a layout alone).

KEYS = {
    "shard_shape",
    "num_devices",
    "is_fully_replicated",
    "is_fully_addressable",
    "replication_factor",
}


@pytest.mark.points(0.5)
@pytest.mark.rules("values")
def test_describe_rows_on_2x4(impl, check_description, drawn_array):
    mesh = test_mesh((2, 4), ("x", "y"), "explicit")
    arr = jax.device_put(np.zeros((8, 8), np.float32), NamedSharding(mesh, P("x", None)))
    info = impl.describe(arr)
    assert isinstance(info, dict) and KEYS <= set(info), (
        f"describe must return a dict with the keys {sorted(KEYS)}, got {info!r}"
    )
    want = {
        "shard_shape": (4, 8),
        "num_devices": 8,
        "is_fully_replicated": False,
        "is_fully_addressable": True,
        "replication_factor": 4,
    }
    got = {**{k: info[k] for k in KEYS}, "shard_shape": tuple(info["shard_shape"])}
    assert got == want, (
        f"describe of an (8, 8) array with P('x', None) on a 2x4 mesh: expected {want}, got {got}"
    )
    arr, mesh, spec, _ = drawn_array()
    check_description(
        impl.describe(arr), arr, f"a {arr.shape} array with {spec} on mesh {dict(mesh.shape)}"
    )


@pytest.mark.points(0.5)
@pytest.mark.rules("values")
@pytest.mark.parametrize(
    "global_shape, mesh_shape, spec, want",
    [
        ((8, 6), {"x": 2, "y": 3}, P("x", "y"), (4, 2)),
        ((12, 6), {"x": 2, "y": 3}, P(("x", "y"), None), (2, 6)),
        ((8, 6, 5), {"x": 2, "y": 3}, P(None, "y"), (8, 2, 5)),
        ((12,), {"x": 2, "y": 3}, P(), (12,)),
    ],
)
def test_shard_shape_examples(
    impl, check_shard_shape, named_shard_shape, global_shape, mesh_shape, spec, want
):
    check_shard_shape(impl, global_shape, mesh_shape, spec, want)
    sizes, spec, shape = inputs.layout(inputs.rng(0))
    check_shard_shape(impl, shape, sizes, spec, named_shard_shape(shape, sizes, spec))


@pytest.mark.points(0.5)
@pytest.mark.rules("values", "errors", branches=("indivisible",))
def test_shard_shape_rejects_indivisible(
    impl, check_shard_shape, check_rejects_indivisible, named_shard_shape, before_errors
):
    # First the same mesh and spec on an array that divides (dimension 1 of size 8 in 4 blocks).
    check_shard_shape(impl, (8, 8), {"x": 2, "y": 4}, P("x", "y"), (4, 2), note=before_errors)
    # Dimension 1 (size 6) cannot be split in 4 blocks.
    check_rejects_indivisible(impl, (8, 6), {"x": 2, "y": 4}, P("x", "y"), 1)
    # Then a layout drawn for this test, and the same with one split dimension made one element longer.
    rng = inputs.rng(0)
    sizes, spec, shape = inputs.layout(rng)
    check_shard_shape(
        impl, shape, sizes, spec, named_shard_shape(shape, sizes, spec), note=before_errors
    )
    split = [
        i
        for i, e in enumerate(spec)
        if e is not None and named_shard_shape(shape, sizes, spec)[i] < shape[i]
    ]
    dim = int(rng.choice(split))
    bad = tuple(n + 1 if i == dim else n for i, n in enumerate(shape))
    check_rejects_indivisible(impl, bad, sizes, spec, dim)


@pytest.mark.points(0.25)
@pytest.mark.rules("values", "errors", branches=("axis-twice",))
def test_shard_shape_rejects_an_axis_used_twice(
    impl,
    check_shard_shape,
    check_rejects_axis_used_twice,
    check_drawn_axis_used_twice,
    before_errors,
):
    # First the spec with the repeated axis replaced by one not used yet: rows in 8 blocks, columns whole.
    check_shard_shape(
        impl, (8, 4), {"x": 2, "y": 4}, P(("x", "y"), None), (1, 4), note=before_errors
    )
    # "x" splits dimension 0 and again dimension 1: the message names dimension 1.
    check_rejects_axis_used_twice(impl, (8, 4), {"x": 2, "y": 4}, P(("x", "y"), "x"), (1,))
    # Then a layout drawn for this test, and the same with one of its axes used again.
    check_drawn_axis_used_twice(impl, seed=1)


@pytest.mark.points(0.25)
@pytest.mark.rules("values")
def test_bytes_per_device_example(impl, named_shard_shape):
    got = impl.bytes_per_device((1024, 1024), jnp.float32, {"x": 8}, P("x", None))
    assert got == 1024 * 1024 * 4 // 8, (
        f"expected {1024 * 1024 * 4 // 8} bytes per device, got {got}"
    )
    rng = inputs.rng(0)
    sizes, spec, shape = inputs.layout(rng)
    dtype = (jnp.float32, jnp.bfloat16, np.int8, np.float64)[int(rng.integers(4))]
    want = int(np.prod(named_shard_shape(shape, sizes, spec))) * np.dtype(dtype).itemsize
    got = impl.bytes_per_device(shape, dtype, dict(sizes), spec)
    assert got == want, (
        f"bytes_per_device({shape}, {np.dtype(dtype).name}, {sizes}, {spec}): expected {want}, got {got}"
    )


@pytest.mark.rules("values", "layouts")
def test_replicate_along_2x4(impl, drawn_array, without):
    mesh = test_mesh((2, 4), ("x", "y"), "explicit")
    x = inputs.rng(0).standard_normal((8, 8)).astype(np.float32)
    arr = jax.device_put(x, NamedSharding(mesh, P("x", "y")))
    out = impl.replicate_along(arr, mesh, "x")
    assert_sharded_like(
        out, mesh, P(None, "y"), x, rtol=0, atol=0, name="replicate_along(arr, mesh, 'x')"
    )
    # Then a layout drawn for this test, along one of its mesh's axes.
    arr, mesh, spec, x = drawn_array(seed=1)
    axis = str(inputs.rng(2).choice(mesh.axis_names))
    assert_sharded_like(
        impl.replicate_along(arr, mesh, axis),
        mesh,
        without(spec, axis),
        x,
        rtol=0,
        atol=0,
        name=f"replicate_along(an array with {spec}, mesh {dict(mesh.shape)}, {axis!r})",
    )
