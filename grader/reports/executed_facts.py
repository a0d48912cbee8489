"""What the executed-program facts of a collectives check (grader.checks.executed) mean, as figures the pages
and the terminal draw: a pipeline's stages x steps grid, expected beside the one its executed sends imply; a
permute's pairs, expected against found; an all-to-all's bytes beside its buffer at the capacity. (The counts
themselves, each rule's expected figure beside the executed one, are the program's table: program_facts.py.)

Only bounded figures leave here: a count of sends can be as large as a loop's trip count, so a grid is never
built past GRID_STEPS steps (nor GRID_STAGES stages), and a picture says when it is cut.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

from grader.core.results import CollectivesCheck, PipelineSchedule, ProgramAccount

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


def pipeline_figures(
    check: CollectivesCheck, account: ProgramAccount | None = None
) -> PipelineFigures | None:
    """The check's pipeline, its sends read from the program's account when there is one (every permute
    counted, however many of its instructions the report kept), else from the check's own instructions."""
    if check.schedule is None:
        return None
    if account is not None:
        rows = [row for row in account.traffic if row.kind == PERMUTE]
        runs = [row.runs for row in rows]
        return PipelineFigures(
            check.schedule,
            None if None in runs else sum(runs),  # type: ignore[arg-type]
            None in runs,
            sum(row.instructions for row in rows),
        )
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
