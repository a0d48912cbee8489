"""ex01 with the right values but the wrong layout from place: the array is put on the mesh
replicated, P(), whatever spec asks for (every device ends up holding the whole array). The meshes
and the shard table are correct."""

import jax
from jax.sharding import AxisType, NamedSharding, PartitionSpec as P


def make_mesh_2x4():
    return jax.make_mesh((2, 4), ("x", "y"), axis_types=(AxisType.Explicit,) * 2, devices=jax.devices()[:8])


def make_data_mesh(n, name="data"):
    return jax.make_mesh((n,), (name,), axis_types=(AxisType.Auto,), devices=jax.devices()[:n])


def place(x, mesh, spec):
    return jax.device_put(x, NamedSharding(mesh, P()))


def shard_table(arr):
    return sorted((s.device.id, s.index, s.data.shape) for s in arr.addressable_shards)
