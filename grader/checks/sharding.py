"""Sharding assertions, three ways (the sharding object, each shard's shape, each shard's values),
with the expected and actual layouts drawn side by side when they differ."""

from __future__ import annotations

import jax
import numpy as np
from jax.sharding import NamedSharding, PartitionSpec

from grader.checks.numerics import Tolerance, compare
from grader.core import facts
from grader.core.layout_grid import grid_words, layout_grid
from grader.core.results import Block, Layout, LayoutCheck


def format_index(index: tuple[slice, ...]) -> str:
    """(slice(4, 8), slice(None)) -> "[4:8, :]", the way a student would write it."""
    parts = [
        f"{'' if s.start is None else s.start}:{'' if s.stop is None else s.stop}" for s in index
    ]
    return "[" + ", ".join(parts) + "]"


def layout_text(shape: tuple[int, ...], sharding: jax.sharding.Sharding) -> list[str]:
    """A grid of which devices hold which block (like jax.debug.visualize_array_sharding, as plain text
    lines so it fits in a failure message): rows x columns of the first two dimensions, one grid per block
    of the later ones (grader.core.layout_grid places them, as on the page)."""
    if len(shape) == 0:
        devices = sorted(d.id for d in sharding.devices_indices_map(()))
        return [f"scalar on devices {','.join(map(str, devices))}"]
    grid = layout_grid(layout_of(shape, sharding))
    lines: list[str] = []
    for piece in grid.slices:
        labels = {(c.row, c.column): ",".join(map(str, c.devices)) for c in piece.cells}
        width = max(len(v) for v in labels.values()) + 2
        sep = "+" + "+".join("-" * width for _ in range(piece.columns)) + "+"
        lines += [piece.label] if piece.label is not None else []
        lines.append(sep)
        for r in range(piece.rows):
            cells = (labels.get((r, c), "?").center(width) for c in range(piece.columns))
            lines += ["|" + "|".join(cells) + "|", sep]
    return lines + ([grid.note()] if grid.left_out else [])


def side_by_side(
    left: list[str], right: list[str], titles=("expected", "actual"), gap: int = 4
) -> str:
    width = max(len(titles[0]), *(len(line) for line in left))
    out = [titles[0].ljust(width) + " " * gap + titles[1]]
    for i in range(max(len(left), len(right))):
        a = left[i] if i < len(left) else ""
        b = right[i] if i < len(right) else ""
        out.append(a.ljust(width) + " " * gap + b)
    return "\n".join(out)


def describe_sharding(sharding: jax.sharding.Sharding) -> str:
    if isinstance(sharding, NamedSharding):
        axes = ", ".join(f"{name}={size}" for name, size in sharding.mesh.shape.items())
        return f"{sharding.spec} on mesh ({axes})"
    return type(sharding).__name__ + f" on devices {sorted(d.id for d in sharding.device_set)}"


def layout_of(
    shape: tuple[int, ...], sharding: jax.sharding.Sharding, *, blocks: bool = True
) -> Layout:
    """The layout as a fact for the test's result: the sharding and which devices hold each block."""
    named = isinstance(sharding, NamedSharding)
    found: dict[tuple[tuple[int, int], ...], list[int]] = {}
    if blocks:
        for device, index in sharding.devices_indices_map(tuple(shape)).items():
            span = tuple(
                (s.start or 0, size if s.stop is None else s.stop) for s, size in zip(index, shape)
            )
            found.setdefault(span, []).append(device.id)
    return Layout(
        global_shape=tuple(int(n) for n in shape),
        sharding=type(sharding).__name__,
        spec=str(sharding.spec) if named else None,
        mesh_axes=tuple(str(a) for a in sharding.mesh.axis_names) if named else (),
        mesh_sizes=tuple(int(n) for n in sharding.mesh.devices.shape) if named else (),
        mesh_devices=tuple(int(d.id) for d in sharding.mesh.devices.flat) if named else (),
        blocks=tuple(Block(span, tuple(sorted(ids))) for span, ids in sorted(found.items())),
    )


_DIMENSIONS = {1: ("its one dimension",), 2: ("its rows", "its columns")}


def _entry_axes(entry) -> tuple[str, ...]:
    if entry is None:
        return ()
    return tuple(entry) if isinstance(entry, tuple) else (entry,)


def spec_words(sharding: jax.sharding.Sharding, ndim: int) -> str:
    """What a layout means, in words: which dimension is split over which mesh axes, and across which
    axes the blocks are copied ("its columns split over 'i'; copied across 'x'")."""
    if not isinstance(sharding, NamedSharding):
        return describe_sharding(sharding)
    names = _DIMENSIONS.get(ndim, tuple(f"dimension {d}" for d in range(ndim)))
    split, used = [], set()
    for dim, entry in zip(names, sharding.spec):
        axes = _entry_axes(entry)
        used.update(axes)
        if axes:
            split.append(f"{dim} split over {' and '.join(map(repr, axes))}")
    copied = [a for a, size in sharding.mesh.shape.items() if a not in used and size > 1]
    if not split:
        return "the whole array on every device (nothing split)"
    words = ", ".join(split)
    return words + (
        f"; each block copied across {' and '.join(map(repr, copied))}" if copied else ""
    )


def _layout_message(name, arr, expected_sharding, headline) -> str:
    return (
        f"{name}: {headline}\n"
        f"  expected {describe_sharding(expected_sharding)}\n"
        f"  actual   {describe_sharding(arr.sharding)}\n"
        f"Which devices hold each block ({grid_words(arr.ndim)}):\n"
        + side_by_side(
            layout_text(arr.shape, expected_sharding), layout_text(arr.shape, arr.sharding)
        )
    )


def _wrong_layout(arr, expected: NamedSharding) -> str:
    """The headline of a wrong sharding: what the student's layout means against the one asked for."""
    return (
        f"wrong sharding: yours has {spec_words(arr.sharding, arr.ndim)}, "
        f"where it should have {spec_words(expected, arr.ndim)}"
    )


def assert_sharding(arr, mesh, spec: PartitionSpec, *, name: str = "output") -> None:
    """The array's sharding is equivalent to NamedSharding(mesh, spec), and each shard has its shape.
    The expected and actual layouts are recorded for the test's result whatever the verdict."""
    expected = NamedSharding(mesh, spec)
    try:
        _check_sharding(arr, expected, spec, name)
    except AssertionError:
        _record(name, arr, expected, passed=False)
        raise
    _record(name, arr, expected, passed=True)


def _record(name: str, arr, expected: NamedSharding, *, passed: bool) -> None:
    if isinstance(arr, jax.Array):
        shape = tuple(arr.shape)
        try:
            expected.shard_shape(shape)
            splits = True
        except ValueError:
            splits = False
        want, actual = layout_of(shape, expected, blocks=splits), layout_of(shape, arr.sharding)
    else:  # not an array on devices: no actual layout, and no shape to lay the expected one out on
        want, actual = layout_of((), expected, blocks=False), None
    facts.record_layout(LayoutCheck(name, want, actual, passed))


def _check_sharding(arr, expected: NamedSharding, spec: PartitionSpec, name: str) -> None:
    if not isinstance(arr, jax.Array):
        raise AssertionError(
            f"{name} should be a jax.Array placed on the mesh, got {type(arr).__name__}"
        )
    try:
        expected.shard_shape(arr.shape)
    except ValueError as exc:
        raise AssertionError(
            f"{name} has shape {arr.shape}, which {spec} cannot split: {exc}"
        ) from None
    if not arr.sharding.is_equivalent_to(expected, arr.ndim):
        raise AssertionError(
            _layout_message(name, arr, expected, _wrong_layout(arr, expected))
            + f"\nGive it the layout {spec}: place it with NamedSharding(mesh, {spec}), or "
            "name that spec in shard_map's out_specs or jit's out_shardings."
        )
    want = expected.shard_shape(arr.shape)
    for shard in arr.addressable_shards:
        if shard.data.shape != want:
            raise AssertionError(
                _layout_message(
                    name,
                    arr,
                    expected,
                    f"the shard on device {shard.device.id} has shape "
                    f"{shard.data.shape}, expected {want}",
                )
            )


def assert_shard_values(
    arr, expected_global, *, rtol: float = 1e-5, atol: Tolerance = 1e-6, name: str = "output"
) -> None:
    """Each addressable shard holds exactly its slice of the expected global array (and of `atol`, when it
    is one tolerance per element)."""
    want = np.asarray(expected_global)
    if tuple(arr.shape) != want.shape:
        raise AssertionError(f"{name} has shape {tuple(arr.shape)}, expected {want.shape}")
    for shard in sorted(arr.addressable_shards, key=lambda s: s.device.id):
        problem = compare(
            shard.data,
            want[shard.index],
            rtol=rtol,
            atol=np.asarray(atol)[shard.index] if np.ndim(atol) else atol,
            name=f"{name}'s shard on device {shard.device.id} (global {format_index(shard.index)})",
        )
        if problem:
            raise AssertionError(problem)


def assert_sharded_like(
    arr,
    mesh,
    spec: PartitionSpec,
    expected_global,
    *,
    rtol: float = 1e-5,
    atol: Tolerance = 1e-6,
    name: str = "output",
) -> None:
    """All three checks: sharding object, shard shapes, shard values."""
    assert_sharding(arr, mesh, spec, name=name)
    assert_shard_values(arr, expected_global, rtol=rtol, atol=atol, name=name)
