"""A test's program tables (program_facts.py) as monospace text, for the terminal (`shardlab check`): per program
the rules, expected beside executed, in columns that fit the terminal's width (a long cell wraps within its
column), then what each device executed, then the pictures its checks add (executed_text.py draws them).
`test_blocks` is everything a failed test's facts say, in the order the terminal prints them; an older
report.json's collectives checks are written as they always were."""

from __future__ import annotations

import textwrap
from collections.abc import Sequence

from grader.core.results import TestResult
from grader.reports import executed_facts as ef, program_facts as pf
from grader.reports.executed_text import check_lines, exchange_text, pipeline_text
from grader.reports.memory_facts import memory_lines
from grader.reports.text import printable

ROWS = 24  # rows of one part of a table written out at most; the page has them all
MIN_COLUMN = 8  # a column that wraps keeps this many characters, however narrow the terminal
# How a rule's columns give way to a narrow terminal: its expected words first, then the executed figure
# (a work rule's ratio going under it), before the measure.
RULE_NARROWING = ((1, 24), (2, 12))
_GAP = "  "
_INDENT = "  "


def columns(
    header: Sequence[str],
    rows: Sequence[Sequence[str]],
    width: int,
    right: frozenset[int] = frozenset(),
    narrowing: Sequence[tuple[int, int]] = (),
) -> list[str]:
    """The rows under their header, in columns of fixed width that fit `width` characters. The columns of
    `narrowing` ((column, floor), in order) narrow first, each down to its floor; then the widest of those
    that are not right-aligned (figures, which never wrap), none below MIN_COLUMN (below that, a line may
    pass the width). A narrowed column's cells wrap within it."""
    count = len(header)
    sizes = [max(len(cells[i]) for cells in [header, *rows]) for i in range(count)]
    room = width - len(_INDENT) - len(_GAP) * (count - 1)
    for column, floor in narrowing:
        if sum(sizes) > room:
            sizes[column] = max(sizes[column] - (sum(sizes) - room), min(sizes[column], floor))
    while sum(sizes) > room:
        narrowable = [i for i in range(count) if i not in right and sizes[i] > MIN_COLUMN]
        if not narrowable:
            break
        sizes[max(narrowable, key=lambda i: sizes[i])] -= 1
    lines = []
    for cells in [header, *rows]:
        wrapped = [
            [cell] if i in right else textwrap.wrap(cell, sizes[i], break_on_hyphens=False) or [""]
            for i, cell in enumerate(cells)
        ]
        for depth in range(max(map(len, wrapped))):
            parts = [
                (w[depth] if depth < len(w) else "").rjust(sizes[i])
                if i in right
                else (w[depth] if depth < len(w) else "").ljust(sizes[i])
                for i, w in enumerate(wrapped)
            ]
            lines.append((_INDENT + _GAP.join(parts)).rstrip())
    return lines


def wrapped(line: str, width: int, indent: str = "") -> list[str]:
    """A line of words within `width` columns, its continuation indented two more."""
    return textwrap.wrap(
        line,
        max(width, MIN_COLUMN),
        initial_indent=indent,
        subsequent_indent=indent + "  ",
        break_on_hyphens=False,
    ) or [indent]


def _table(header, rows, width: int, right=frozenset(), narrowing=()) -> list[str]:
    """columns(...) of at most ROWS rows, the last line saying how many more the page has."""
    kept = rows if len(rows) <= ROWS else rows[: ROWS - 1]
    lines = columns(header, kept, width, right, narrowing)
    if len(kept) < len(rows):
        lines.append(f"{_INDENT}... and {len(rows) - len(kept)} more rows (the page has them all)")
    return lines


def rule_lines(table: pf.ProgramTable, width: int) -> list[str]:
    if not table.rules:
        return wrapped(
            "no rule was judged on its figures (the test's message says what it checked)",
            width,
            _INDENT,
        )
    rows = [[row.measure, row.expected, row.executed, row.mark] for row in table.rules]
    return _table(pf.RULES_HEADER, rows, width, narrowing=RULE_NARROWING)


def executed_lines(table: pf.ProgramTable, width: int) -> list[str]:
    """What each device executed in one run: its collectives, its multiply-adds, its memory."""
    if table.account is None:
        return []
    traffic = table.traffic
    if traffic:
        rows = [row.cells() for row in traffic]
        lines = _table(pf.TRAFFIC_HEADER, rows, width, frozenset({2, 3, 4, 5, 6}), ((1, 12),))
    else:
        lines = [_INDENT + "collectives: none"]
    lines += wrapped(f"multiply-adds: {table.work_words()}", width, _INDENT)
    lines += wrapped(f"memory: {table.memory_words()}", width, _INDENT)
    return lines


def picture_lines(table: pf.ProgramTable) -> list[str]:
    """The pictures the table's checks add: pipeline grids, pairs, exchanges."""
    drawn = pf.pictures(table)
    lines: list[str] = []
    for pipeline in drawn.pipelines:
        lines += pipeline_text(pipeline)
    for pairs in drawn.pairs:
        lines += ["collective-permute pairs (device positions, source->target):"]
        lines += ["  " + line for line in ef.pair_lines(pairs)]
    for rows in drawn.exchanges:
        lines += exchange_text(list(rows))
    return lines


def table_lines(table: pf.ProgramTable, width: int = 80) -> list[str]:
    """One program's table, within `width` columns wherever its cells can wrap."""
    lines = wrapped(table.heading() + ":", width)
    lines += rule_lines(table, width)
    lines += executed_lines(table, width)
    lines += picture_lines(table)
    return [printable(line) for line in lines]


def test_blocks(test: TestResult, width: int = 80) -> list[list[str]]:
    """What a test's facts say as text, a block each: its programs' tables, an older report's collectives
    checks, its memory checks' bars."""
    blocks = [table_lines(table, width) for table in pf.program_tables(test)]
    blocks += [check_lines(check) for check in pf.unplaced_checks(test)]
    blocks += [memory_lines(check, width) for check in test.memory]
    return [block for block in blocks if block]


test_blocks.__test__ = False  # not a pytest test, wherever it is imported
