"""What ex02's visible and hidden tests share: the check of shard_shape on a layout that divides, the checks
of its ValueError (raised, naming the dimension), the check of a description against the array's own
sharding, what replicate_along's spec is, and layouts drawn for the test (every function here answers from
a layout alone, so fixed layouts alone could be answered from a list)."""

import re

import jax
import numpy as np
import pytest
from jax.sharding import AbstractMesh, NamedSharding, PartitionSpec as P

from grader.checks import inputs, test_mesh

BEFORE_ERRORS = "the error case is checked once this is right"


def _check_shard_shape(impl, global_shape, mesh_shape, spec, want, *, note=""):
    """Asserts impl.shard_shape(global_shape, mesh_shape, spec) == want on a layout whose every dimension
    divides. A ValueError there is a wrong answer, not a crash: shard_shape raises only where a layout
    does not divide, so a function that raises everywhere fails here, with this message."""
    call = f"shard_shape({tuple(global_shape)}, {dict(mesh_shape)}, {spec})"
    suffix = f" ({note})" if note else ""
    try:
        got = impl.shard_shape(tuple(global_shape), dict(mesh_shape), spec)
    except ValueError as exc:
        raise AssertionError(
            f"{call} raised ValueError, but every dimension divides and no mesh axis is used "
            f"twice: expected {tuple(want)}{suffix}; got: {exc}"
        ) from None
    try:
        right = tuple(got) == tuple(want)
    except TypeError:  # not a sequence at all
        right = False
    assert right, f"{call}: expected {tuple(want)}, got {got!r}{suffix}"


@pytest.fixture
def check_shard_shape():
    """check_shard_shape(impl, global_shape, mesh_shape, spec, want, note=""): shard_shape on a valid layout."""
    return _check_shard_shape


@pytest.fixture
def before_errors():
    """The note an error test adds to its valid case's message."""
    return BEFORE_ERRORS


def names_dimension(message: str, dims) -> bool:
    """The message mentions one of these dimension indices as a number of its own."""
    return any(re.search(rf"(?<![\w.]){d}(?![\w.])", message) for d in dims)


def value_error_from(call, what: str) -> ValueError:
    try:
        returned = call()
    except ValueError as exc:
        return exc
    raise AssertionError(f"{what} should raise ValueError, but it returned {returned!r}")


def _check_rejects_indivisible(impl, global_shape, mesh_shape, spec, dim):
    """shard_shape raises ValueError naming dimension `dim`, the one its mesh axes do not divide."""
    what = f"shard_shape({tuple(global_shape)}, {dict(mesh_shape)}, {spec})"
    error = value_error_from(
        lambda: impl.shard_shape(tuple(global_shape), dict(mesh_shape), spec), what
    )
    assert names_dimension(str(error), [dim]), (
        f"{what} raised ValueError, but its message must name dimension {dim} (the one that is not "
        f"divisible) by its index; got: {error}"
    )


def _check_rejects_axis_used_twice(impl, global_shape, mesh_shape, spec, dims, axis=None):
    """shard_shape raises ValueError naming one of `dims`: where the axis is used again (the greatest of them)
    or, for an axis repeated in one tuple, that dimension."""
    what = f"shard_shape({tuple(global_shape)}, {dict(mesh_shape)}, {spec})"
    error = value_error_from(
        lambda: impl.shard_shape(tuple(global_shape), dict(mesh_shape), spec), what
    )
    which = "the axis" if axis is None else f"the axis {axis!r}"
    assert names_dimension(str(error), dims), (
        f"{what} raised ValueError, but its message must name the dimension where {which} is used "
        f"again (dimension {max(dims)}) by its index; got: {error}"
    )


def _check_drawn_axis_used_twice(impl, seed=0):
    """A layout drawn for the test (shard_shape checked on it first), then the same with one of its axes used
    again in another dimension (or in the same entry)."""
    rng = inputs.rng(seed)
    sizes, valid, shape = inputs.layout(rng)
    _check_shard_shape(
        impl, shape, sizes, valid, _named_shard_shape(shape, sizes, valid), note=BEFORE_ERRORS
    )
    entries = [() if e is None else (e,) if isinstance(e, str) else tuple(e) for e in valid]
    first = int(rng.choice([i for i, e in enumerate(entries) if e]))
    axis = str(rng.choice(entries[first]))
    # or the same entry
    again = int(rng.choice([i for i in range(len(entries)) if i != first] or [first]))
    entries[again] += (axis,)
    repeated = P(*(None if not e else e[0] if len(e) == 1 else e for e in entries))
    _check_rejects_axis_used_twice(impl, shape, sizes, repeated, sorted({first, again}), axis)


@pytest.fixture
def check_rejects_indivisible():
    """check_rejects_indivisible(impl, global_shape, mesh_shape, spec, dim): a ValueError naming dimension dim."""
    return _check_rejects_indivisible


@pytest.fixture
def check_rejects_axis_used_twice():
    """check_rejects_axis_used_twice(impl, global_shape, mesh_shape, spec, dims, axis=None): a ValueError naming
    one of dims, where the axis is used again."""
    return _check_rejects_axis_used_twice


@pytest.fixture
def check_drawn_axis_used_twice():
    """check_drawn_axis_used_twice(impl, seed=0): the same on a layout drawn for the test, one axis repeated."""
    return _check_drawn_axis_used_twice


KEYS = (
    "shard_shape",
    "num_devices",
    "is_fully_replicated",
    "is_fully_addressable",
    "replication_factor",
)


def _expected_description(arr):
    index_map = arr.sharding.devices_indices_map(arr.shape)
    blocks = {tuple(s.indices(n) for s, n in zip(idx, arr.shape)) for idx in index_map.values()}
    return {
        "shard_shape": tuple(arr.sharding.shard_shape(arr.shape)),
        "num_devices": len(index_map),
        "is_fully_replicated": len(blocks) == 1,
        "is_fully_addressable": True,
        "replication_factor": len(index_map) // len(blocks),
    }


def _check_description(info, arr, what):
    assert isinstance(info, dict) and set(KEYS) <= set(info), (
        f"describe must return a dict with the keys {list(KEYS)}, got {info!r}"
    )
    want = _expected_description(arr)
    got = {**{k: info[k] for k in KEYS}, "shard_shape": tuple(info["shard_shape"])}
    wrong = {k: f"expected {want[k]!r}, got {got[k]!r}" for k in KEYS if got[k] != want[k]}
    assert not wrong, f"describe of {what}: " + "; ".join(f"{k}: {v}" for k, v in wrong.items())


def _axes(entry) -> tuple[str, ...]:
    return () if entry is None else (entry,) if isinstance(entry, str) else tuple(entry)


def _without(spec, axis):
    """The spec with `axis` removed from every entry (replicate_along's docstring)."""
    kept = [tuple(a for a in _axes(entry) if a != axis) for entry in spec]
    return P(*(None if not k else k[0] if len(k) == 1 else k for k in kept))


def _named_shard_shape(shape, sizes, spec):
    """JAX's shard shape for a layout on a mesh of these axis sizes (an abstract mesh: it needs no devices)."""
    return tuple(
        NamedSharding(AbstractMesh(tuple(sizes.values()), tuple(sizes)), spec).shard_shape(
            tuple(shape)
        )
    )


def _drawn_array(devices=8, axis_type="explicit", seed=0):
    """(array, mesh, spec, values): values drawn for the test, placed with a layout drawn for it over the
    first `devices` devices."""
    rng = inputs.rng(seed)
    sizes, spec, shape = inputs.layout(rng, devices)
    mesh = test_mesh(tuple(sizes.values()), tuple(sizes), axis_type)
    values = rng.standard_normal(shape).astype(np.float32)
    return jax.device_put(values, NamedSharding(mesh, spec)), mesh, spec, values


@pytest.fixture
def check_description():
    """check_description(info, arr, what): describe's dict for arr, as its sharding says."""
    return _check_description


@pytest.fixture
def without():
    """without(spec, axis): the spec replicate_along must return, `axis` removed from every entry."""
    return _without


@pytest.fixture
def named_shard_shape():
    """named_shard_shape(shape, sizes, spec): JAX's shard shape for the layout (raises where it does not divide)."""
    return _named_shard_shape


@pytest.fixture
def drawn_array():
    """drawn_array(devices=8, axis_type="explicit", seed=0) -> (array, mesh, spec, values) drawn for the test."""
    return _drawn_array
