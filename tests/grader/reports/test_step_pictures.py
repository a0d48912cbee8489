"""A training step's collectives (each rule's expected count beside the one executed, in its program's table,
every kind that ran listed once with its runs, operands and bytes) and its memory per device as bars
(arguments, temporaries and outputs against their bounds, beside the test's comparison figures): the facts,
their round trip through report.json, and their drawing in the HTML page, the Markdown of results.json and the
terminal. The facts are built by hand, as grader.checks.executed records them, and from real compiled
programs. A pipeline's steps too: the grid its sends make, drawn and said as its rule judged them (ex14 allows
M + S - 2 sends or M + S - 1, one after the last step), its bubbles counted over the whole schedule, and the
figure within its budget.

The browser test opens the page in Chromium, takes a screenshot and reads its pixels: the bars' widths are
in proportion to their bytes, the failing row is marked, and nothing leaves its box."""

from __future__ import annotations

import dataclasses
import html
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
    PipelineSchedule,
    ProgramAccount,
    RuleFigure,
    TestResult,
    Traffic,
)
from grader.course import catalog
from grader.grading.results import GradingResults, score_exercise
from grader.reports import (
    executed_facts as ef,
    feedback_page,
    markdown,
    memory_facts as mf,
    program_facts as pf,
)
from grader.reports.executed_text import pipeline_text
from grader.reports.memory_picture import BOX_WIDTH, memory_figure
from grader.reports.program_page import program_figure
from grader.reports.program_text import test_blocks
from grader.reports.schedule_picture import schedule_figure
from grader.reports.writers import write_all

RS, AG, AR, CP = "reduce-scatter", "all-gather", "all-reduce", "collective-permute"
LEAVES = 3  # parameter leaves of the ZeRO-like step: a reduce-scatter and an all-gather of each
SCRIPT = "<script>alert(1)</script>"


KEY = "5e7ab1c2d3e4f506"


def op(kind: str, executed: int | None, operands: int, unknown: bool = False) -> Collective:
    shapes = ((16,),) * operands
    return Collective(
        kind, 4, ("data",), f"{kind}(x)", executed, unknown, (), shapes, 64 * operands
    )


# the step's program: the leaves' reduce-scatters combined in one instruction, the all-gathers in one,
# but only 2 of the 3 leaves gathered; and an all-reduce of the loss no rule names
ZERO_FOUND = (op(RS, 1, LEAVES), op(AG, 1, LEAVES - 1), op(AR, 1, 1))


def zero_account(key=KEY, gathered=LEAVES - 1) -> ProgramAccount:
    """What grader.checks.account makes of the step: a row per kind over "data" (4 devices)."""
    return ProgramAccount(
        "your train step",
        key,
        4,
        (
            Traffic(AR, ("data",), 4, 1, 1, 1, 4, 6),
            Traffic(AG, ("data",), 4, 1, 1, gathered, 64 * gathered, 192 * gathered),
            Traffic(RS, ("data",), 4, 1, 1, LEAVES, 64 * LEAVES, 48 * LEAVES),
        ),
        dot_work=3 * 4096,
        product_work=256,
        argument_bytes=12_288,
        temp_bytes=40_000,
        output_bytes=4_096,
    )


def zero_figures(key=KEY, gathered=LEAVES - 1) -> list[RuleFigure]:
    """What assert_executed(..., operands=True, per="step") records for ZeRO-1's two once-per-leaf rules."""
    return [
        RuleFigure(
            key,
            "collectives",
            f"{kind} operands run",
            f"exactly {LEAVES} per step",
            actual,
            actual == LEAVES,
            LEAVES,
        )
        for kind, actual in ((RS, LEAVES), (AG, gathered))
    ]


def zero_checks(found=ZERO_FOUND, gathered=LEAVES - 1, key=KEY) -> list[CollectivesCheck]:
    """The collectives checks the same two calls record beside their figures."""
    return [
        CollectivesCheck(
            "your train step",
            found,
            actual == LEAVES,
            rule=f"{kind} operands run exactly {LEAVES} times",
            executed_rule=ExecutedRule(kind, LEAVES, LEAVES, True, actual, per="step"),
            program=key,
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


def failed_test(checks=(), memory=(), programs=None, figures=None) -> TestResult:
    """The test's facts; with checks of the step, its account and its rules' figures too (unless given)."""
    keys = list(dict.fromkeys(check.program for check in checks if check.program is not None))
    return TestResult(
        nodeid="tests/exercises/ex17/test_visible.py::test_step",
        exercise="ex17",
        hidden=False,
        weight=1.0,
        category=str(Category.FAILED),
        message="the compiled program of your train step runs all-gather operands 2 times",
        collectives=list(checks),
        memory=list(memory),
        programs=[zero_account(key) for key in keys] if programs is None else list(programs),
        figures=[f for key in keys for f in zero_figures(key)]
        if figures is None
        else list(figures),
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


def test_an_old_report_without_the_keys_loads_and_draws_no_table():
    """report.json before the accounts and the rules' figures (and one older still, before ExecutedRule and
    MemoryCheck): it loads, and its checks are drawn as they always were, with no program table."""
    old = failed_test(zero_checks()).to_dict()
    del old["programs"], old["figures"]
    for check in old["collectives"]:
        del check["executed_rule"], check["program"]
    test = TestResult.from_dict(old)
    assert test.memory == [] and all(c.executed_rule is None for c in test.collectives)
    card = feedback_page.test_card(test)
    assert "program-check" not in card and "memory-check" not in card
    assert card.count('class="collectives-check"') == 2
    assert pf.program_tables(test) == []
    assert "| rule | expected | executed | verdict |" not in markdown.test_output(test)


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


def test_the_steps_table_sets_each_rule_expected_beside_executed():
    (table,) = pf.program_tables(failed_test(zero_checks()))
    assert table.what == "your train step"
    assert [(r.measure, r.expected, r.executed, r.mark) for r in table.rules] == [
        (f"{RS} operands run", "exactly 3 per step", "3", "pass"),
        (f"{AG} operands run", "exactly 3 per step", "2", "FAIL"),
    ]
    # every kind that ran, once, a rule on it or not: the all-reduce of the loss too
    assert [row.cells() for row in table.traffic] == [
        [AR, "data", "4", "1", "1", "1", "6"],
        [AG, "data", "4", "1", "1", "2", "384"],
        [RS, "data", "4", "1", "1", "3", "144"],
    ]
    figure = program_figure(table)
    assert figure.count('class="rule-row held"') == 1
    failed = figure.split('class="rule-row failed"', 1)[1].split("</tr>", 1)[0]
    assert f'data-measure="{AG} operands run" data-actual="2"' in failed and "✗ not held" in figure


def test_checks_of_two_programs_make_two_tables():
    other = [dataclasses.replace(c, what="your eval step", program="0" * 16) for c in zero_checks()]
    tables = pf.program_tables(failed_test(zero_checks() + other))
    assert [(t.key, len(t.rules), len(t.checks)) for t in tables] == [
        (KEY, 2, 2),
        ("0" * 16, 2, 2),
    ]


def test_an_unknown_trip_count_is_said_and_fails_never_guessed():
    looped = dataclasses.replace(
        zero_account(), traffic=(Traffic(AR, ("data",), 4, 1, None, None, 4, None),)
    )
    rule = RuleFigure(KEY, "collectives", f"{AR} runs", "1 to 6 per step", None, False, 6)
    (table,) = pf.program_tables(failed_test(zero_checks(), programs=[looped], figures=[rule]))
    assert [(r.executed, r.mark) for r in table.rules] == [
        ("unknown: in a loop with no static trip count", "FAIL")
    ]
    assert table.traffic[0].cells()[4:] == ["unknown"] * 3
    figure = program_figure(table)
    assert 'data-actual="unknown"' in figure and 'data-runs="unknown"' in figure


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
    drawn = f"[{mf.FILLED}{mf.EMPTY}{mf.MARKER}]+"
    bar_lines = [line for line in lines[1:] if re.search(drawn, line)]
    # a label longer than its column is whole, on its own line above its bar: never cut
    label = "the reference without remat (temporaries)"
    assert "…" not in "".join(lines) and label in " ".join(" ".join(lines).split())
    lines = [lines[0], *bar_lines]
    bars = {line.split(mf.FILLED)[0].split()[0]: line for line in lines[1:4]}
    cells = len(re.search(drawn, lines[1])[0])
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
    bars = [
        found[0]
        for line in lines[1:]
        if (found := re.search(f"[{mf.FILLED}{mf.EMPTY}{mf.MARKER}]+", line))
    ]
    assert len(bars) == 4 and all(len(bar) == mf.MIN_BAR for bar in bars)


# -- the Markdown and the terminal ----------------------------------------------------------------------


def test_the_markdown_has_the_step_table_and_the_bars():
    out = markdown.test_output(failed_test(zero_checks(), [remat_check()]))
    assert "| all\\-gather operands run | exactly 3 per step | 2 | FAIL |" in out
    assert "| all\\-reduce | data | 4 | 1 | 1 | 1 | 6 |" in out
    assert out.count("**your train step**") == 1  # two rules, one table
    block = out.rsplit("```", 2)[1]
    assert "temporaries" in block and "(bound 32.0 KiB)  OVER" in block
    assert all(len(line) <= markdown.MEMORY_WIDTH for line in block.strip().splitlines()[1:])


@pytest.mark.parametrize("width", [80, 120])
def test_the_terminal_draws_both_under_a_failed_test_within_its_width(width):
    console = Console(record=True, width=width, file=io.StringIO())
    student.render_test(failed_test(zero_checks(), [remat_check()]), console)
    shown = console.export_text()
    assert re.search(r"all-gather operands run\s+exactly 3 per step\s+2\s+FAIL", shown)
    assert shown.count("your train step: the rules judged on one run of it") == 1
    bar_lines = [line for line in shown.splitlines() if mf.EMPTY in line or mf.FILLED in line]
    assert len(bar_lines) == 4 and all(len(line) <= width for line in bar_lines)
    table = test_blocks(failed_test(zero_checks()), width - 6)[0]
    assert all(len(line) <= width - 6 for line in table)
    passed = dataclasses.replace(failed_test(zero_checks(), [remat_check()]), category="passed")
    console = Console(record=True, width=width, file=io.StringIO())
    student.render_test(passed, console)
    assert mf.FILLED not in console.export_text()  # a passed test stays one line


def test_names_from_a_submission_stay_text():
    evil = failed_test(
        zero_checks(),
        programs=[
            dataclasses.replace(
                zero_account(), what=SCRIPT, traffic=(Traffic(SCRIPT, (SCRIPT,), 4, 1, 1, 1, 1, 1),)
            )
        ],
        figures=[dataclasses.replace(f, measure=SCRIPT, expected=SCRIPT) for f in zero_figures()],
    )
    page = "".join(program_figure(t) for t in pf.program_tables(evil))
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
    (account,) = counted.programs
    assert check.program == account.key
    test = failed_test(counted.collectives, programs=counted.programs, figures=counted.figures)
    (table,) = pf.program_tables(test)
    assert table.what == "your function"
    (row,) = table.rules
    assert (row.measure, row.expected, row.executed, row.mark) == (
        f"{AR} runs",
        "1 to 4 per step",
        "5",
        "FAIL",
    )
    assert [r.cells()[:5] for r in table.traffic] == [[AR, "data", "4", "1", "5"]]
    with pytest.raises(ValueError, match="per must name what one run of the program is"):
        assert_executed(step_program(mesh, 5), AR, at_most=4, per="")
    # a loop of traced bounds: unknown, and the rule fails, whatever its range allows
    unknown = recorded(lambda: assert_executed(step_program(mesh), AR, at_least=0, at_most=10**9))
    (check,) = unknown.collectives
    assert check.executed_rule.actual is None and check.passed is False
    test = failed_test(unknown.collectives, programs=unknown.programs, figures=unknown.figures)
    (row,) = pf.program_tables(test)[0].rules
    assert (row.executed, row.mark) == ("unknown: in a loop with no static trip count", "FAIL")


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


# -- a pipeline's steps ---------------------------------------------------------------------------------

# ex14's visible pipeline_forward test: 16 microbatches through 8 stages, 23 steps
PIPELINE = PipelineSchedule(8, 16)


def sends_program(mesh, sends: int):
    """A loop of `sends` collective-permutes down the chain of "stage", as a pipeline's steps send."""
    S = mesh.shape["stage"]
    chain = [(s, s + 1) for s in range(S - 1)]

    def body(x):
        return jax.lax.fori_loop(0, sends, lambda i, c: jax.lax.ppermute(c, "stage", chain), x)

    spec = PartitionSpec("stage")
    fn = jax.shard_map(body, mesh=mesh, in_specs=spec, out_specs=spec)
    x = jax.device_put(jnp.ones((S, 16), jnp.float32), NamedSharding(mesh, spec))
    return compiled(fn, x)


def judged_sends(sends: int, schedule: PipelineSchedule = PIPELINE) -> facts.TestFacts:
    """The facts ex14's rule records for a compiled program of `sends` sends: R M + S - 2 or R M + S - 1."""
    mesh = test_mesh((schedule.stages,), ("stage",), "explicit")
    steps = schedule.steps
    return recorded(
        lambda: assert_executed(
            sends_program(mesh, sends),
            CP,
            at_least=steps - 1,
            at_most=steps,
            schedule=schedule,
            what="pipeline_forward",
        )
    )


def pipeline_test(taken: facts.TestFacts) -> TestResult:
    return failed_test(taken.collectives, programs=taken.programs, figures=taken.figures)


ONE_GRID = 'data-role="expected and actual"'  # a program that takes the steps expected: one grid


def drawn_steps(figure: str, role: str) -> set[int]:
    """The steps a grid draws; "expected" and "actual" are the one grid of a figure that has one."""
    shown = f'data-role="{role}"' if f'data-role="{role}"' in figure else ONE_GRID
    grid = figure.split(shown, 1)[1].split("</svg>", 1)[0]
    return {
        int(step)
        for step in re.findall(r'class="cell \w+" data-stage="\d+" data-step="(\d+)"', grid)
    }


def caption(figure: str) -> str:
    """The figure's own caption, as text."""
    markup = figure.split("<figcaption>", 1)[1].split("</figcaption>", 1)[0]
    return html.unescape(re.sub("<[^>]+>", "", markup))


def true_bubbles(schedule: PipelineSchedule, steps: int) -> int:
    """Every idle cell of a pipeline of `steps` steps, counted one by one over the whole grid: item i (of the
    R M, those that get through every stage in time) is at stage s at step i + s, each once."""
    items = min(schedule.repeats * schedule.microbatches, steps - schedule.stages + 1)
    return sum(not 0 <= t - s < items for s in range(schedule.stages) for t in range(steps))


@pytest.mark.parametrize("sends", [22, 23])
def test_sends_the_rule_allows_take_the_steps_expected(sends):
    """22 sends (one between each two of the 23 steps) and 23 (one more after the last step, which nothing
    reads) are what ex14's rule allows: both are drawn as the 23 steps expected, no column more, and said
    to be so in the program's table, the figure and the terminal alike."""
    taken = judged_sends(sends)
    (check,) = taken.collectives
    assert check.passed is True
    test = pipeline_test(taken)
    (table,) = pf.program_tables(test)
    assert [(row.measure, row.expected, row.executed, row.mark) for row in table.rules] == [
        (f"{CP} runs", "22 or 23", str(sends), "pass")
    ]
    (pipeline,) = pf.pictures(table).pipelines
    assert pipeline.actual_steps == 23 and pipeline.held is True
    figure = schedule_figure(pipeline)
    assert 'data-expected-steps="23" data-actual-steps="23" data-held="true"' in figure
    assert "not the steps expected" not in figure and "verdict-fail" not in figure
    assert '<span class="verdict-pass">the steps expected</span>' in figure
    assert drawn_steps(figure, "actual") == drawn_steps(figure, "expected")
    assert max(drawn_steps(figure, "actual")) < 23
    words = caption(figure)
    assert "expected 23 steps (22 or 23 sends). " in words
    if sends == 23:
        assert (
            "run 23 times: one between each two steps, and one after the last step, which the "
            "schedule allows (nothing reads it). That makes 23 steps, the steps expected." in words
        )
    else:
        assert (
            "run 22 times, one between each two steps, which makes 23 steps, the steps expected."
            in words
        )
    assert "24 steps" not in figure and "redo" not in words
    # every sentence after a period starts with a capital
    assert all(sentence[0].isupper() for sentence in words.split(". ")[1:])
    # the terminal says what the page says, and the page's program card draws the same figure
    (block,) = test_blocks(test, 100)
    said = " ".join(" ".join(block).split())  # its lines wrapped at the terminal's width, joined
    assert words.startswith("pipeline of 8 stages x 16 microbatches: expected 23 steps")
    assert words in said
    assert figure in feedback_page.test_card(test)


def test_a_small_pipeline_with_a_send_after_its_last_step_draws_every_step_once():
    """4 stages and 6 microbatches, 9 sends: the whole grid is drawn, 9 columns as expected, the same cells."""
    taken = judged_sends(9, PipelineSchedule(4, 6))
    (pipeline,) = pf.pictures(pf.program_tables(pipeline_test(taken))[0]).pipelines
    figure = schedule_figure(pipeline)
    # one grid, what was expected and what the program took alike: every step, drawn once
    assert figure.count(ONE_GRID) == 2  # its figure and its svg
    assert 'data-role="expected"' not in figure and 'data-role="actual"' not in figure
    assert drawn_steps(figure, "expected") == set(range(9))


def test_one_send_too_many_is_still_not_the_steps_expected():
    """24 sends: one more than the rule allows, so 25 steps, drawn and said in the failure's red, as the
    program's table marks the rule failed."""
    taken = judged_sends(24)
    test = pipeline_test(taken)
    (table,) = pf.program_tables(test)
    assert [row.mark for row in table.rules] == ["FAIL"]
    (pipeline,) = pf.pictures(table).pipelines
    assert pipeline.held is False and pipeline.actual_steps == 25
    figure = schedule_figure(pipeline)
    assert 'data-actual-steps="25" data-held="false"' in figure
    assert '<span class="verdict-fail">not the steps expected</span>' in figure
    assert (
        "run 24 times, one between each two steps, which makes 25 steps, not the steps expected."
        in caption(figure)
    )
    text = pipeline_text(pipeline)
    assert text[0].endswith("which makes 25 steps, not the steps expected.")
    assert text[-1] == "  (25 steps, 72 bubble cells in all)"
    # the terminal draws every step: stage 7's row ends with its 16 microbatches and two idle steps
    assert text[-2].split()[-4:] == ["14", "15", ".", "."]


def test_an_unjudged_pipeline_says_no_verdict():
    """A check that judged its collectives by a rule of its own (passed None) draws its sends' steps and
    says no verdict, neither one way nor the other."""
    check = CollectivesCheck("p", (op(CP, 23, 1),), None, schedule=PIPELINE)
    pipeline = ef.pipeline_figures(check)
    figure = schedule_figure(pipeline)
    assert pipeline.actual_steps == 24 and "steps expected" not in figure
    assert 'data-held="unknown"' in figure and "verdict-" not in figure
    assert pipeline_text(pipeline)[0].endswith("which makes 24 steps.")


@pytest.mark.parametrize(
    "schedule, steps",
    [
        (PipelineSchedule(8, 9, 2), 25),  # ex14's circular pipeline: as expected
        (PipelineSchedule(8, 9, 2), 26),  # a step more: the 8 stages idle one step more each
        (PipelineSchedule(8, 9, 2), 20),  # steps too few for its 18 items
        (PipelineSchedule(4, 6), 200),  # cut at its first steps
        (PipelineSchedule(20, 6), 25),  # cut at its first 16 stages
    ],
)
def test_the_bubbles_are_the_whole_schedules(schedule, steps):
    assert ef.bubble_cells(schedule, steps) == true_bubbles(schedule, steps)


def test_25_and_26_steps_have_the_bubbles_they_have():
    """The circular pipeline of 8 stages, 9 microbatches twice round takes 25 steps (56 bubble cells): with
    25 sends under a rule that allows 24 only, 26 steps, 64 bubble cells, and the figure says both."""
    schedule = PipelineSchedule(8, 9, 2)
    assert (true_bubbles(schedule, 25), true_bubbles(schedule, 26)) == (56, 64)
    check = CollectivesCheck(
        "circular_forward",
        (op(CP, 25, 1),),
        False,
        rule=f"{CP} runs exactly 24 times",
        schedule=schedule,
        executed_rule=ExecutedRule(CP, 24, 24, False, 25),
    )
    pipeline = ef.pipeline_figures(check)
    figure = schedule_figure(pipeline)
    assert "expected 25 steps (24 sends)" in caption(figure)
    assert (
        "25 steps, 56 bubble cells in all" in figure
        and "26 steps, 64 bubble cells in all" in figure
    )
    assert (
        'data-steps="25" data-bubbles="56"' in figure
        and 'data-steps="26" data-bubbles="64"' in figure
    )
    # the terminal draws both whole: the step more is idle at the end of every stage's row
    text = pipeline_text(pipeline)
    assert "  (25 steps, 56 bubble cells in all)" in text
    assert "  (26 steps, 64 bubble cells in all)" in text
    actual = text[text.index("  (25 steps, 56 bubble cells in all)") + 1 :]
    assert actual[-2].split()[-3:] == [
        "7",
        "8",
        ".",
    ]  # stage 7: microbatch 8's second pass, then idle


def test_a_cut_grid_counts_every_bubble_and_says_what_it_cuts():
    """A billion sends through 4 stages: the drawing shows its first steps, the count is the schedule's."""
    check = CollectivesCheck("p", (op(CP, 10**9, 1),), False, schedule=PipelineSchedule(4, 6))
    pipeline = ef.pipeline_figures(check)
    _, actual = pipeline.grids()
    drawn = sum(row.count(ef.BUBBLE) for row in actual.rows())
    assert actual.bubbles == 4 * (10**9 + 1 - 6) != drawn
    figure = schedule_figure(pipeline)
    assert (
        f"{10**9 + 1} steps, {actual.bubbles} bubble cells in all "
        f"(only the first {actual.drawn_steps} of {10**9 + 1} steps drawn)"
    ) in figure


# The largest pipelines a figure can be asked for: ex14's largest (8 stages, 8 microbatches three times round,
# 31 steps) with the sends of a loop of a billion; as many stages as a grid draws and more; and the widest
# grid of 4 stages, which drew 54,739 characters before the figure had its budget.
LARGEST = [
    PipelineSchedule(8, 8, 3),
    PipelineSchedule(8, 20),
    PipelineSchedule(ef.GRID_STAGES, 10**6),
    PipelineSchedule(10**6, 10**6, 10**3),
    PipelineSchedule(4, 6),
]


@pytest.mark.parametrize("schedule", LARGEST, ids=str)
@pytest.mark.parametrize("sends", [None, 10**9, 10**12])
def test_a_schedule_figure_stays_within_its_budget(schedule, sends):
    assert ef.FIGURE_CHARS <= TEST_FACTS_CHARS
    unknown = sends is None
    check = CollectivesCheck(
        "p",
        (op(CP, sends, 1, unknown),),
        False,
        rule=f"{CP} runs {schedule.steps - 1} or {schedule.steps} times",
        schedule=schedule,
        executed_rule=ExecutedRule(CP, schedule.steps - 1, schedule.steps, False, sends),
    )
    figure = schedule_figure(ef.pipeline_figures(check))
    assert len(figure) <= ef.FIGURE_CHARS
    cells = re.findall(r'<g class="cell.*?</g>', figure)
    assert cells and max(map(len, cells)) <= ef.CELL_CHARS
    assert len(figure) - sum(map(len, cells)) <= ef.FRAME_CHARS
    assert len(cells) <= ef.FIGURE_CELLS


def test_a_passing_pipeline_the_size_of_ex14s_largest_is_within_budget_and_says_so():
    """31 steps, 31 sends (one after the last step): the figure within its budget, each grid its first steps,
    and said so."""
    schedule = LARGEST[0]
    check = CollectivesCheck(
        "p",
        (op(CP, 31, 1),),
        True,
        schedule=schedule,
        executed_rule=ExecutedRule(CP, 30, 31, False, 31),
    )
    figure = schedule_figure(ef.pipeline_figures(check))
    assert len(figure) <= ef.FIGURE_CHARS
    # the steps expected: one grid, with the whole budget
    drawn = ef.FIGURE_CELLS // 8
    assert drawn_steps(figure, "expected") == set(range(drawn)) and drawn >= 28
    assert figure.count(f"(only the first {drawn} of 31 steps drawn)") == 1


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
    assert test.programs == [zero_account()] and test.figures == zero_figures()


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
        steps = page.locator("figure.program-check")
        steps.scroll_into_view_if_needed()
        steps_box = steps.bounding_box()
        steps_shot = page.screenshot(clip=steps_box)
        failed = page.evaluate("""() => { const r = document.querySelector('tr.rule-row.failed');
            if (!r) return null;
            const cell = r.querySelector('td').getBoundingClientRect();
            return {measure: r.dataset.measure, x: cell.x + 2, y: cell.y + 2,
              mark: getComputedStyle(r.querySelector('td:last-child')).color,
              rows: document.querySelectorAll('tr.rule-row').length,
              kinds: [...document.querySelectorAll('tr.traffic-row')].map(t => t.dataset.kind)}; }""")
        outside = page.evaluate("""() => [...document.querySelectorAll(
            'figure.memory-check, figure.program-check, figure.memory-check svg, figure.program-check table')]
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
    # the failing row: all-gather's, its background the failure's tint, its mark in the failure's red; every
    # kind that ran listed once below the rules
    assert failed is not None, "no row of the step table is marked failed"
    assert failed["measure"] == f"{AG} operands run" and failed["rows"] == 2
    assert failed["mark"] == "rgb(207, 34, 46)" and failed["kinds"] == [AR, AG, RS]
    _, _, step_rows = png_pixels(steps_shot)
    assert pixel(step_rows, steps_box, failed["x"], failed["y"]) == (0xFF, 0xEB, 0xE9)
