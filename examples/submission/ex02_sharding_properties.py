"""ex02 -- what a sharding says. describe, bytes_per_device and replicate_along are done;
shard_shape passes the visible tests."""

import math

import jax
import numpy as np
from jax.sharding import NamedSharding, PartitionSpec as P


def describe(arr):
    s = arr.sharding
    block = s.shard_shape(arr.shape)
    # how many *different* blocks there are: count the distinct index tuples
    indices = s.devices_indices_map(arr.shape).values()
    distinct = {tuple((sl.start, sl.stop) for sl in idx) for idx in indices}
    return {
        "shard_shape": tuple(block),
        "num_devices": len(s.device_set),
        "is_fully_replicated": s.is_fully_replicated,
        "is_fully_addressable": s.is_fully_addressable,
        "replication_factor": len(s.device_set) // len(distinct),
    }


def _axes_of(entry):
    """A helper you may use (or not): the mesh axis names one spec entry splits its dimension over,
    as a tuple: () for None, ("x",) for "x", the names themselves for a tuple of names."""
    if entry is None:
        return ()
    if type(entry) is str:
        return (entry,)
    return tuple(entry)


def shard_shape(global_shape, mesh_shape, spec):
    spec = list(spec)
    spec += [None] * (len(global_shape) - len(spec))   # missing entries = not split
    result = []
    for i, size in enumerate(global_shape):
        axes = _axes_of(spec[i])
        n_blocks = 1
        for a in axes:
            n_blocks *= mesh_shape[a]
        if size % n_blocks != 0:
            raise ValueError(f"dimension {i} (size {size}) is not divisible by {n_blocks}, "
                             f"the size of its mesh axes {axes}")
        result.append(size // n_blocks)
    return tuple(result)


def bytes_per_device(global_shape, dtype, mesh_shape, spec):
    itemsize = np.dtype(dtype).itemsize
    return math.prod(shard_shape(global_shape, mesh_shape, spec)) * itemsize


def replicate_along(arr, mesh, axis):
    new_spec = []
    for entry in arr.sharding.spec:
        rest = [a for a in _axes_of(entry) if a != axis]
        if len(rest) == 0:
            new_spec.append(None)
        elif len(rest) == 1:
            new_spec.append(rest[0])
        else:
            new_spec.append(tuple(rest))
    # device_put and not reshard: reshard only takes Explicit axes and some meshes here are Auto
    return jax.device_put(arr, NamedSharding(mesh, P(*new_spec)))
