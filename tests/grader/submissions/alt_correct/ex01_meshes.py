"""ex01 written from the exercise contract alone (the docstrings), another way than the reference: the
Mesh constructor on a reshaped device array, arrays assembled block by block with
make_array_from_callback, and the shard table read from the sharding's devices_indices_map."""

import jax
import numpy as np
from jax.sharding import AxisType, Mesh, NamedSharding


def make_mesh_2x4():
    grid = np.array(jax.devices()[:8]).reshape(2, 4)
    return Mesh(grid, ("x", "y"), axis_types=(AxisType.Explicit,) * 2)


def make_data_mesh(n, name="data"):
    return Mesh(np.array(jax.devices()[:n]), (name,), axis_types=(AxisType.Auto,))


def place(x, mesh, spec):
    host = np.asarray(x)
    return jax.make_array_from_callback(host.shape, NamedSharding(mesh, spec), lambda index: host[index])


def shard_table(arr):
    sharding = arr.sharding
    block = sharding.shard_shape(arr.shape)
    index_map = sharding.devices_indices_map(arr.shape)
    mine = {d.id for d in sharding.addressable_devices}
    return [(device.id, index_map[device], block)
            for device in sorted(index_map, key=lambda d: d.id) if device.id in mine]
