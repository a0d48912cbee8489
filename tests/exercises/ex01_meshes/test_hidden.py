"""ex01_meshes, hidden tests: every mesh size, both axis types, device order and every shard's row."""

import jax
import numpy as np
import pytest
from jax.sharding import AxisType, Mesh, NamedSharding, PartitionSpec as P

from grader.checks import assert_sharded_like, inputs, test_mesh

pytestmark = pytest.mark.hidden


@pytest.mark.points(0.5)
@pytest.mark.rules("values")
def test_mesh_2x4_devices_in_order(impl, check_mesh):
    mesh = impl.make_mesh_2x4()
    check_mesh(mesh, {"x": 2, "y": 4}, AxisType.Explicit, "make_mesh_2x4()")
    assert mesh.devices.shape == (2, 4), f"the device grid should be 2x4, got {mesh.devices.shape}"


@pytest.mark.points(0.5)
@pytest.mark.rules("values")
def test_mesh_2x4_sharding_is_in_the_type(impl):
    mesh = impl.make_mesh_2x4()
    arr = jax.device_put(np.zeros((4, 8), np.float32), NamedSharding(mesh, P("x", "y")))
    assert str(jax.typeof(arr)) == "float32[4@x,8@y]", (
        f"on an Explicit mesh the sharding is part of the type: expected float32[4@x,8@y], "
        f"got {jax.typeof(arr)} (are both axes Explicit?)"
    )


@pytest.mark.points(0.5)
@pytest.mark.rules("values")
def test_data_mesh_sizes(impl, check_mesh, n_devices):
    check_mesh(
        impl.make_data_mesh(n_devices),
        {"data": n_devices},
        AxisType.Auto,
        f"make_data_mesh({n_devices})",
    )


@pytest.mark.points(0.5)
@pytest.mark.rules("values")
@pytest.mark.parametrize("n", [1, 3, 5])
def test_data_mesh_odd_sizes(impl, check_mesh, n):
    check_mesh(impl.make_data_mesh(n), {"data": n}, AxisType.Auto, f"make_data_mesh({n})")


@pytest.mark.points(0.5)
@pytest.mark.rules("values")
def test_data_mesh_named_axis(impl, check_mesh, n_devices):
    check_mesh(
        impl.make_data_mesh(n_devices, name="batch"),
        {"batch": n_devices},
        AxisType.Auto,
        f"make_data_mesh({n_devices}, name='batch')",
    )
    check_mesh(
        impl.make_data_mesh(n_devices, "rows"),
        {"rows": n_devices},
        AxisType.Auto,
        f"make_data_mesh({n_devices}, 'rows')",
    )
    name = "".join(inputs.rng(0).choice(list("abcdefghijklmnopqrstuvwxyz"), 8))
    check_mesh(
        impl.make_data_mesh(n_devices, name=name),
        {name: n_devices},
        AxisType.Auto,
        f"make_data_mesh({n_devices}, name={name!r})",
    )


# (mesh shape as a function of n, axis names, spec, array shape): every spec splits something.
PLACEMENTS = {
    "1d-rows": (lambda n: (n,), ("data",), P("data"), (16, 3)),
    "1d-columns": (lambda n: (n,), ("data",), P(None, "data"), (3, 16)),
    "2d-both": (lambda n: (2, n // 2), ("x", "y"), P("x", "y"), (8, 8)),
    "2d-transposed": (lambda n: (2, n // 2), ("x", "y"), P("y", "x"), (8, 8)),
    "2d-tuple": (lambda n: (2, n // 2), ("x", "y"), P(("x", "y"), None), (16, 2)),
    "3d-middle": (lambda n: (n // 2, 2), ("x", "y"), P(None, "y", "x"), (2, 4, 8)),
}


@pytest.mark.points(1.5)
@pytest.mark.rules("values", "layouts")
@pytest.mark.parametrize("axis_type", ["explicit", "auto"])
@pytest.mark.parametrize("case", list(PLACEMENTS))
def test_place_layouts(impl, n_devices, case, axis_type):
    shape_of, names, spec, array_shape = PLACEMENTS[case]
    mesh = test_mesh(shape_of(n_devices), names, axis_type)
    x = inputs.rng(1).standard_normal(array_shape).astype(np.float32)
    out = impl.place(x, mesh, spec)
    assert_sharded_like(out, mesh, spec, x, rtol=0, atol=0, name=f"place(x, mesh, {spec})")


@pytest.mark.points(0.5)
@pytest.mark.rules("values", "layouts")
def test_place_moves_a_placed_array(impl):
    mesh = test_mesh((2, 4), ("x", "y"), "explicit")
    x = inputs.rng(0).integers(-(2**31), 2**31, (8, 8), dtype=np.int32)
    placed = jax.device_put(x, NamedSharding(mesh, P("x", "y")))
    out = impl.place(placed, mesh, P("y", None))
    assert_sharded_like(
        out, mesh, P("y", None), x, rtol=0, atol=0, name="place(arr, mesh, P('y', None))"
    )
    assert out.dtype == np.int32, f"place must keep the dtype: int32 in, {out.dtype} out"


TABLES = {
    "rows": ((2, 4), P("x", None), (8, 6)),
    "both": ((2, 4), P("x", "y"), (4, 8)),
    "tuple": ((2, 4), P(None, ("y", "x")), (3, 16)),
    "replicated": ((2, 4), P(), (5, 3)),
    "3d": ((2, 4), P("y", None, "x"), (4, 3, 2)),
    "1d-columns": ((8,), P(None, "d"), (2, 16)),
}


@pytest.mark.points(0.75)
@pytest.mark.rules("values")
@pytest.mark.parametrize("case", list(TABLES))
def test_shard_table_layouts(impl, check_table, drawn_array, case):
    """Each case's layout, then one drawn for the test."""
    mesh_shape, spec, shape = TABLES[case]
    mesh = test_mesh(mesh_shape, ("x", "y") if len(mesh_shape) == 2 else ("d",), "explicit")
    arr = jax.device_put(np.zeros(shape, np.float32), NamedSharding(mesh, spec))
    check_table(impl.shard_table(arr), arr)
    arr = drawn_array()
    check_table(impl.shard_table(arr), arr)


@pytest.mark.points(0.5)
@pytest.mark.rules("values")
def test_shard_table_sizes(impl, check_table, drawn_array, n_devices):
    mesh = test_mesh((n_devices,), ("data",), "auto")
    arr = jax.device_put(np.zeros((2 * n_devices, 3), np.float32), NamedSharding(mesh, P("data")))
    check_table(impl.shard_table(arr), arr)
    arr = drawn_array(n_devices)
    check_table(impl.shard_table(arr), arr)


@pytest.mark.points(0.5)
@pytest.mark.rules("values")
def test_shard_table_sorted_on_a_reversed_mesh(impl, check_table, drawn_array):
    # The devices sit in the mesh in reverse order, so the shards come in the order 7, 6, ..., 0.
    devices = np.array(jax.devices()[:8][::-1]).reshape(2, 4)
    mesh = Mesh(devices, ("x", "y"), axis_types=(AxisType.Explicit,) * 2)
    arr = jax.device_put(np.zeros((4, 8), np.float32), NamedSharding(mesh, P("x", "y")))
    check_table(impl.shard_table(arr), arr)
    # Then the devices in an order drawn for the test, with a layout drawn too.
    shuffled = [jax.devices()[i] for i in inputs.rng(1).permutation(8)]
    arr = drawn_array(mesh_devices=shuffled)
    check_table(impl.shard_table(arr), arr)


@pytest.mark.points(0.25)
@pytest.mark.rules("values")
def test_shard_table_single_device_and_scalar(impl, check_table):
    rng = inputs.rng(0)
    device = jax.devices()[int(rng.integers(8))]
    vector = jax.device_put(
        rng.standard_normal(int(rng.integers(1, 10))).astype(np.float32), device
    )
    check_table(impl.shard_table(vector), vector)
    mesh = test_mesh((4,), ("d",), "explicit")
    scalar = jax.device_put(np.float32(rng.standard_normal()), NamedSharding(mesh, P()))
    check_table(impl.shard_table(scalar), scalar)
