"""ex02_sharding_properties: what a sharding says.

A `NamedSharding(mesh, spec)` fixes, before a single byte moves, the shape of every device's block,
how many devices hold each element, and so how much memory each device needs. Each entry of the
`PartitionSpec` speaks for one dimension of the array: None keeps the dimension whole, an axis name
splits it in as many blocks as that mesh axis is long, and a tuple of axis names splits it over all
of them (in that order), i.e. in as many blocks as the product of their sizes. A spec shorter than
the array leaves the remaining dimensions whole. Every mesh axis that the spec does not name is one
the array is replicated over.

You will read these properties off an array, compute them yourself in pure Python (no devices, no
arrays), and move an array so that it is no longer split along one mesh axis.

Grading: 10 points, describe 2, shard_shape 4, bytes_per_device 1, replicate_along 3; every
comparison is exact (shapes, counts, bytes, placed values). The hidden tests use meshes of 2, 4 and
8 devices, Explicit and Auto, and cross-check `shard_shape` and `bytes_per_device` on many random
meshes and specs against `NamedSharding(mesh, spec).shard_shape(shape)`, including the ValueError
cases. Of shard_shape's 4 points, 1.5 are for its ValueError (raised, naming the dimension). Each
error test first checks shard_shape on a valid layout (the same mesh and spec on an array that
divides, or the spec without its repeated axis) and earns only when that answer is right too: a
shard_shape that raises everywhere earns nothing. A ValueError on a valid layout is a wrong answer.
"""

import math

import jax
import numpy as np
from jax.sharding import NamedSharding, PartitionSpec as P


def describe(arr):
    """What `arr`'s sharding says, as a dict with these keys:

      "shard_shape": tuple of ints, the shape of the block each device holds;
      "num_devices": int, how many devices the array is placed on;
      "is_fully_replicated": bool, every device holds the whole array;
      "is_fully_addressable": bool, this process can reach every shard;
      "replication_factor": int, how many devices hold each element (1 when nothing is replicated,
        num_devices when everything is).

    arr is any `jax.Array`: placed on a mesh with a NamedSharding, or on a single device.
    Example: an (8, 8) array with P("x", None) on a 2x4 mesh ("x", "y") has shard shape (4, 8), is on 8
    devices, and each element is held by the 4 devices of one "x" row: replication factor 4.
    Hint: most of these are properties of `arr.sharding`; the replication factor is the number of
    devices divided by the number of different blocks.
    """
    ### BEGIN SOLUTION
    sharding = arr.sharding
    shard_shape = tuple(sharding.shard_shape(arr.shape))
    blocks = math.prod(dim // block for dim, block in zip(arr.shape, shard_shape) if block)
    return {
        "shard_shape": shard_shape,
        "num_devices": sharding.num_devices,
        "is_fully_replicated": bool(sharding.is_fully_replicated),
        "is_fully_addressable": bool(sharding.is_fully_addressable),
        "replication_factor": sharding.num_devices // blocks,
    }
    ### END SOLUTION


def _axes_of(entry):
    """A helper you may use (or not): the mesh axis names one spec entry splits its dimension over,
    as a tuple: () for None, ("x",) for "x", the names themselves for a tuple of names."""
    ### BEGIN SOLUTION
    if entry is None:
        return ()
    if isinstance(entry, str):
        return (entry,)
    return tuple(entry)
    ### END SOLUTION


def shard_shape(global_shape, mesh_shape, spec):
    """The shape of one device's block, worked out in pure Python: no devices, no arrays.

    global_shape is a tuple of ints; mesh_shape maps each mesh axis name to its size, e.g.
    {"x": 2, "y": 4} (it may describe a mesh far larger than this machine); spec is a PartitionSpec
    (or any sequence of entries) with at most len(global_shape) entries, each None, an axis name of
    mesh_shape, or a tuple of such names. Returns a tuple of ints, one per dimension.
    Raises ValueError when a dimension is not divisible by the number of blocks it is split in, or
    when a mesh axis is used twice in the spec. The message must name the dimension by its index
    (for an axis used twice: the dimension where it appears again), e.g.
    "dimension 1 (size 6) is not divisible by 4, the size of its mesh axes ('y',)".
    Example: shard_shape((12, 6), {"x": 2, "y": 3}, P(("x", "y"), None)) == (2, 6).
    Hint: walk the spec one dimension at a time and keep track of the mesh axes already used.
    """
    ### BEGIN SOLUTION
    if len(tuple(spec)) > len(global_shape):
        raise ValueError(
            f"the spec {spec} has more entries than the {len(global_shape)} dimensions of the array"
        )
    shape = []
    used = set()
    entries = tuple(spec) + (None,) * (len(global_shape) - len(tuple(spec)))
    for dim, (size, entry) in enumerate(zip(global_shape, entries)):
        axes = _axes_of(entry)
        for axis in axes:
            if axis in used:
                raise ValueError(
                    f"dimension {dim}: mesh axis {axis!r} appears a second time in the spec "
                    f"{spec}; a mesh axis may split only one dimension, once"
                )
            used.add(axis)
        blocks = math.prod(mesh_shape[axis] for axis in axes)
        if size % blocks:
            raise ValueError(
                f"dimension {dim} (size {size}) is not divisible by {blocks}, the size of "
                f"its mesh axes {axes}"
            )
        shape.append(size // blocks)
    return tuple(shape)
    ### END SOLUTION


def bytes_per_device(global_shape, dtype, mesh_shape, spec):
    """How many bytes of the array each device holds, as an int (pure Python, like `shard_shape`).

    dtype is a NumPy or JAX dtype or scalar type (np.float32, jnp.bfloat16, np.dtype("int8"), ...).
    Example: a (1024, 1024) float32 array with P("x", None) on {"x": 8} takes 131072 bytes per device.
    Hint: a device holds one block; how big is one element?
    """
    ### BEGIN SOLUTION
    return math.prod(shard_shape(global_shape, mesh_shape, spec)) * np.dtype(dtype).itemsize
    ### END SOLUTION


def replicate_along(arr, mesh, axis):
    """The same values, no longer split along the mesh axis `axis`; every other split is kept.

    arr arrives placed on `mesh` (Explicit or Auto) with some NamedSharding. Returns a `jax.Array`
    with arr's values whose sharding is arr's spec with `axis` removed from every entry, on the same
    mesh: e.g. P("x", "y") along "x" becomes P(None, "y"), and P(("x", "y"), None) along "x" becomes
    P("y", None). An array not split along `axis` keeps its sharding. This is what
    `PositionalSharding.replicate(axis)` did before it was removed from JAX.
    Hint: build the new PartitionSpec entry by entry, then move the array to it (`jax.reshard`
    accepts Explicit axes only).
    """
    ### BEGIN SOLUTION
    entries = []
    for entry in arr.sharding.spec:
        kept = tuple(name for name in _axes_of(entry) if name != axis)
        entries.append(None if not kept else kept[0] if len(kept) == 1 else kept)
    return jax.device_put(arr, NamedSharding(mesh, P(*entries)))
    ### END SOLUTION
