"""ex02 whose shard_shape does no arithmetic at all: it raises ValueError on every call, with a message
that names every dimension of the array, so that whichever dimension an error test asks about is named.
It must earn nothing of shard_shape's points: an error test pays only when the same function also gets
the valid layouts right. describe, bytes_per_device (which never calls shard_shape) and replicate_along
are correct."""

import jax
import numpy as np
from jax.sharding import NamedSharding, PartitionSpec as P


def describe(arr):
    sharding = arr.sharding
    indices = sharding.devices_indices_map(arr.shape).values()
    blocks = {tuple(s.indices(n) for s, n in zip(index, arr.shape)) for index in indices}
    return {
        "shard_shape": tuple(sharding.shard_shape(arr.shape)),
        "num_devices": len(sharding.device_set),
        "is_fully_replicated": len(blocks) == 1,
        "is_fully_addressable": sharding.is_fully_addressable,
        "replication_factor": len(sharding.device_set) // len(blocks),
    }


def shard_shape(global_shape, mesh_shape, spec):
    dims = ", ".join(str(d) for d in range(len(global_shape)))
    raise ValueError(f"dimension {dims}: cannot be split over the mesh axes of {spec}")


def bytes_per_device(global_shape, dtype, mesh_shape, spec):
    entries = list(spec) + [None] * (len(global_shape) - len(spec))
    elements = 1
    for size, entry in zip(global_shape, entries):
        names = () if entry is None else (entry,) if isinstance(entry, str) else tuple(entry)
        parts = 1
        for name in names:
            parts *= mesh_shape[name]
        elements *= size // parts
    return elements * np.dtype(dtype).itemsize


def replicate_along(arr, mesh, axis):
    def drop(entry):
        names = () if entry is None else (entry,) if isinstance(entry, str) else tuple(entry)
        kept = tuple(name for name in names if name != axis)
        return kept[0] if len(kept) == 1 else (kept or None)

    return jax.device_put(arr, NamedSharding(mesh, P(*(drop(e) for e in arr.sharding.spec))))
