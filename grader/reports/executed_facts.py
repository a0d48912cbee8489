"""What the executed-program facts of a collectives check (grader.checks.executed) mean, as figures the pages
and the terminal draw: a pipeline's stages x steps grid, expected beside the one its executed sends imply; a
permute's pairs, expected against found; an all-to-all's bytes beside its buffer at the capacity; the
collectives a training step runs, each kind's expected count beside the one counted.

Only bounded figures leave here: a count of sends can be as large as a loop's trip count, so a grid is never
built past GRID_STEPS steps (nor GRID_STAGES stages), and a picture says when it is cut.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

from grader.core.results import Collective, CollectivesCheck, ExecutedRule, PipelineSchedule

PERMUTE, ALL_TO_ALL = "collective-permute", "all-to-all"
GRID_STEPS = 64  # steps drawn at most
GRID_STAGES = 16  # stages drawn at most (a pipeline has a stage per device along its axis)
PAIRS_LISTED = 64  # pairs of one kind listed as text at most
BUBBLE = -1

Pair = tuple[int, int]


# -- a pipeline ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class PipelineFigures:
    """The pipeline a check expects, and what the program's executed collective-permutes say it did."""

    schedule: PipelineSchedule
    sends: int | None  # collective-permutes run, summed; None: some could not be counted
    unknown: bool  # a permute sits in a loop with no static trip count (so `sends` is None)
    permutes: int  # collective-permutes in the compiled program

    @property
    def actual_steps(self) -> int | None:
        """The reference's M + S - 2 sends make M + S - 1 steps: one step more than sends."""
        return None if self.sends is None else self.sends + 1


def pipeline_figures(check: CollectivesCheck) -> PipelineFigures | None:
    if check.schedule is None:
        return None
    permutes = [c for c in check.found if c.op == PERMUTE]
    counted = all(c.executed is not None for c in permutes)
    return PipelineFigures(
        check.schedule,
        sum(c.executed or 0 for c in permutes) if counted else None,
        any(c.unknown_trip_count for c in permutes),
        len(permutes),
    )


def grid_rows(schedule: PipelineSchedule, steps: int) -> list[list[int]]:
    """PipelineSchedule.grid(steps=steps) cut to its first GRID_STAGES rows and GRID_STEPS columns, without
    ever building the rest (a count of sends may be in the millions)."""
    items = max(steps - schedule.stages + 1, 0)
    return [
        [
            (t - s) % schedule.microbatches
            if 0 <= t - s < items and schedule.microbatches
            else BUBBLE
            for t in range(min(steps, GRID_STEPS))
        ]
        for s in range(min(schedule.stages, GRID_STAGES))
    ]


def cut_words(schedule: PipelineSchedule, steps: int) -> str:
    """What a drawn grid leaves out, or ""."""
    cut = [
        f"the first {GRID_STEPS} of {steps} steps" if steps > GRID_STEPS else "",
        f"the first {GRID_STAGES} of {schedule.stages} stages"
        if schedule.stages > GRID_STAGES
        else "",
    ]
    shown = " and ".join(c for c in cut if c)
    return f"only {shown} drawn" if shown else ""


def sends_words(figures: PipelineFigures) -> str:
    """What the executed sends say, in words: never a guess where a count is missing."""
    expected = figures.schedule.steps
    if figures.unknown:
        return (
            f"expected {expected} steps; a collective-permute runs in a loop with no static trip "
            "count, so how many steps the program takes is unknown"
        )
    if figures.sends is None:
        return f"expected {expected} steps; the collective-permutes were not counted"
    return (
        f"expected {expected} steps ({expected - 1} sends); the program's collective-permutes run "
        f"{figures.sends} times, which makes {figures.actual_steps} steps"
    )


def schedule_words(schedule: PipelineSchedule) -> str:
    repeats = f", each going round {schedule.repeats} times" if schedule.repeats != 1 else ""
    return f"{schedule.stages} stages x {schedule.microbatches} microbatches{repeats}"


# -- pairs --------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class PairFigures:
    """A permute's pairs: every pair found (over all collective-permutes) against those expected."""

    found: tuple[Pair, ...]
    expected: tuple[Pair, ...] | None  # None: the check expected none in particular

    @cached_property
    def _sets(self) -> tuple[frozenset[Pair], frozenset[Pair]]:
        return frozenset(self.found), frozenset(self.expected or ())

    def kind(self, pair: Pair) -> str:
        """ "matched", "missing" (expected, not found), "extra" (found, not expected) or "found"."""
        found, expected = self._sets
        if self.expected is None:
            return "found"
        if pair in found:
            return "matched" if pair in expected else "extra"
        return "missing"

    def pairs(self) -> list[Pair]:
        """Every pair to draw: the expected ones in their order, then the others found."""
        return list(dict.fromkeys([*(self.expected or ()), *self.found]))

    def rings(self) -> list[list[int]]:
        """The devices the pairs link, one list per connected group (a ring per group of a 2-D mesh),
        each sorted, groups by their first device."""
        parent: dict[int, int] = {}

        def root(d: int) -> int:
            while parent.setdefault(d, d) != d:
                parent[d] = parent[parent[d]]
                d = parent[d]
            return d

        for a, b in self.pairs():
            parent[root(a)] = root(b)
        groups: dict[int, list[int]] = {}
        for device in sorted(parent):
            groups.setdefault(root(device), []).append(device)
        return sorted(groups.values())


def pair_figures(check: CollectivesCheck) -> PairFigures | None:
    found = tuple(dict.fromkeys(p for c in check.found if c.op == PERMUTE for p in c.pairs))
    if check.expected_pairs is None and not found:
        return None
    return PairFigures(found, check.expected_pairs)


def pair_lines(figures: PairFigures) -> list[str]:
    """The pairs as text, grouped by what they are against the rule, at most PAIRS_LISTED of each kind."""
    by_kind: dict[str, list[str]] = {}
    for pair in figures.pairs():
        by_kind.setdefault(figures.kind(pair), []).append(f"{pair[0]}->{pair[1]}")
    for kind, listed in by_kind.items():
        if len(listed) > PAIRS_LISTED:
            by_kind[kind] = [*listed[:PAIRS_LISTED], f"and {len(listed) - PAIRS_LISTED} more"]
    heads = {
        "matched": "expected and found",
        "missing": "expected, MISSING",
        "extra": "found, NOT expected",
        "found": "found",
    }
    return [f"{heads[kind]}: {' '.join(by_kind[kind])}" for kind in heads if kind in by_kind]


# -- an exchange --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ExchangeRow:
    shapes: tuple[tuple[int, ...], ...]
    bytes: int | None
    buffer: int

    @property
    def ratio(self) -> str:
        if self.bytes is None or self.buffer <= 0:
            return "?"
        return f"{self.bytes / self.buffer:.2f}x"

    @property
    def shape_words(self) -> str:
        return " ".join(
            f"({', '.join(map(str, s))}{',' if len(s) == 1 else ''})" for s in self.shapes
        )


def exchange_rows(check: CollectivesCheck) -> list[ExchangeRow] | None:
    """Each all-to-all beside the buffer the capacity gives, when the check names one."""
    if check.buffer_bytes is None:
        return None
    return [
        ExchangeRow(c.operand_shapes, c.operand_bytes, check.buffer_bytes)
        for c in check.found
        if c.op == ALL_TO_ALL
    ]


# -- a collective's count -----------------------------------------------------------------------------------


def executed_words(executed: int | None, unknown: bool) -> str:
    """How many times a collective runs, in words: "8 times", never a guess."""
    if unknown:
        return "unknown: in a loop with no static trip count"
    if executed is None:
        return "not counted"
    return f"{executed} time" + ("" if executed == 1 else "s")


def counted(check: CollectivesCheck) -> bool:
    """Whether the check counted executions (an older report.json never did)."""
    return any(c.executed is not None or c.unknown_trip_count for c in check.found)


# -- the collectives of a step ------------------------------------------------------------------------------


@dataclass(frozen=True)
class StepRow:
    """One kind of collective in one run of a program (a training step): what a rule expects, what ran."""

    kind: str
    expected: str  # the rule's range in words; "no rule" for a kind that ran and no rule names
    actual: int | None  # counted as the rule counts (operands or runs); None: unknown
    operands: bool  # `actual` counts operands, not runs
    passed: bool | None  # the rule's verdict; None: no rule names the kind

    @property
    def actual_words(self) -> str:
        if self.actual is None:
            return "unknown: in a loop with no static trip count"
        unit = "operand" if self.operands else "run"
        return f"{self.actual} {unit}" + ("" if self.actual == 1 else "s")

    @property
    def mark(self) -> str:
        return {True: "pass", False: "FAIL", None: "-"}[self.passed]


@dataclass(frozen=True)
class StepTable:
    what: str  # the program, as the checks name it
    per: str  # what one run of it is: "step", "run"
    rows: tuple[StepRow, ...]


def range_words(rule: ExecutedRule) -> str:
    """ "1 to 6 per step", "none": the counts a rule allows per run of its program."""
    low, high = rule.at_least, rule.at_most
    unit, per = " operands" if rule.operands else "", rule.per
    if high == 0:
        return "none"
    if low is not None and low == high:
        return f"exactly {low}{unit} per {per}"
    if low is not None and high is not None:
        return f"{low} to {high}{unit} per {per}"
    if low is not None:
        return f"at least {low}{unit} per {per}"
    return f"at most {high}{unit} per {per}" if high is not None else "any"


def _unruled(kind: str, found: tuple[Collective, ...]) -> StepRow:
    of_kind = [c for c in found if c.op == kind]
    known = all(c.executed is not None and not c.unknown_trip_count for c in of_kind)
    return StepRow(
        kind, "no rule", sum(c.executed or 0 for c in of_kind) if known else None, False, None
    )


def step_tables(checks: list[CollectivesCheck]) -> list[StepTable]:
    """Per program checked (its `what` and what it compiled to), a row per rule on its executed counts,
    then a row per kind that ran and no rule names. Checks without executed-rule figures (an older
    report.json's, or another check's) make none."""
    programs: dict[tuple[str, tuple[Collective, ...]], list[CollectivesCheck]] = {}
    for check in checks:
        if check.executed_rule is not None:
            programs.setdefault((check.what, check.found), []).append(check)
    tables = []
    for (what, found), ruled in programs.items():
        rows = [
            StepRow(r.kind, range_words(r), r.actual, r.operands, c.passed)
            for c in ruled
            if (r := c.executed_rule) is not None
        ]
        named = {row.kind for row in rows}
        rows += [_unruled(k, found) for k in dict.fromkeys(c.op for c in found) if k not in named]
        per = next(c.executed_rule.per for c in ruled if c.executed_rule is not None)
        tables.append(StepTable(what, per, tuple(rows)))
    return tables
