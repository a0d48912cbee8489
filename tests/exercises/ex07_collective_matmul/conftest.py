"""What ex07's visible and hidden tests share: the inputs, placed on the mesh, the float64 NumPy product,
and the rules the compiled programs are graded by (their collectives, the multiply-adds each device
executes and the bytes it sends, and the overlapped all-gather matmul's temporary memory), so that
`shardlab check` applies the very checks grading does."""

import jax
import numpy as np
import pytest
from jax.sharding import NamedSharding, PartitionSpec as P

from grader.checks import (
    NotReported,
    Variant,
    assert_collectives,
    assert_computes,
    assert_traffic,
    assert_work,
    compiled,
    inputs,
    memory_per_device,
)

# float32 matmuls summed in different orders; the product's entries are of order 1.
TOL = dict(rtol=1e-5, atol=1e-4)


def _inputs(M, K, N, seed=0):
    rng = inputs.rng(seed)
    return (
        rng.standard_normal((M, K), dtype=np.float32),
        rng.standard_normal((K, N), dtype=np.float32) / np.float32(np.sqrt(K)),
    )


LAYOUTS = {"allgather": (P("i", None), P("i", None)), "reducescatter": (P(None, "i"), P("i", None))}


def _placed(mesh, layout, lhs, rhs):
    specs = LAYOUTS[layout]
    return tuple(jax.device_put(v, NamedSharding(mesh, spec)) for v, spec in zip((lhs, rhs), specs))


def _reference_matmul(lhs, rhs):
    return np.asarray(lhs, np.float64) @ np.asarray(rhs, np.float64)


def _ring_turned(lhs, rhs, n, layout):
    """What a ring whose ppermute pairs go the other way than its indexing computes: the block a device
    holds at step s is the one s steps the other way round, so device d pairs lhs's block a with rhs's
    block 2d - a (all-gather), or adds block 2e - d's rows of device e's contribution (reduce-scatter)."""
    lhs, rhs = np.asarray(lhs, np.float64), np.asarray(rhs, np.float64)
    m, k = lhs.shape[0] // n, rhs.shape[0] // n
    rows = lambda a, b: slice((a % n) * b, (a % n + 1) * b)  # noqa: E731
    if layout == "allgather":
        return np.concatenate(
            [
                sum(lhs[rows(d, m), rows(a, k)] @ rhs[rows(2 * d - a, k)] for a in range(n))
                for d in range(n)
            ]
        )
    return np.concatenate(
        [
            sum(lhs[rows(2 * e - d, m), rows(e, k)] @ rhs[rows(e, k)] for e in range(n))
            for d in range(n)
        ]
    )


RING_TURNED = (
    "matches a ring turned the wrong way: the ppermute pairs send each block (or running sum) the "
    "other way round the ring than the step indexing assumes, so each device multiplies a block by "
    "the wrong partner. Make the pairs agree with the schedule: if device d holds block (d + s) mod n "
    "at step s, it must receive from d + 1, i.e. pairs (j, (j - 1) % n) (or flip the indexing)."
)


def _wrong_variants(lhs, rhs, n, layout):
    """The mistakes a ring version is known to make, for naming a wrong result (grader.checks.Variant)."""
    return [Variant(lambda: _ring_turned(lhs, rhs, n, layout), RING_TURNED)]


@pytest.fixture
def wrong_variants():
    """wrong_variants(lhs, rhs, n, layout) -> the known wrong results, each with its story."""
    return _wrong_variants


@pytest.fixture
def matmul_inputs():
    """matmul_inputs(M, K, N, seed) -> (lhs, rhs) as float32 NumPy arrays."""
    return _inputs


@pytest.fixture
def placed():
    """placed(mesh, layout, lhs, rhs) -> (lhs, rhs) put on the mesh; layout "allgather" is lhs P("i", None),
    rhs P("i", None), layout "reducescatter" lhs P(None, "i"), rhs P("i", None)."""
    return _placed


@pytest.fixture
def reference_matmul():
    """lhs @ rhs in float64 NumPy, on one device."""
    return _reference_matmul


# --- the compiled programs -----------------------------------------------------------------------

# Each function: its inputs' layout, and the collectives its compiled program must have (assert_collectives).
COLLECTIVE_RULES = {
    "allgather_matmul": ("allgather", dict(exactly={"all-gather": 1})),
    "allgather_matmul_overlapped": (
        "allgather",
        dict(present=("collective-permute",), absent=("all-gather",)),
    ),
    "reducescatter_matmul": ("reducescatter", dict(exactly={"reduce-scatter": 1})),
    "reducescatter_matmul_overlapped": ("reducescatter", dict(only=("collective-permute",))),
}


# Each function's share of the product's M K N multiply-adds per device, and the bytes it may send
# (float32), from M, K, N and n. A collective sends what it needs ((n - 1) / n of rhs for the all-gather,
# of the partial product for the reduce-scatter); a ring of n steps may pass its block once per step, n
# blocks (n - 1 moves are enough, the docstring's schedule). A program in which every device gathers lhs
# and rhs and computes the whole product executes n times the share and sends (n - 1) / n x (M K + K N)
# x 4 bytes: (1 + M / N) times the all-gather's bound, (K / N + K / M) times the reduce-scatter's.
F32 = 4


def rows_of_product(M, K, N, n):
    return M * K * N // n


def rhs_gathered(M, K, N, n):
    return (n - 1) * K * (N * F32) // n


def rhs_once_per_step(M, K, N, n):
    return K * N * F32


def product_scattered(M, K, N, n):
    return (n - 1) * M * (N * F32) // n


def sums_once_per_step(M, K, N, n):
    return M * N * F32


# name: (the bytes each device may send, from M, K, N and n; the bound in words)
TRAFFIC = {
    "allgather_matmul": (rhs_gathered, "(n - 1) / n x K N x 4: one all-gather of its block of rhs"),
    "allgather_matmul_overlapped": (rhs_once_per_step, "K N x 4: its block of rhs, once per step"),
    "reducescatter_matmul": (
        product_scattered,
        "(n - 1) / n x M N x 4: one reduce-scatter of its partial product",
    ),
    "reducescatter_matmul_overlapped": (
        sums_once_per_step,
        "M N x 4: a block of M/n rows of running sums, once per step",
    ),
}
SHARE_WORDS = {
    "allgather": "the product (M K N / n: its M/n rows)",
    "reducescatter": "the product (M K N / n: its K/n slice of the sum)",
}
REPLICATED = (
    "Does every device gather lhs and rhs and compute the whole product? Each device multiplies only "
    "the pieces its rows (or its slice of K) need, and sends each block no more than once per step."
)


def _check_collectives(impl, name, mesh, lhs, rhs):
    """The compiled program of `name` on `mesh` has the collectives of COLLECTIVE_RULES, computes lhs @ rhs,
    and keeps to its share of the work (2 x M K N / n per device) and the bytes of TRAFFIC."""
    layout, rule = COLLECTIVE_RULES[name]
    fn = getattr(impl, name)
    args = _placed(mesh, layout, lhs, rhs)
    program = compiled(lambda a, b: fn(a, b, mesh), *args)
    counts = assert_collectives(
        program, *args, **rule, expected=_reference_matmul(lhs, rhs), **TOL, what=name
    )
    sizes = (*lhs.shape, rhs.shape[1], mesh.shape["i"])
    assert_work(
        program,
        share=rows_of_product(*sizes),
        share_of=SHARE_WORDS[layout],
        what=name,
        hint=REPLICATED,
        args=args,
    )
    bound, words = TRAFFIC[name]
    assert_traffic(
        program, at_most=bound(*sizes), bound_of=words, what=name, hint=REPLICATED, args=args
    )
    return counts


def _check_temp_memory(impl, mesh, lhs, rhs):
    """XLA's own figure for the temporary buffers one device needs in the compiled allgather_matmul_overlapped
    (which must also compute lhs @ rhs): below the whole rhs, which the all-gather version holds at once;
    blocks travelling round the ring need only a few of its n blocks at a time."""
    n = mesh.devices.size
    args = _placed(mesh, "allgather", lhs, rhs)
    program = compiled(lambda a, b: impl.allgather_matmul_overlapped(a, b, mesh), *args)
    assert_computes(
        program(*args), _reference_matmul(lhs, rhs), **TOL, what="allgather_matmul_overlapped"
    )
    try:
        temp = memory_per_device(program).temp_bytes
    except NotReported as exc:
        pytest.skip(str(exc))
    whole_rhs = rhs.size * rhs.dtype.itemsize
    assert temp < whole_rhs, (
        f"with lhs {lhs.shape} and rhs {rhs.shape} on {n} devices, the compiled allgather_matmul_overlapped "
        f"needs {temp} bytes of temporary memory per device, the whole rhs is {whole_rhs} bytes (one block "
        f"{whole_rhs // n}): it must stay below the whole rhs. Does your function gather rhs, or collect "
        "every block before multiplying? Multiply each block as it arrives and keep only the running result."
    )


@pytest.fixture
def check_collectives():
    """check_collectives(impl, name, mesh, lhs, rhs): the compiled program of impl.<name> has the collectives
    COLLECTIVE_RULES gives it, and computes lhs @ rhs (lhs, rhs as NumPy arrays; placed here)."""
    return _check_collectives


@pytest.fixture
def check_temp_memory():
    """check_temp_memory(impl, mesh, lhs, rhs): the compiled allgather_matmul_overlapped computes lhs @ rhs with
    less temporary memory per device than the whole rhs."""
    return _check_temp_memory
