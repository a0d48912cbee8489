"""ex05_collectives: the collective zoo.

A collective is an operation every device of a mesh axis takes part in at once, each with its own
block of data. They are the whole vocabulary of communication in parallel programs: everything the
compiler inserts for you under `jax.jit`, and everything you write yourself inside `jax.shard_map`,
is one of a handful of them. Here you write each one once, with `jax.shard_map`, and see what it does.

Every function runs on the 1-D Explicit mesh `mesh` with one axis "i" of n devices. x arrives
sharded P("i"): its first dimension is split into n equal row-blocks, block d on device d. Its size
is divisible by n, and by n * n where a block is split again (`all_to_all`, `reduce_scatter`,
`all_reduce_via_scatter_gather`). x may have more dimensions after the first; they are never split.
Worked example used throughout, on 4 devices:

    x = [3 1 4 1 | 5 9 2 6 | 5 3 5 8 | 9 7 1 2]      (blocks 0 | 1 | 2 | 3)

Values are compared with NumPy at rtol=1e-5, atol=1e-5 (sums in a different order differ in the last
bits; device_ranks's integers exactly), by the visible and the hidden tests alike, three ways: the
output's sharding, each shard's shape, each shard's values; graded on meshes of 2, 4 and 8 devices.
The tests also compile each function but device_ranks (under `jax.jit`, with the mesh fixed) and read
the collectives of the compiled program: on the CPU backend each shard_map collective becomes exactly
one HLO instruction, so each function must use the kinds of collective its docstring names (HLO: ...),
and no other kind. The compiled program must also compute the right values. The same program is held
to two bounds per device: the multiply-adds it executes, none (a collective moves blocks and adds them
up: it multiplies nothing), and the bytes it sends to other devices, at most what its collective needs:
a multiple of B, the bytes of one block, that each docstring gives. A program that gathers every block and computes
the result locally, or sends more than its collective needs, breaks the second. The visible tests
check all of this on 8 devices, the hidden ones on 2, 4 and 8.

Grading: 15 points. device_ranks 3, the values and layouts 7, the collectives (with their work and
traffic) 5; the visible tests (`shardlab check ex05`) carry 5 of them: device_ranks 1, the worked example
2, the collectives 2.
"""

import jax
import jax.numpy as jnp
from jax.sharding import PartitionSpec as P


def device_ranks(mesh):
    """[0, 1, ..., n-1] as an int32 array sharded P("i"): device d writes its own index d.

    No input: inside `jax.shard_map`, each device makes a block of one element holding its position
    along "i".
    Hint: `jax.lax.axis_index`; a function with no arguments can still be shard_mapped (in_specs=()).
    """

    # YOUR CODE HERE
    raise NotImplementedError("ex05: device_ranks")


def all_gather(x, mesh):
    """x itself, every device holding all of it: returns P() (replicated).

    Each device starts with its block and ends with the n blocks in order. On the example:
    [3 1 4 1 5 9 2 6 5 3 5 8 9 7 1 2] on every device. HLO: all-gather. Each device sends at most
    (n - 1) x B bytes (B: the bytes of its block): its block, once, to each other device.
    Hint: the result of `jax.lax.all_gather` differs per device as far as JAX's type system knows,
    so `out_specs=P()` needs `check_vma=False`; `tiled=True` concatenates instead of stacking.
    """

    # YOUR CODE HERE
    raise NotImplementedError("ex05: all_gather")


def all_reduce(x, mesh):
    """The sum of the n blocks, on every device: returns P() (replicated), with the shape of one block.

    On the example: [3 1 4 1] + [5 9 2 6] + [5 3 5 8] + [9 7 1 2] = [22 20 12 17]. HLO: all-reduce.
    Each device sends at most 2 (n - 1) / n x B bytes (B: the bytes of its block), what one all-reduce
    needs; gathering every block to add them up on each device sends n / 2 times that.
    """
    # YOUR CODE HERE
    raise NotImplementedError("ex05: all_reduce")


def reduce_scatter(x, mesh):
    """The sum of the n blocks, split over the devices: returns P("i"), with the shape of one block.

    Device d ends with the d-th piece of the sum: on the example, device 0 holds [22], device 1 [20],
    device 2 [12], device 3 [17]. The global result is all_reduce's, but no device holds all of it.
    HLO: reduce-scatter (and no all-reduce: summing everything everywhere and keeping a slice moves
    twice the data needed). Each device sends at most (n - 1) / n x B bytes (B: the bytes of its
    block): every piece of its block but its own. Hint: `jax.lax.psum_scatter`.
    """

    # YOUR CODE HERE
    raise NotImplementedError("ex05: reduce_scatter")


def all_reduce_via_scatter_gather(x, mesh):
    """all_reduce's result, replicated (P()), built as a reduce-scatter followed by an all-gather.

    That is how an all-reduce is done on a ring of devices, and why it costs about twice a
    reduce-scatter. HLO: reduce-scatter and all-gather, no all-reduce. Each device sends at most
    2 (n - 1) / n x B bytes (B: the bytes of its block), as much as one all-reduce.
    """

    # YOUR CODE HERE
    raise NotImplementedError("ex05: all_reduce_via_scatter_gather")


def all_to_all(x, mesh):
    """The block transpose: returns P("i").

    x's first dimension is n * n * r long: device d's block is n sub-blocks (of r rows). Device d
    sends its j-th sub-block to device j, and receives from every device j its d-th sub-block, in
    order of j. On the example (r = 1): device 0 ends with [3 5 5 9] (the first element of every
    block), and the whole result is [3 5 5 9 1 9 3 7 4 2 5 1 1 6 8 2]. HLO: all-to-all. Each device
    sends at most (n - 1) / n x B bytes (B: the bytes of its block): each sub-block but its own, once.
    Hint: `jax.lax.all_to_all` with split_axis and concat_axis both 0, and tiled=True.
    """

    # YOUR CODE HERE
    raise NotImplementedError("ex05: all_to_all")


def ring_shift(x, mesh, k: int = 1):
    """Every block moves k devices along the ring: device d's block ends on device (d + k) mod n.

    Returns P("i"). k may be any int, negative or larger than n. On the example with k = 1:
    [9 7 1 2 3 1 4 1 5 9 2 6 5 3 5 8]. HLO: collective-permute. Each device sends at most B bytes,
    its block, once.
    Hint: `jax.lax.ppermute` takes a list of (source, destination) pairs.
    """
    # YOUR CODE HERE
    raise NotImplementedError("ex05: ring_shift")


def ring_all_reduce(x, mesh):
    """all_reduce's result, replicated (P()), built from ppermute alone.

    Pass blocks round the ring: after n - 1 shifts by one device, every device has seen every block
    once and can add them up. (Real ring all-reduces pass pieces of blocks, so each link carries
    less; passing whole blocks is enough here.) HLO: collective-permute only: no all-reduce,
    all-gather or reduce-scatter. Each device sends at most n x B bytes (B: the bytes of its block):
    its block, once per step of the ring.
    Hint: JAX cannot prove that the n sums are equal on every device, so `out_specs=P()` needs
    `check_vma=False`; the tests check the values on every device.
    """
    # YOUR CODE HERE
    raise NotImplementedError("ex05: ring_all_reduce")
