"""ex11_padded_particles: imbalanced per-device data in fixed-size, padded buffers.

JAX wants static shapes, but real per-device data rarely divides evenly: particles in a simulation
gather where the physics puts them, so one device may hold 900 of them and its neighbour none. The
way out (used by jz-tree's multi-GPU code, for instance) is to give every device a buffer of the same
fixed size `cap` and a count of how many of its rows are valid:

    pos  global shape (n * cap, 3), P("d"):  device i holds rows [i * cap, (i + 1) * cap)
    num  global shape (n,), int32, P("d"):   device i's valid rows are the first num[i] of its block

Rows past the count are padding: their values are anything at all (leftovers, garbage, large
numbers), never to be used. A count may be 0 (an empty device) or cap (a full one). Every function
takes the 1-D mesh `mesh` it must use: one axis, named "d", Explicit (as `jax.make_mesh` makes it by
default), so shard_map accepts the inputs as placed above. You build:

  1. `expanding_shard_map`: shard_map with per-device results stacked along a new device axis,
     the convenient way to look at per-device data (one row of results per device);
  2. `masked_mean`: a reduction that counts only the valid rows;
  3. `redistribute_by_slab`: move every particle to the device that owns its slab of space, with
     one `jax.lax.all_to_all` over fixed-size buckets, reporting when a bucket was too small.

Graded on meshes of 2, 4 and 8 devices; the hidden tests draw counts and positions at random
(property-based: the same particles must come out as went in, each on its right device), with a
few rows per device (8). Positions are float32 in [0, 1) for valid rows; values are compared at
rtol=1e-5, atol=1e-6 (a mean) or exactly (moved particles are copied, never computed). The tests
compile each function (under jax.jit) and read, from the program each device runs, how many
multiply-adds it executes (its dots, and products written out elementwise) and how many bytes it
sends to other devices; each function's docstring bounds both by a formula of n, cap and capacity.
A program in which every device gathers every block and does every device's work meets neither.

Grading: 20 points. expanding_shard_map 4 (one output and several, P() outputs, under jax.jit, the
compiled ones within the work and traffic bounds); masked_mean 4 (values with garbage padding and
empty devices, and the work and traffic bounds, 3; no particle at all gives zeros 1, checked after a
case with particles). redistribute_by_slab 12: every particle arrives on its slab's device when
nothing overflows 4; overflow 6 (1 in the visible tests): reported whenever a bucket is too small,
never when none is, and then only the particles that did not fit are missing; an all-to-all in the
compiled program that also redistributes right, within the work and traffic bounds, 2 (0.5 in the
visible tests).
Losing particles without saying so is the mistake this exercise is about: it costs those 6 points.
"""

from functools import partial

import jax
import jax.numpy as jnp
from jax.sharding import PartitionSpec as P


def expanding_shard_map(f, mesh, in_specs, out_specs):
    """Like `jax.shard_map(f, mesh=mesh, in_specs=in_specs, out_specs=out_specs)`, but every varying
    output gets a leading device axis.

    Inputs are split exactly as jax.shard_map splits them (f sees device i's block). f returns one
    array or a tuple of them; `out_specs` is one spec for all of them or a tuple with one per result,
    as in jax.shard_map. A result whose spec names the mesh axis ("varying", e.g. P("d")) is stacked
    along a new first axis of length n: a per-device result of shape s comes out with global shape
    (n, *s), row i being device i's, split over the devices (a per-device scalar becomes an (n,)
    array). A result whose spec is P() (the same on every device) comes out unchanged, as in
    jax.shard_map. Returns the function (call it directly or under jax.jit), not its results.

    Example, n = 4, pos (4 * cap, 3) P("d"), num (4,) P("d"):
        count = expanding_shard_map(lambda p, k: k[0], mesh, (P("d"), P("d")), P("d"))
        count(pos, num)            # (4,): the count of each device, P("d")
    The tests compile the function you return: each device executes at most 2 x what f executes on
    one block (f's work on its own blocks, and nothing more) and sends nothing.
    Hint: add the axis inside the per-device function, before shard_map puts the blocks together.

    A PartitionSpec is not a tuple in this JAX (0.10.2): isinstance(P("d"), tuple) is False and
    P() == () is False. Tell one spec from a tuple of specs with isinstance(spec, P); read a spec's
    entries by iterating it (tuple(spec) == () for P()). jax.tree functions take a P as one leaf.
    """

    # YOUR CODE HERE
    raise NotImplementedError("ex11: expanding_shard_map")


# Given: jax.jit compiles each function once per mesh (and capacity) and reuses the program; without
# it, shard_map called outside jit runs its body one operation at a time (about 0.1 s each here).
@partial(jax.jit, static_argnames=("mesh",))
def masked_mean(pos, num, mesh):
    """The mean position of the valid particles only: a (3,) float32 array.

    pos (n * cap, 3) and num (n,) arrive P("d") as described above. Padding rows must not count,
    whatever they hold, and a device with no particles (num[i] == 0) must not produce a NaN anywhere.
    When no device holds any particle, the mean is defined as zeros(3). Compared with the float64
    mean of the valid rows at rtol=1e-5, atol=1e-6. The tests compile it: each device executes at
    most 2 x (cap x 3 + 3) multiply-adds (masking its own block, if the mask multiplies, and the
    mean's divisions) and sends at most 1.25 x (n - 1) x 16 bytes (its 3 sums and its count to every
    other device, and a quarter more).
    Hint: a mean over devices is not a mean of per-device means; sum the valid rows and count them on
    every device, then add the sums and the counts across devices before dividing.
    """
    # YOUR CODE HERE
    raise NotImplementedError("ex11: masked_mean")


@partial(jax.jit, static_argnames=("mesh", "capacity"))
def redistribute_by_slab(pos, num, mesh, capacity):
    """Send every valid particle to the device that owns its slab: device floor(x * n), where x is
    its first coordinate (pos[:, 0], in [0, 1) for valid rows). Returns (pos, num, overflow).

    Exchange fixed-size buckets with `jax.lax.all_to_all`: every device sorts its valid particles
    into n buckets, one per destination device (itself included), each of `capacity` rows (`capacity`
    is a Python int), and sends bucket j to device j, with the number of particles in it (the counts
    travel by all_to_all too). A device receives n buckets, one from every device.

    Returns, in the same padded layout as the input:
      pos:      global shape (n * n * capacity, 3), P("d"): device i's block of n * capacity rows
                holds the particles it received, its valid rows first (the rest is padding, any values);
      num:      (n,) int32, P("d"): how many valid rows each device's block now has;
      overflow: a bool scalar, replicated (the same on every device, P()): True when some device had
                more than `capacity` particles for one destination, so that the bucket could not hold
                them all (the extra ones are then lost). When overflow is False, every valid
                particle must have arrived, exactly once; nothing may ever be lost without it.
    The order of the particles inside a device's block is free.
    The tests compile it under jax.jit (mesh and capacity fixed) and expect an all-to-all in the
    program, which must also compute the right result. Each device executes at most
    2 x (cap (n + 1) + 3 n capacity) products (one per row for its slab, per element of its rows'
    one-hot over the n destinations, and per coordinate of the rows it receives) and sends at most
    1.25 x ((n - 1) x (3 capacity + 1) x 4 + 2 (n - 1)/n x 4) bytes: (n - 1)/n of its n buckets and
    their n counts (one all_to_all each), an all-reduce of the overflow flag, and a quarter more.
    Hint: a particle's place in its bucket is the number of valid particles before it with the same
    destination (a cumulative sum of one-hot rows); rows that are padding or do not fit have no place.
    """
    # YOUR CODE HERE
    raise NotImplementedError("ex11: redistribute_by_slab")
