"""A pipeline's schedule as SVG: stages in rows, steps in columns, each cell the microbatch a stage works on
(coloured by microbatch) or a bubble (grey, empty), the grid the check expects above the one the program's
executed sends imply. Each cell carries its stage, step and microbatch as data attributes, for the tests."""

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


def _grid_figure(figures: ef.PipelineFigures, steps: int | None, role: str) -> Markup:
    schedule = figures.schedule
    title = element("div", role, class_="grid-title")
    if steps is None:
        return element(
            "figure",
            title,
            element("p", "not drawn: how many steps the program takes is unknown", class_="note"),
            class_="schedule",
            data_role=role,
        )
    rows = ef.grid_rows(schedule, steps)
    bubbles = sum(row.count(ef.BUBBLE) for row in rows)
    cut = ef.cut_words(schedule, steps)
    caption = f"{steps} steps, {bubbles} bubble cells" + (f" ({cut})" if cut else "")
    return element(
        "figure",
        title,
        element("figcaption", caption),
        element("div", grid_svg(rows, role), class_="wide"),
        class_="schedule",
        data_role=role,
        data_steps=steps,
    )


def schedule_figure(figures: ef.PipelineFigures) -> Markup:
    """The expected grid above the actual one, with what the sends say in words."""
    expected, actual = figures.schedule.steps, figures.actual_steps
    same = actual == expected
    return element(
        "figure",
        element(
            "figcaption",
            f"pipeline of {ef.schedule_words(figures.schedule)}: {ef.sends_words(figures)} ",
            element(
                "span",
                "the steps expected" if same else "not the steps expected",
                class_="verdict-pass" if same else "verdict-fail",
            ),
        ),
        _grid_figure(figures, expected, "expected"),
        _grid_figure(figures, actual, "actual"),
        class_="pipeline-check",
        data_expected_steps=expected,
        data_actual_steps="unknown" if actual is None else actual,
    )
