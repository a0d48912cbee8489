"""A collective-permute's pairs as SVG: the devices each group of pairs links on a circle (one circle per group,
so a 2-D mesh's rings are drawn apart), an arrow per source -> target pair. An expected pair the program does
not send is dashed red, a pair it sends that was not expected is orange; the rest are dark. Every arrow
carries its pair and kind as data attributes, for the tests."""

from __future__ import annotations

import math

from grader.reports import executed_facts as ef
from grader.reports.html import Markup, element, number

MAX_RINGS = 8  # groups drawn at most
MAX_DEVICES = 32  # devices of one group drawn at most
MAX_ARROWS = 128  # arrows of one figure at most: a page's bytes per test stay bounded
_NODE = 11  # a device's circle's radius
_PAD = 16
_STYLE = {
    "matched": ("#1f2328", None),
    "found": ("#1f2328", None),
    "missing": ("#cf222e", "5 3"),
    "extra": ("#bc4c00", None),
}
_WORDS = {
    "matched": "expected and sent",
    "found": "sent",
    "missing": "expected, not sent (dashed red)",
    "extra": "sent, not expected (orange)",
}


def _arrow(a: tuple[float, float], b: tuple[float, float], kind: str, both_ways: bool) -> Markup:
    (x1, y1), (x2, y2) = a, b
    length = math.hypot(x2 - x1, y2 - y1) or 1.0
    ux, uy = (x2 - x1) / length, (y2 - y1) / length
    shift = 3.5 if both_ways else 0.0  # a pair sent both ways: two arrows side by side
    x1, y1 = x1 + ux * (_NODE + 2) - uy * shift, y1 + uy * (_NODE + 2) + ux * shift
    x2, y2 = x2 - ux * (_NODE + 3) - uy * shift, y2 - uy * (_NODE + 3) + ux * shift
    colour, dashes = _STYLE[kind]
    head = (
        f"M{number(x2)} {number(y2)} L{number(x2 - ux * 8 - uy * 4)} {number(y2 - uy * 8 + ux * 4)} "
        f"L{number(x2 - ux * 8 + uy * 4)} {number(y2 - uy * 8 - ux * 4)} Z"
    )
    return [
        element(
            "line",
            x1=number(x1),
            y1=number(y1),
            x2=number(x2),
            y2=number(y2),
            stroke=colour,
            stroke_width=2 if kind == "extra" else 1.5,
            stroke_dasharray=dashes,
        ),
        element("path", d=head, fill=colour),
    ]


def ring_svg(figures: ef.PairFigures, devices: list[int]) -> Markup:
    """One group's devices on a circle, in order, with the arrows of the pairs among them."""
    radius = max(34.0, len(devices) * 30 / math.pi)  # about 30 px of circle per device
    centre = radius + _NODE + _PAD
    where = {
        d: (
            centre + radius * math.cos(2 * math.pi * i / len(devices) - math.pi / 2),
            centre + radius * math.sin(2 * math.pi * i / len(devices) - math.pi / 2),
        )
        for i, d in enumerate(devices)
    }
    pairs = [p for p in figures.pairs() if p[0] in where and p[1] in where and p[0] != p[1]]
    drawn = set(pairs)
    arrows = [
        element(
            "g",
            _arrow(where[a], where[b], figures.kind((a, b)), (b, a) in drawn),
            class_=f"pair {figures.kind((a, b))}",
            data_source=a,
            data_target=b,
        )
        for a, b in pairs
    ]
    nodes = [
        element(
            "g",
            element(
                "circle", cx=number(x), cy=number(y), r=_NODE, fill="#ffffff", stroke="#57606a"
            ),
            element("text", d, x=number(x), y=number(y + 4)),
            class_="device",
            data_device=d,
        )
        for d, (x, y) in where.items()
    ]
    size = number(2 * centre)
    return element(
        "svg",
        element("title", f"pairs among devices {', '.join(map(str, devices))}"),
        *arrows,
        *nodes,
        xmlns="http://www.w3.org/2000/svg",
        width=size,
        height=size,
        viewBox=f"0 0 {size} {size}",
        role="img",
        class_="ring",
        data_devices=",".join(map(str, devices)),
    )


def ring_figure(figures: ef.PairFigures) -> Markup:
    """Every group's circle (at most MAX_RINGS of at most MAX_DEVICES devices, MAX_ARROWS arrows in all; the
    groups that would pass these are left out, whole), a legend with the counts,
    and the pairs as text a click away, drawn or not (at most PAIRS_LISTED of each kind)."""
    rings = figures.rings()
    of_ring = {d: i for i, ring in enumerate(rings) for d in ring}
    arrows = [0] * len(rings)
    for a, _ in figures.pairs():
        arrows[of_ring[a]] += 1
    drawn, total = [], 0
    for i, ring in enumerate(rings):
        if len(drawn) < MAX_RINGS and len(ring) <= MAX_DEVICES and total + arrows[i] <= MAX_ARROWS:
            drawn.append(ring)
            total += arrows[i]
    left_out = len(rings) - len(drawn)
    counts: dict[str, int] = {}
    for pair in figures.pairs():
        counts[figures.kind(pair)] = counts.get(figures.kind(pair), 0) + 1
    legend = "; ".join(f"{counts[kind]} {_WORDS[kind]}" for kind in _WORDS if kind in counts)
    return element(
        "figure",
        element(
            "figcaption",
            f"collective-permute pairs, source -> target (device positions): {legend}",
        ),
        element("div", [ring_svg(figures, ring) for ring in drawn], class_="rings"),
        element(
            "p",
            f"{left_out} groups of devices not drawn (at most {MAX_RINGS} groups of at most "
            f"{MAX_DEVICES} devices are, with {MAX_ARROWS} arrows in all): the text below lists "
            f"their pairs, at most {ef.PAIRS_LISTED} of each kind",
            class_="note",
        )
        if left_out
        else None,
        element(
            "details",
            element("summary", "the pairs as text"),
            element("pre", "\n".join(ef.pair_lines(figures))),
        ),
        class_="ring-check",
        data_missing=counts.get("missing", 0),
        data_extra=counts.get("extra", 0),
    )
