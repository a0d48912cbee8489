"""The executed-program facts drawn: a pipeline's stages x steps grid (expected beside what the executed sends
imply), a permute's pairs on rings, an all-to-all's bytes beside its buffer; in the HTML page, the Markdown of
results.json and the terminal; under their program's table, each drawn once however many checks read the
program, or (an older report.json's, without accounts) under each check as before. The facts are built by hand,
as grader.checks.executed records them.

The browser test opens the page in Chromium, takes a screenshot and reads its pixels (conftest's read_png):
the bubbles and the microbatches are visible where the cells are, the missing pair's arrow is red, and nothing
leaves its box."""

from __future__ import annotations

import dataclasses
import io
import json
import re

import jax
import jax.numpy as jnp
import pytest
from jax.sharding import NamedSharding, PartitionSpec
from rich.console import Console

from grader.checks import assert_executed, assert_permute_pairs, compiled, test_mesh
from grader.commands import student
from grader.core import facts
from grader.core.results import (
    Category,
    Collective,
    CollectivesCheck,
    PipelineSchedule,
    ProgramAccount,
    RuleFigure,
    TestResult,
    Traffic,
)
from grader.course import catalog
from grader.grading.results import GradingResults, score_exercise
from grader.reports import executed_facts as ef, feedback_page, markdown, program_facts as pf
from grader.reports.executed_text import check_lines, grid_text
from grader.reports.program_text import test_blocks
from grader.reports.ring_picture import ring_figure
from grader.reports.schedule_picture import schedule_figure
from grader.reports.writers import write_all

P, A2A = "collective-permute", "all-to-all"
SCRIPT = "<script>alert(1)</script><img src=x>"
CHAIN = ((0, 1), (1, 2), (2, 3))
CYCLE = (*CHAIN, (3, 0))


def permute(pairs, executed=None, unknown=False) -> Collective:
    return Collective(
        P, 2, ("stage",), "cp = f32[8] collective-permute(x)", executed, unknown, tuple(pairs)
    )


def pipeline_check(sends: int | None, unknown: bool = False, stages=4, microbatches=6):
    return CollectivesCheck(
        "your pipeline",
        (permute(CHAIN, sends, unknown),),
        sends == stages + microbatches - 2,
        rule=f"collective-permute runs exactly {stages + microbatches - 2} times",
        schedule=PipelineSchedule(stages, microbatches),
    )


def ring_check(found, expected=CYCLE) -> CollectivesCheck:
    return CollectivesCheck(
        "your ring",
        (permute(found, 3),),
        set(found) == set(expected),
        rule="collective-permute sends one cycle along 'x'",
        expected_pairs=expected,
    )


ONE_GRID = 'data-role="expected and actual"'  # a program that takes the steps expected: one grid


def cells(markup: str, kind: str, role: str) -> int:
    """A grid's cells of a kind; "expected" and "actual" are the one grid of a figure that has one."""
    shown = f'data-role="{role}"' if f'data-role="{role}"' in markup else ONE_GRID
    grid = markup.split(shown, 1)[1].split("</svg>", 1)[0]
    return grid.count(f'class="cell {kind}"')


# -- the pipeline ---------------------------------------------------------------------------------------


def test_the_expected_grid_of_4_stages_and_6_microbatches():
    schedule = PipelineSchedule(4, 6)
    rows = ef.grid_rows(schedule, schedule.steps)
    assert rows == schedule.grid()  # the cut grid is the schedule's own, when nothing is cut
    assert len(rows) == 4 and all(len(row) == 9 for row in rows)
    for s, row in enumerate(rows):  # stage s works on 0..5 from step s, idle the other 3 steps
        assert row[s : s + 6] == list(range(6))
        assert row.count(ef.BUBBLE) == 3
    figure = schedule_figure(ef.pipeline_figures(pipeline_check(8)))
    assert cells(figure, "work", "expected") == 24 and cells(figure, "bubble", "expected") == 12
    assert cells(figure, "work", "actual") == 24 and cells(figure, "bubble", "actual") == 12
    assert 'data-actual-steps="9"' in figure and "the steps expected" in figure
    assert "9 steps, 12 bubble cells" in figure


def test_the_actual_grid_is_what_the_executed_sends_make():
    """11 sends: 12 steps, in which the same 4 stages take the same 6 microbatches (the program computed the
    reference's values, so it did no microbatch twice): the 3 steps more are 3 more bubbles in each row."""
    figures = ef.pipeline_figures(pipeline_check(11))
    assert figures.actual_steps == 12
    rows = ef.grid_rows(figures.schedule, 12)
    assert rows[0] == [0, 1, 2, 3, 4, 5] + [ef.BUBBLE] * 6
    assert rows[3] == [ef.BUBBLE] * 3 + [0, 1, 2, 3, 4, 5] + [ef.BUBBLE] * 3
    figure = schedule_figure(figures)
    assert cells(figure, "work", "actual") == 4 * 6 and cells(figure, "bubble", "actual") == 24
    assert cells(figure, "bubble", "expected") == 12 and "not the steps expected" in figure
    assert "run 11 times, one between each two steps, which makes 12 steps" in figure


def test_a_count_of_a_billion_sends_draws_what_the_budget_holds_and_says_so():
    """The grid is never built past GRID_STEPS columns; the figure draws what its cells' budget holds (the
    expected grid's 9 steps whole, the actual one's first steps in the rest), and its counts are the whole
    schedule's."""
    figures = ef.pipeline_figures(pipeline_check(10**9))
    rows = ef.grid_rows(figures.schedule, figures.actual_steps)
    assert [len(row) for row in rows] == [ef.GRID_STEPS] * 4
    expected, actual = figures.grids()
    drawn = (ef.FIGURE_CELLS - 4 * 9) // 4
    assert (expected.drawn_steps, actual.drawn_steps) == (9, drawn) and drawn < ef.GRID_STEPS
    figure = schedule_figure(figures)
    assert f"only the first {drawn} of {10**9 + 1} steps drawn" in figure
    assert cells(figure, "work", "actual") + cells(figure, "bubble", "actual") == 4 * drawn
    assert f"{10**9 + 1} steps, {4 * (10**9 + 1 - 6)} bubble cells in all" in figure
    text = "\n".join(check_lines(pipeline_check(10**9)))
    # the terminal draws a few characters a cell: up to GRID_STEPS of them
    assert f"; only the first {ef.GRID_STEPS} of {10**9 + 1} steps drawn)" in text


def test_a_pipeline_of_20_stages_draws_16_and_says_so():
    figures = ef.pipeline_figures(pipeline_check(24, stages=20, microbatches=6))
    figure = schedule_figure(figures)
    drawn = figures.grids()[0].drawn_steps
    assert drawn == ef.FIGURE_CELLS // 16  # the steps expected: one grid, with the whole budget
    assert figure.count('data-stages="16"') == 1
    assert f"only the first {drawn} of 25 steps and the first 16 of 20 stages drawn" in figure
    assert cells(figure, "work", "expected") + cells(figure, "bubble", "expected") == 16 * drawn
    assert "25 steps, 380 bubble cells in all" in figure  # 20 stages idle 19 steps each


def test_an_unknown_trip_count_is_said_never_guessed():
    check = pipeline_check(None, unknown=True)
    figure = schedule_figure(ef.pipeline_figures(check))
    assert 'data-actual-steps="unknown"' in figure
    assert "not drawn: how many steps the program takes is unknown" in figure
    assert (
        cells(figure, "work", "expected") == 24 and 'data-role="actual" data-stages' not in figure
    )
    table = feedback_page.collectives_table(check)
    assert "unknown: in a loop with no static trip count" in table and "<th>runs</th>" in table
    lines = check_lines(check)
    assert "collective-permute runs: unknown: in a loop with no static trip count" in lines
    assert "actual: not drawn, its number of steps is unknown" in lines
    assert any("the program's steps are unknown, not the steps expected." in line for line in lines)


def test_the_terminal_grid_marks_bubbles_with_dots():
    schedule = PipelineSchedule(4, 6)
    lines = grid_text(ef.grid_rows(schedule, 9), "expected")
    assert lines[0].split()[1:] == ["step", *map(str, range(9))]
    assert lines[1].split()[2:] == ["0", "1", "2", "3", "4", "5", ".", ".", "."]
    assert lines[4].split()[2:] == [".", ".", ".", "0", "1", "2", "3", "4", "5"]
    # the cells stand under their step's number
    assert lines[4].index("5") == lines[0].rindex("8")


# -- the pairs ------------------------------------------------------------------------------------------


def test_a_chain_missing_its_wrap_draws_the_wrap_dashed_red():
    figures = ef.pair_figures(ring_check(CHAIN))
    assert [figures.kind(p) for p in CYCLE] == ["matched"] * 3 + ["missing"]
    figure = ring_figure(figures)
    assert figure.count('class="pair matched"') == 3 and figure.count('class="pair missing"') == 1
    missing = figure.split('class="pair missing"', 1)[1].split("</g>", 1)[0]
    assert 'data-source="3" data-target="0"' in missing and 'stroke-dasharray="5 3"' in missing
    assert 'data-missing="1"' in figure and 'data-extra="0"' in figure
    assert "expected, MISSING: 3->0" in ef.pair_lines(figures)


def test_a_ring_with_an_extra_pair_marks_it():
    figures = ef.pair_figures(ring_check((*CYCLE, (1, 3))))
    figure = ring_figure(figures)
    assert figure.count('class="pair matched"') == 4 and figure.count('class="pair extra"') == 1
    assert 'data-source="1" data-target="3"' in figure.split('class="pair extra"', 1)[1]
    assert ef.pair_lines(figures)[-1] == "found, NOT expected: 1->3"


def test_pairs_within_the_groups_of_a_2d_mesh_draw_a_ring_per_group():
    rows = tuple(p for base in (0, 4) for p in ((base, base + 1), (base + 1, base)))
    figures = ef.pair_figures(ring_check(rows, expected=rows))
    assert figures.rings() == [[0, 1], [4, 5]]
    figure = ring_figure(figures)
    assert figure.count('class="ring"') == 2 and figure.count('class="pair matched"') == 4
    assert 'data-devices="0,1"' in figure and 'data-devices="4,5"' in figure


def test_more_rings_than_drawn_are_said_and_listed():
    pairs = tuple((2 * i, 2 * i + 1) for i in range(20))
    figure = ring_figure(ef.pair_figures(ring_check(pairs, expected=pairs)))
    assert figure.count('class="ring"') == 8
    assert "12 groups of devices not drawn" in figure and "38-&gt;39" in figure


def test_a_ring_of_1024_devices_is_listed_not_drawn():
    """A permute's pairs are bounded by bounds.MAX_PAIRS (1,024): such a ring is too large to draw, its text is
    cut at 64 pairs of a kind, and the counts stay whole."""
    ring = tuple((i, (i + 1) % 1024) for i in range(1024))
    figures = ef.pair_figures(ring_check(ring, expected=tuple((b, a) for a, b in ring)))
    figure = ring_figure(figures)
    assert 'class="ring"' not in figure and "1 groups of devices not drawn" in figure
    assert 'data-missing="1024"' in figure and 'data-extra="1024"' in figure
    lines = ef.pair_lines(figures)
    assert [line.split(": ")[0] for line in lines] == ["expected, MISSING", "found, NOT expected"]
    listed = [line.split(": ", 1)[1].split() for line in lines]
    assert [len(words) for words in listed] == [64 + 3] * 2  # 64 pairs, "and 960 more"
    assert all(" ".join(words[-3:]) == "and 960 more" for words in listed)


def test_every_pair_among_32_devices_is_listed_not_drawn_past_128_arrows():
    """32 devices sending to each other (992 pairs) pass the devices' cap but not the arrows' (128): the group is
    said and listed, and a small ring beside it is still drawn."""
    every = tuple((a, b) for a in range(32) for b in range(32) if a != b)
    check = CollectivesCheck("your function", (permute((*every, (40, 41)), 1),), None)
    figure = ring_figure(ef.pair_figures(check))
    assert figure.count('class="ring"') == 1 and 'data-devices="40,41"' in figure
    assert figure.count('class="pair found"') == 1 and "1 groups of devices not drawn" in figure
    assert len(figure) < 16_000


# -- the exchange ---------------------------------------------------------------------------------------


def test_the_all_to_all_table_sets_the_bytes_beside_the_buffer():
    check = CollectivesCheck(
        "your layer",
        (
            Collective(A2A, 4, ("expert",), "a2a", 1, False, (), ((4, 8, 16),), 2048),
            Collective(A2A, 4, ("expert",), "a2a", 1, False, (), ((512,),), 2048),
        ),
        False,
        rule="each all-to-all moves at most 1024 bytes per device",
        buffer_bytes=1024,
    )
    rows = ef.exchange_rows(check)
    assert [(r.shape_words, r.bytes, r.buffer, r.ratio) for r in rows] == [
        ("(4, 8, 16)", 2048, 1024, "2.00x"),
        ("(512,)", 2048, 1024, "2.00x"),
    ]
    table = feedback_page.collectives_table(check)
    assert table.count('class="exchange"') == 3  # the table and its two rows
    assert "<td>(4, 8, 16)</td>" in table and '<td class="num">2.00x</td>' in table
    assert check_lines(check)[-1] == (
        "all-to-all (512,): 2048 bytes per device, the capacity's buffer 1024 bytes (2.00x)"
    )


# -- old reports, names from a submission ---------------------------------------------------------------


def test_an_old_report_without_the_new_keys_renders_as_before():
    old = {
        "what": "your layer",
        "found": [{"op": "all-reduce", "group_size": 4, "mesh_axes": ["x"], "line": "ar"}],
        "passed": True,
        "exactly": {"all-reduce": 1},
    }
    check = CollectivesCheck.from_dict(old)
    table = feedback_page.collectives_table(check)
    assert "runs" not in table and "<svg" not in table and "exchange" not in table
    assert check_lines(check) == []
    assert "```" not in markdown.collectives_table(check)


def test_names_from_a_submission_stay_text_everywhere():
    check = CollectivesCheck(
        SCRIPT,
        (Collective(P, 2, (SCRIPT,), SCRIPT, 3, False, CHAIN),),
        False,
        rule=f"collective-permute runs {SCRIPT}\x1b[31m",
        schedule=PipelineSchedule(2, 2),
        expected_pairs=CYCLE,
    )
    page = feedback_page.collectives_table(check)
    assert "<script" not in page and "<img" not in page and "&lt;script&gt;" in page
    assert all("\x1b" not in line for line in check_lines(check))
    assert "<script" not in markdown.collectives_table(check).split("```", 1)[0]


# -- the Markdown and the terminal ----------------------------------------------------------------------


def failed_test(*checks: CollectivesCheck) -> TestResult:
    return TestResult(
        nodeid="tests/exercises/ex14_pipeline/test_visible.py::test_schedule",
        exercise="ex14_pipeline",
        hidden=False,
        weight=1.0,
        category=str(Category.FAILED),
        message="the compiled program of your pipeline should run collective-permute 8 times",
        duration=0.5,
        collectives=list(checks),
    )


def test_the_markdown_draws_the_grid_and_the_pairs_verbatim():
    out = markdown.test_output(failed_test(pipeline_check(11), ring_check(CHAIN)))
    blocks = out.split("```")
    drawn = "\n".join(blocks[3::2])  # the blocks after the verdict's
    assert "actual    step  0  1" in drawn and "  stage 3" in drawn
    assert "expected, MISSING: 3->0" in drawn
    assert "collective-permute runs: 11 times" in drawn
    assert "| collective\\-permute | 1 | 2 | stage | the rule below |" in blocks[2]


def test_the_terminal_prints_the_grids_under_a_failed_test():
    console = Console(record=True, width=100, file=io.StringIO())
    student.render_test(failed_test(pipeline_check(11), ring_check(CHAIN)), console)
    shown = console.export_text()
    assert "      expected  step 0 1 2 3 4 5 6 7 8\n" in shown
    assert "      actual    step  0  1  2  3  4  5  6  7  8  9 10 11\n" in shown
    # 12 steps of the same 4 stages and 6 microbatches: the 3 steps past the schedule's 9 idle
    assert "        stage 3       .  .  .  0  1  2  3  4  5  .  .  .\n" in shown
    assert "which makes 12 steps, not the steps expected." in shown
    assert "expected, MISSING: 3->0" in shown
    passed = dataclasses.replace(failed_test(pipeline_check(8)), category=str(Category.PASSED))
    console = Console(record=True, width=100, file=io.StringIO())
    student.render_test(passed, console)
    assert "stage" not in console.export_text()  # a passed test stays one line


# -- under their program's table ------------------------------------------------------------------------

PIPE = "0badc0de0badc0de"


def pipeline_account(sends: int | None) -> ProgramAccount:
    """The pipeline's account: its one permute instruction run `sends` times (None: in a loop of traced
    bounds), 2 KiB per send."""
    figures = (None, None, None) if sends is None else (sends, 2048 * sends, 2048 * sends)
    runs, operand_bytes, sent = figures
    return ProgramAccount(
        "your pipeline",
        PIPE,
        4,
        (Traffic(P, ("stage",), 2, 1, runs, runs, operand_bytes, sent),),
        dot_work=4 * 8192,
        product_work=0,
    )


def one_program(sends: int | None = 11) -> TestResult:
    """Three checks of one pipeline, as assert_executed (with its schedule), assert_permute_pairs (with the
    pairs it expects) and assert_operand_bytes record them: one account, three rules."""
    pipe = dataclasses.replace(pipeline_check(sends, unknown=sends is None), program=PIPE)
    ring = dataclasses.replace(ring_check(CHAIN), what="your pipeline", program=PIPE)
    plain = CollectivesCheck(
        "your pipeline",
        pipe.found,
        True,
        rule="each collective-permute moves at most 4096 bytes",
        program=PIPE,
    )
    rules = [
        RuleFigure(PIPE, "collectives", f"{P} runs", "exactly 8", sends, sends == 8, 8),
        RuleFigure(PIPE, "collectives", f"{P} pairs", "sent round one cycle", 3, False),
        RuleFigure(
            PIPE, "collectives", f"bytes of the largest {P}", "at most 4096", 2048, True, 4096
        ),
    ]
    return dataclasses.replace(
        failed_test(pipe, ring, plain), programs=[pipeline_account(sends)], figures=rules
    )


def test_a_programs_pictures_are_drawn_once_under_its_table():
    test = one_program()
    (table,) = pf.program_tables(test)
    drawn = pf.pictures(table)
    assert len(drawn.pipelines) == 1 and len(drawn.pairs) == 1 and drawn.exchanges == ()
    # the pairs a check expects, not the found-only ones again
    assert drawn.pairs[0].expected == CYCLE
    card = feedback_page.test_card(test)
    assert card.count('class="program-check"') == 1 and "collectives-check" not in card
    assert card.count('class="pipeline-check"') == 1 and card.count('class="ring-check"') == 1
    program = card.split('class="program-check"', 1)[1]
    assert 'class="pipeline-check"' in program and 'class="ring-check"' in program
    (block,) = test_blocks(test, 100)
    text = "\n".join(block)
    assert text.count("expected  step") == 1 and text.count("actual    step") == 1
    assert text.count("expected, MISSING: 3->0") == 1 and "rule:" not in text
    assert len(re.findall(r"collective-permute runs\s+exactly 8\s+11\s+FAIL", text)) == 1
    out = markdown.test_output(test)
    assert out.count("actual    step") == 1
    assert out.count("expected, MISSING: 3->0") == 1 and "Collectives of" not in out


def test_a_pipelines_sends_are_the_accounts():
    """The grid reads the account's count of permutes, every one of them, not the instructions a check
    kept; and an unknown count is the account's too."""
    check = dataclasses.replace(pipeline_check(3), program=PIPE)
    assert ef.pipeline_figures(check).actual_steps == 4
    assert ef.pipeline_figures(check, pipeline_account(11)).actual_steps == 12
    unknown = ef.pipeline_figures(check, pipeline_account(None))
    assert unknown.unknown and unknown.sends is None
    (table,) = pf.program_tables(one_program(None))
    assert "not drawn: how many steps the program takes is unknown" in "".join(
        feedback_page.test_card(one_program(None))
    )
    assert table.rules[0].executed == "unknown: in a loop with no static trip count"


# -- in a browser ---------------------------------------------------------------------------------------


# the columns drawn of the widest grid: a billion sends' grid beside the expected 9 steps of 4 stages
WIDEST = ef.pipeline_figures(pipeline_check(10**9)).grids()[1].drawn_steps


@pytest.fixture(scope="module")
def pictured(tmp_path_factory):
    """write_all's folder for a grading with a test of a pipeline check (11 sends) and a ring check missing
    its wrap and with an extra pair, and a test of a pipeline of a billion sends (the widest grid drawn; a
    test of its own, as the page holds each test's pictures to a budget)."""
    ex = catalog.get("ex10")
    tests = [
        dataclasses.replace(
            failed_test(*checks),
            exercise=ex.id,
            nodeid=f"tests/exercises/{ex.id}/test_visible.py::{name}",
        )
        for name, checks in (
            ("test_x", (pipeline_check(11), ring_check((*CHAIN, (1, 3))))),
            ("test_widest", (pipeline_check(10**9),)),
        )
    ]
    out = tmp_path_factory.mktemp("pictured")
    write_all(GradingResults("alice", {ex.id: score_exercise(ex, tests)}), out)
    return out


def test_report_json_holds_what_the_page_draws(pictured):
    report = GradingResults.from_dict(json.loads((pictured / "report.json").read_text()))
    test, widest = report.tests()
    assert widest.collectives[0].schedule == test.collectives[0].schedule
    assert test.collectives[0].schedule == PipelineSchedule(4, 6)
    assert test.collectives[1].expected_pairs == CYCLE


def test_the_screenshot_shows_the_grids_and_the_ring(browser, page_visit, pictured, png_pixels):
    with page_visit(browser, pictured / "feedback.html", javascript=True) as seen:
        page = seen.page
        figure = page.locator('figure.pipeline-check[data-actual-steps="12"]')
        figure.scroll_into_view_if_needed()
        box = figure.bounding_box()
        shot = page.screenshot(clip=box)
        cells_seen = page.evaluate("""() => [...document.querySelectorAll(
            'figure.pipeline-check[data-actual-steps="12"] g.cell')].map(g => { const r = g.querySelector('rect')
            .getBoundingClientRect(); return {role: g.closest('svg').dataset.role,
            bubble: g.classList.contains('bubble'), x: r.x + r.width / 2, y: r.y + r.height / 2,
            w: r.width, h: r.height}; })""")
        ring = page.locator(
            'figure.ring-check[data-missing="1"]'
        )  # the pipeline's chain has one too
        ring.scroll_into_view_if_needed()
        ring_box = ring.bounding_box()
        ring_shot = page.screenshot(clip=ring_box)
        missing = page.evaluate("""() => { const l = document.querySelector(
            'figure.ring-check g.pair.missing line'); const r = l.getBoundingClientRect();
            return {x1: +l.getAttribute('x1'), y1: +l.getAttribute('y1'), x2: +l.getAttribute('x2'),
            y2: +l.getAttribute('y2'), svg: l.ownerSVGElement.getBoundingClientRect().toJSON(),
            dash: getComputedStyle(l).strokeDasharray, arrows: document.querySelectorAll(
            'figure.ring-check[data-missing="1"] g.pair').length}; }""")
        # every picture and table inside its test's box, the 64 steps of the widest grid too
        outside = page.evaluate("""() => [...document.querySelectorAll(
            'figure.collectives-check svg, figure.collectives-check table')].filter(s => {
              const r = s.getBoundingClientRect(), a = s.closest('article').getBoundingClientRect();
              return r.width === 0 || r.left < a.left || r.right > a.right; }).length""")
        widest = page.evaluate(f"""() => document.querySelector(
            'figure.pipeline-check svg[data-role="actual"][data-steps="{WIDEST}"]').getBBox().width""")
    assert seen.requests == [] and seen.console == [] and seen.errors == []
    assert outside == 0 and widest > WIDEST * 14
    # the cells: 4 x 9 expected and 4 x 12 actual, 12 and 24 bubbles, each cell of a visible size
    expected = [c for c in cells_seen if c["role"] == "expected"]
    actual = [c for c in cells_seen if c["role"] == "actual"]
    assert (len(expected), sum(c["bubble"] for c in expected)) == (36, 12)
    assert (len(actual), sum(c["bubble"] for c in actual)) == (48, 24)
    assert all(c["w"] >= 12 and c["h"] >= 12 for c in cells_seen)
    # the screenshot: a bubble's centre is the bubble grey, a microbatch's is a colour, not the page's white
    width, height, rows = png_pixels(shot)
    assert (width, height) == (round(box["width"]), round(box["height"]))

    def pixel(rows, frame, x, y) -> tuple[int, int, int]:
        row = rows[int(y - frame["y"])]
        at = 3 * int(x - frame["x"])
        return tuple(row[at : at + 3])

    for cell in cells_seen:
        # a point inside the cell, off its label
        colour = pixel(rows, box, cell["x"] - cell["w"] / 2 + 2.5, cell["y"] - cell["h"] / 2 + 2.5)
        if cell["bubble"]:
            assert colour == (0xEA, 0xEE, 0xF2), cell
        else:
            assert colour != (0xEA, 0xEE, 0xF2) and colour != (255, 255, 255), cell
    # the ring: 5 arrows; the missing one's middle is red in the screenshot
    assert missing["arrows"] == 5 and missing["dash"] == "5px, 3px"
    _, _, ring_rows = png_pixels(ring_shot)
    mx = missing["svg"]["x"] + (missing["x1"] + missing["x2"]) / 2
    my = missing["svg"]["y"] + (missing["y1"] + missing["y2"]) / 2
    near = [
        pixel(ring_rows, ring_box, mx + dx, my + dy) for dx in range(-2, 3) for dy in range(-2, 3)
    ]
    assert any(r > 150 and g < 100 and b < 100 for r, g, b in near), near


# -- from real compiled programs ------------------------------------------------------------------------


def recorded(check_call) -> CollectivesCheck:
    """The collectives check that grader.checks.executed records for `check_call`, failing or not."""
    facts.start()
    try:
        check_call()
    except AssertionError:
        pass
    (check,) = facts.take().collectives
    return check


def loop_of_sends(mesh, steps: int, pairs):
    def body(x):
        return jax.lax.fori_loop(0, steps, lambda i, c: jax.lax.ppermute(c, "stage", pairs), x)

    spec = PartitionSpec("stage")
    fn = jax.shard_map(body, mesh=mesh, in_specs=spec, out_specs=spec)
    x = jax.device_put(jnp.ones((8, 16), jnp.float32), NamedSharding(mesh, spec))
    return compiled(fn, x)


@pytest.mark.parametrize("sends, steps", [(8, 9), (9, 9), (10, 11), (3, 4)])
def test_a_compiled_pipeline_draws_the_grid_its_sends_make(sends, steps):
    """8 sends in a loop (the reference's M + S - 2) draw the expected 9 steps, and so do 9 (one after the
    last step, which the rule allows); 10 draw 11 steps, not the steps expected; the whole batch as one
    microbatch (3 sends) draws 4 steps, the cells of one item: the picture tells them apart."""
    line = test_mesh((4,), ("stage",), "explicit")
    prog = loop_of_sends(line, sends, CHAIN)
    check = recorded(
        lambda: assert_executed(
            prog, P, at_least=8, at_most=9, schedule=PipelineSchedule(4, 6), what="pipeline"
        )
    )
    figure = schedule_figure(ef.pipeline_figures(check))
    assert f'data-actual-steps="{steps}"' in figure
    assert cells(figure, "work", "actual") == 4 * min(steps - 3, 6)
    assert ("not the steps expected" in figure) == (steps != 9) == (not check.passed)


def test_a_compiled_chain_judged_as_a_cycle_draws_its_missing_wrap():
    line = test_mesh((4,), ("stage",), "explicit")
    check = recorded(
        lambda: assert_permute_pairs(loop_of_sends(line, 1, CHAIN), line, "stage", shape="cycle")
    )
    figures = ef.pair_figures(check)
    kinds = {pair: figures.kind(pair) for pair in figures.pairs()}
    assert [pair for pair, kind in kinds.items() if kind == "missing"] == [(3, 0)]
    assert 'data-missing="1"' in ring_figure(figures)


def test_compiled_pairs_within_the_rows_of_a_2d_mesh_draw_a_ring_per_row():
    grid = test_mesh((2, 4), ("data", "stage"), "explicit")

    def body(x):
        return jax.lax.ppermute(x, "stage", [(s, (s + 1) % 4) for s in range(4)])

    spec = PartitionSpec("data", "stage")
    fn = jax.shard_map(body, mesh=grid, in_specs=spec, out_specs=spec)
    x = jax.device_put(jnp.ones((8, 16), jnp.float32), NamedSharding(grid, spec))
    check = recorded(lambda: assert_permute_pairs(compiled(fn, x), grid, "stage", shape="cycle"))
    figures = ef.pair_figures(check)
    assert figures.rings() == [[0, 1, 2, 3], [4, 5, 6, 7]]
    figure = ring_figure(figures)
    assert figure.count('class="ring"') == 2 and figure.count('class="pair matched"') == 8


def test_the_terminal_says_each_kind_and_count_once():
    """A step of six all-gathers run once each, and one run four times: two lines, not seven."""
    gathers = [Collective("all-gather", 8, ("data",), f"ag.{i}", 1) for i in range(6)]
    check = CollectivesCheck(
        "step",
        (*gathers, Collective("all-gather", 8, ("data",), "ag.6", 4)),
        False,
        rule="all-gather runs at most 6 times",
    )
    assert check_lines(check) == [
        "rule: all-gather runs at most 6 times",
        "all-gather runs: 1 time (6 instructions)",
        "all-gather runs: 4 times",
    ]


@pytest.fixture(scope="module")
def one_program_page(tmp_path_factory):
    """write_all's folder for the three checks of one pipeline of a billion sends (the widest grid drawn)."""
    ex = catalog.get("ex10")
    test = dataclasses.replace(
        one_program(10**9),
        exercise=ex.id,
        nodeid=f"tests/exercises/{ex.id}/test_visible.py::test_x",
    )
    out = tmp_path_factory.mktemp("one-program")
    write_all(GradingResults("alice", {ex.id: score_exercise(ex, [test])}), out)
    return out


def test_the_pictures_under_a_program_table_stay_in_its_card(browser, page_visit, one_program_page):
    with page_visit(browser, one_program_page / "feedback.html", javascript=True) as seen:
        found = seen.page.evaluate("""() => {
            const f = document.querySelector('figure.program-check'), a = f.closest('article');
            const box = a.getBoundingClientRect();
            const parts = [...f.querySelectorAll('svg, table, figure, details')];
            return {parts: parts.length, grids: f.querySelectorAll('figure.pipeline-check').length,
              rings: f.querySelectorAll('figure.ring-check').length,
              outside: parts.filter(e => { const r = e.getBoundingClientRect();
                return r.width === 0 || r.left < box.left - 0.5 || r.right > box.right + 0.5; }).length,
              page: document.documentElement.scrollWidth - document.documentElement.clientWidth}; }""")
    assert seen.requests == [] and seen.console == [] and seen.errors == []
    assert found["grids"] == 1 and found["rings"] == 1 and found["parts"] > 4
    assert found["outside"] == 0 and found["page"] <= 0, found
