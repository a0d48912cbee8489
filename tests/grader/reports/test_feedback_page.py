"""A student's feedback.html: what it draws is what report.json holds, it is self-contained and deterministic, it
follows the hidden-test policy, and a broken or partial result still renders. The layouts are real: jax computes
them here for 1-D and 2-D meshes, replicated and partially replicated, exactly as the checks record them.

The browser tests open the page in Chromium (tests/grader/browser.py) and measure what it shows; they skip with
the reason where Playwright or Chromium is missing."""

from __future__ import annotations

import base64
import hashlib
import html
import json
import re
import shutil
import subprocess
import sys
from html.parser import HTMLParser
from pathlib import Path

import jax
import pytest

from grader.checks.sharding import layout_of
from grader.commands import student
from grader.core.options import VISIBILITIES
from grader.core.results import (
    Category,
    Collective,
    CollectivesCheck,
    Environment,
    IsolationRecord,
    LayoutCheck,
    SpeedFigures,
    TestResult,
)
from grader.course import catalog, paths
from grader.grading.results import GradingResults, score_exercise
from grader.reports import feedback_page, pictures
from grader.reports.writers import write_all

EX04, EX06, EX10, EX12 = (catalog.get(n) for n in ("ex04", "ex06", "ex10", "ex12"))
SCRIPT = "<script>alert(1)</script><img src=http://example.com/x.png>"


def named(mesh_shape, axes, spec, shape):
    mesh = jax.make_mesh(
        mesh_shape, axes, devices=jax.devices()[: int(__import__("math").prod(mesh_shape))]
    )
    return layout_of(shape, jax.NamedSharding(mesh, jax.P(*spec)))


# Real layouts: a 1-D mesh, sharded against replicated; a 2-D mesh, sharded against partially replicated; a 3-D
# array split along its third dimension too; a non-array.
ROWS_8 = named((8,), ("data",), ("data", None), (64, 10))
REPLICATED_8 = named((8,), ("data",), (), (64, 10))
GRID_2x4 = named((2, 4), ("x", "y"), ("x", "y"), (8, 16))
PARTIAL_2x4 = named((2, 4), ("x", "y"), ("x", None), (8, 16))
# PARTIAL_2x4's device sets, on columns
COLUMNS_2x4 = named((2, 4), ("x", "y"), (None, "x"), (8, 16))
DEEP = named((2, 4), ("x", "y"), (None, "x", "y"), (2, 4, 8))
VECTOR = named((4,), ("data",), ("data",), (12,))

FIGURES = SpeedFigures(
    label="layer vs replicated",
    speedup=2.7,
    spread=(2.4, 3.1),
    baseline_s=0.012,
    candidate_s=0.0044,
    repeats=15,
    threshold=1.5,
    devices=8,
    cores=2,
    platform="cpu",
    calibration=3.4,
    policy="enforce",
)
SLOW = SpeedFigures(
    label="train_step vs one device",
    speedup=0.8,
    spread=(0.7, 0.95),
    baseline_s=0.01,
    candidate_s=0.0125,
    repeats=21,
    threshold=1.2,
    devices=4,
    cores=2,
    platform="cpu",
    policy="enforce",
)


def test_result(exercise, name, category, *, hidden=False, message="", **facts) -> TestResult:
    file = "test_hidden" if hidden else "test_visible"
    return TestResult(
        nodeid=f"tests/exercises/{exercise.id}/{file}.py::{name}",
        exercise=exercise.id,
        hidden=hidden,
        weight=1.0,
        category=str(category),
        message=message,
        duration=0.5,
        **facts,
    )


test_result.__test__ = False


def every_fact() -> GradingResults:
    ex04 = [
        test_result(
            EX04,
            "test_layer_auto",
            Category.FAILED,
            message="output: wrong sharding\n  expected ...\n"
            "  actual ...\nWhich devices hold each block:\n+---+\n| 0 |\n+---+",
            layouts=[LayoutCheck("output", ROWS_8, REPLICATED_8, False)],
        ),
        test_result(
            EX04,
            "test_layer_2d[8dev]",
            Category.FAILED,
            message="output: wrong sharding",
            layouts=[
                LayoutCheck("output", GRID_2x4, PARTIAL_2x4, False),
                LayoutCheck("hidden_state", PARTIAL_2x4, COLUMNS_2x4, False),
                LayoutCheck("params['w']", DEEP, DEEP, True),
                LayoutCheck("bias", VECTOR, None, False),
            ],
        ),
        test_result(EX04, "test_layer_speedup", Category.PASSED, speedup=FIGURES),
        test_result(
            EX04,
            "test_hidden_speed[4dev]",
            Category.FAILED,
            hidden=True,
            speedup=SLOW,
            message=f"speedup 0.80x below 1.20x {SCRIPT}",
        ),
        test_result(
            EX04,
            "test_layer_hidden_values[2dev]",
            Category.FAILED,
            hidden=True,
            message="max abs error 0.25 at (3, 1)",
        ),
        test_result(EX04, "test_layer_hidden_ok[2dev]", Category.PASSED, hidden=True),
    ]
    collectives = CollectivesCheck(
        "case3_reducescatter",
        (
            Collective(
                "all-reduce",
                2,
                ("x",),
                "%ar = f32[8,8]{1,0} all-reduce(%f), replica_groups={{0,1}}",
            ),
            Collective("all-gather", 4, None, "%ag = f32[8,32] all-gather(%g)"),
        ),
        passed=False,
        present=("reduce-scatter",),
        absent=("all-reduce",),
    )
    ex06 = [
        test_result(
            EX06,
            "test_collectives[2dev-case3]",
            Category.FAILED,
            message="uses all-reduce x1",
            collectives=[collectives],
        ),
        test_result(
            EX06,
            "test_own_rule",
            Category.PASSED,
            collectives=[CollectivesCheck("f", (), passed=None)],
        ),
    ]
    ex10 = [
        test_result(
            EX10,
            "test_crash[8dev]",
            Category.CRASHED,
            message="the worker died: signal 11 (SIGSEGV)",
        ),
        test_result(EX10, "test_timeout", Category.TIMEOUT, message="ran past its 10 s limit"),
    ]
    exercises = {
        EX04.id: score_exercise(EX04, ex04),
        EX06.id: score_exercise(EX06, ex06),
        EX10.id: score_exercise(EX10, ex10),
        EX12.id: score_exercise(
            EX12,
            [
                test_result(
                    EX12,
                    "test_join",
                    Category.NOT_ATTEMPTED,
                    message="not attempted: module missing",
                )
            ],
            "module missing: not attempted",
        ),
    }
    environment = Environment(
        devices=8,
        cores=2,
        timing="enforce",
        parallel=2,
        limits={"test_timeout": None, "worker_memory_bytes": 6 << 30},
        time_limits={"source": "calibrated here"},
        isolation=IsolationRecord({"level": "bubblewrap", "not_applied": []}),
    )
    return GradingResults(
        f"alice {SCRIPT}",
        exercises,
        environment,
        problems=[f"not graded: notes.txt {SCRIPT}"],
        duration=42.0,
    )


class Parsed(HTMLParser):
    """The page's grids, blocks, charts and tests, as the HTML says them."""

    def __init__(self, page: str):
        super().__init__()
        self.grids: list[dict] = []  # {"role", "check", "test", "blocks": [(devices, label, fill)]}
        self.tests: list[dict] = []
        self.charts: list[dict] = []
        self.styles: list[str] = []
        self.scripts = 0
        self.addresses: list[str] = []  # every href, src, xlink:href, action
        self._test = self._check = self._block = None
        self._in_text = self._in_style = False
        self.feed(page)

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag == "script" or any(k.startswith("on") for k in a) or "style" in a:
            self.scripts += 1
        self.addresses += [
            v for k, v in a.items() if k in ("href", "src", "xlink:href", "action", "srcset")
        ]
        if tag == "article":
            self._test = a["data-nodeid"]
            self.tests.append(a)
        if tag == "figure" and "layout-check" in a.get("class", ""):
            self._check = a["data-name"]
        if tag == "figure" and a.get("class") == "grid":
            self.grids.append(
                {"role": a["data-role"], "check": self._check, "test": self._test, "blocks": []}
            )
        if tag == "g" and a.get("class") == "block":
            self._block = [tuple(map(int, a["data-devices"].split(","))), "", None]
            self.grids[-1]["blocks"].append(self._block)
        if tag == "rect" and self._block is not None:
            self._block[2] = a["fill"]
        if tag == "text" and self._block is not None:
            self._in_text = True
        if tag == "svg" and a.get("class") == "speed-chart":
            self.charts.append({**a, "test": self._test})
        self._in_style = tag == "style"

    def handle_endtag(self, tag):
        if tag == "g":
            self._block = None
        self._in_text = self._in_style = False

    def handle_data(self, data):
        if self._in_text and self._block is not None:
            self._block[1] += data
        if self._in_style:
            self.styles.append(data)


@pytest.fixture(scope="module")
def results() -> GradingResults:
    return every_fact()


@pytest.fixture(scope="module")
def written(results, tmp_path_factory) -> Path:
    """write_all's folder: report.json and feedback.html from the same results."""
    out = tmp_path_factory.mktemp("graded")
    write_all(results, out)
    return out


def report_layouts(out: Path) -> dict[tuple[str, str], LayoutCheck]:
    report = GradingResults.from_dict(json.loads((out / "report.json").read_text()))
    return {(t.nodeid, c.name): c for t in report.tests() for c in t.layouts}


# -- the HTML ------------------------------------------------------------------------------------------------


def test_every_grid_shows_the_devices_report_json_holds(written):
    parsed = Parsed((written / "feedback.html").read_text())
    checks = report_layouts(written)
    drawn = {(g["test"], g["check"], g["role"]): g for g in parsed.grids}
    assert {(t, c) for t, c, _ in drawn} == set(checks)
    for (test, name), check in checks.items():
        for role, layout in (("expected", check.expected), ("actual", check.actual)):
            grid = drawn[test, name, role]
            if layout is None:
                assert grid["blocks"] == []
                continue
            # Every block of the layout, in a cell of its own labelled with its devices (and nothing
            # else): a 3-D layout draws one grid per block of its third dimension.
            wanted = sorted(block.devices for block in layout.blocks)
            assert sorted(devices for devices, _, _ in grid["blocks"]) == wanted
            for devices, label, _ in grid["blocks"]:
                assert expand(label) == list(devices)


def expand(label: str) -> list[int]:
    """ "0-3,6" -> [0, 1, 2, 3, 6]."""
    found = []
    for part in label.split(","):
        low, _, high = part.partition("-")
        found += range(int(low), int(high or low) + 1)
    return found


def test_the_same_devices_have_the_same_colour_in_both_grids(written):
    parsed = Parsed((written / "feedback.html").read_text())
    pairs: dict[tuple, list[dict]] = {}
    for grid in parsed.grids:
        pairs.setdefault((grid["test"], grid["check"]), []).append(grid)
    compared = 0
    for expected, actual in pairs.values():
        colour = {}
        for devices, _, fill in expected["blocks"] + actual["blocks"]:
            assert colour.setdefault(devices, fill) == fill
        fills = list(colour.values())
        assert len(set(fills)) == len(fills), "two device sets share a colour"
        compared += bool(
            set(d for d, _, _ in expected["blocks"]) & set(d for d, _, _ in actual["blocks"])
        )
    assert compared == 2  # rows against columns, and the passed 3-D one, share their device sets


def test_the_grids_of_a_2d_mesh_and_a_partial_replication():
    colours = pictures.device_colours([GRID_2x4, PARTIAL_2x4])
    sharded = Parsed(pictures.device_grid(GRID_2x4, colours, "expected")).grids[0]["blocks"]
    partial = Parsed(pictures.device_grid(PARTIAL_2x4, colours, "actual")).grids[0]["blocks"]
    assert [d for d, _, _ in sharded] == [(i,) for i in range(8)]
    assert [(d, label) for d, label, _ in partial] == [((0, 1, 2, 3), "0-3"), ((4, 5, 6, 7), "4-7")]
    vector = Parsed(
        pictures.device_grid(VECTOR, pictures.device_colours([VECTOR]), "expected")
    ).grids[0]["blocks"]
    assert [d for d, _, _ in vector] == [(0,), (1,), (2,), (3,)]  # one row of four


def test_the_speed_chart_carries_the_figures(written):
    charts = {
        c["test"].rsplit("::", 1)[1]: c
        for c in Parsed((written / "feedback.html").read_text()).charts
    }
    met, missed = charts["test_layer_speedup"], charts["test_hidden_speed[4dev]"]
    assert (float(met["data-speedup"]), float(met["data-threshold"])) == (2.7, 1.5)
    assert (float(met["data-low"]), float(met["data-high"]), float(met["data-calibration"])) == (
        2.4,
        3.1,
        3.4,
    )
    assert "data-calibration" not in missed and float(missed["data-speedup"]) == 0.8


def test_nothing_from_a_result_becomes_markup_and_nothing_runs(written):
    page = (written / "feedback.html").read_text()
    parsed = Parsed(page)
    assert parsed.scripts == 0
    assert "<script>" not in page and "<img" not in page and "&lt;script&gt;alert(1)" in page
    # within the page
    assert parsed.addresses and all(address.startswith("#") for address in parsed.addresses)
    csp = html.unescape(
        re.search(r'http-equiv="Content-Security-Policy" content="([^"]+)"', page)[1]
    )
    assert csp.startswith("default-src 'none'; ")
    digest = base64.b64encode(hashlib.sha256("".join(parsed.styles).encode()).digest()).decode()
    # the one stylesheet, by its hash: nothing else may style
    assert f"style-src 'sha256-{digest}'" in csp


def test_the_same_results_give_the_same_bytes(results):
    assert feedback_page.feedback_page(every_fact()) == feedback_page.feedback_page(results)


@pytest.mark.parametrize("visibility", VISIBILITIES)
def test_hidden_tests_follow_the_visibility_policy(results, visibility):
    page = feedback_page.feedback_page(results, hidden_visibility=visibility)
    hidden = [t for t in results.tests() if t.hidden]
    shown = [t for t in Parsed(page).tests if t["data-hidden"] == "true"]
    if visibility == "hidden":
        assert (
            shown == []
            and "max abs error 0.25" not in page
            and "test_layer_hidden_values" not in page
        )
        assert "3 hidden tests, shown to instructors only." in page
        # no per-exercise score that would tell how hidden tests went
        assert "of 3 visible tests passed" in page
    else:
        assert len(shown) == len(hidden) and "max abs error 0.25 at (3, 1)" in page
    assert "def test_" not in page  # names and messages, never code


def test_a_broken_or_partial_result_still_renders():
    empty = GradingResults("empty.zip", {}, problems=["the zip holds no exercise module"])
    page = feedback_page.feedback_page(empty)
    assert "the zip holds no exercise module" in page and "0/0" in page
    untouched = GradingResults(
        "nothing", {EX12.id: score_exercise(EX12, [], "module missing: not attempted")}
    )
    assert "module missing: not attempted" in feedback_page.feedback_page(untouched)
    with pytest.raises(ValueError, match="hidden_visibility must be one of"):
        feedback_page.feedback_page(empty, hidden_visibility="later")


def test_check_html_writes_the_page_of_the_visible_tests(tmp_path):
    folder = tmp_path / "work"
    folder.mkdir()
    wrong = (
        catalog.get("ex01")
        .solution_path()
        .read_text()
        .replace(
            "return jax.device_put(x, NamedSharding(mesh, spec))",
            "return jax.device_put(x, NamedSharding(mesh, jax.P()))   # forgot the spec",
        )
    )
    (folder / catalog.get("ex01").module_file).write_text(wrong)
    done = subprocess.run(
        [sys.executable, "-m", "grader.cli", "check", "ex01", "--impl", str(folder), "--html"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
    )
    page = tmp_path / ".shardlab" / "feedback.html"
    assert done.returncode == 1 and f"Feedback page: {page.relative_to(tmp_path)}" in done.stdout
    # the terminal output is as before
    assert "✗ test_place_rows_and_columns  failed" in done.stdout
    parsed = Parsed(page.read_text())
    assert parsed.tests and all(t["data-hidden"] == "false" for t in parsed.tests)
    assert (
        any(g["blocks"] for g in parsed.grids)
        and "Only the visible tests were run" in page.read_text()
    )
    again = tmp_path / "elsewhere.html"
    student.check_command("ex01", impl=folder, html=again)
    assert again.read_text().startswith("<!DOCTYPE html>")


# -- in a browser ----------------------------------------------------------------------------------------------


def test_the_page_loads_nothing_and_logs_no_error(browser, page_visit, written):
    with page_visit(browser, written / "feedback.html") as seen:
        assert seen.page.locator("h1").inner_text() == "shardlab feedback"
        assert seen.page.locator("figure.layout-check").count() == 5
    assert seen.requests == [] and seen.console == [] and seen.errors == []


def test_the_browser_draws_what_report_json_holds(browser, page_visit, written):
    """Labels as rendered, and each rect's computed fill: the same device set, the same colour, in both grids."""
    checks = report_layouts(written)
    with page_visit(browser, written / "feedback.html", javascript=True) as seen:
        grids = seen.page.evaluate("""() => [...document.querySelectorAll('figure.layout-check')].map(f => ({
            test: f.closest('article').dataset.nodeid, check: f.dataset.name,
            grids: [...f.querySelectorAll('figure.grid')].map(g => ({role: g.dataset.role,
                blocks: [...g.querySelectorAll('g.block')].map(b => ({devices: b.dataset.devices,
                    label: b.querySelector('text').textContent,
                    fill: getComputedStyle(b.querySelector('rect')).fill,
                    visible: b.querySelector('text').getBBox().width > 0}))}))}))""")
    assert len(grids) == len(checks)
    for figure in grids:
        check = checks[figure["test"], figure["check"]]
        fills = {}
        for grid in figure["grids"]:
            layout = check.expected if grid["role"] == "expected" else check.actual
            if layout is None:
                assert grid["blocks"] == []
                continue
            assert {b["devices"] for b in grid["blocks"]} <= {
                ",".join(map(str, b.devices)) for b in layout.blocks
            } or len(layout.global_shape) > 2
            for block in grid["blocks"]:
                assert expand(block["label"]) == [int(d) for d in block["devices"].split(",")]
                assert fills.setdefault(block["devices"], block["fill"]) == block["fill"]
        assert len(set(fills.values())) == len(fills)


def test_the_chart_bars_measure_the_figures(browser, page_visit, written):
    with page_visit(browser, written / "feedback.html", javascript=True) as seen:
        seen.page.evaluate("() => document.querySelectorAll('details').forEach(d => d.open = true)")
        measured = seen.page.evaluate("""() => [...document.querySelectorAll('svg.speed-chart')].map(svg => {
            const box = svg.getBoundingClientRect(), bar = svg.querySelector('rect.bar').getBoundingClientRect(),
                  line = svg.querySelector('line.threshold').getBoundingClientRect(),
                  whisker = svg.querySelector('g.iqr').getBoundingClientRect();
            return {test: svg.closest('article').dataset.nodeid, origin: bar.left - box.left, bar: bar.width,
                    threshold: line.left + line.width / 2 - box.left, low: whisker.left - box.left,
                    high: whisker.right - box.left};
        })""")
    figures = {
        t.nodeid: t.speedup
        for t in GradingResults.from_dict(json.loads((written / "report.json").read_text())).tests()
        if t.speedup
    }
    assert len(measured) == len(figures) == 2
    for chart in measured:
        fig = figures[chart["test"]]
        scale = chart["bar"] / fig.speedup  # px per 1x
        assert chart["threshold"] - chart["origin"] == pytest.approx(fig.threshold * scale, abs=1.5)
        assert chart["low"] - chart["origin"] == pytest.approx(fig.spread[0] * scale, abs=1.5)
        assert chart["high"] - chart["origin"] == pytest.approx(fig.spread[1] * scale, abs=1.5)


@pytest.mark.parametrize("visibility", ["hidden", "after_due_date"])
def test_the_browser_shows_hidden_tests_as_the_policy_says(
    browser, page_visit, results, tmp_path, visibility
):
    path = feedback_page.write_feedback_html(
        results, tmp_path / "feedback.html", hidden_visibility=visibility
    )
    with page_visit(browser, path) as seen:
        hidden = seen.page.locator("article[data-hidden=true]")
        text = seen.page.locator("body").inner_text()
        assert hidden.count() == (0 if visibility == "hidden" else 3)
        assert ("max abs error 0.25" in text) == (visibility != "hidden")
    assert seen.console == [] and seen.requests == []


def test_a_broken_result_renders_and_prints(browser, page_visit, tmp_path):
    broken = GradingResults(
        "broken",
        {
            EX10.id: every_fact().exercises[EX10.id],
            EX12.id: score_exercise(EX12, [], "module missing: not attempted"),
        },
        problems=["the harness died while collecting: exit 1"],
    )
    path = feedback_page.write_feedback_html(broken, tmp_path / "feedback.html")
    with page_visit(browser, path) as seen:
        assert "the harness died while collecting" in seen.page.locator(".problems").inner_text()
        assert seen.page.locator("article[data-category=crashed]").count() == 1
        pdf = seen.page.pdf()  # printable: Chromium lays it out on paper
    assert pdf.startswith(b"%PDF") and seen.console == []


# -- the example submission, graded --------------------------------------------------------------------------


@pytest.mark.slow
def test_grading_the_example_writes_a_page_true_to_its_report(browser, page_visit, tmp_path):
    """`shardlab grade` end to end on the example submission (three exercises: layouts on 1-D and 2-D meshes,
    collectives, speed figures): the page holds every fact report.json holds, and loads nothing."""
    out = tmp_path / "graded"
    example = paths.REPO_ROOT / "examples" / "submission"
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "grader.cli",
            "grade",
            str(example),
            "--out",
            str(out),
            "--exercise",
            "ex04",
            "--exercise",
            "ex06",
            "--exercise",
            "ex10",
            "--timing",
            "report",
            "--quiet",
        ],
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    report = GradingResults.from_dict(json.loads((out / "report.json").read_text()))
    page = (out / "feedback.html").read_text()
    parsed = Parsed(page)
    assert {t["data-nodeid"] for t in parsed.tests} == {t.nodeid for t in report.tests()}
    assert len(parsed.grids) == 2 * sum(len(t.layouts) for t in report.tests())
    assert len(parsed.charts) == sum(t.speedup is not None for t in report.tests()) > 0
    # a table per program the checks read, each once, however many checks read it
    assert page.count('class="program-check"') == sum(len(t.programs) for t in report.tests()) > 0
    assert 'class="collectives-check"' not in page
    assert any(
        len(layout.mesh_sizes) == 2
        for t in report.tests()
        for c in t.layouts
        for layout in [c.expected]
    )
    with page_visit(browser, out / "feedback.html") as seen:
        assert seen.page.locator("section.exercise").count() == 3
    assert seen.requests == [] and seen.console == [] and seen.errors == []
    shutil.rmtree(out)


def test_the_page_carries_the_hint_of_an_exercise_that_lost_points_and_names_1d_grids():
    vector = test_result(
        EX04,
        "test_bias",
        Category.FAILED,
        message="bias: wrong sharding",
        layouts=[LayoutCheck("bias", VECTOR, VECTOR, False)],
    )
    lost = GradingResults("s", {EX04.id: score_exercise(EX04, [vector])})
    page = feedback_page.feedback_page(lost)
    assert f"<strong>Hint: </strong>{html.escape(EX04.hint, quote=False)}" in page
    assert "bias: which devices hold each block (blocks along its one dimension)" in page
    passed = GradingResults(
        "s", {EX04.id: score_exercise(EX04, [test_result(EX04, "test_ok", Category.PASSED)])}
    )
    assert "Hint: " not in feedback_page.feedback_page(passed)


def test_the_hidden_tests_heading_says_the_courses_visibility_and_no_platform(results):
    """The page is the same on every route: it says when students are meant to see the hidden tests (the
    course's hidden_visibility), never that Gradescope shows them, which only results.json's route does."""
    page = feedback_page.feedback_page(results, hidden_visibility="after_due_date")
    assert "Gradescope" not in page
    assert page.count("for students after the due date (hidden_visibility = after_due_date)") >= 2


@pytest.fixture(scope="module")
def syntax_errors(tmp_path_factory) -> GradingResults:
    """A real grading of two modules with a syntax error each: every test of both ends in the one error."""
    from grader.grading.engine import grade_submission

    folder = tmp_path_factory.mktemp("syntax") / "sub"
    folder.mkdir()
    (folder / "ex01_meshes.py").write_text("def make_mesh_2x4(:\n    pass\n")
    (folder / "ex04_sharded_layer.py").write_text("import jax\n\n\ndef layer(x:\n")
    (folder / "ex02_sharding_properties.ipynb").write_text("{broken")  # refused at intake
    return grade_submission(folder, exercises=["ex01", "ex04"])


def test_a_module_that_cannot_be_imported_is_said_once_per_exercise(syntax_errors):
    """Before, each of the 97 tests carried the syntax error in a card of its own (1,497 elements); now each
    exercise says it once, with its file and line, and lists the tests it stopped a line each."""
    tests = syntax_errors.tests()
    assert len(tests) > 50 and {t.category for t in tests} == {"error"}
    page = feedback_page.feedback_page(syntax_errors, hidden_visibility="after_due_date")
    assert page.count("ex01_meshes.py has a syntax error at line 1") == 1
    assert page.count("ex04_sharded_layer.py has a syntax error at line 4") == 1
    parsed = Parsed(page)
    assert parsed.tests == []  # no test card at all
    stopped = re.findall(r'class="stopped" data-tests="(\d+)"', page)
    assert sorted(map(int, stopped)) == sorted(
        len(e.tests) for e in syntax_errors.exercises.values()
    )
    # every test named, a line each: bounded by the tests, not by a card's size
    assert page.count("<li>") <= len(tests) + 10
    assert page.count("<") < 8 * len(tests)


def test_a_real_grading_records_the_file_intake_refused(syntax_errors):
    """The engine carries intake's refusal into the grading (report.json's "refused"), beside its problems."""
    [refused] = syntax_errors.refused
    assert refused.startswith("ex02_sharding_properties.ipynb is not a readable notebook")
    assert refused in syntax_errors.problems


def test_one_error_needs_every_test_to_end_in_it():
    same = [
        test_result(EX04, f"test_{i}", Category.ERROR, message="ex04.py has a syntax error")
        for i in range(3)
    ]
    assert feedback_page.one_error(same) == "ex04.py has a syntax error"
    other = test_result(EX04, "test_x", Category.ERROR, message="ZeroDivisionError")
    assert feedback_page.one_error([*same, other]) is None
    failed = test_result(EX04, "test_y", Category.FAILED, message="ex04.py has a syntax error")
    assert feedback_page.one_error([*same, failed]) is None
    assert feedback_page.one_error(same[:1]) is None


# -- one test's card ----------------------------------------------------------------------------------------


def test_a_passing_test_is_one_line_with_its_pictures_on_demand():
    passed = test_result(
        EX04,
        "test_layer_auto",
        Category.PASSED,
        message="",
        layouts=[LayoutCheck("output", ROWS_8, ROWS_8, True)],
    )
    card = feedback_page.test_card(passed)
    # the card's first child is a closed <details> whose summary is the test's line
    assert card.startswith('<article class="test"') and "<details><summary" in card
    summary = card[card.index("<summary") : card.index("</summary>")]
    assert "test_layer_auto" in summary and "1/1 points" not in summary  # no score set: 0/0
    assert 'class="layout-check"' in card[card.index("</summary>") :]
    assert " open" not in card
    # with nothing to show, the line alone
    bare = feedback_page.test_card(test_result(EX04, "test_x", Category.PASSED))
    assert "<details" not in bare and 'class="line"' in bare


def test_a_failing_test_opens_with_what_failed_and_folds_what_held():
    held = LayoutCheck("params['w']", DEEP, DEEP, True)
    failed = LayoutCheck("output", GRID_2x4, PARTIAL_2x4, False)
    card = feedback_page.test_card(
        test_result(
            EX04,
            "test_layer_2d",
            Category.FAILED,
            message="output: wrong sharding",
            layouts=[held, failed],
        )
    )
    assert card.index("<header>") < card.index('data-name="output"')
    # the failed check is drawn first and open; the held one after it, one click away
    assert card.index('data-name="output"') < card.index('<details class="held">')
    assert card.index('<details class="held">') < card.index('data-name="params[&#x27;w&#x27;]"')
    assert "1 more that held" in card


def test_a_tests_pictures_are_held_to_their_budget():
    many = [LayoutCheck(f"leaf {i}", GRID_2x4, PARTIAL_2x4, False) for i in range(400)]
    test = test_result(EX04, "test_many", Category.FAILED, message="wrong", layouts=many)
    card = feedback_page.test_card(test)
    drawn = len(re.findall(r'<figure class="layout-check"', card))
    left = int(re.search(r"(\d+) more pictures not drawn", card)[1])
    # the result kept what its facts' bound holds; the page draws what its budget holds, and counts the rest
    assert 0 < drawn < len(test.layouts) and drawn + left == len(test.layouts)
    assert len(card) < feedback_page.PICTURE_CHARS + 10_000
