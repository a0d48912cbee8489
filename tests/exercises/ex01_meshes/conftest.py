"""What ex01's visible and hidden tests share: the check of a shard table against the array's own sharding,
and a layout drawn for the test (a table depends on nothing else, so fixed layouts alone could be answered
from a list)."""

import jax
import numpy as np
import pytest
from jax.sharding import NamedSharding

from grader.checks import inputs, test_mesh


def expected_rows(arr):
    rows = [(d.id, idx, tuple(arr.sharding.shard_shape(arr.shape)))
            for d, idx in arr.sharding.devices_indices_map(arr.shape).items()]
    return sorted(rows, key=lambda row: row[0])


def normalize(index, shape, what):
    is_slices = isinstance(index, tuple) and all(isinstance(s, slice) for s in index)
    assert is_slices and len(index) == len(shape), (
        f"{what}: the index should be a tuple of {len(shape)} slice(s), got {index!r}")
    return tuple(s.indices(n) for s, n in zip(index, shape))


def _check_table(table, arr):
    want = expected_rows(arr)
    table = list(table)
    got_ids = [row[0] for row in table]
    assert sorted(got_ids) == [row[0] for row in want], (
        f"expected one row per device holding a shard, devices {[row[0] for row in want]}, got {got_ids}")
    assert got_ids == sorted(got_ids), f"the rows must be sorted by device id, got the order {got_ids}"
    for (device, index, shape), (_, want_index, want_shape) in zip(table, want):
        what = f"the row of device {device}"
        assert normalize(index, arr.shape, what) == normalize(want_index, arr.shape, "reference"), (
            f"{what}: it holds arr[{want_index}], your row says {index}")
        assert tuple(shape) == want_shape, f"{what}: the shard shape is {want_shape}, your row says {shape}"


def _drawn_array(devices=8, seed=0, mesh_devices=None):
    """An array placed with a layout drawn for the test over `devices` devices (the first ones, or
    `mesh_devices` in that order), its values drawn too."""
    rng = inputs.rng(seed)
    sizes, spec, shape = inputs.layout(rng, devices)
    if mesh_devices is None:
        mesh = test_mesh(tuple(sizes.values()), tuple(sizes), "explicit")
    else:
        mesh = jax.sharding.Mesh(np.array(mesh_devices).reshape(tuple(sizes.values())), tuple(sizes),
                                 axis_types=(jax.sharding.AxisType.Explicit,) * len(sizes))
    return jax.device_put(rng.standard_normal(shape).astype(np.float32), NamedSharding(mesh, spec))


@pytest.fixture
def check_table():
    """check_table(table, arr): shard_table's rows for arr, as its sharding says."""
    return _check_table


@pytest.fixture
def drawn_array():
    """drawn_array(devices=8, seed=0, mesh_devices=None) -> an array placed with a layout drawn for the test."""
    return _drawn_array
