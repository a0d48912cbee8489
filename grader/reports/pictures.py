"""The pictures of the HTML pages, drawn as inline SVG from the structured facts of a result (never by parsing
a message): device grids of a layout, a speedup chart, a histogram of scores.

Hand-written SVG rather than a plotting library: a page must work offline under a CSP that allows no script
and no request, stay small, and give the same bytes for the same report, and these three pictures are a few
rectangles and lines each. Every picture carries its figures as data attributes too, so a test (or a reader
of the page source) can check what is drawn against report.json.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from grader.core.layout_grid import LayoutGrid, layout_grid
from grader.core.results import Layout, SpeedFigures
from grader.reports.html import Markup, element, number

# A qualitative palette (light, so the labels stay readable); more sets than colours take hues a golden angle apart.
_PALETTE = (
    "#a6cee3",
    "#b2df8a",
    "#fdbf6f",
    "#cab2d6",
    "#fb9a99",
    "#ffff99",
    "#8dd3c7",
    "#bebada",
    "#fccde5",
    "#d9d9d9",
    "#ccebc5",
    "#ffed6f",
)


def device_label(devices: Sequence[int]) -> str:
    """(0, 1, 2, 3, 6) -> "0-3,6": runs of three or more as a range, the rest listed."""
    parts: list[str] = []
    run: list[int] = []
    for device in list(devices) + [None]:
        if run and (device is None or device != run[-1] + 1):
            parts.append(f"{run[0]}-{run[-1]}" if len(run) >= 3 else ",".join(map(str, run)))
            run = []
        if device is not None:
            run.append(device)
    return ",".join(parts)


def device_colours(layouts: Iterable[Layout | None]) -> dict[tuple[int, ...], str]:
    """A colour for every set of devices holding a block in any of `layouts`: the same set, the same colour,
    in every grid drawn with this map. Sets are coloured in the order they first appear."""
    colours: dict[tuple[int, ...], str] = {}
    for layout in layouts:
        grid = layout_grid(layout) if layout is not None else LayoutGrid((), 0)
        for cell in (cell for piece in grid.slices for cell in piece.cells):
            if cell.devices not in colours:
                i = len(colours)
                colours[cell.devices] = (
                    _PALETTE[i] if i < len(_PALETTE) else f"hsl({(i * 137.508) % 360:.1f} 70% 80%)"
                )
    return colours


_CELL_HEIGHT = 26
_CHAR_WIDTH = 7.8  # of the 12 px monospace labels
_MIN_CELL_WIDTH = 44
_SLICE_LABEL = 18  # the height of a slice's "[:, :, 0:4]" above its grid
_SLICE_GAP = 6


def device_grid(layout: Layout | None, colours: dict[tuple[int, ...], str], role: str) -> Markup:
    """One layout as a grid of blocks, each labelled with the devices holding it, coloured by `colours`;
    an array of three or more dimensions as one grid per block of its later dimensions, one above the other.
    role: "expected" or "actual" (a data attribute the page's tests read)."""
    title = element("div", role, class_="grid-title")
    if layout is None:
        return element(
            "figure",
            title,
            element("p", "not a jax.Array: no layout to draw", class_="note"),
            class_="grid",
            data_role=role,
        )
    grid = layout_grid(layout)
    caption = element("figcaption", _describe(layout))
    if not grid.slices:
        return element(
            "figure",
            title,
            caption,
            element("p", "no blocks: this spec cannot split this shape", class_="note"),
            class_="grid",
            data_role=role,
        )
    labels = {c: device_label(c.devices) for piece in grid.slices for c in piece.cells}
    width = max(_MIN_CELL_WIDTH, 12 + _CHAR_WIDTH * max(len(label) for label in labels.values()))
    columns = grid.slices[0].columns
    svg_width = columns * width + 1
    shapes = []
    top = 0
    for piece in grid.slices:
        if piece.label is not None:
            svg_width = max(svg_width, 8 + _CHAR_WIDTH * len(piece.label))
            shapes.append(element("text", piece.label, x=2, y=top + 13, class_="slice"))
            top += _SLICE_LABEL
        for cell in piece.cells:
            x, y = cell.column * width, top + cell.row * _CELL_HEIGHT
            shapes.append(
                element(
                    "g",
                    element(
                        "rect",
                        x=number(x + 0.5),
                        y=number(y + 0.5),
                        width=number(width - 1),
                        height=_CELL_HEIGHT - 1,
                        fill=colours.get(cell.devices, "#ffffff"),
                    ),
                    element("text", labels[cell], x=number(x + width / 2), y=y + 17),
                    class_="block",
                    data_devices=",".join(map(str, cell.devices)),
                    data_index=cell.span,
                )
            )
        top += piece.rows * _CELL_HEIGHT + (_SLICE_GAP if piece.label is not None else 0)
    svg_height = top + 1 - (_SLICE_GAP if grid.slices[-1].label is not None else 0)
    svg_width = number(svg_width)
    svg = element(
        "svg",
        element("title", f"{role}: {_describe(layout)}"),
        *shapes,
        xmlns="http://www.w3.org/2000/svg",
        width=svg_width,
        height=svg_height,
        viewBox=f"0 0 {svg_width} {svg_height}",
        role="img",
    )
    note = grid.note()
    left_out = [element("p", note, class_="note")] if note else []
    return element("figure", title, caption, svg, *left_out, class_="grid", data_role=role)


def _describe(layout: Layout) -> str:
    """ "P('data', None) on mesh (data=8), shape (64, 10)"."""
    shape = (
        "("
        + ", ".join(map(str, layout.global_shape))
        + ("," if len(layout.global_shape) == 1 else "")
        + ")"
    )
    return f"{layout.describe()}, shape {shape}"


# -- speed ----------------------------------------------------------------------------------------------

_CHART_WIDTH, _CHART_LEFT, _CHART_RIGHT = 460, 12, 60


def speed_chart(figures: SpeedFigures) -> Markup:
    """The median speedup as a bar, the interquartile range of the pairwise ratios as a whisker, the threshold
    as a line (and the calibration kernel's figure, when the threshold was scaled by it), on a linear axis from 0."""
    low, high = figures.spread
    top = max(figures.speedup, high, figures.threshold, figures.calibration or 0.0, 1.0) * 1.1
    scale = (_CHART_WIDTH - _CHART_LEFT - _CHART_RIGHT) / top

    def x(value: float) -> str:
        return number(_CHART_LEFT + value * scale)

    def marker(value: float, name: str, colour: str, ys: tuple, width: float, dashes: str):
        """A dashed line across the bar at `value`, named above or below it: ys = (top, bottom, text)."""
        top, bottom, text_y = ys
        line = element(
            "line",
            x1=x(value),
            x2=x(value),
            y1=top,
            y2=bottom,
            stroke=colour,
            stroke_width=width,
            stroke_dasharray=dashes,
            class_=name,
        )
        label = element(
            "text",
            f"{name} {value:.2f}x",
            x=x(value),
            y=text_y,
            text_anchor="middle",
            font_size=10,
            fill=colour,
        )
        return [line, label]

    parts = [
        element("title", f"speedup {figures.speedup:.2f}x, threshold {figures.threshold:.2f}x")
    ]
    for tick in range(0, int(top) + 1, max(1, int(top) // 6 + (1 if top > 12 else 0))):
        parts.append(element("line", x1=x(tick), x2=x(tick), y1=18, y2=66, stroke="#d0d7de"))
        parts.append(
            element(
                "text",
                f"{tick}x",
                x=x(tick),
                y=80,
                text_anchor="middle",
                font_size=10,
                fill="#57606a",
            )
        )
    colour = "#1a7f37" if figures.met else "#cf222e"
    parts.append(
        element(
            "rect",
            x=x(0),
            y=28,
            width=number(figures.speedup * scale),
            height=22,
            fill=colour,
            fill_opacity=".75",
            class_="bar",
        )
    )
    parts.append(
        element(
            "g",
            element("line", x1=x(low), x2=x(high), y1=39, y2=39),
            element("line", x1=x(low), x2=x(low), y1=33, y2=45),
            element("line", x1=x(high), x2=x(high), y1=33, y2=45),
            stroke="#1f2328",
            stroke_width=1.5,
            class_="iqr",
        )
    )
    parts += marker(figures.threshold, "threshold", "#9a6700", (14, 66, 11), width=2, dashes="5 3")
    if figures.calibration is not None:
        parts += marker(figures.calibration, "calibration", "#0969da", (22, 58, 68), 1.5, "2 2")
    parts.append(
        element(
            "text",
            f"{figures.speedup:.2f}x",
            x=number(_CHART_LEFT + figures.speedup * scale + 4),
            y=25,
            font_size=11,
            fill=colour,
        )
    )
    return element(
        "svg",
        *parts,
        xmlns="http://www.w3.org/2000/svg",
        width=_CHART_WIDTH,
        height=86,
        viewBox=f"0 0 {_CHART_WIDTH} 86",
        role="img",
        class_="speed-chart",
        data_speedup=number(figures.speedup, 4),
        data_threshold=number(figures.threshold, 4),
        data_low=number(low, 4),
        data_high=number(high, 4),
        data_calibration=number(figures.calibration, 4)
        if figures.calibration is not None
        else None,
        data_origin=_CHART_LEFT,
        data_scale=number(scale, 6),
    )


# -- scores ---------------------------------------------------------------------------------------------

HISTOGRAM_BINS = 10


def score_bins(scores: Sequence[float], max_score: float, bins: int = HISTOGRAM_BINS) -> list[int]:
    """How many scores fall in each tenth of `max_score`; a full score counts in the last bin."""
    counts = [0] * bins
    for score in scores:
        share = score / max_score if max_score else 0.0
        counts[min(bins - 1, max(0, int(share * bins + 1e-9)))] += 1
    return counts


def histogram(scores: Sequence[float], max_score: float, title: str) -> Markup:
    """The distribution of one exercise's scores over a class, as bars over tenths of the points."""
    counts = score_bins(scores, max_score)
    width, height, bar = 240, 96, 22
    tallest = max(counts) or 1
    parts = [element("title", title)]
    for i, count in enumerate(counts):
        h = 52 * count / tallest  # the count above the tallest bar stays inside the picture
        x = 10 + i * bar
        parts.append(
            element(
                "rect",
                x=x,
                y=number(70 - h),
                width=bar - 3,
                height=number(h),
                fill="#0969da",
                fill_opacity=".7",
                class_="bin",
                data_count=count,
            )
        )
        if count:
            parts.append(
                element(
                    "text",
                    count,
                    x=number(x + (bar - 3) / 2),
                    y=number(66 - h),
                    text_anchor="middle",
                    font_size=10,
                )
            )
    parts.append(
        element("line", x1=8, x2=10 + HISTOGRAM_BINS * bar, y1=70.5, y2=70.5, stroke="#57606a")
    )
    parts.append(element("text", "0", x=10, y=84, font_size=10, fill="#57606a"))
    parts.append(
        element(
            "text",
            number(max_score),
            x=10 + HISTOGRAM_BINS * bar - 3,
            y=84,
            text_anchor="end",
            font_size=10,
            fill="#57606a",
        )
    )
    return element(
        "svg",
        *parts,
        xmlns="http://www.w3.org/2000/svg",
        width=width,
        height=height,
        viewBox=f"0 0 {width} {height}",
        role="img",
        class_="histogram",
        data_counts=",".join(map(str, counts)),
        data_max=number(max_score),
    )
