"""ex01_meshes, visible tests: run them with `shardlab check ex01` (or pytest on this file)."""

import jax
import numpy as np
import pytest
from jax.sharding import AxisType, NamedSharding, PartitionSpec as P

from grader.checks import assert_sharded_like, inputs, test_mesh

# Points (ex01_meshes.py's docstring): make_mesh_2x4 2, make_data_mesh 2, place 3, shard_table 3, of
# which these visible tests carry 1, 0.5, 1 and 1; the hidden tests carry the rest. The meshes are checked
# as the hidden tests check them (conftest.py's check_mesh): names, sizes, axis types and device order.


@pytest.mark.rules("values")
def test_make_mesh_2x4(impl, check_mesh):
    mesh = impl.make_mesh_2x4()
    check_mesh(mesh, {"x": 2, "y": 4}, AxisType.Explicit, "make_mesh_2x4()")
    assert mesh.devices.shape == (2, 4), f"the device grid should be 2x4, got {mesh.devices.shape}"


@pytest.mark.points(0.5)
@pytest.mark.rules("values")
def test_make_data_mesh(impl, check_mesh):
    check_mesh(impl.make_data_mesh(8), {"data": 8}, AxisType.Auto, "make_data_mesh(8)")
    # Then a name drawn for the test (the hidden tests take every size).
    name = "".join(inputs.rng(0).choice(list("abcdefghijklmnopqrstuvwxyz"), 8))
    check_mesh(
        impl.make_data_mesh(8, name=name),
        {name: 8},
        AxisType.Auto,
        f"make_data_mesh(8, name={name!r})",
    )


@pytest.mark.rules("values", "layouts")
def test_place_rows_and_columns(impl):
    mesh = test_mesh((2, 4), ("x", "y"), "explicit")
    x = inputs.rng(0).standard_normal((8, 12)).astype(np.float32)
    out = impl.place(x, mesh, P("x", "y"))
    assert_sharded_like(
        out, mesh, P("x", "y"), x, rtol=0, atol=0, name="place(x, mesh, P('x', 'y'))"
    )
    # Then integers drawn for the test: the dtype is kept too.
    x = inputs.rng(1).integers(-(2**31), 2**31, (8, 8), dtype=np.int32)
    out = impl.place(x, mesh, P("y", None))
    assert_sharded_like(
        out, mesh, P("y", None), x, rtol=0, atol=0, name="place(x, mesh, P('y', None))"
    )
    assert out.dtype == np.int32, f"place must keep the dtype: int32 in, {out.dtype} out"


@pytest.mark.rules("values")
def test_shard_table_rows(impl, check_table, drawn_array):
    mesh = test_mesh((2, 4), ("x", "y"), "explicit")
    arr = jax.device_put(np.zeros((8, 8), np.float32), NamedSharding(mesh, P("x", None)))
    table = list(impl.shard_table(arr))
    assert len(table) == 8, f"expected one row per device (8), got {len(table)} rows"
    device, index, shape = table[0]
    assert device == 0, f"the first row should be device 0's, got device {device}"
    assert tuple(shape) == (4, 8), f"device 0 holds a (4, 8) block, your row says {shape}"
    assert len(index) == 2 and all(isinstance(s, slice) for s in index), (
        f"the index should be a tuple of 2 slices, got {index!r}"
    )
    assert [s.indices(n)[:2] for s, n in zip(index, arr.shape)] == [(0, 4), (0, 8)], (
        f"device 0 holds rows 0:4 and every column, your row says {index}"
    )
    # Then every row, on a layout drawn for the test.
    arr = drawn_array()
    check_table(impl.shard_table(arr), arr)
