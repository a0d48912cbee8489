"""ex02_sharding_properties, hidden tests: every mesh size, and shard_shape cross-checked against
NamedSharding on random meshes and specs (hypothesis: derandomized in a student's run, each test's own
examples from the grading's secret while grading). Every test of fixed layouts also checks a layout drawn
for it (grader.checks.inputs.layout). Each error test first checks shard_shape on a valid layout beside
its error case (the same mesh and spec on an array that divides, or the spec without its repeated axis):
a function that raises ValueError everywhere is right on every error case, and must earn nothing for it."""

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st
from jax.sharding import NamedSharding, PartitionSpec as P

from grader.checks import assert_sharded_like, inputs, test_mesh
from grader.checks.properties import GRADING

pytestmark = pytest.mark.hidden


# ---- describe ------------------------------------------------------------------------------------

DESCRIBED = {  # (mesh shape as a function of n, axis names, spec, array shape)
    "1d-split": (lambda n: (n,), ("d",), P("d"), (16, 3)),
    "1d-replicated": (lambda n: (n,), ("d",), P(), (5, 3)),
    "2d-rows": (lambda n: (2, n // 2), ("x", "y"), P("x", None), (4, 6)),
    "2d-columns": (lambda n: (2, n // 2), ("x", "y"), P(None, "y"), (4, 8)),
    "2d-both": (lambda n: (2, n // 2), ("x", "y"), P("y", "x"), (8, 8)),
    "2d-tuple": (lambda n: (2, n // 2), ("x", "y"), P(None, None, ("x", "y")), (2, 3, 16)),
}


@pytest.mark.points(1)
@pytest.mark.rules("values")
@pytest.mark.parametrize("axis_type", ["explicit", "auto"])
@pytest.mark.parametrize("case", list(DESCRIBED))
def test_describe_layouts(impl, check_description, drawn_array, n_devices, case, axis_type):
    """Each case's layout, then one drawn for the test."""
    shape_of, names, spec, shape = DESCRIBED[case]
    mesh = test_mesh(shape_of(n_devices), names, axis_type)
    arr = jax.device_put(np.zeros(shape, np.float32), NamedSharding(mesh, spec))
    check_description(
        impl.describe(arr), arr, f"a {shape} array with {spec} on mesh {dict(mesh.shape)}"
    )
    arr, mesh, spec, _ = drawn_array(n_devices, axis_type)
    check_description(
        impl.describe(arr), arr, f"a {arr.shape} array with {spec} on mesh {dict(mesh.shape)}"
    )


@pytest.mark.points(0.25)
@pytest.mark.rules("values")
def test_describe_single_device_and_scalar(impl, check_description):
    rng = inputs.rng(0)
    device = jax.devices()[int(rng.integers(8))]
    vector = jax.device_put(
        rng.standard_normal(int(rng.integers(1, 10))).astype(np.float32), device
    )
    check_description(impl.describe(vector), vector, f"an array on one device (device {device.id})")
    mesh = test_mesh((4,), ("d",), "explicit")
    scalar = jax.device_put(np.float32(rng.standard_normal()), NamedSharding(mesh, P()))
    check_description(impl.describe(scalar), scalar, "a scalar replicated on 4 devices")


@pytest.mark.points(0.25)
@pytest.mark.rules("values")
def test_describe_on_part_of_the_devices(impl, check_description, drawn_array):
    mesh = test_mesh((2, 2), ("x", "y"), "auto")
    arr = jax.device_put(np.zeros((4, 4), np.float32), NamedSharding(mesh, P("y")))
    check_description(
        impl.describe(arr), arr, "a (4, 4) array with P('y') on a 2x2 mesh of 4 devices"
    )
    arr, mesh, spec, _ = drawn_array(4, "auto")
    check_description(
        impl.describe(arr),
        arr,
        f"a {arr.shape} array with {spec} on mesh {dict(mesh.shape)} of the first 4 devices",
    )


# ---- shard_shape: random meshes and specs --------------------------------------------------------

NAMES = ("x", "y", "z", "data", "model")


def split(draw, n):
    """n as an ordered product of 1 to 3 factors (factors of 1 allowed, rarer)."""
    ndims = draw(st.sampled_from([2, 3, 1]))
    sizes = []
    for _ in range(ndims - 1):
        factor = draw(st.sampled_from([d for d in (2, 4, 1, 8) if n % d == 0]))
        sizes.append(factor)
        n //= factor
    return tuple(sizes + [n])


@st.composite
def layouts(draw):
    """A mesh over the first 8, 4, 2 or 1 devices, a spec using each mesh axis at most once (names,
    tuples of names, None; possibly shorter than the array) and an array shape it divides.
    Hypothesis draws the first option of each choice most often: the interesting ones come first."""
    mesh_shape = split(draw, draw(st.sampled_from([8, 4, 2, 1])))
    names = draw(st.permutations(NAMES))[: len(mesh_shape)]
    sizes = dict(zip(names, mesh_shape))
    rank = draw(st.integers(1, 4))
    free = list(draw(st.permutations(names)))
    entries = []
    for _ in range(rank):
        kind = draw(st.sampled_from(["tuple", "name", "none"]))
        if kind == "name" and free:
            entries.append(free.pop())
        elif kind == "tuple" and free:
            count = draw(st.integers(1, len(free)))
            entries.append(tuple(free.pop() for _ in range(count)))
        else:
            entries.append(None)
    blocks = [
        math.prod(sizes[a] for a in ((e,) if isinstance(e, str) else e or ())) for e in entries
    ]
    shape = tuple(b * draw(st.integers(1, 3)) for b in blocks)
    # Trailing None entries may be left out of the spec.
    needed = max((i + 1 for i, e in enumerate(entries) if e is not None), default=0)
    spec_len = rank - draw(st.integers(0, rank - needed))
    return sizes, P(*entries[:spec_len]), shape


@pytest.mark.points(1.5)
@pytest.mark.rules("values")
@settings(GRADING, max_examples=80)
@given(layout=layouts())
def test_shard_shape_matches_named_sharding(impl, check_shard_shape, layout):
    sizes, spec, shape = layout
    mesh = test_mesh(tuple(sizes.values()), tuple(sizes), "explicit")
    check_shard_shape(impl, shape, sizes, spec, NamedSharding(mesh, spec).shard_shape(shape))


@pytest.mark.points(0.5)
@pytest.mark.rules("values", "errors", branches=("indivisible",))
@settings(GRADING, max_examples=60)
@given(layout=layouts(), data=st.data())
def test_shard_shape_indivisible_names_the_dimension(
    impl, check_shard_shape, check_rejects_indivisible, before_errors, layout, data
):
    sizes, spec, shape = layout
    mesh = test_mesh(tuple(sizes.values()), tuple(sizes), "explicit")
    check_shard_shape(
        impl, shape, sizes, spec, NamedSharding(mesh, spec).shard_shape(shape), note=before_errors
    )
    split_dims = [
        i
        for i, e in enumerate(spec)
        if e is not None and math.prod(sizes[a] for a in ((e,) if isinstance(e, str) else e)) > 1
    ]
    if not split_dims:
        return
    dim = data.draw(st.sampled_from(split_dims))
    # One element more than a multiple of the block count: that dimension alone is not divisible.
    bad = tuple(n + 1 if i == dim else n for i, n in enumerate(shape))
    with pytest.raises(ValueError):
        NamedSharding(mesh, spec).shard_shape(bad)  # the reference agrees that it cannot split
    check_rejects_indivisible(impl, bad, sizes, spec, dim)


@pytest.mark.points(0.25)
@pytest.mark.rules("values", "errors", branches=("axis-twice",))
@pytest.mark.parametrize(
    "global_shape, mesh_shape, spec, dims, valid_spec, valid_shape",
    [
        ((4, 4), {"x": 2, "y": 2}, P("x", "x"), (0, 1), P("x", "y"), (2, 2)),
        (
            (4, 8, 2),
            {"x": 2, "y": 2},
            P(None, ("x", "y"), "y"),
            (1, 2),
            P(None, ("x", "y"), None),
            (4, 2, 2),
        ),
        (
            (8, 8, 8),
            {"data": 2, "model": 4},
            P("model", None, ("data", "model")),
            (0, 2),
            P("model", None, "data"),
            (2, 8, 4),
        ),
        ((8, 8), {"x": 2, "y": 4}, P(None, ("y", "y")), (1,), P(None, ("y", "x")), (8, 1)),
    ],
)
def test_shard_shape_axis_used_twice(
    impl,
    check_shard_shape,
    check_rejects_axis_used_twice,
    check_drawn_axis_used_twice,
    before_errors,
    global_shape,
    mesh_shape,
    spec,
    dims,
    valid_spec,
    valid_shape,
):
    # First the spec with the repeated axis replaced by one not used yet.
    check_shard_shape(impl, global_shape, mesh_shape, valid_spec, valid_shape, note=before_errors)
    check_rejects_axis_used_twice(impl, global_shape, mesh_shape, spec, dims)
    # Then a layout drawn for this test, and the same with one of its axes used again in another dimension.
    check_drawn_axis_used_twice(impl)


@pytest.mark.points(0.5)
@pytest.mark.rules("values")
def test_shard_shape_needs_no_devices(impl, check_shard_shape, named_shard_shape):
    # A mesh of 2048 devices: only pure Python arithmetic can answer on this machine.
    mesh_shape = {"pod": 16, "chip": 128}
    check_shard_shape(impl, (4096, 512), mesh_shape, P("chip", "pod"), (32, 32))
    check_shard_shape(impl, (4096, 3), mesh_shape, P(("pod", "chip")), (2, 3))
    # Then a mesh of 512 devices or more drawn for this test, with a layout drawn on it.
    rng = inputs.rng(0)
    sizes, spec, _ = inputs.layout(rng)
    sizes = {axis: size * 2 ** int(rng.integers(6, 9)) for axis, size in sizes.items()}
    blocks = [math.prod(sizes[a] for a in ((e,) if isinstance(e, str) else e or ())) for e in spec]
    shape = tuple(b * int(rng.integers(1, 4)) for b in blocks)
    check_shard_shape(impl, shape, sizes, spec, named_shard_shape(shape, sizes, spec))


# ---- bytes_per_device ----------------------------------------------------------------------------


@pytest.mark.points(0.25)
@pytest.mark.rules("values")
@pytest.mark.parametrize(
    "dtype, itemsize",
    [
        (jnp.float32, 4),
        (jnp.bfloat16, 2),
        (np.int8, 1),
        (np.dtype("float16"), 2),
        (jnp.int32, 4),
        (np.float64, 8),
    ],
)
def test_bytes_per_device_dtypes(impl, named_shard_shape, dtype, itemsize):
    got = impl.bytes_per_device((64, 48), dtype, {"x": 2, "y": 4}, P(None, ("x", "y")))
    assert got == 64 * 6 * itemsize, (
        f"bytes_per_device((64, 48), {np.dtype(dtype).name}, x=2 y=4, P(None, ('x', 'y'))): "
        f"a device holds 64 x 6 elements of {itemsize} bytes = {64 * 6 * itemsize}, got {got}"
    )
    sizes, spec, shape = inputs.layout(inputs.rng(0))
    want = math.prod(named_shard_shape(shape, sizes, spec)) * itemsize
    got = impl.bytes_per_device(shape, dtype, dict(sizes), spec)
    assert got == want, (
        f"bytes_per_device({shape}, {np.dtype(dtype).name}, {sizes}, {spec}): expected {want}, got {got}"
    )


@pytest.mark.points(0.5)
@pytest.mark.rules("values")
@settings(GRADING, max_examples=30)
@given(layout=layouts(), dtype=st.sampled_from([jnp.float32, jnp.bfloat16, np.int8]))
def test_bytes_per_device_matches_named_sharding(impl, layout, dtype):
    sizes, spec, shape = layout
    mesh = test_mesh(tuple(sizes.values()), tuple(sizes), "explicit")
    want = math.prod(NamedSharding(mesh, spec).shard_shape(shape)) * np.dtype(dtype).itemsize
    got = impl.bytes_per_device(shape, dtype, dict(sizes), spec)
    assert got == want, (
        f"bytes_per_device({shape}, {np.dtype(dtype).name}, {sizes}, {spec}): expected {want}, got {got}"
    )


# ---- replicate_along -----------------------------------------------------------------------------


def check_replicated_along(impl, mesh, spec, axis, want_spec, shape):
    x = inputs.rng(2).standard_normal(shape).astype(np.float32)
    arr = jax.device_put(x, NamedSharding(mesh, spec))
    out = impl.replicate_along(arr, mesh, axis)
    assert_sharded_like(
        out,
        mesh,
        want_spec,
        x,
        rtol=0,
        atol=0,
        name=f"replicate_along(an array with {spec}, mesh, {axis!r})",
    )


def check_drawn_replicated_along(impl, drawn, without):
    """A layout drawn for the test, along an axis drawn too (one its spec splits, or not)."""
    arr, mesh, spec, x = drawn
    axis = str(inputs.rng(2).choice(mesh.axis_names))
    assert_sharded_like(
        impl.replicate_along(arr, mesh, axis),
        mesh,
        without(spec, axis),
        x,
        rtol=0,
        atol=0,
        name=f"replicate_along(an array with {spec} on mesh {dict(mesh.shape)}, {axis!r})",
    )


# On a (n // 2, 2) mesh ("x", "y"): every result stays split along "y" (size 2 at every n).
ALONG_X = {
    "one-of-two": (P("x", "y"), P(None, "y"), (4, 4)),
    "out-of-a-tuple": (P(("x", "y"), None), P("y", None), (8, 3)),
    "not-split-along-it": (P(None, "y"), P(None, "y"), (3, 4)),
}


@pytest.mark.points(1)
@pytest.mark.rules("values", "layouts")
@pytest.mark.parametrize("axis_type", ["explicit", "auto"])
@pytest.mark.parametrize("case", list(ALONG_X))
def test_replicate_along_sizes(impl, drawn_array, without, n_devices, case, axis_type):
    spec, want, shape = ALONG_X[case]
    mesh = test_mesh((n_devices // 2, 2), ("x", "y"), axis_type)
    check_replicated_along(impl, mesh, spec, "x", want, shape)
    check_drawn_replicated_along(impl, drawn_array(n_devices, axis_type, seed=1), without)


ON_2X4 = {  # (spec, axis, expected spec, array shape)
    "columns-kept": (P("y", "x"), "y", P(None, "x"), (8, 8)),
    "tuple-reversed": (P(("y", "x")), "y", P("x"), (16,)),
    "tuple-in-3d": (P(None, ("x", "y"), None), "x", P(None, "y", None), (2, 8, 3)),
    "3d": (P("y", None, "x"), "y", P(None, None, "x"), (4, 3, 2)),
}


@pytest.mark.points(1)
@pytest.mark.rules("values", "layouts")
@pytest.mark.parametrize("axis_type", ["explicit", "auto"])
@pytest.mark.parametrize("case", list(ON_2X4))
def test_replicate_along_on_2x4(impl, drawn_array, without, case, axis_type):
    spec, axis, want, shape = ON_2X4[case]
    mesh = test_mesh((2, 4), ("x", "y"), axis_type)
    check_replicated_along(impl, mesh, spec, axis, want, shape)
    check_drawn_replicated_along(impl, drawn_array(8, axis_type, seed=1), without)
