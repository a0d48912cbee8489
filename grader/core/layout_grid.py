"""Where a layout's blocks go in a drawing, one computation for the terminal's text grid and the page's
picture: rows are blocks of the first dimension, columns of the second (a vector is one row, a scalar one
cell), and an array of three or more dimensions gets one such grid per block of the later dimensions.
Every block is then a cell of its own, so two layouts that hold any block on different devices never draw
the same; a single grid of the first two dimensions drew a split of the third as nothing at all."""

from __future__ import annotations

from dataclasses import dataclass

from grader.core.results import Layout

# More slices than a failure message or a page can show side by side; with the course's 8 devices an array
# has at most 8 blocks, so this bound only cuts a layout drawn for more devices, and the drawing says so.
MAX_SLICES = 8


@dataclass(frozen=True)
class GridCell:
    row: int
    column: int
    span: str  # the block's index in every dimension, "0:8,0:10,0:4"
    devices: tuple[int, ...]


@dataclass(frozen=True)
class GridSlice:
    label: str | None  # which block of the later dimensions: "[:, :, 0:4]"; None for rank 0-2
    rows: int
    columns: int
    cells: tuple[GridCell, ...]  # ordered by row, then column


@dataclass(frozen=True)
class LayoutGrid:
    slices: tuple[GridSlice, ...]  # at most MAX_SLICES
    left_out: int  # slices not drawn

    def note(self) -> str | None:
        """What the drawing leaves out, in words; None when it is all there."""
        if not self.left_out:
            return None
        return f"{self.left_out} more slices of the later dimensions not drawn"


def _span(span: tuple[int, int]) -> str:
    return f"{span[0]}:{span[1]}"


def layout_grid(layout: Layout) -> LayoutGrid:
    """The slices of `layout`'s drawing (none when it has no blocks)."""
    rank = len(layout.global_shape)
    whole = (0, 1)
    # the block's (row, column) key and the key of its slice
    placed = [
        (
            (whole, whole) if rank == 0 else (whole, b.index[0]) if rank == 1 else b.index[:2],
            b.index[2:],
            b,
        )
        for b in layout.blocks
    ]
    rows = sorted({where[0] for where, _, _ in placed})
    columns = sorted({where[1] for where, _, _ in placed})
    keys = sorted({key for _, key, _ in placed})
    slices = []
    for key in keys[:MAX_SLICES]:
        # blocks of one slice differ in the first two dimensions (or there is one: rank 0), yet merge
        # devices as the old grid did, should a layout ever list one index twice
        held: dict[tuple, set[int]] = {}
        spans: dict[tuple, str] = {}
        for where, k, block in placed:
            if k == key:
                held.setdefault(where, set()).update(block.devices)
                spans[where] = ",".join(_span(s) for s in block.index)
        cells = sorted(
            (
                GridCell(
                    rows.index(where[0]), columns.index(where[1]), spans[where], tuple(sorted(d))
                )
                for where, d in held.items()
            ),
            key=lambda c: (c.row, c.column),
        )
        label = "[:, :, " + ", ".join(_span(s) for s in key) + "]" if rank > 2 else None
        slices.append(GridSlice(label, len(rows), len(columns), tuple(cells)))
    return LayoutGrid(tuple(slices), max(0, len(keys) - MAX_SLICES))


def grid_words(ndim: int) -> str:
    """What a layout's grid of blocks shows, for an array of `ndim` dimensions."""
    return {
        0: "the whole array, a scalar",
        1: "blocks along its one dimension",
        2: "rows x columns",
    }.get(
        ndim,
        f"rows x columns of the first two of its {ndim} dimensions, "
        "one grid per block of the others",
    )
