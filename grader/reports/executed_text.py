"""The executed-program facts of a collectives check as monospace text, for the terminal (`shardlab check`)
and the Markdown of results.json: the pipeline grids, the permute pairs, the all-to-all buffers, drawn as the
layouts are drawn there, in a few lines of plain characters (program_text.py sets them under their program's
table); and, for an older report.json, without accounts, each check's rule and counts (`check_lines`)."""

from __future__ import annotations

from collections import Counter

from grader.core.results import CollectivesCheck
from grader.reports import executed_facts as ef
from grader.reports.text import printable

_BUBBLE = "."


def grid_text(rows: list[list[int]], label: str) -> list[str]:
    """A stages x steps grid: a microbatch's number where a stage works, "." for a bubble."""
    if not rows or not rows[0]:
        return [f"{label}: no step"]
    width = max(len(str(max(max(r) for r in rows))), len(str(len(rows[0]) - 1)))
    head = f"{label:<10}step " + " ".join(f"{t:>{width}}" for t in range(len(rows[0])))
    lines = [head]
    for s, row in enumerate(rows):
        cells = " ".join(f"{_BUBBLE if m == ef.BUBBLE else m:>{width}}" for m in row)
        lines.append(f"  stage {s:<{max(2, len(str(len(rows) - 1)))}}     {cells}")
    return lines


def pipeline_text(figures: ef.PipelineFigures) -> list[str]:
    """The page's schedule figure as text: the same words and verdict, and the grids, which a few
    characters a cell draw up to GRID_STEPS steps where the page's budget cuts them sooner."""
    lines = [f"pipeline of {ef.schedule_words(figures.schedule)}: {ef.verdict_words(figures)}"]
    expected, actual = figures.grids(ef.TEXT_CELLS)
    if actual is expected:  # the steps expected: one grid, as the page draws it
        return lines + _grid_lines(expected, "expected and actual")
    lines += _grid_lines(expected, "expected")
    if actual is None:
        lines.append("actual: not drawn, its number of steps is unknown")
        return lines
    return lines + _grid_lines(actual, "actual")


def _grid_lines(grid: ef.Grid, label: str) -> list[str]:
    cut = grid.cut_words()
    return [
        *grid_text(grid.rows(), label),
        f"  ({grid.count_words()}" + (f"; {cut})" if cut else ")"),
    ]


def exchange_text(rows: list[ef.ExchangeRow]) -> list[str]:
    if not rows:
        return ["all-to-all: none in the compiled program"]
    return [
        f"all-to-all {row.shape_words or '?'}: {'?' if row.bytes is None else row.bytes} bytes per "
        f"device, the capacity's buffer {row.buffer} bytes ({row.ratio})"
        for row in rows
    ]


def check_lines(check: CollectivesCheck) -> list[str]:
    """Everything the executed facts of `check` say, as text; [] for a check without them."""
    lines: list[str] = []
    if check.rule is not None:
        lines.append(f"rule: {printable(check.rule)}")
    if ef.counted(check):
        # one line per kind and count: a step of 12 all-gathers run once each is one line, not 12
        said = Counter(
            f"{c.op} runs: {ef.executed_words(c.executed, c.unknown_trip_count)}"
            for c in check.found
        )
        lines += [line if n == 1 else f"{line} ({n} instructions)" for line, n in said.items()]
    if (pipeline := ef.pipeline_figures(check)) is not None:
        lines += pipeline_text(pipeline)
    if (pairs := ef.pair_figures(check)) is not None:
        lines += ["collective-permute pairs (device positions, source->target):"]
        lines += ["  " + line for line in ef.pair_lines(pairs)]
    if (exchange := ef.exchange_rows(check)) is not None:
        lines += exchange_text(exchange)
    return [printable(line) for line in lines]
