"""What the executed-program facts of a collectives check (grader.checks.executed) mean, as figures the pages
and the terminal draw: a pipeline's stages x steps grid, expected beside the one its executed sends imply; a
permute's pairs, expected against found; an all-to-all's bytes beside its buffer at the capacity. (The counts
themselves, each rule's expected figure beside the executed one, are the program's table: program_facts.py.)

Only bounded figures leave here: a count of sends can be as large as a loop's trip count, so a grid is never
built past GRID_STEPS steps (nor GRID_STAGES stages), the two grids of a pipeline's figure on the page draw
FIGURE_CELLS cells between them, and a picture says what it cuts. What it counts (its steps, its bubbles) is the whole
schedule's, worked out, never counted over the cells drawn.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

from grader.core.bounds import TEST_FACTS_CHARS
from grader.core.results import CollectivesCheck, ExecutedRule, PipelineSchedule, ProgramAccount

PERMUTE, ALL_TO_ALL = "collective-permute", "all-to-all"
GRID_STEPS = 64  # steps drawn at most
GRID_STAGES = 16  # stages drawn at most (a pipeline has a stage per device along its axis)
# A pipeline's figure on the page, both grids and their words, at most: what all one test's facts may hold
# as text (the page holds a test's pictures to as much), where 4 stages x 64 steps drew 54,739 characters.
# A drawn cell is CELL_CHARS of markup at most (its box, label, stage, step and microbatch: 182 measured,
# every number of it bounded by GRID_STEPS and GRID_STAGES) and the rest of the figure FRAME_CHARS (its
# words, stage names and step numbers: under 4,000 measured), so the two grids draw FIGURE_CELLS between them.
FIGURE_CHARS = TEST_FACTS_CHARS
CELL_CHARS = 190
FRAME_CHARS = 5_000
FIGURE_CELLS = (FIGURE_CHARS - FRAME_CHARS) // CELL_CHARS
# The terminal's two grids (and the Markdown's), a few characters a cell: cut at GRID_STEPS and GRID_STAGES only
TEXT_CELLS = 2 * GRID_STEPS * GRID_STAGES
PAIRS_LISTED = 64  # pairs of one kind listed as text at most
BUBBLE = -1

Pair = tuple[int, int]


# -- a pipeline ---------------------------------------------------------------------------------------------


def bubble_cells(schedule: PipelineSchedule, steps: int) -> int:
    """The idle cells of a pipeline of `steps` steps, every stage and step counted: each of the S stages
    works on each item once and idles the rest of its steps."""
    return schedule.stages * (steps - schedule.work_items(steps))


def grid_rows(
    schedule: PipelineSchedule, steps: int, drawn_steps: int = GRID_STEPS
) -> list[list[int]]:
    """The grid of a pipeline of `steps` steps through the schedule's stages (stage s takes item i at step
    i + s; -1 for a bubble), cut to its first GRID_STAGES rows and `drawn_steps` columns (GRID_STEPS at
    most), without ever building the rest (a count of sends may be in the millions)."""
    items = schedule.work_items(steps)
    return [
        [
            (t - s) % schedule.microbatches if 0 <= t - s < items else BUBBLE
            for t in range(min(steps, drawn_steps, GRID_STEPS))
        ]
        for s in range(min(schedule.stages, GRID_STAGES))
    ]


@dataclass(frozen=True)
class Grid:
    """One grid of a pipeline's figure: `steps` steps in all, of which the first `drawn_steps` are drawn."""

    schedule: PipelineSchedule
    steps: int
    drawn_steps: int

    @property
    def drawn_stages(self) -> int:
        return min(self.schedule.stages, GRID_STAGES)

    def rows(self) -> list[list[int]]:
        return grid_rows(self.schedule, self.steps, self.drawn_steps)

    @property
    def bubbles(self) -> int:
        return bubble_cells(self.schedule, self.steps)

    def count_words(self) -> str:
        """Its steps and bubbles, the whole grid's."""
        return f"{self.steps} steps, {self.bubbles} bubble cells in all"

    def cut_words(self) -> str:
        """What the drawing leaves out, or ""."""
        cut = [
            f"the first {self.drawn_steps} of {self.steps} steps"
            if self.drawn_steps < self.steps
            else "",
            f"the first {self.drawn_stages} of {self.schedule.stages} stages"
            if self.drawn_stages < self.schedule.stages
            else "",
        ]
        shown = " and ".join(c for c in cut if c)
        return f"only {shown} drawn" if shown else ""


def steps_to_draw(schedule: PipelineSchedule, steps: int, cells: int) -> int:
    """How many of a grid's first steps `cells` cells draw: at least one, at most GRID_STEPS."""
    rows = max(min(schedule.stages, GRID_STAGES), 1)
    return min(steps, GRID_STEPS, max(cells // rows, 1))


@dataclass(frozen=True)
class PipelineFigures:
    """The pipeline a check expects, what the program's executed collective-permutes say it did, and what
    the check's rule made of their count."""

    schedule: PipelineSchedule
    sends: int | None  # collective-permutes run, summed; None: some could not be counted
    unknown: bool  # a permute sits in a loop with no static trip count (so `sends` is None)
    permutes: int  # collective-permutes in the compiled program
    # the rule's verdict on the sends, as its check recorded it (None: it gave none), and the sends it
    # allows, when it recorded them as figures
    held: bool | None = None
    rule: ExecutedRule | None = None

    @property
    def actual_steps(self) -> int | None:
        """The steps the program takes. Sends the rule allows take the schedule's steps: M + S - 2 sends,
        one between each two steps, or M + S - 1, one more after the last step that nobody reads. Any
        other count, one send between each two steps, makes one step more than sends."""
        if self.sends is None:
            return None
        return self.schedule.steps if self.held else self.sends + 1

    @property
    def verdict(self) -> str | None:
        """The rule's verdict on the steps, in words; None when the check gave none."""
        if self.held is None:
            return None
        return "the steps expected" if self.held else "not the steps expected"

    def grids(self, cells: int = FIGURE_CELLS) -> tuple[Grid, Grid | None]:
        """The expected grid and the actual one (None when its steps are unknown), drawing `cells` cells
        between them: the expected one up to half of them, the actual one what is left. A program that
        takes the expected steps has one grid, the same object twice, drawn once with every cell."""
        schedule, actual_steps = self.schedule, self.actual_steps
        if actual_steps is None or actual_steps == schedule.steps:
            alone = Grid(schedule, schedule.steps, steps_to_draw(schedule, schedule.steps, cells))
            return alone, None if actual_steps is None else alone
        half = steps_to_draw(schedule, schedule.steps, cells // 2)
        expected = Grid(schedule, schedule.steps, half)
        left = cells - expected.drawn_steps * expected.drawn_stages
        return expected, Grid(schedule, actual_steps, steps_to_draw(schedule, actual_steps, left))


def pipeline_figures(
    check: CollectivesCheck, account: ProgramAccount | None = None
) -> PipelineFigures | None:
    """The check's pipeline, its sends read from the program's account when there is one (every permute
    counted, however many of its instructions the report kept), else from the check's own instructions;
    the verdict is the check's own, the one its rule gave on the same count."""
    if check.schedule is None:
        return None
    rule = check.executed_rule
    sends_rule = rule if rule is not None and rule.kind == PERMUTE and not rule.operands else None
    if account is not None:
        rows = [row for row in account.traffic if row.kind == PERMUTE]
        runs = [row.runs for row in rows]
        return PipelineFigures(
            check.schedule,
            None if None in runs else sum(runs),  # type: ignore[arg-type]
            None in runs,
            sum(row.instructions for row in rows),
            check.passed,
            sends_rule,
        )
    permutes = [c for c in check.found if c.op == PERMUTE]
    counted = all(c.executed is not None for c in permutes)
    return PipelineFigures(
        check.schedule,
        sum(c.executed or 0 for c in permutes) if counted else None,
        any(c.unknown_trip_count for c in permutes),
        len(permutes),
        check.passed,
        sends_rule,
    )


def _allowed_sends(figures: PipelineFigures) -> str:
    """The sends the rule allows, as a figure ("22 or 23"); without its figures, the schedule's own."""
    rule = figures.rule
    if rule is None or (rule.at_least is None and rule.at_most is None):
        return str(figures.schedule.steps - 1)
    if rule.at_least is None:
        return f"at most {rule.at_most}"
    if rule.at_most is None:
        return f"at least {rule.at_least}"
    if rule.at_least == rule.at_most:
        return str(rule.at_least)
    joined = " or " if rule.at_most == rule.at_least + 1 else " to "
    return f"{rule.at_least}{joined}{rule.at_most}"


def _counted_words(figures: PipelineFigures, sends: int) -> str:
    """What a counted number of sends makes of the steps."""
    expected = figures.schedule.steps
    runs = f"The program's collective-permutes run {sends} times"
    if figures.held and sends == expected:
        return (
            f"{runs}: one between each two steps, and one after the last step, which the schedule "
            f"allows (nothing reads it). That makes {expected} steps"
        )
    if figures.held and sends != expected - 1:
        return f"{runs}, which the rule allows: that is {expected} steps"
    return f"{runs}, one between each two steps, which makes {figures.actual_steps} steps"


def sends_words(figures: PipelineFigures) -> str:
    """What the executed sends say, in words, up to the verdict (verdict_words adds it): never a guess
    where a count is missing."""
    expected = f"expected {figures.schedule.steps} steps ({_allowed_sends(figures)} sends)"
    if figures.unknown:
        return (
            f"{expected}. A collective-permute runs in a loop with no static trip count, so the "
            "program's steps are unknown"
        )
    if figures.sends is None:
        return f"{expected}. The collective-permutes were not counted, so the program's steps are unknown"
    return f"{expected}. {_counted_words(figures, figures.sends)}"


def verdict_words(figures: PipelineFigures) -> str:
    """The sends' words and the rule's verdict, as one sentence's end: the terminal's line."""
    verdict = figures.verdict
    return sends_words(figures) + (f", {verdict}." if verdict else ".")


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
