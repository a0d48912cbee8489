"""What ex11's visible and hidden tests share: padded per-device particle buffers (with garbage in the
padding), the NumPy reference mean and the check of a mean, the check of a redistribution, which knows
nothing of the order of the particles inside a device nor of how many padding rows each device's block
has, and the check of a compiled redistribution (an all-to-all in a program that redistributes right)."""

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
    compiled,
    inputs,
)

CAP = 8  # rows per device in every test's input: the same shapes for every example, one compile per test


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
    all-to-all, and earns it only by also redistributing (pos, num) right."""
    n = mesh.shape["d"]
    args = _place(mesh, pos, num)
    program = compiled(lambda p, k: impl.redistribute_by_slab(p, k, mesh, capacity), *args)
    _check_redistribution(program(*args), pos, num, n, capacity)
    assert_collectives(program, present=("all-to-all",), what="redistribute_by_slab")


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
