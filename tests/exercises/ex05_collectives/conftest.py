"""What ex05's visible and hidden tests share: inputs placed P("i"), NumPy versions of each collective, the
tolerance, and the rules each function's compiled program is graded by (its kinds of collective, the
multiply-adds each device executes and the bytes it sends), checked the same way by the visible and the
hidden tests."""

import jax
import numpy as np
import pytest
from jax.sharding import NamedSharding, PartitionSpec as P

from grader.checks import (
    assert_collectives,
    assert_sharded_like,
    assert_traffic,
    assert_work,
    compiled,
    test_mesh,
)

EXAMPLE = np.array([3, 1, 4, 1, 5, 9, 2, 6, 5, 3, 5, 8, 9, 7, 1, 2], dtype=np.float32)

# The module docstring's tolerance: sums added in another order differ in the last bits.
TOL = dict(rtol=1e-5, atol=1e-5)

# name: (output spec, rows of x per device as a multiple of n, the collectives its program may contain).
# The kinds are strict (on the CPU backend each shard_map collective is one HLO op, and jit inserts
# none of its own here); the counts are not: a ring all-reduce unrolled in Python has n - 1
# collective-permutes, in a fori_loop one.
CONTRACT = {
    "all_gather": (P(), 2, ("all-gather",)),
    "all_reduce": (P(), 2, ("all-reduce",)),
    "reduce_scatter": (P("i"), 2, ("reduce-scatter",)),
    "all_reduce_via_scatter_gather": (P(), 2, ("reduce-scatter", "all-gather")),
    "all_to_all": (P("i"), 2, ("all-to-all",)),
    "ring_shift": (P("i"), 1, ("collective-permute",)),
    "ring_all_reduce": (P(), 2, ("collective-permute",)),
}


# The bytes each device sends for one run of the collective each function names, from n and B, the bytes of
# one device's block (grader.checks.account's figures: an all-gather sends its block to the n - 1 others;
# an all-reduce 2 (n - 1) / n of it, a reduce-scatter then an all-gather; a reduce-scatter and an
# all-to-all every 1/n piece but their own; a permute its block). A program that gathers every block and
# computes the result on each device sends (n - 1) B or more: n times a reduce-scatter's or all-to-all's
# bound, n / 2 times an all-reduce's; ring_shift's ring of n - 1 moves, n - 1 times its one move.
def gathered(n, B):
    return (n - 1) * B


def all_reduced(n, B):
    return 2 * (n - 1) * B // n


def scattered(n, B):
    return (n - 1) * B // n


def moved_once(n, B):
    return B


def once_per_step(n, B):
    return n * B


# name: (the bytes each device may send, from n and B; the bound in words)
TRAFFIC = {
    "all_gather": (gathered, "(n - 1) x B: its block to each other device, once"),
    "all_reduce": (all_reduced, "2 (n - 1) / n x B: one all-reduce of its block"),
    "reduce_scatter": (scattered, "(n - 1) / n x B: every piece of its block but its own"),
    "all_reduce_via_scatter_gather": (
        all_reduced,
        "2 (n - 1) / n x B: a reduce-scatter of its block, then an all-gather of its piece",
    ),
    "all_to_all": (scattered, "(n - 1) / n x B: every sub-block of its block but its own"),
    "ring_shift": (moved_once, "B: its block, moved once"),
    # The docstring lets whole blocks travel, n - 1 shifts of B; a loop of n steps that shifts once more
    # than it needs is allowed too (measured: a fori_loop of n add-then-shift steps, n / (n - 1) x the
    # n - 1 shifts). Passing every block round the ring and adding them up on each device is the
    # docstring's own program; a ring that moves more than a block per shift (the whole array, padded)
    # sends n - 1 times this bound.
    "ring_all_reduce": (once_per_step, "n x B: its block, once per step of the ring"),
}


# A collective moves blocks and adds them up: it multiplies nothing (the account counts products of
# floating-point values only, so a block's offset, axis_index * rows, is not work). Gathering every block
# and multiplying to pick or combine them (a one-hot mask, a weighted sum) is work a collective never needs.
WORK_WORDS = "a collective moves and adds blocks: it multiplies nothing"
REPLICATED = (
    "Does every device gather all the blocks and work out the result itself, or send more than its "
    "block needs? Let the collective move only what the result needs."
)


def blocks_of(x: np.ndarray, n: int) -> list[np.ndarray]:
    return np.split(np.asarray(x, dtype=np.float64), n)


class Expected:
    """The global result of each collective, from the blocks, in float64 NumPy."""

    @staticmethod
    def all_gather(x, n):
        return np.asarray(x, dtype=np.float64)

    @staticmethod
    def all_reduce(x, n):
        return sum(blocks_of(x, n))

    reduce_scatter = all_reduce
    all_reduce_via_scatter_gather = all_reduce
    ring_all_reduce = all_reduce

    @staticmethod
    def all_to_all(x, n):
        # block d, sub-block j -> block j, sub-block d
        sub = np.asarray(x, dtype=np.float64).reshape(n, n, -1, *np.shape(x)[1:])
        return np.swapaxes(sub, 0, 1).reshape(np.shape(x))

    @staticmethod
    def ring_shift(x, n, k=1):
        return np.concatenate(np.roll(np.stack(blocks_of(x, n)), k, axis=0))


def _ring(n):
    mesh = test_mesh((n,), ("i",), "explicit")
    return mesh, lambda x: jax.device_put(
        np.asarray(x, dtype=np.float32), NamedSharding(mesh, P("i"))
    )


@pytest.fixture
def expected():
    return Expected


@pytest.fixture
def contract():
    """{name: (output spec, rows of x per device as a multiple of n, the kinds of collective it may use)}"""
    return CONTRACT


@pytest.fixture
def tol():
    return TOL


@pytest.fixture
def ring():
    """ring(n) -> (mesh, place): the 1-D Explicit mesh "i" over n devices, and x -> x placed P("i")."""
    return _ring


@pytest.fixture
def example():
    return EXAMPLE.copy()


@pytest.fixture
def ranks_rule(impl):
    """check(n): device_ranks on n devices is [0 .. n-1], integers, sharded P("i"), compared exactly. (No work
    or traffic rule: called with the mesh alone, no array, it runs where grading reads no program.)"""

    def check(n):
        mesh, _ = _ring(n)
        ranks = impl.device_ranks(mesh)
        assert_sharded_like(ranks, mesh, P("i"), np.arange(n), rtol=0, atol=0, name="device_ranks")
        assert np.issubdtype(ranks.dtype, np.integer), (
            f"device_ranks should hold integers, got {ranks.dtype}"
        )

    return check


@pytest.fixture
def collectives_rule(impl):
    """check(name, n, x): the compiled program of the function `name` on n devices, with x placed P("i"),
    uses the kinds of collective its docstring names and no other, computes the right values, executes no
    multiply-add and sends at most the bytes of TRAFFIC."""

    def check(name, n, x):
        mesh, place = _ring(n)
        kinds = CONTRACT[name][2]
        args = (place(x),)
        program = compiled(lambda x: getattr(impl, name)(x, mesh), *args)
        assert_collectives(
            program,
            *args,
            present=kinds,
            only=kinds,
            expected=getattr(Expected, name)(x, n),
            **TOL,
            what=name,
        )
        assert_work(
            program,
            share=0,
            share_of=WORK_WORDS,
            what=name,
            hint=REPLICATED,
            args=args,
        )
        bound, words = TRAFFIC[name]
        block_bytes = np.asarray(x, np.float32).nbytes // n
        assert_traffic(
            program,
            at_most=bound(n, block_bytes),
            bound_of=f"{words}, B = {block_bytes:,} bytes",
            what=name,
            hint=REPLICATED,
            args=args,
        )

    return check
