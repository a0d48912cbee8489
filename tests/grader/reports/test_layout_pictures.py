"""Layouts of any rank drawn so that two different layouts never draw the same, in the terminal (the failure
message's text grid) and on the page (the SVG grid): an array of three or more dimensions gets one grid per
block of its later dimensions (grader.core.layout_grid), where one grid of the first two dimensions drew
ex02's replicate_along mistake on a 3-D array as two identical "0-7" grids.

The browser test opens a page with that mistake in Chromium and compares the pixels of the two pictures."""

from __future__ import annotations

import dataclasses
import re

import pytest
from hypothesis import given, settings, strategies as st
from jax.sharding import NamedSharding, PartitionSpec as P

from grader.checks import layout_text, test_mesh
from grader.checks.sharding import layout_of
from grader.core.layout_grid import MAX_SLICES, layout_grid
from grader.core.results import Block, Category, Layout, LayoutCheck, TestResult
from grader.course import catalog
from grader.grading.results import GradingResults, score_exercise
from grader.reports import pictures
from grader.reports.writers import write_all

MESHES = {1: [(8,), (2,)], 2: [(2, 4), (4, 2)], 3: [(2, 2, 2)]}
NAMES = ("a", "b", "c")


@st.composite
def layouts(draw):
    """A mesh of 1-3 axes, and two specs of one rank (1-4) on it: each axis used at most once per spec."""
    axes = draw(st.integers(1, 3))
    sizes = draw(st.sampled_from(MESHES[axes]))
    names = NAMES[:axes]
    rank = draw(st.integers(1, 4))

    def spec():
        order = draw(st.permutations(names))
        cut = draw(st.lists(st.integers(0, rank), min_size=len(names), max_size=len(names)))
        entries = [tuple(n for n, at in zip(order, cut) if at == d) for d in range(rank + 1)]
        return P(*(None if not e else e[0] if len(e) == 1 else e for e in entries[:rank]))

    return sizes, names, (8,) * rank, spec(), spec()


def drawn_svg(layout: Layout, colours) -> str:
    """What the page's grid shows, without the words naming the spec (the caption and the SVG's title)
    and the data attributes a test reads: the rectangles, their colours and their labels."""
    markup = str(pictures.device_grid(layout, colours, "actual"))
    markup = re.sub(r"<figcaption>.*?</figcaption>|<title>.*?</title>", "", markup)
    return re.sub(r' data-[a-z-]+="[^"]*"', "", markup)


@settings(max_examples=150, deadline=None)
@given(layouts())
def test_different_layouts_never_draw_the_same(case):
    sizes, names, shape, left, right = case
    mesh = test_mesh(sizes, names)
    one, two = NamedSharding(mesh, left), NamedSharding(mesh, right)
    a, b = layout_of(shape, one), layout_of(shape, two)
    colours = pictures.device_colours([a, b])
    same = a.device_ids() == b.device_ids()
    assert (layout_text(shape, one) == layout_text(shape, two)) == same, (left, right)
    assert (drawn_svg(a, colours) == drawn_svg(b, colours)) == same, (left, right)


def test_a_rank_2_grid_is_drawn_as_it_was():
    mesh = test_mesh((2, 4), ("x", "y"))
    lines = layout_text((8, 8), NamedSharding(mesh, P("x", None)))
    assert lines == ["+---------+", "| 0,1,2,3 |", "+---------+", "| 4,5,6,7 |", "+---------+"]
    (piece,) = layout_grid(layout_of((8, 8), NamedSharding(mesh, P("x", "y")))).slices
    assert piece.label is None and (piece.rows, piece.columns) == (2, 4)


# ex02's replicate_along asked to drop "x" from P(None, None, ("x", "y")); the mistake replicates everything
MISTAKE = ((2, 4), ("x", "y"), (8, 8, 8), P(None, None, "y"), P())


def test_the_replicate_along_mistake_draws_two_different_text_grids():
    sizes, names, shape, wanted, got = MISTAKE
    mesh = test_mesh(sizes, names)
    expected = layout_text(shape, NamedSharding(mesh, wanted))
    actual = layout_text(shape, NamedSharding(mesh, got))
    assert expected != actual
    # four slices of the third dimension, each held by the pairs of devices one "y" index names
    assert [line for line in expected if line.startswith("[")] == [
        "[:, :, 0:2]",
        "[:, :, 2:4]",
        "[:, :, 4:6]",
        "[:, :, 6:8]",
    ]
    assert "| 0,4 |" in expected and actual == [
        "[:, :, 0:8]",
        "+-----------------+",
        "| 0,1,2,3,4,5,6,7 |",
        "+-----------------+",
    ]


def test_slices_past_the_bound_are_named_not_drawn():
    blocks = tuple(Block(((0, 4), (0, 4), (i, i + 1)), (i,)) for i in range(MAX_SLICES + 3))
    layout = Layout((4, 4, MAX_SLICES + 3), "NamedSharding", "P(None, None, 'd')", blocks=blocks)
    grid = layout_grid(layout)
    assert (len(grid.slices), grid.left_out) == (MAX_SLICES, 3)
    assert "3 more slices of the later dimensions not drawn" in str(
        pictures.device_grid(layout, pictures.device_colours([layout]), "actual")
    )


@pytest.fixture(scope="module")
def mistaken(tmp_path_factory):
    """A feedback page whose one failed test holds the replicate_along mistake on a 3-D array."""
    sizes, names, shape, wanted, got = MISTAKE
    mesh = test_mesh(sizes, names)
    check = LayoutCheck(
        "output",
        layout_of(shape, NamedSharding(mesh, wanted)),
        layout_of(shape, NamedSharding(mesh, got)),
        passed=False,
    )
    ex = catalog.get("ex02")
    test = TestResult(
        nodeid=f"tests/exercises/{ex.id}/test_visible.py::test_replicate_along",
        exercise=ex.id,
        hidden=False,
        weight=1.0,
        category=str(Category.FAILED),
        message="output: wrong sharding",
        layouts=[check],
    )
    out = tmp_path_factory.mktemp("mistaken")
    write_all(
        GradingResults("alice", {ex.id: score_exercise(ex, [dataclasses.replace(test)])}), out
    )
    return out


def test_the_screenshot_shows_two_different_pictures(browser, page_visit, mistaken, png_pixels):
    with page_visit(browser, mistaken / "feedback.html", javascript=True) as seen:
        page = seen.page
        shots = {}
        for role in ("expected", "actual"):
            svg = page.locator(f'figure.layout-check figure.grid[data-role="{role}"] svg')
            svg.scroll_into_view_if_needed()
            box = svg.bounding_box()
            shots[role] = (box, png_pixels(page.screenshot(clip=box)))
        # every grid inside its test's box, none wider than its figure
        outside = page.evaluate("""() => [...document.querySelectorAll('figure.grid svg')].filter(s => {
              const r = s.getBoundingClientRect(), a = s.closest('article').getBoundingClientRect();
              return r.width === 0 || r.left < a.left || r.right > a.right
                || s.parentElement.scrollWidth > s.parentElement.clientWidth; }).length""")
    assert seen.requests == [] and seen.console == [] and seen.errors == []
    assert outside == 0
    (_, (w1, h1, expected)), (_, (w2, h2, actual)) = shots["expected"], shots["actual"]
    # four slices of 1 x 4 blocks against one of a single block: not the same picture, in size or pixels
    assert (w1, h1) != (w2, h2)
    assert h1 > 3 * h2
    common = [row[: 3 * min(w1, w2)] for row in expected[: min(h1, h2)]]
    assert common != [row[: 3 * min(w1, w2)] for row in actual[: min(h1, h2)]]
