"""A memory check on the page: a row per figure (the program's arguments, temporaries and outputs per
device, then the test's comparison figures), each a horizontal bar in an SVG box of one width, scaled to
the largest figure shown, its bound a dark line across it. Exact bytes in each bar's title (its tooltip);
every bar carries its figures as data attributes, for the tests."""

from __future__ import annotations

from grader.core.results import MemoryCheck
from grader.reports import memory_facts as mf
from grader.reports.html import Markup, element, number

BOX_WIDTH, _HEIGHT = 320, 18  # a bar's box, in px


def _bar_svg(bar: mf.Bar, scale: int) -> Markup:
    width = mf.fraction(bar.bytes, scale) * BOX_WIDTH
    bound = None
    if bar.bound is not None:
        x = number(min(mf.fraction(bar.bound, scale) * BOX_WIDTH, BOX_WIDTH - 1))
        bound = element("line", x1=x, x2=x, y1=0, y2=_HEIGHT, class_="bound")
    exact = f"{bar.bytes:,} bytes per device" + (
        f" (bound: below {bar.bound:,})" if bar.bound is not None else ""
    )
    return element(
        "svg",
        element("title", exact),
        element("rect", x=0, y=0, width=BOX_WIDTH, height=_HEIGHT, class_="box"),
        element(
            "rect",
            x=0,
            y=2,
            width=number(width),
            height=_HEIGHT - 4,
            class_=f"fill {bar.role}" + (" over" if bar.over else ""),
        ),
        bound,
        xmlns="http://www.w3.org/2000/svg",
        width=BOX_WIDTH,
        height=_HEIGHT,
        viewBox=f"0 0 {BOX_WIDTH} {_HEIGHT}",
        role="img",
        data_width=number(width),
    )


def memory_figure(check: MemoryCheck) -> Markup:
    shown = mf.bars(check)
    scale = mf.top(shown)
    rows = [
        element(
            "tr",
            element("th", bar.label, scope="row"),
            element("td", _bar_svg(bar, scale)),
            element("td", mf.human_bytes(bar.bytes), class_="num", title=f"{bar.bytes:,} bytes"),
            element(
                "td",
                None if bar.bound is None else f"bound {mf.human_bytes(bar.bound)}",
                element("span", " over the bound", class_="verdict-fail") if bar.over else None,
                class_="note",
            ),
            class_=f"memory-bar {bar.role}",
            data_bytes=bar.bytes,
            data_bound=bar.bound,
            data_over=str(bar.over).lower(),
        )
        for bar in shown
    ]
    return element(
        "figure",
        element(
            "figcaption",
            f"{mf.verdict_words(check)} (",
            element(
                "span",
                "held" if check.passed else "not held",
                class_="verdict-pass" if check.passed else "verdict-fail",
            ),
            f"); bars to scale, a full bar {mf.human_bytes(scale)}",
        ),
        element("div", element("table", element("tbody", rows), class_="memory"), class_="wide"),
        class_="memory-check",
        data_what=check.what,
        data_passed=str(check.passed).lower(),
        data_scale=scale,
    )
