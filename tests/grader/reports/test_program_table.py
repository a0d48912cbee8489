"""One table per program a test's checks read: each rule's expected figure beside the executed one (a work
rule's ratio to its share), then what each device executed (collectives by kind and mesh axes with their runs,
operands and bytes sent; multiply-adds; memory), shown once however many checks read the program; in the
terminal, the Markdown of results.json and the page alike. The facts are built by hand as the checks record
them (grader.checks.executed, shares, hlo), and from real compiled programs graded end to end.

The browser test opens the page in Chromium at a 1280 px window: the table stays inside its card, long cells
wrap, and no two of its rows overlap."""

from __future__ import annotations

import dataclasses
import io
import json
import re

import jax
import jax.numpy as jnp
import pytest
from jax.sharding import NamedSharding, PartitionSpec as P
from rich.console import Console

from grader.checks import (
    assert_collectives,
    assert_executed,
    assert_traffic,
    assert_work,
    compiled,
    test_mesh,
)
from grader.commands import student
from grader.core import facts
from grader.core.bounds import LINE_CHARS, MAX_RULE_FIGURES, MAX_TRAFFIC_ROWS
from grader.core.results import (
    Category,
    Collective,
    CollectivesCheck,
    ProgramAccount,
    RuleFigure,
    TestResult,
    Traffic,
)
from grader.course import catalog
from grader.grading.results import GradingResults, score_exercise
from grader.reports import feedback_page, markdown, program_facts as pf, program_text
from grader.reports.writers import write_all

KEY, OTHER = "a1b2c3d4e5f60718", "ffeeddccbbaa9988"
AG, AR, RS, CP = "all-gather", "all-reduce", "reduce-scatter", "collective-permute"
SCRIPT = "<script>alert(1)</script>"
UNKNOWN = "unknown: in a loop with no static trip count"


def account(key=KEY, what="your layer", **changes) -> ProgramAccount:
    """A replicated layer's program on 4 devices: it gathers the whole batch (1,536 bytes sent per device) and
    does 4 times its share of the dot's work."""
    return dataclasses.replace(
        ProgramAccount(
            what,
            key,
            4,
            (Traffic(AG, ("data",), 4, 1, 1, 1, 512, 1536),),
            dot_work=32_768,
            product_work=1,
            argument_bytes=8_704,
            temp_bytes=6_148,
            output_bytes=1_024,
        ),
        **changes,
    )


def figures(key=KEY) -> list[RuleFigure]:
    """The rules assert_work, assert_traffic and assert_executed record on it."""
    return [
        RuleFigure(
            key,
            "work",
            "multiply-adds per device",
            "at most 2 x its share of the layer's dot, B D H / n (8,192): 16,384",
            32_769,
            False,
            16_384,
            8_192,
        ),
        RuleFigure(
            key, "traffic", "bytes sent per device", "none (no collective needed)", 1536, False, 0
        ),
        RuleFigure(key, "collectives", f"{AG} runs", "at most 0", 1, False, 0),
    ]


def check(key=KEY, what="your layer", **changes) -> CollectivesCheck:
    """The collectives check assert_executed records beside its figure."""
    found = (Collective(AG, 4, ("data",), "%ag = f32[16,32]{1,0} all-gather(%x)", 1),)
    return dataclasses.replace(
        CollectivesCheck(what, found, False, rule=f"{AG} runs at most 0 times", program=key),
        **changes,
    )


def failed(**fields) -> TestResult:
    return TestResult(
        **{
            "nodeid": "tests/exercises/ex04_sharded_layer/test_visible.py::test_layer_work",
            "exercise": "ex04_sharded_layer",
            "hidden": False,
            "weight": 1.0,
            "category": str(Category.FAILED),
            "message": "each device executed 4.0 x its share",
        }
        | fields
    )


def three_checks() -> TestResult:
    """Three checks on one program: its account recorded once, three rules, three collectives checks."""
    return failed(programs=[account()], figures=figures(), collectives=[check()] * 3)


def terminal(test: TestResult, width: int = 100) -> str:
    console = Console(record=True, width=width, file=io.StringIO())
    student.render_test(test, console)
    return console.export_text()


# -- the table as figures -------------------------------------------------------------------------------------


def test_a_program_read_by_three_checks_makes_one_table():
    (table,) = pf.program_tables(three_checks())
    assert (table.what, table.key, table.devices, table.passed) == ("your layer", KEY, 4, False)
    assert [(r.measure, r.executed, r.mark) for r in table.rules] == [
        ("multiply-adds per device", "32,769 (4.0 x its share)", "FAIL"),
        ("bytes sent per device", "1,536", "FAIL"),
        (f"{AG} runs", "1", "FAIL"),
    ]
    assert table.rules[0].ratio == pytest.approx(32_769 / 8_192)
    assert [row.cells() for row in table.traffic] == [[AG, "data", "4", "1", "1", "1", "1,536"]]
    assert table.work_words() == "32,769 (dots and convolutions 32,768, products written out 1)"
    assert table.memory_words() == (
        "arguments 8,704 B (8.5 KiB), temporaries 6,148 B (6.0 KiB), outputs 1,024 B (1.0 KiB)"
    )
    assert len(table.checks) == 3 and len(table.instructions()) == table.instruction_count() == 1
    assert pf.unplaced_checks(three_checks()) == []


def test_an_unknown_figure_is_said_never_guessed():
    looped = account(traffic=(Traffic(AR, ("data",), 4, 1, None, None, 64, None),), dot_work=None)
    unknown = [
        dataclasses.replace(f, actual=None, passed=False) for f in figures()[:2]
    ]  # what assert_work and assert_traffic record for it
    (table,) = pf.program_tables(failed(programs=[looped], figures=unknown))
    assert [row.executed for row in table.rules] == [UNKNOWN, UNKNOWN]
    assert table.traffic[0].cells()[4:] == ["unknown", "unknown", "unknown"]
    assert table.work_words() == UNKNOWN
    # a program whose every figure is known has no such loop: a figure of None is of a kind it has none of
    none = RuleFigure(
        KEY, "collectives", "bytes of the largest all-to-all", "at most 1024", None, False
    )
    (table,) = pf.program_tables(failed(programs=[account()], figures=[none]))
    assert table.rules[0].executed == "none in the program"


def test_two_programs_of_one_name_make_two_tables_told_apart():
    test = failed(
        programs=[account(), account(OTHER, traffic=(), dot_work=8_192, product_work=0)],
        figures=[*figures(), *figures(OTHER)],
        collectives=[check(), check(OTHER)],
    )
    tables = pf.program_tables(test)
    assert [t.what for t in tables] == [
        "your layer (program 1 of 2 of that name)",
        "your layer (program 2 of 2 of that name)",
    ]
    assert [len(t.rules) for t in tables] == [3, 3] and tables[1].traffic == []
    page = feedback_page.test_card(test)
    assert page.count('class="program-check"') == 2 and "collectives-check" not in page


def test_rules_whose_account_was_cut_still_make_their_table():
    """A report cut to fit its share keeps the rules before the accounts run out: the table says so."""
    (table,) = pf.program_tables(failed(figures=figures(OTHER)))
    assert table.account is None and len(table.rules) == 3
    assert table.caption().endswith("(what it executed was not recorded)")
    assert program_text.executed_lines(table, 80) == []
    assert "Multiply" not in markdown.test_output(failed(figures=figures(OTHER)))


def test_an_old_report_draws_its_checks_as_before_without_tables():
    """report.json before the accounts: no programs, no figures, checks without a program's key."""
    old = three_checks().to_dict()
    del old["programs"], old["figures"]
    for fact in old["collectives"]:
        del fact["program"]
    test = TestResult.from_dict(json.loads(json.dumps(old)))
    assert pf.program_tables(test) == [] and pf.unplaced_checks(test) == test.collectives
    card = feedback_page.test_card(test)
    assert card.count('class="collectives-check"') == 3 and "program-check" not in card
    assert markdown.test_output(test).count("**Collectives of your layer**") == 3
    assert terminal(test).count(f"rule: {AG} runs at most 0 times") == 3


# -- the three media ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("width", [80, 100, 160])
def test_the_terminal_shows_the_table_once_within_its_width(width):
    shown = terminal(three_checks(), width)
    assert shown.count("your layer: the rules judged on one run of it") == 1
    lines = shown.splitlines()
    assert all(len(line) <= width for line in lines), [line for line in lines if len(line) > width]
    # a rule's row: the measure, its expected words, the executed figure beside them, the verdict
    row = next(line for line in lines if "bytes sent per device" in line)
    assert re.search(
        r"bytes sent per device\s+none \(no collective\s*(needed\))?\s+1,536\s+FAIL", row
    )
    assert "32,769" in shown and "4.0 x its" in shown
    # what the program executed, once: collectives, multiply-adds, memory
    assert len(re.findall(r"^\s+all-gather\s+data\s+4\s+1\s+1\s+1\s+1,536$", shown, re.M)) == 1
    assert shown.count("multiply-adds: 32,769") == 1 and shown.count("temporaries 6,148 B") == 1
    # the collectives aren't listed again per check, nor their HLO
    assert "rule:" not in shown and "%ag" not in shown and "all-gather runs:" not in shown


def test_the_terminal_wraps_long_words_and_cuts_many_rows():
    long = [
        dataclasses.replace(f, expected=f"at most {i:,} " + "words " * 60, actual=i)
        for i, f in enumerate(figures() * 16)
    ]
    test = failed(
        programs=[
            account(traffic=tuple(Traffic(AG, (f"a{i}",), 4, 1, 1, 1, 1, 1) for i in range(40)))
        ],
        figures=long,
    )
    table = pf.program_tables(test)[0]
    assert len(table.rules) == 48 and all(len(r.expected) <= pf.WORDS_CHARS for r in table.rules)
    lines = program_text.table_lines(table, 90)
    assert all(len(line) <= 90 for line in lines)
    assert "  ... and 25 more rows (the page has them all)" in lines
    assert "  ... and 17 more rows (the page has them all)" in lines
    assert len(lines) < 400


def test_the_markdown_has_one_table_per_program_with_bytes_and_work():
    out = markdown.test_output(three_checks())
    assert (
        out.count("**your layer**") == 1
        and out.count("| rule | expected | executed | verdict |") == 1
    )
    assert (
        "| multiply\\-adds per device | at most 2 x its share of the layer's dot, B D H / n \\(8,192\\)\\: "
        "16,384 | 32,769 \\(4\\.0 x its share\\) | FAIL |"
    ) in out
    assert "| bytes sent per device | none \\(no collective needed\\) | 1,536 | FAIL |" in out
    assert "| all\\-gather | data | 4 | 1 | 1 | 1 | 1,536 |" in out
    assert out.count("Multiply\\-adds: 32,769") == 1 and "outputs 1,024 B" in out
    assert "Collectives of" not in out and "%ag" not in out


def test_the_page_has_one_table_per_program_its_instructions_folded_once():
    card = feedback_page.test_card(three_checks())
    assert card.count('class="program-check"') == 1 and "collectives-check" not in card
    assert card.count('<details class="instructions"') == 1 and card.count("%ag = f32") == 1
    assert "its 1 collective instruction, as compiled (HLO)" in card and "1 time: %ag" in card
    rows = re.findall(
        r'<tr class="rule-row (\w+)" data-rule="(\w+)" data-measure="[^"]*" data-actual="(\w+)"',
        card,
    )
    assert rows == [
        ("failed", "work", "32769"),
        ("failed", "traffic", "1536"),
        ("failed", "collectives", "1"),
    ]
    assert 'data-ratio="4.00"' in card and "(4.0 x its share)" in card
    assert card.count('class="traffic-row"') == 1 and 'data-sent="1536"' in card
    assert 'data-work="32769"' in card and "temporaries 6,148 B (6.0 KiB)" in card


def test_an_instruction_list_cut_to_fit_says_so():
    cut = failed(
        programs=[account(traffic=(Traffic(AG, ("data",), 4, 5, 5, 5, 512, 1536),))],
        figures=figures(),
        collectives=[check()],
    )
    assert "(the first 1 of 5: the rest did not fit in the report)" in feedback_page.test_card(cut)


def test_names_from_a_submission_stay_text_everywhere():
    evil = failed(
        programs=[
            account(what=SCRIPT + "\x1b[31m", traffic=(Traffic(AG, (SCRIPT,), 4, 1, 1, 1, 1, 1),))
        ],
        figures=[dataclasses.replace(f, measure=SCRIPT, expected=SCRIPT) for f in figures()],
        collectives=[check(found=(Collective(AG, 4, (SCRIPT,), SCRIPT, 1),))],
    )
    card = feedback_page.test_card(evil)
    assert "<script" not in card and "&lt;script&gt;" in card
    assert "<script" not in markdown.test_output(evil) and "\x1b" not in terminal(evil)


def test_the_report_round_trips_what_the_table_draws():
    test = three_checks()
    again = TestResult.from_dict(json.loads(json.dumps(test.to_dict())))
    assert again == test and pf.program_tables(again) == pf.program_tables(test)


def test_a_test_at_its_caps_stays_bounded():
    """MAX_RULE_FIGURES rules of the longest words on MAX_PROGRAMS accounts of MAX_TRAFFIC_ROWS rows: the
    test keeps what fits in its share, and the page and the Markdown stay within a few times its facts."""
    rows = tuple(Traffic(AG, ("x" * 200,), 4, 1, 1, 1, 1, 1) for _ in range(MAX_TRAFFIC_ROWS))
    keys = [f"{i:016x}" for i in range(8)]
    test = failed(
        programs=[account(k, what="w" * 200, traffic=rows) for k in keys],
        figures=[
            dataclasses.replace(f, program=keys[i % 8], expected="e" * LINE_CHARS)
            for i, f in enumerate(figures() * 20)
        ][:MAX_RULE_FIGURES],
    )
    page, out = feedback_page.test_card(test), markdown.test_output(test)
    assert len(page) < 4 * test.text_size() and len(out) < 2 * test.text_size()
    drawn = [line for block in program_text.test_blocks(test, 120) for line in block]
    assert all(len(line) <= 120 for line in drawn)


# -- from real compiled programs, graded end to end -----------------------------------------------------------

B, D, H = 16, 32, 64


def layer_programs():
    """A layer x @ w with x split over "data": honest (each device its rows, no collective) and replicated
    (each device gathers the whole batch, multiplies it all and keeps its rows)."""
    mesh = test_mesh((4,), ("data",), "explicit")
    x = jax.device_put(jnp.ones((B, D)), NamedSharding(mesh, P("data")))
    w = jax.device_put(jnp.ones((D, H)), NamedSharding(mesh, P()))

    def replicated_rows(x, w):
        whole = jax.lax.all_gather(x, "data", tiled=True) @ w
        return jax.lax.dynamic_slice_in_dim(whole, jax.lax.axis_index("data") * (B // 4), B // 4)

    def mapped(body):
        return jax.shard_map(body, mesh=mesh, in_specs=(P("data"), P()), out_specs=P("data"))

    honest = compiled(mapped(lambda x, w: x @ w), x, w)
    replicated = compiled(mapped(replicated_rows), x, w)
    return honest, replicated, (x, w), x @ w


def graded(program, args, expected) -> TestResult:
    """The test a grading makes of three checks on `program`: its facts as the harness records them."""
    facts.start()
    try:
        share = B * D * H // 4
        for rule in (
            lambda: assert_work(
                program, share=share, share_of="the layer's dot, B D H / n", args=args
            ),
            lambda: assert_traffic(program, at_most=0, bound_of="no collective needed", args=args),
            lambda: assert_executed(program, AG, at_most=0, args=args, expected=expected),
        ):
            try:
                rule()
            except AssertionError:
                pass
    finally:
        taken = facts.take()
    if all(figure.passed for figure in taken.figures):
        return failed(category=str(Category.PASSED), message="").with_facts(taken)
    return failed().with_facts(taken)


@pytest.fixture(scope="module")
def layers():
    honest, replicated, args, expected = layer_programs()
    return graded(honest, args, expected), graded(replicated, args, expected)


def test_a_real_grading_records_one_account_and_a_figure_per_rule(layers):
    honest, replicated = layers
    for test in layers:
        assert len(test.programs) == 1 and len(test.figures) == 3 and len(test.collectives) == 1
    assert honest.category == "passed" and replicated.category == "failed"
    (table,) = pf.program_tables(replicated)
    work, traffic, gathers = table.rules
    assert (work.actual, work.ratio_words, work.passed) == (
        replicated.programs[0].work,
        "4.0 x its share",
        False,
    )
    assert traffic.actual == 1536 and gathers.actual == 1
    assert [row.cells()[:2] for row in table.traffic] == [[AG, "data"]]
    (table,) = pf.program_tables(honest)
    assert [r.mark for r in table.rules] == ["pass"] * 3 and table.traffic == []
    assert table.rules[0].ratio_words == "1.0 x its share"


def test_a_real_grading_shows_the_table_once_in_each_medium(layers):
    _, replicated = layers
    replicated = dataclasses.replace(replicated, collectives=replicated.collectives * 3)
    # the terminal: the table once, bytes and work, expected beside executed
    shown = terminal(replicated, 120)
    assert shown.count("your function: the rules judged on one run of it") == 1
    assert re.search(r"bytes sent per device\s+none \(no collective needed\)\s+1,536\s+FAIL", shown)
    assert re.search(
        r"multiply-adds per device\s+at most 2 x its share .*32,76\d \(4\.0 x its share\)\s+FAIL",
        shown,
    )
    assert (
        shown.count("multiply-adds: 32,76") == 1 and shown.count("bytes sent") == 2
    )  # a rule, a column
    # the Markdown
    out = markdown.test_output(replicated)
    assert out.count("| rule | expected | executed | verdict |") == 1
    assert "| bytes sent per device | none \\(no collective needed\\) | 1,536 | FAIL |" in out
    assert out.count("| all\\-gather | data | 4 | 1 | 1 | 1 | 1,536 |") == 1
    # the page
    card = feedback_page.test_card(replicated)
    assert card.count('class="program-check"') == 1 and card.count('class="instructions"') == 1
    assert card.count('class="rule-row failed"') == 3 and "(4.0 x its share)" in card
    assert "collectives-check" not in card and card.count("all-gather(") == 1


def test_a_passed_test_stays_one_line_in_the_terminal(layers):
    honest, _ = layers
    assert terminal(honest).strip().splitlines() == ["✓ test_layer_work"]


def test_assert_collectives_rules_read_as_rows_of_the_same_table():
    honest, replicated, args, _ = layer_programs()
    facts.start()
    with pytest.raises(AssertionError):
        assert_collectives(replicated, absent=(AG,), what="your layer")
    assert_collectives(honest, exactly={}, what="your layer")
    test = failed().with_facts(facts.take())
    tables = pf.program_tables(test)
    assert [[(r.measure, r.expected, r.actual, r.mark) for r in t.rules] for t in tables] == [
        [(f"{AG} instructions", "none", 1, "FAIL")],
        [],
    ]
    assert "no rule was judged on its figures" in terminal(test)


# -- in a browser ---------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def pictured(tmp_path_factory):
    """write_all's folder for a grading of the three checks' test, and one of words as long as a report keeps."""
    ex = catalog.get("ex04")
    long = failed(
        programs=[
            account(
                OTHER,
                what="w" * 200,
                traffic=(Traffic(AG, ("x" * 200, "y" * 200), 4, 1, 1, 1, 1, 1),),
            )
        ],
        figures=[
            dataclasses.replace(f, program=OTHER, expected="word " * 60 + "x" * 300)
            for f in figures()
        ],
        collectives=[
            check(OTHER, found=(Collective(AG, 4, ("data",), "%ag = " + "f" * LINE_CHARS, 1),))
        ],
    )
    tests = [
        three_checks(),
        dataclasses.replace(long, nodeid=long.nodeid + "_long"),
    ]
    out = tmp_path_factory.mktemp("program-tables")
    write_all(GradingResults("alice", {ex.id: score_exercise(ex, tests)}), out)
    return out


def test_report_json_holds_what_the_page_draws(pictured):
    report = GradingResults.from_dict(json.loads((pictured / "report.json").read_text()))
    first, _ = report.tests()
    assert first.programs == [account()] and first.figures == figures()


def test_the_table_fits_its_card_and_nothing_overlaps(browser, page_visit, pictured):
    with page_visit(browser, pictured / "feedback.html", javascript=True) as seen:
        page = seen.page
        page.locator("details.instructions").first.locator("summary").click()
        measured = page.evaluate("""() => [...document.querySelectorAll('figure.program-check')].map(f => {
            const card = f.closest('article'), box = card.getBoundingClientRect();
            const inside = [...f.querySelectorAll('*')];
            const rows = [...f.querySelectorAll('tr')].map(r => r.getBoundingClientRect());
            const overlaps = [];
            for (let i = 1; i < rows.length; i++)
              if (rows[i].top < rows[i - 1].bottom - 0.5 && rows[i].left < rows[i - 1].right) overlaps.push(i);
            const cells = [...f.querySelectorAll('tr')].flatMap(r => {
              const c = [...r.children].map(d => d.getBoundingClientRect());
              return c.slice(1).filter((d, i) => d.left < c[i].right - 0.5).map(() => 1); });
            return {program: f.dataset.program, cardScroll: card.scrollWidth - card.clientWidth,
              outside: inside.filter(e => { const r = e.getBoundingClientRect();
                return r.left < box.left - 0.5 || r.right > box.right + 0.5; }).map(e => e.tagName),
              overlaps, cells: cells.length, rules: f.querySelectorAll('tr.rule-row').length,
              failedTint: getComputedStyle(f.querySelector('tr.rule-row.failed')).backgroundColor,
              page: document.documentElement.scrollWidth - document.documentElement.clientWidth}; })""")
    assert seen.requests == [] and seen.console == [] and seen.errors == []
    assert [m["program"] for m in measured] == [KEY, OTHER]
    for figure in measured:
        assert figure["cardScroll"] <= 0 and figure["page"] <= 0, figure
        assert figure["outside"] == [] and figure["overlaps"] == [] and figure["cells"] == 0, figure
        assert figure["rules"] == 3 and figure["failedTint"] == "rgb(255, 235, 233)"
