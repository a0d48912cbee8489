"""What ex01's visible and hidden tests share: the check of a mesh (axis names, sizes, types and device
order), the check of a shard table against the array's own sharding, and a layout drawn for the test (a
table depends on nothing else, so fixed layouts alone could be answered from a list)."""

import jax
import numpy as np
import pytest
from jax.sharding import NamedSharding

from grader.checks import inputs, test_mesh


def device_ids(mesh):
    return [d.id for d in mesh.devices.flat]


def _check_mesh(mesh, shape: dict, axis_type, what: str):
    assert isinstance(mesh, jax.sharding.Mesh), (
        f"{what}: expected a jax.sharding.Mesh, got {type(mesh).__name__}"
    )
    assert tuple(mesh.axis_names) == tuple(shape), (
        f"{what}: expected the axis names {tuple(shape)}, got {mesh.axis_names}"
    )
    assert dict(mesh.shape) == shape, (
        f"{what}: expected the axis sizes {shape}, got {dict(mesh.shape)}"
    )
    assert tuple(mesh.axis_types) == (axis_type,) * len(shape), (
        f"{what}: every axis must be {axis_type.name}, got axis_types={mesh.axis_types}"
    )
    first = jax.devices()[: mesh.devices.size]
    # Row-major order of the first devices, or the order jax.make_mesh picks for them (the same on CPU;
    # it may follow the physical topology on accelerators).
    chosen = jax.make_mesh(
        tuple(shape.values()), tuple(shape), axis_types=(axis_type,) * len(shape), devices=first
    )
    accepted = ([d.id for d in first], device_ids(chosen))
    assert device_ids(mesh) in accepted, (
        f"{what}: expected the first {len(first)} devices in order {accepted[0]}, got {device_ids(mesh)}"
    )


@pytest.fixture
def check_mesh():
    """check_mesh(mesh, shape, axis_type, what): a Mesh with these axis names and sizes ({"x": 2, "y": 4}), every
    axis of this AxisType, over the first devices in order."""
    return _check_mesh


def expected_rows(arr):
    rows = [
        (d.id, idx, tuple(arr.sharding.shard_shape(arr.shape)))
        for d, idx in arr.sharding.devices_indices_map(arr.shape).items()
    ]
    return sorted(rows, key=lambda row: row[0])


def normalize(index, shape, what):
    is_slices = isinstance(index, tuple) and all(isinstance(s, slice) for s in index)
    assert is_slices and len(index) == len(shape), (
        f"{what}: the index should be a tuple of {len(shape)} slice(s), got {index!r}"
    )
    return tuple(s.indices(n) for s, n in zip(index, shape))


def _check_table(table, arr):
    want = expected_rows(arr)
    table = list(table)
    got_ids = [row[0] for row in table]
    assert sorted(got_ids) == [row[0] for row in want], (
        f"expected one row per device holding a shard, devices {[row[0] for row in want]}, got {got_ids}"
    )
    assert got_ids == sorted(got_ids), (
        f"the rows must be sorted by device id, got the order {got_ids}"
    )
    for (device, index, shape), (_, want_index, want_shape) in zip(table, want):
        what = f"the row of device {device}"
        assert normalize(index, arr.shape, what) == normalize(want_index, arr.shape, "reference"), (
            f"{what}: it holds arr[{want_index}], your row says {index}"
        )
        assert tuple(shape) == want_shape, (
            f"{what}: the shard shape is {want_shape}, your row says {shape}"
        )


def _drawn_array(devices=8, seed=0, mesh_devices=None):
    """An array placed with a layout drawn for the test over `devices` devices (the first ones, or
    `mesh_devices` in that order), its values drawn too."""
    rng = inputs.rng(seed)
    sizes, spec, shape = inputs.layout(rng, devices)
    if mesh_devices is None:
        mesh = test_mesh(tuple(sizes.values()), tuple(sizes), "explicit")
    else:
        mesh = jax.sharding.Mesh(
            np.array(mesh_devices).reshape(tuple(sizes.values())),
            tuple(sizes),
            axis_types=(jax.sharding.AxisType.Explicit,) * len(sizes),
        )
    return jax.device_put(rng.standard_normal(shape).astype(np.float32), NamedSharding(mesh, spec))


@pytest.fixture
def check_table():
    """check_table(table, arr): shard_table's rows for arr, as its sharding says."""
    return _check_table


@pytest.fixture
def drawn_array():
    """drawn_array(devices=8, seed=0, mesh_devices=None) -> an array placed with a layout drawn for the test."""
    return _drawn_array
