"""A training step's collectives (each kind's expected count beside the one executed) and its memory per
device as bars (arguments, temporaries and outputs against their bounds, beside the test's comparison
figures): the facts, their round trip through report.json, and their drawing in the HTML page, the Markdown
of results.json and the terminal. The facts are built by hand, as grader.checks.executed records them, and
from real compiled programs.

The browser test opens the page in Chromium, takes a screenshot and reads its pixels: the bars' widths are
in proportion to their bytes, the failing row is marked, and nothing leaves its box."""

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

from grader.checks import assert_executed, assert_memory, compiled, test_mesh
from grader.checks.hlo import memory_per_device
from grader.commands import student
from grader.core import facts
from grader.core.bounds import MAX_FIGURES, NAME_CHARS, TEST_FACTS_CHARS
from grader.core.results import (
    Category,
    Collective,
    CollectivesCheck,
    ExecutedRule,
    MalformedResult,
    MemoryCheck,
    TestResult,
)
from grader.course import catalog
from grader.grading.results import GradingResults, score_exercise
from grader.reports import executed_facts as ef, feedback_page, markdown, memory_facts as mf
from grader.reports.executed_text import step_lines
from grader.reports.memory_picture import BOX_WIDTH, memory_figure
from grader.reports.step_table import step_figures
from grader.reports.writers import write_all

RS, AG, AR = "reduce-scatter", "all-gather", "all-reduce"
LEAVES = 3  # parameter leaves of the ZeRO-like step: a reduce-scatter and an all-gather of each
SCRIPT = "<script>alert(1)</script>"


def op(kind: str, executed: int | None, operands: int, unknown: bool = False) -> Collective:
    shapes = ((16,),) * operands
    return Collective(
        kind, 4, ("data",), f"{kind}(x)", executed, unknown, (), shapes, 64 * operands
    )


# the step's program: the leaves' reduce-scatters combined in one instruction, the all-gathers in one,
# but only 2 of the 3 leaves gathered; and an all-reduce of the loss no rule names
ZERO_FOUND = (op(RS, 1, LEAVES), op(AG, 1, LEAVES - 1), op(AR, 1, 1))


def zero_checks(found=ZERO_FOUND, gathered=LEAVES - 1) -> list[CollectivesCheck]:
    """What assert_executed(..., operands=True) records for the two once-per-leaf rules of ZeRO-1."""
    return [
        CollectivesCheck(
            "your train step",
            found,
            actual == LEAVES,
            rule=f"{kind} operands run exactly {LEAVES} times",
            executed_rule=ExecutedRule(kind, LEAVES, LEAVES, True, actual, per="step"),
        )
        for kind, actual in ((RS, LEAVES), (AG, gathered))
    ]


def remat_check(temp=40_000, without=90_000) -> MemoryCheck:
    return MemoryCheck(
        "your block's gradient",
        argument_bytes=12_288,
        output_bytes=4_096,
        temp_bytes=temp,
        passed=temp < 32_768,
        argument_below=16_384,
        temp_below=32_768,
        shown_against={"the reference without remat (temporaries)": without},
    )


def failed_test(checks=(), memory=()) -> TestResult:
    return TestResult(
        nodeid="tests/exercises/ex17/test_visible.py::test_step",
        exercise="ex17",
        hidden=False,
        weight=1.0,
        category=str(Category.FAILED),
        message="the compiled program of your train step runs all-gather operands 2 times",
        collectives=list(checks),
        memory=list(memory),
    )


# -- the facts ------------------------------------------------------------------------------------------


def test_the_rule_and_the_memory_round_trip_through_report_json():
    test = failed_test(zero_checks(), [remat_check()])
    data = json.loads(json.dumps(test.to_dict()))
    assert TestResult.from_dict(data) == test
    assert data["collectives"][1]["executed_rule"] == {
        "kind": AG,
        "operands": True,
        "at_least": 3,
        "at_most": 3,
        "actual": 2,
        "per": "step",
    }
    assert data["memory"][0]["shown_against"] == {
        "the reference without remat (temporaries)": 90_000
    }
    # figures that are not set stay out of the JSON
    unknown = ExecutedRule(AG, None, 6, False, None).to_dict()
    assert unknown == {"kind": AG, "operands": False, "at_most": 6}
    bare = MemoryCheck("f", 1, 2, 3, True).to_dict()
    assert set(bare) == {"what", "argument_bytes", "output_bytes", "temp_bytes", "passed"}
    assert "memory" not in failed_test(zero_checks()).to_dict()


def test_an_old_report_without_the_keys_loads_and_draws_neither():
    old = failed_test(zero_checks()).to_dict()
    for check in old["collectives"]:
        del check["executed_rule"]
    test = TestResult.from_dict(old)
    assert test.memory == [] and all(c.executed_rule is None for c in test.collectives)
    card = feedback_page.test_card(test)
    assert "step-check" not in card and "memory-check" not in card
    assert step_lines(test.collectives) == []
    assert "Collectives per step" not in markdown.test_output(test)


@pytest.mark.parametrize(
    "change, named",
    [
        ({"temp_bytes": -1}, "temp_bytes"),
        ({"argument_bytes": None}, "argument_bytes"),
        ({"shown_against": {"x": "many"}}, "x"),
        ({"shown_against": [1]}, "shown_against"),
        ({"temp_below": True}, "temp_below"),
    ],
)
def test_a_malformed_memory_check_is_refused_naming_its_field(change, named):
    with pytest.raises(MalformedResult, match=f"MemoryCheck: .*{named}"):
        MemoryCheck.from_dict(remat_check().to_dict() | change)
    with pytest.raises(MalformedResult, match="ExecutedRule: actual"):
        ExecutedRule.from_dict({"kind": AG, "operands": True, "actual": -3})


def test_labels_and_figures_stay_bounded_and_the_facts_in_their_share():
    labels = {f"{i}{SCRIPT * 10_000}": i for i in range(20)}
    check = dataclasses.replace(remat_check(), shown_against=labels)
    assert len(check.shown_against) == MAX_FIGURES
    assert all(len(label) <= NAME_CHARS for label in check.shown_against)
    test = failed_test(zero_checks(), [check] * 40)
    assert len(test.memory) == MAX_FIGURES
    facts_size = test.text_size() - len(json.dumps(test.message)) - len(json.dumps(test.output))
    assert facts_size <= TEST_FACTS_CHARS
    assert f"8 of 40 memory checks, a test keeps at most {MAX_FIGURES}" in test.message
    again = TestResult.from_dict(json.loads(json.dumps(test.to_dict())))
    assert again == test  # bounding a bounded result changes nothing


# -- the table of a step --------------------------------------------------------------------------------


def test_the_step_table_sets_each_kind_expected_beside_executed():
    (table,) = ef.step_tables(zero_checks())
    assert table.what == "your train step"
    assert [(r.kind, r.expected, r.actual_words, r.mark) for r in table.rows] == [
        (RS, "exactly 3 operands per step", "3 operands", "pass"),
        (AG, "exactly 3 operands per step", "2 operands", "FAIL"),
        (AR, "no rule", "1 run", "-"),
    ]
    figure = "".join(step_figures(zero_checks()))
    assert figure.count('class="step-row held"') == 1
    failed = figure.split('class="step-row failed"', 1)[1].split("</tr>", 1)[0]
    assert f'data-kind="{AG}" data-actual="2"' in failed and "✗ not held" in figure


def test_checks_of_two_programs_make_two_tables():
    other = [dataclasses.replace(c, what="your eval step") for c in zero_checks()]
    assert [t.what for t in ef.step_tables(zero_checks() + other)] == [
        "your train step",
        "your eval step",
    ]
    # the same name, another program: its own table, its own unruled kinds
    fewer = zero_checks(found=ZERO_FOUND[:2])
    assert [len(t.rows) for t in ef.step_tables(zero_checks() + fewer)] == [3, 2]


@pytest.mark.parametrize(
    "at_least, at_most, operands, per, words",
    [
        (1, 6, False, "step", "1 to 6 per step"),
        (None, 0, False, "step", "none"),
        (4, 4, True, "step", "exactly 4 operands per step"),
        (2, None, False, "run", "at least 2 per run"),
        (None, 6, True, "run", "at most 6 operands per run"),
    ],
)
def test_a_range_in_words(at_least, at_most, operands, per, words):
    assert ef.range_words(ExecutedRule(AR, at_least, at_most, operands, 0, per)) == words


def test_an_unknown_trip_count_is_said_and_fails_never_guessed():
    found = (op(AR, None, 1, unknown=True), op(AG, None, 1, unknown=True))
    check = CollectivesCheck(
        "your train step", found, False, executed_rule=ExecutedRule(AR, 1, 6, False, None)
    )
    (table,) = ef.step_tables([check])
    assert [(r.kind, r.actual, r.mark) for r in table.rows] == [(AR, None, "FAIL"), (AG, None, "-")]
    assert table.rows[0].actual_words == "unknown: in a loop with no static trip count"
    assert 'data-actual="unknown"' in "".join(step_figures([check]))


# -- the bars -------------------------------------------------------------------------------------------


def widths(figure: str) -> dict[str, float]:
    rows = re.findall(r'class="memory-bar (\w+)".*?data-width="([\d.]+)"', figure)
    return {role: float(width) for role, width in rows}


def test_the_bars_are_in_proportion_and_the_largest_fills_its_box():
    check = remat_check()
    figure = memory_figure(check)
    assert 'data-scale="90000"' in figure
    drawn = widths(figure)
    assert drawn == pytest.approx(
        {
            "arguments": 12_288 / 90_000 * BOX_WIDTH,
            "temporaries": 40_000 / 90_000 * BOX_WIDTH,
            "outputs": 4_096 / 90_000 * BOX_WIDTH,
            "against": BOX_WIDTH,
        },
        abs=0.01,
    )
    bound = re.search(
        r'class="memory-bar temporaries".*?<line x1="([\d.]+)"[^>]*class="bound"', figure
    )
    assert float(bound[1]) == pytest.approx(32_768 / 90_000 * BOX_WIDTH, abs=0.01)
    assert figure.count('data-over="true"') == 1 and "over the bound" in figure
    assert 'title="40,000 bytes"' in figure and "39.1 KiB" in figure


def test_a_bound_beyond_every_figure_sets_the_scale_and_zero_draws_nothing():
    check = MemoryCheck("f", 0, 0, 100, True, temp_below=1_000)
    figure = memory_figure(check)
    assert widths(figure) == {"arguments": 0, "temporaries": 32, "outputs": 0}
    x = float(re.search(r'<line x1="([\d.]+)"[^>]*class="bound"', figure)[1])
    assert x == BOX_WIDTH - 1  # at the box's end, inside it
    nothing = memory_figure(MemoryCheck("f", 0, 0, 0, True))
    assert set(widths(nothing).values()) == {0}


@pytest.mark.parametrize(
    "value, words", [(0, "0 B"), (1023, "1023 B"), (1536, "1.5 KiB"), (3 << 20, "3.0 MiB")]
)
def test_bytes_in_human_units(value, words):
    assert mf.human_bytes(value) == words


@pytest.mark.parametrize("width", [72, 80, 100, 160])
def test_the_text_bars_fit_the_width_and_keep_the_proportions(width):
    check = remat_check()
    lines = mf.memory_lines(check, width)
    assert all(len(line) <= width for line in lines[1:])
    bars = {line.split(mf.FILLED)[0].split()[0]: line for line in lines[1:4]}
    cells = len(re.search(f"[{mf.FILLED}{mf.EMPTY}{mf.MARKER}]+", lines[1])[0])
    for label, value in (("arguments", 12_288), ("temporaries", 40_000), ("outputs", 4_096)):
        assert bars[label].count(mf.FILLED) in {
            round(value / 90_000 * cells),
            round(value / 90_000 * cells) - 1,  # the bound's marker may stand on a filled cell
        }
    marker = lines[2].index(mf.MARKER) - lines[2].index(mf.FILLED)
    assert marker == min(round(32_768 / 90_000 * cells), cells - 1)
    assert lines[4].count(mf.FILLED) == cells and "OVER" in lines[2] and "OVER" not in lines[1]


def test_a_narrow_terminal_keeps_a_bar_of_min_bar_cells():
    lines = mf.memory_lines(remat_check(), 20)
    assert all(
        len(re.search(f"[{mf.FILLED}{mf.EMPTY}{mf.MARKER}]+", line)[0]) == mf.MIN_BAR
        for line in lines[1:]
    )


# -- the Markdown and the terminal ----------------------------------------------------------------------


def test_the_markdown_has_the_step_table_and_the_bars():
    out = markdown.test_output(failed_test(zero_checks(), [remat_check()]))
    assert "| all\\-gather | exactly 3 operands per step | 2 operands | FAIL |" in out
    assert (
        "| all\\-reduce | no rule | 1 run | \\- |" in out
        or "| all\\-reduce | no rule | 1 run | - |" in out
    )
    block = out.rsplit("```", 2)[1]
    assert "temporaries" in block and "(bound 32.0 KiB)  OVER" in block
    assert all(len(line) <= markdown.MEMORY_WIDTH for line in block.strip().splitlines()[1:])


@pytest.mark.parametrize("width", [80, 120])
def test_the_terminal_draws_both_under_a_failed_test_within_its_width(width):
    console = Console(record=True, width=width, file=io.StringIO())
    student.render_test(failed_test(zero_checks(), [remat_check()]), console)
    shown = console.export_text()
    assert re.search(
        r"all-gather\s+expected exactly 3 operands per step\s+executed 2 operands\s+FAIL", shown
    )
    bar_lines = [line for line in shown.splitlines() if mf.EMPTY in line or mf.FILLED in line]
    assert len(bar_lines) == 4 and all(len(line) <= width for line in bar_lines)
    passed = dataclasses.replace(failed_test(zero_checks(), [remat_check()]), category="passed")
    console = Console(record=True, width=width, file=io.StringIO())
    student.render_test(passed, console)
    assert mf.FILLED not in console.export_text()  # a passed test stays one line


def test_names_from_a_submission_stay_text():
    found = (Collective(SCRIPT, 4, (SCRIPT,), SCRIPT, 1, False),)
    check = CollectivesCheck(SCRIPT, found, False, executed_rule=ExecutedRule(AR, 1, 1, False, 0))
    page = "".join(step_figures([check]))
    assert "<script" not in page and "&lt;script&gt;" in page


# -- from real compiled programs ------------------------------------------------------------------------


def step_program(mesh, steps=None):
    """A psum per step of a loop: static `steps`, or traced when None (no static trip count)."""

    def body(x, n):
        count = steps if steps is not None else n
        return jax.lax.fori_loop(0, count, lambda i, c: c + jax.lax.psum(c, "data"), x)

    spec = PartitionSpec("data")
    fn = jax.shard_map(body, mesh=mesh, in_specs=(spec, PartitionSpec()), out_specs=spec)
    x = jax.device_put(jnp.ones((8, 16), jnp.float32), NamedSharding(mesh, spec))
    return compiled(fn, x, jnp.int32(3))


def recorded(call) -> facts.TestFacts:
    facts.start()
    try:
        call()
    except AssertionError:
        pass
    return facts.take()


def test_assert_executed_records_its_rule_as_figures():
    mesh = test_mesh((4,), ("data",), "explicit")
    counted = recorded(
        lambda: assert_executed(step_program(mesh, 5), AR, at_least=1, at_most=4, per="step")
    )
    (check,) = counted.collectives
    assert check.executed_rule == ExecutedRule(AR, 1, 4, False, 5, "step") and not check.passed
    (table,) = ef.step_tables([check])
    assert (table.what, table.per) == ("your function", "step")
    (row,) = table.rows
    assert (row.expected, row.actual_words, row.mark) == ("1 to 4 per step", "5 runs", "FAIL")
    with pytest.raises(ValueError, match="per must name what one run of the program is"):
        assert_executed(step_program(mesh, 5), AR, at_most=4, per="")
    # a loop of traced bounds: unknown, and the rule fails, whatever its range allows
    unknown = recorded(lambda: assert_executed(step_program(mesh), AR, at_least=0, at_most=10**9))
    (check,) = unknown.collectives
    assert check.executed_rule.actual is None and check.passed is False
    assert ef.step_tables([check])[0].rows[0].mark == "FAIL"


def test_assert_memory_records_xla_figures_and_the_comparison():
    mesh = test_mesh((4,), ("data",), "explicit")
    prog = step_program(mesh, 2)
    xla = memory_per_device(prog)
    taken = recorded(
        lambda: assert_memory(
            prog, argument_below=1, what="your step", shown_against={"replicated Adam state": 4096}
        )
    )
    (check,) = taken.memory
    assert (check.argument_bytes, check.temp_bytes, check.output_bytes) == (
        xla.argument_bytes,
        xla.temp_bytes,
        xla.output_bytes,
    )
    assert check.passed is False and check.argument_below == 1
    assert check.shown_against == {"replicated Adam state": 4096}
    held = recorded(lambda: assert_memory(prog, temp_below=10**9))
    assert held.memory[0].passed is True and held.memory[0].shown_against == {}


@pytest.mark.parametrize(
    "figures, named",
    [
        ({"": 1}, "label"),
        ({"x": -1}, "x"),
        ({"x": 1.5}, "x"),
        ({"x": True}, "x"),
        ({str(i): i for i in range(MAX_FIGURES + 1)}, f"at most {MAX_FIGURES}"),
    ],
)
def test_bad_comparison_figures_are_refused_naming_the_problem(figures, named):
    mesh = test_mesh((4,), ("data",), "explicit")
    facts.start()
    with pytest.raises(ValueError, match=re.escape(named)):
        assert_memory(step_program(mesh, 1), shown_against=figures)
    assert facts.take().memory == []  # nothing recorded for a check that did not run


# -- in a browser ---------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def pictured(tmp_path_factory):
    """write_all's folder for a grading with the ZeRO-like step (the all-gathers one leaf short) and a remat
    memory check beside the reference without remat."""
    ex = catalog.get("ex10")
    test = dataclasses.replace(
        failed_test(zero_checks(), [remat_check()]),
        exercise=ex.id,
        nodeid=f"tests/exercises/{ex.id}/test_visible.py::test_step",
    )
    out = tmp_path_factory.mktemp("step-pictured")
    write_all(GradingResults("alice", {ex.id: score_exercise(ex, [test])}), out)
    return out


def test_report_json_holds_what_the_page_draws(pictured):
    report = GradingResults.from_dict(json.loads((pictured / "report.json").read_text()))
    (test,) = report.tests()
    assert test.memory == [remat_check()]
    assert [c.executed_rule.actual for c in test.collectives] == [LEAVES, LEAVES - 1]


def test_the_screenshot_shows_the_bars_in_proportion_and_the_failing_row(
    browser, page_visit, pictured, png_pixels
):
    with page_visit(browser, pictured / "feedback.html", javascript=True) as seen:
        page = seen.page
        memory = page.locator("figure.memory-check")
        memory.scroll_into_view_if_needed()
        box = memory.bounding_box()
        shot = page.screenshot(clip=box)
        bars = page.evaluate("""() => [...document.querySelectorAll('tr.memory-bar')].map(tr => {
            const fill = tr.querySelector('rect.fill').getBoundingClientRect();
            const frame = tr.querySelector('rect.box').getBoundingClientRect();
            const bound = tr.querySelector('line.bound');
            return {role: tr.classList[1], bytes: +tr.dataset.bytes, x: fill.x, y: fill.y + fill.height / 2,
              w: fill.width, box: frame.width, boxRight: frame.right, fillRight: fill.right,
              bound: bound ? bound.getBoundingClientRect().x : null}; })""")
        steps = page.locator("figure.step-check")
        steps.scroll_into_view_if_needed()
        steps_box = steps.bounding_box()
        steps_shot = page.screenshot(clip=steps_box)
        failed = page.evaluate("""() => { const r = document.querySelector('tr.step-row.failed');
            if (!r) return null;
            const cell = r.querySelector('td').getBoundingClientRect();
            return {kind: r.dataset.kind, x: cell.x + 2, y: cell.y + 2,
              mark: getComputedStyle(r.querySelector('td:last-child')).color,
              rows: document.querySelectorAll('tr.step-row').length}; }""")
        outside = page.evaluate("""() => [...document.querySelectorAll(
            'figure.memory-check, figure.step-check, figure.memory-check svg, figure.step-check table')]
            .filter(s => { const r = s.getBoundingClientRect(), a = s.closest('article').getBoundingClientRect();
              return r.width === 0 || r.left < a.left || r.right > a.right; }).length""")
    assert seen.requests == [] and seen.console == [] and seen.errors == []
    assert outside == 0
    # the bars: each as wide as its bytes are of the largest figure, within a pixel, none past its box
    assert [b["role"] for b in bars] == ["arguments", "temporaries", "outputs", "against"]
    largest = max(b["bytes"] for b in bars)
    for bar in bars:
        assert bar["w"] == pytest.approx(bar["bytes"] / largest * bar["box"], abs=1.5), bar
        assert bar["fillRight"] <= bar["boxRight"] + 0.5, bar
    temporaries = next(b for b in bars if b["role"] == "temporaries")
    assert temporaries["bound"] - temporaries["x"] == pytest.approx(
        32_768 / largest * BOX_WIDTH, abs=1.5
    )
    # the screenshot: inside each bar its colour (the one over its bound red), past its end the box's grey
    width, height, rows = png_pixels(shot)
    assert abs(width - box["width"]) <= 1 and abs(height - box["height"]) <= 1

    def pixel(rows, frame, x, y):
        row = rows[int(y - frame["y"])]
        at = 3 * int(x - frame["x"])
        return tuple(row[at : at + 3])

    colours = {
        "arguments": (0x54, 0xAE, 0xFF),
        "temporaries": (0xCF, 0x22, 0x2E),  # over its bound
        "outputs": (0xC2, 0x97, 0xFF),
        "against": (0x8C, 0x95, 0x9F),
    }
    for bar in bars:
        assert (
            pixel(rows, box, bar["x"] + min(4, bar["w"] / 2), bar["y"]) == colours[bar["role"]]
        ), bar
        if bar["w"] < bar["box"] - 8:
            assert pixel(rows, box, bar["fillRight"] + 4, bar["y"]) == (0xF6, 0xF8, 0xFA), bar
    # the failing row: all-gather, its background the failure's tint, its mark in the failure's red
    assert failed is not None, "no row of the step table is marked failed"
    assert failed["kind"] == AG and failed["rows"] == 3 and failed["mark"] == "rgb(207, 34, 46)"
    _, _, step_rows = png_pixels(steps_shot)
    assert pixel(step_rows, steps_box, failed["x"], failed["y"]) == (0xFF, 0xEB, 0xE9)
