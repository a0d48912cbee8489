"""What ex11's visible and hidden tests share: padded per-device particle buffers (with garbage in the
padding), the NumPy reference mean and the check of a mean, the check of a redistribution, which knows
nothing of the order of the particles inside a device nor of how many padding rows each device's block
has, the check of a compiled redistribution (an all-to-all in a program that redistributes right), and each
compiled function's share of the work and of the traffic."""

from collections import Counter

import jax
import numpy as np
import pytest
from jax.sharding import NamedSharding, PartitionSpec as P

from grader.checks import (
    Variant,
    assert_close_or_named,
    assert_collectives,
    assert_sharded_like,
    assert_sharding,
    assert_traffic,
    assert_work,
    compiled,
    inputs,
)

CAP = 8  # rows per device in every test's input: the same shapes for every example, one compile per test
# The compiled redistribution's bucket size: buckets smaller than a device's buffer, so that what a device
# sends through all_to_all (its buckets) weighs less than its buffer, which a program that gathers every
# buffer sends to every device (2.8 times the traffic bound below on 8 devices; at capacity CAP, as much).
PROGRAM_CAPACITY = 2
F32 = 4  # bytes of a float32 or an int32
# What the compiler adds to the collectives' bytes (a flag, a split it chooses) stays within a quarter.
TRAFFIC_SLACK = 1.25


# --- each device's share: the work it executes, the bytes it sends ---------------------------------------


def stacking_share(f_work):
    """Multiply-adds per device of expanding_shard_map(f, ...): f's on its own block, `f_work` (the test's
    f, counted from its shapes). Every device applying f to every block executes n times this."""
    return f_work


def stacking_traffic(n):
    """Bytes a device sends for expanding_shard_map: none, every block stays on its device and so does its
    result (stacking adds a device axis inside each device's function)."""
    return 0


def mean_share(cap):
    """Multiply-adds (products written out) per device of masked_mean: its block's masking, at most one
    product per coordinate of its rows (cap x 3, when the mask multiplies), and the mean's 3 divisions.
    jnp.where masks with no product at all. Every device masking every block executes n times the first."""
    return cap * 3 + 3


def mean_traffic(n):
    """Bytes a device may send for masked_mean: its block's statistics, 3 sums and a count (16 bytes), to
    every other device, (n - 1) x 16 (an all-gather of them; an all-reduce sends less, 2 (n - 1)/n x 16),
    with a quarter to spare. Gathering every particle sends (n - 1) x (cap x 3 + 1) x 4: 5 times this."""
    return int(TRAFFIC_SLACK * (n - 1) * 4 * F32)


def redistribution_share(cap, n, capacity):
    """Products per device of redistribute_by_slab: at most one per row for its slab (floor(x * n)), one per
    element of its rows' one-hot over the n destinations (cap x n), and one per coordinate of the rows it
    receives (n x capacity x 3). The sorting itself is comparisons and sums, no products. Every device
    bucketing every device's rows executes about n times its own share, which a bound on products alone
    cannot tell from an honest program that multiplies its masks (the traffic bound does)."""
    return cap * (n + 1) + 3 * n * capacity


def redistribution_traffic(n, capacity):
    """Bytes a device may send for redistribute_by_slab: one all_to_all of its n buckets (n x capacity rows
    of 3 float32) and one of their n counts, (n - 1)/n of their bytes each, and an all-reduce of the
    overflow flag (2 (n - 1)/n x 4), with a quarter to spare. Gathering every buffer sends (n - 1) x
    (cap x 3 + 1) x 4 instead."""
    buckets = (n - 1) * (capacity * 3 + 1) * F32  # (n - 1)/n of n buckets and n counts
    return int(TRAFFIC_SLACK * (buckets + 2 * (n - 1) * F32 / n))


def _assert_shares(program, args, *, share, share_of, at_most, bound_of, what, hint):
    """The program keeps to its share of the work and of the traffic (its values checked by the caller, on
    the same program)."""
    assert_work(program, share=share, share_of=share_of, what=what, hint=hint, args=args)
    assert_traffic(program, at_most=at_most, bound_of=bound_of, what=what, hint=hint, args=args)


def _assert_stacking_shares(program, args, n, f_work, f_words):
    """expanding_shard_map(f, ...)'s compiled program: f's work on one block per device, nothing sent."""
    _assert_shares(
        program,
        args,
        share=stacking_share(f_work),
        share_of=f"the test's function on one block ({f_words})",
        at_most=stacking_traffic(n),
        bound_of="every block stays on its device, and so does its result",
        what="expanding_shard_map(f, ...)",
        hint="Does every device gather the inputs and apply f to every block? shard_map hands each device "
        "its own blocks: apply f to them alone and add the device axis to its results.",
    )


@pytest.fixture
def assert_stacking_shares():
    """assert_stacking_shares(program, args, n, f_work, f_words): f's work per device on its own block, and
    nothing sent."""
    return _assert_stacking_shares


def _assert_mean_shares(program, args, n, cap=CAP):
    _assert_shares(
        program,
        args,
        share=mean_share(cap),
        share_of="masking its block and dividing, cap x 3 + 3 (one product per coordinate of its rows)",
        at_most=mean_traffic(n),
        bound_of="1.25 x (n - 1) x 16: 3 sums and a count sent to every other device, and a quarter to "
        "spare",
        what="masked_mean",
        hint="Is every particle gathered to every device? Each device sums and counts its own valid rows; "
        "only those 3 sums and the count travel (a psum of them).",
    )


@pytest.fixture
def assert_mean_shares():
    """assert_mean_shares(program, args, n): masked_mean's compiled program masks only its own block and
    sends only its block's statistics."""
    return _assert_mean_shares


@pytest.fixture
def once():
    """once(name, thunk): thunk's result, computed at the first call of the test (later calls return it, or
    raise its error again): a property-based test's examples share one compiled program and one verdict on
    its shares, the same for every example, as hypothesis needs."""
    outcomes = {}

    def call(name, thunk):
        if name not in outcomes:
            try:
                outcomes[name] = (thunk(), None)
            except AssertionError as error:
                outcomes[name] = (None, error)
        result, error = outcomes[name]
        if error is not None:
            raise error
        return result

    return call


def _padded(slabs, n, *, cap=CAP, seed=0):
    """pos (n * cap, 3) float32 and num (n,) int32 for device i holding len(slabs[i]) valid particles, the
    j-th of them with first coordinate in slab slabs[i][j] % n, i.e. in [s / n, (s + 1) / n). Padding rows
    hold garbage well outside [0, 1), which changes any mean or slab it leaks into."""
    rng = inputs.rng(seed)
    pos = rng.uniform(-9.0, 9.0, (n * cap, 3)).astype(np.float32)
    pos[:, 0] = np.where(rng.random(n * cap) < 0.5, -1.0, 1.0) * rng.uniform(2.0, 9.0, n * cap)
    num = np.zeros(n, np.int32)
    for i, device_slabs in enumerate(slabs[:n]):
        count = min(len(device_slabs), cap)
        rows = slice(i * cap, i * cap + count)
        slab = np.asarray(device_slabs[:count], dtype=np.float64) % n
        # Away from the slab's edges, so that float32 rounding cannot move a particle to the next slab.
        pos[rows, 0] = (slab + rng.uniform(0.01, 0.99, count)) / n
        pos[rows, 1:] = rng.uniform(0.0, 1.0, (count, 2))
        num[i] = count
    return pos, num


def _random_slabs(n, counts, seed):
    rng = inputs.rng(seed)
    return [list(rng.integers(0, n, c)) for c in counts]


def _place(mesh, pos, num):
    sharding = NamedSharding(mesh, P("d"))
    return jax.device_put(pos, sharding), jax.device_put(num, sharding)


def _valid(pos, num, n):
    cap = len(pos) // n
    return np.concatenate(
        [pos[i * cap : i * cap + num[i]] for i in range(n)] + [np.zeros((0, 3), np.float32)]
    )


def _reference_mean(pos, num, n):
    valid = _valid(pos, num, n).astype(np.float64)
    return valid.mean(axis=0) if len(valid) else np.zeros(3)


def _mean_mistakes(pos, num, n) -> list[Variant]:
    """The wrong means the course knows, each computed from the same padded buffers."""
    blocks = pos.astype(np.float64).reshape(n, -1, 3)
    counts = np.asarray(num)
    sums = np.stack([blocks[i, : counts[i]].sum(axis=0) for i in range(n)])
    held = counts > 0
    means = sums[held] / counts[held, None] if held.any() else np.zeros((1, 3))
    weigh = (
        "devices hold different numbers of real particles (the rest of each block is padding), so "
        "weigh each device by its count: psum the masked sums and the counts, and divide once"
    )
    return [
        Variant(
            lambda: means.mean(axis=0),
            "is the mean of the devices' means (over the devices that hold particles): " + weigh,
        ),
        Variant(
            lambda: (sums / np.maximum(counts, 1)[:, None]).mean(axis=0),
            "is the mean of the devices' means (an empty device counted as 0): " + weigh,
        ),
        Variant(
            lambda: blocks.reshape(-1, 3).mean(axis=0),
            "averages every row of the buffers, padding included: only the first num[i] rows of "
            "device i's block are particles; mask the rest out (jnp.arange(rows) < count) and divide "
            "by the number of real particles",
        ),
        Variant(
            lambda: sums.sum(axis=0) / len(blocks.reshape(-1, 3)),
            "sums the real particles but divides by every row, padding included: divide by the "
            "psum of the counts instead",
        ),
    ]


def _check_mean(mean, pos, num, n, **tol):
    """masked_mean's result for inputs (pos, num) as NumPy arrays: no NaN (an empty device), then the
    values, a wrong mean named by the known mistake it matches."""
    mean = np.asarray(mean)
    assert not np.isnan(mean).any(), (
        f"masked_mean gave {mean} with counts {np.asarray(num).tolist()}: an empty device must not make a NaN"
    )
    assert_close_or_named(
        mean,
        _reference_mean(pos, num, n),
        _mean_mistakes(pos, num, n),
        **tol,
        name=f"masked_mean with counts {np.asarray(num).tolist()} (padding rows hold garbage)",
    )


def _rows(array) -> Counter:
    return Counter(tuple(float(v) for v in row) for row in np.asarray(array))


def _check_redistribution(result, pos, num, n, capacity, mesh=None):
    """The rules of redistribute_by_slab for inputs (pos, num) as NumPy arrays. With `mesh`, the layouts
    are checked too (the outputs of a direct call; a compiled program's outputs get them from the test)."""
    assert isinstance(result, (tuple, list)) and len(result) == 3, (
        f"redistribute_by_slab should return (pos, num, overflow), got {type(result).__name__} "
        f"of length {len(result) if isinstance(result, (tuple, list)) else '-'}"
    )
    out, counts, overflow = result
    if mesh is not None:
        assert_sharding(out, mesh, P("d"), name="the returned pos")
        assert_sharding(counts, mesh, P("d"), name="the returned num")
        assert isinstance(overflow, jax.Array) and overflow.sharding.is_fully_replicated, (
            "overflow should be a jax bool scalar replicated on every device (P()), got "
            f"{type(overflow).__name__} {getattr(overflow, 'sharding', '')}"
        )
    out, counts, overflow = np.asarray(out), np.asarray(counts), np.asarray(overflow)
    assert out.ndim == 2 and out.shape[1] == 3 and out.shape[0] % n == 0, (
        f"the returned pos should have shape (n * rows_per_device, 3) with n = {n}, got {out.shape}"
    )
    assert counts.shape == (n,) and np.issubdtype(counts.dtype, np.integer), (
        f"the returned num should be ({n},) integers, one count per device, got {counts.shape} {counts.dtype}"
    )
    assert overflow.shape == () and overflow.dtype == np.bool_, (
        f"overflow should be a bool scalar, got shape {overflow.shape} and dtype {overflow.dtype}"
    )
    block = out.shape[0] // n
    assert ((0 <= counts) & (counts <= block)).all(), (
        f"the returned counts {counts.tolist()} should lie between 0 and the {block} rows of a device's block"
    )
    sent = _valid(pos, num, n)
    source = np.repeat(np.arange(n), num)
    dest = np.floor(sent[:, 0].astype(np.float64) * n).astype(int)
    pairs = np.zeros((n, n), int)
    np.add.at(pairs, (source, dest), 1)
    for i in range(n):
        x = out[i * block : i * block + counts[i], 0].astype(np.float64)
        wrong = np.floor(x * n) != i
        assert not wrong.any(), (
            f"device {i} holds a particle with x = {x[wrong][0]:.4f} among its {counts[i]} valid rows: it "
            f"belongs on device floor(x * n) = {int(np.floor(x[wrong][0] * n))}. (Are padding rows counted as "
            "valid, or are the valid rows not first in the block?)"
        )
    arrived, expected = _rows(_valid(out, counts, n)), _rows(sent)
    invented = arrived - expected
    assert not invented, (
        f"{sum(invented.values())} particle(s) came out that were not valid particles going in (or came out "
        f"twice), e.g. {next(iter(invented))}: padding rows must never travel, and each particle arrives once"
    )
    lost = sum((expected - arrived).values())
    too_many = [(s, d, int(pairs[s, d])) for s, d in zip(*np.nonzero(pairs > capacity))]
    if too_many:
        s, d, k = too_many[0]
        assert overflow, (
            f"device {s} has {k} particles for device {d} but a bucket holds capacity = {capacity}: overflow "
            f"must be True, got False ({lost} particle(s) missing). Nothing may be dropped without reporting it."
        )
    if too_many and overflow:
        extra = int(np.maximum(pairs - capacity, 0).sum())  # what no bucket can hold
        assert lost <= extra, (
            f"{lost} of the {len(sent)} particles did not arrive, but only {extra} did not fit in their buckets "
            f"(capacity = {capacity}; per source and destination: {pairs.tolist()}): a full bucket still carries "
            "capacity particles, and overflow excuses only the ones that did not fit"
        )
    if (pairs.sum(axis=0) <= capacity).all():
        assert not overflow, (
            f"overflow is True, but no device receives more than capacity = {capacity} particles "
            f"(per destination: {pairs.sum(axis=0).tolist()}; per source and destination, at most "
            f"{pairs.max(initial=0)}): every bucket was big enough"
        )
    if not overflow:
        assert lost == 0, (
            f"overflow is False but {lost} of the {len(sent)} particles did not arrive: when nothing "
            "overflows, every valid particle must come out, on its slab's device "
            f"(new counts {counts.tolist()}, particles per destination {pairs.sum(axis=0).tolist()})"
        )


def _assert_redistribution_program(impl, mesh, pos, num, capacity):
    """redistribute_by_slab compiled under jax.jit (mesh and capacity fixed): the program must contain an
    all-to-all, and earns it only by also redistributing (pos, num) right; then each device's share of the
    work and of the traffic."""
    n = mesh.shape["d"]
    args = _place(mesh, pos, num)
    program = compiled(lambda p, k: impl.redistribute_by_slab(p, k, mesh, capacity), *args)
    _check_redistribution(program(*args), pos, num, n, capacity)
    assert_collectives(program, present=("all-to-all",), what="redistribute_by_slab")
    cap = len(pos) // n
    _assert_shares(
        program,
        args,
        share=redistribution_share(cap, n, capacity),
        share_of="bucketing its rows and taking in its buckets, cap (n + 1) + 3 n capacity (one product "
        "per row, per element of its rows' one-hot, per coordinate received)",
        at_most=redistribution_traffic(n, capacity),
        bound_of="1.25 x (n - 1) x (capacity x 3 + 1) x 4, plus the overflow flag: (n - 1)/n of its n "
        "buckets and their n counts, one all_to_all each, and a quarter to spare",
        what="redistribute_by_slab",
        hint="Each device sends through all_to_all only its n buckets of capacity rows (and their counts): "
        "gathering every buffer sends every particle to every device.",
    )


def _assert_stacked(got, mesh, spec, want, *, name, **tol):
    """A result of expanding_shard_map: first its shape, with what a wrong one usually means, then
    assert_sharded_like (sharding, shard shapes, shard values)."""
    want = np.asarray(want)
    shape = tuple(getattr(got, "shape", np.shape(got)))
    if tuple(spec) == ():
        why = "with out spec P() a result is the same on every device and comes out as it is, with no device axis"
    else:
        why = (
            f"with out spec {spec}, the devices' results should be stacked along a new leading axis of length "
            "n (one row per device); concatenating them along their own first axis, as jax.shard_map does, "
            "gives another shape"
        )
    assert shape == want.shape, f"{name} has shape {shape}, expected {want.shape}: {why}"
    assert_sharded_like(got, mesh, spec, want, name=name, **tol)


@pytest.fixture
def assert_stacked():
    """assert_stacked(got, mesh, spec, want, name=..., rtol=..., atol=...)"""
    return _assert_stacked


@pytest.fixture
def padded():
    """padded(slabs, n, cap=CAP, seed=0) -> (pos, num) as NumPy arrays; slabs[i] lists device i's particles'
    slabs (taken modulo n)."""
    return _padded


@pytest.fixture
def random_slabs():
    """random_slabs(n, counts, seed) -> slabs drawn uniformly, counts[i] particles on device i."""
    return _random_slabs


@pytest.fixture
def place():
    """place(mesh, pos, num) -> both arrays placed P("d") on the mesh."""
    return _place


@pytest.fixture
def reference_mean():
    """The float64 mean of the valid rows (zeros when there are none)."""
    return _reference_mean


@pytest.fixture
def check_mean():
    """check_mean(mean, pos, num, n, rtol=..., atol=...): no NaN, and the float64 mean of the valid rows."""
    return _check_mean


@pytest.fixture
def assert_redistribution_program():
    """assert_redistribution_program(impl, mesh, pos, num, capacity): an all-to-all in the compiled program,
    which redistributes right."""
    return _assert_redistribution_program


@pytest.fixture
def check_redistribution():
    """check_redistribution(result, pos, num, n, capacity, mesh=None): asserts every rule of the exercise."""
    return _check_redistribution
