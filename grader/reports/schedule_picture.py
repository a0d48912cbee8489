"""A pipeline's schedule as SVG: stages in rows, steps in columns, each cell the microbatch a stage works on
(coloured by microbatch) or a bubble (grey, empty), the grid the check expects above the one the program's
executed sends imply, and the check's verdict on them. Each cell carries its stage, step and microbatch as
data attributes, for the tests. What is drawn and said comes from executed_facts, which keeps the figure
within its budget (FIGURE_CHARS)."""

from __future__ import annotations

from grader.reports import executed_facts as ef
from grader.reports.html import Markup, element, number

_LEFT, _TOP, _HEIGHT = (
    58,
    16,
    20,
)  # the stage labels' column, the step numbers' row, a cell's height
_WIDTH_BUDGET = 960  # the cells of the widest grid (GRID_STEPS of them) fit a page's width
_CHAR = 6.2  # of the 10 px monospace numbers


def _colour(microbatch: int) -> str:
    return f"hsl({(microbatch * 137.508) % 360:.1f} 65% 78%)"


def grid_svg(rows: list[list[int]], role: str) -> Markup:
    """One grid (ef.grid_rows); role: "expected" or "actual"."""
    steps = len(rows[0]) if rows else 0
    width = max(14, min(24, _WIDTH_BUDGET // max(steps, 1)))
    parts = [element("title", f"{role}: {len(rows)} stages x {steps} steps")]
    for t in range(steps):
        if steps <= 16 or t % 4 == 0:
            parts.append(
                element(
                    "text", t, x=number(_LEFT + t * width + width / 2), y=11, class_="step-number"
                )
            )
    for s, row in enumerate(rows):
        y = _TOP + s * _HEIGHT
        parts.append(element("text", f"stage {s}", x=0, y=y + 14, class_="stage-name"))
        for t, microbatch in enumerate(row):
            bubble = microbatch == ef.BUBBLE
            label = str(microbatch)
            fits = len(label) * _CHAR <= width - 3
            parts.append(
                element(
                    "g",
                    element(
                        "rect",
                        x=number(_LEFT + t * width + 0.5),
                        y=number(y + 0.5),
                        width=width - 1,
                        height=_HEIGHT - 1,
                        fill="#eaeef2" if bubble else _colour(microbatch),
                    ),
                    None
                    if bubble or not fits
                    else element("text", label, x=number(_LEFT + t * width + width / 2), y=y + 14),
                    class_="cell bubble" if bubble else "cell work",
                    data_stage=s,
                    data_step=t,
                    data_microbatch=microbatch,
                )
            )
    svg_width, svg_height = _LEFT + steps * width + 1, _TOP + len(rows) * _HEIGHT + 1
    return element(
        "svg",
        *parts,
        xmlns="http://www.w3.org/2000/svg",
        width=svg_width,
        height=svg_height,
        viewBox=f"0 0 {svg_width} {svg_height}",
        role="img",
        class_="schedule-grid",
        data_role=role,
        data_stages=len(rows),
        data_steps=steps,
    )


def _grid_figure(grid: ef.Grid | None, role: str) -> Markup:
    title = element("div", role, class_="grid-title")
    if grid is None:
        return element(
            "figure",
            title,
            element("p", "not drawn: how many steps the program takes is unknown", class_="note"),
            class_="schedule",
            data_role=role,
        )
    cut = grid.cut_words()
    return element(
        "figure",
        title,
        element("figcaption", grid.count_words() + (f" ({cut})" if cut else "")),
        element("div", grid_svg(grid.rows(), role), class_="wide"),
        class_="schedule",
        data_role=role,
        data_steps=grid.steps,
        data_bubbles=grid.bubbles,
    )


def _verdict(figures: ef.PipelineFigures) -> Markup | None:
    """The rule's verdict, in its colour."""
    if figures.verdict is None:
        return None
    return element(
        "span", figures.verdict, class_="verdict-pass" if figures.held else "verdict-fail"
    )


def schedule_figure(figures: ef.PipelineFigures) -> Markup:
    """The expected grid above the actual one (one grid when they are the same), with what the sends say in
    words and the rule's verdict, within ef.FIGURE_CHARS of markup."""
    expected, actual = figures.grids()
    verdict = _verdict(figures)
    return element(
        "figure",
        element(
            "figcaption",
            f"pipeline of {ef.schedule_words(figures.schedule)}: {ef.sends_words(figures)}",
            [", ", verdict, "."] if verdict is not None else ".",
        ),
        # the steps expected: one grid, what the schedule asks and the program took
        _grid_figure(expected, "expected and actual")
        if actual is expected
        else [_grid_figure(expected, "expected"), _grid_figure(actual, "actual")],
        class_="pipeline-check",
        data_expected_steps=expected.steps,
        data_actual_steps="unknown" if actual is None else actual.steps,
        data_held="unknown" if figures.held is None else str(figures.held).lower(),
    )
