"""ex02 with the right values but the wrong layout from replicate_along: the array is replicated
along every mesh axis, P(), instead of along the one axis asked for, so the other splits are lost.
describe, shard_shape and bytes_per_device are correct."""

import math

import jax
import numpy as np
from jax.sharding import NamedSharding, PartitionSpec as P


def describe(arr):
    s = arr.sharding
    block = s.shard_shape(arr.shape)
    blocks = math.prod(n // b for n, b in zip(arr.shape, block) if b)
    return {"shard_shape": tuple(block), "num_devices": s.num_devices,
            "is_fully_replicated": s.is_fully_replicated, "is_fully_addressable": s.is_fully_addressable,
            "replication_factor": s.num_devices // blocks}


def shard_shape(global_shape, mesh_shape, spec):
    used, out = set(), []
    entries = list(spec) + [None] * (len(global_shape) - len(spec))
    for dim, (n, entry) in enumerate(zip(global_shape, entries)):
        axes = () if entry is None else (entry,) if isinstance(entry, str) else tuple(entry)
        if used & set(axes) or len(set(axes)) < len(axes):
            raise ValueError(f"dimension {dim} reuses a mesh axis")
        used |= set(axes)
        k = math.prod(mesh_shape[a] for a in axes)
        if n % k:
            raise ValueError(f"dimension {dim} of size {n} is not divisible by {k}")
        out.append(n // k)
    return tuple(out)


def bytes_per_device(global_shape, dtype, mesh_shape, spec):
    return math.prod(shard_shape(global_shape, mesh_shape, spec)) * np.dtype(dtype).itemsize


def replicate_along(arr, mesh, axis):
    return jax.device_put(arr, NamedSharding(mesh, P()))
