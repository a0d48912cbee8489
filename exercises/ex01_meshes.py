"""ex01_meshes: devices and meshes.

JAX sees every accelerator (here: every forced host CPU device) as a `jax.Device` with an id. A
`jax.sharding.Mesh` arranges devices in an n-dimensional grid whose axes have names, such as a 2x4
grid with axes "x" and "y". A `PartitionSpec` (`jax.P`) then says, for each dimension of an array,
which mesh axes split it: `NamedSharding(mesh, jax.P("x", None))` cuts the rows in as many blocks as
the "x" axis is long and keeps every column whole. Each mesh axis also has a type
(`jax.sharding.AxisType`): Explicit axes put the sharding into the array's type (`jax.typeof`), Auto
axes leave it to the compiler. You will build meshes, place an array on one, and read back which
device holds which block. To try things yourself on the course's 8 devices, start a scratch script, REPL
or notebook (not this module) with `import jax; jax.config.update("jax_num_cpu_devices", 8)` before any
other JAX call (see "Experimenting on 8 devices" in the README).

Grading: 10 points, make_mesh_2x4 2, make_data_mesh 2, place 3, shard_table 3. The grader has 8
(forced host CPU) devices; the hidden tests vary the mesh size over 2, 4 and 8 devices (and other n
for make_data_mesh), use Explicit and Auto meshes, and compare placed values exactly (they are only
moved, never computed).
"""

import jax
from jax.sharding import AxisType, NamedSharding


def make_mesh_2x4():
    """The first 8 devices (`jax.devices()[:8]`) as a 2x4 mesh with axes ("x", "y"), both Explicit.

    Returns a `jax.sharding.Mesh` whose `shape` is {"x": 2, "y": 4} and whose `axis_types` are
    (AxisType.Explicit, AxisType.Explicit). Row "x" = 0 holds devices 0-3 and row 1 devices 4-7
    (on CPU, the order `jax.make_mesh` chooses).
    Hint: `jax.make_mesh` takes the mesh shape, the axis names, the axis types and the devices.
    """
    # YOUR CODE HERE
    raise NotImplementedError("ex01: make_mesh_2x4")


def make_data_mesh(n, name="data"):
    """The first n devices as a 1-D mesh with one axis called `name`, of type Auto.

    Returns a `jax.sharding.Mesh` whose `shape` is {name: n} and whose `axis_types` are
    (AxisType.Auto,). n is anything from 1 to the number of devices (the tests use 1 to 8).
    Hint: without `axis_types`, `jax.make_mesh` gives Explicit axes; this mesh must be Auto.
    """
    # YOUR CODE HERE
    raise NotImplementedError("ex01: make_data_mesh")


def place(x, mesh, spec):
    """x (a NumPy or JAX array) placed on `mesh` with the sharding `NamedSharding(mesh, spec)`.

    Returns a `jax.Array` with the same values and dtype as x whose sharding is equivalent to
    `NamedSharding(mesh, spec)`, on Explicit and on Auto meshes alike; every device holds exactly
    its block. The values are compared exactly.
    Hint: a sharding says where each block of an array lives; there is one call that moves an array
    to where a sharding says.
    """
    # YOUR CODE HERE
    raise NotImplementedError("ex01: place")


def shard_table(arr):
    """One row per addressable shard of `arr`: (device id, index into the global array, shard shape).

    The index is a tuple of slices, one per dimension of arr, such that `arr[index]` is the block
    that device holds (a scalar's index is `()`); the shard shape is a tuple of ints. The rows are
    sorted by device id, whatever the order of the devices in the mesh. A replicated array has one
    row per device, each with the whole array's index. Slices are compared by the elements they
    select, so `slice(None)` and `slice(0, size)` are the same.
    Example, an (8, 8) array with P("x", None) on make_mesh_2x4(): device 0's row is
    (0, (slice(0, 4), slice(None)), (4, 8)).
    Hint: every jax.Array knows its `addressable_shards`, and each shard its device and index.
    """
    # YOUR CODE HERE
    raise NotImplementedError("ex01: shard_table")
