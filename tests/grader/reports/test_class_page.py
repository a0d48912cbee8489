"""The class page (OUT/index.html of grade-batch): the table, the links, the histograms, what to teach again and
who could not be graded, read from report.json files written by hand into a tmp OUT; then the same page in a
real Chromium. Nothing here runs a grading."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import unquote, urlparse

import pytest

from grader.core.results import Category, TestResult
from grader.course import catalog
from grader.grading.batch import REFUSED, StudentOutcome, student_folder
from grader.grading.results import GradingResults, score_exercise
from grader.reports import class_page as page_module
from grader.reports.class_page import class_page, message_key, write_class_page
from grader.reports.writers import write_report_json

EX01, EX04 = "ex01_meshes", "ex04_sharded_layer"
ODD = 'a"b<c d'  # a name that would break out of an unquoted attribute
MARKUP = "<script>alert('x')</script><b>bold</b>"  # report text that must stay text
VALUES = f"tests/exercises/{EX04}/test_hidden.py::test_layer_values"
MANUAL = f"tests/exercises/{EX04}/test_visible.py::test_layer_manual"
MESH = f"tests/exercises/{EX01}/test_visible.py::test_make_mesh"
DEVICES = f"tests/exercises/{EX01}/test_hidden.py::test_devices_indices"
P, F, E, T, N = (
    Category.PASSED,
    Category.FAILED,
    Category.ERROR,
    Category.TIMEOUT,
    Category.NOT_ATTEMPTED,
)


def case(function: str, params: str, category: Category, message: str = "") -> TestResult:
    exercise = function.split("/")[2]
    weight = catalog.get(exercise).points / 3  # three tests weigh an exercise's points
    return TestResult(
        nodeid=function + params,
        exercise=exercise,
        hidden="test_hidden" in function,
        weight=weight,
        category=category.value,
        message=message,
    )


def results(student: str, ex01: list[Category], ex04: list[tuple[Category, str]]) -> GradingResults:
    """ex01: test_make_mesh[2dev], [4dev], test_devices_indices; ex04: test_layer_values[2dev], [4dev] and
    test_layer_manual, with their messages. Every test of the same weight: ex01's are 10/3 points, ex04's 20/3."""
    mesh2, mesh4, devices = ex01
    ex01_tests = [
        case(MESH, "[2dev]", mesh2, "wrong mesh shape (2,)" if mesh2 is F else ""),
        case(MESH, "[4dev]", mesh4, "wrong mesh shape (4,)" if mesh4 is F else ""),
        case(DEVICES, "", devices, f"devices differ {MARKUP}" if devices is F else ""),
    ]
    (v2, m2), (v4, m4), (manual, mm) = ex04
    ex04_tests = [
        case(VALUES, "[2dev]", v2, m2),
        case(VALUES, "[4dev]", v4, m4),
        case(MANUAL, "", manual, mm),
    ]
    return GradingResults(
        student,
        {
            EX01: score_exercise(catalog.get(EX01), ex01_tests),
            EX04: score_exercise(catalog.get(EX04), ex04_tests),
        },
    )


NOT_ATTEMPTED = [
    (N, "not attempted: ex04: layer"),
    (N, "not attempted: ex04: layer"),
    (N, "not attempted: ex04: layer_manual"),
]
CLASS = {
    # ex01 10/10; ex04 values[2dev] failed: 13.33/20
    "alice": results(
        "alice", [P, P, P], [(F, "max abs error 0.123\n  at index (0, 1)"), (P, ""), (P, "")]
    ),
    # ex01 3.33 (both meshes failed: one student, one message group); ex04 0 (values twice, manual error)
    "bob": results(
        "bob",
        [F, F, P],
        [
            (F, "max abs error 0.456\n  at index (3, 3)"),
            (F, "max abs error 4.5e-07"),
            (E, "ZeroDivisionError: division by zero"),
        ],
    ),
    # ex01 10; ex04 not attempted at all: not counted among ex04's attempts
    "carol": results("carol", [P, P, P], NOT_ATTEMPTED),
    # ex01 10; ex04 values[2dev] timed out: 13.33
    ODD: results(
        ODD, [P, P, P], [(T, f"the test ran longer than 60 s {MARKUP}"), (P, ""), (P, "")]
    ),
    # ex01 6.67 (devices failed); ex04 20
    "zed": results("zed", [P, P, F], [(P, ""), (P, ""), (P, "")]),
}
FAILED_DETAIL = f"exit status 1: Traceback (most recent call last):\n  {MARKUP}"


@dataclass
class Node:
    tag: str
    attrs: dict[str, str]
    children: list = field(default_factory=list)  # Node or str

    @property
    def text(self) -> str:
        return "".join(c if isinstance(c, str) else c.text for c in self.children)

    def all(self, tag: str | None = None, **attrs: str) -> list[Node]:
        found = []
        for child in self.children:
            if isinstance(child, Node):
                if (tag is None or child.tag == tag) and all(
                    child.attrs.get(k.replace("_", "-")) == v for k, v in attrs.items()
                ):
                    found.append(child)
                found += child.all(tag, **attrs)
        return found

    def one(self, tag: str | None = None, **attrs: str) -> Node:
        found = self.all(tag, **attrs)
        assert len(found) == 1, (tag, attrs, len(found))
        return found[0]

    def classes(self) -> set[str]:
        return set(self.attrs.get("class", "").split())


class _Tree(HTMLParser):
    VOID = {"meta", "br", "hr", "img", "link", "input", "col"}

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.root = Node("#root", {})
        self.stack = [self.root]

    def handle_starttag(self, tag, attrs):
        node = Node(tag, {k: v or "" for k, v in attrs})
        self.stack[-1].children.append(node)
        if tag not in self.VOID:
            self.stack.append(node)

    def handle_startendtag(self, tag, attrs):
        self.stack[-1].children.append(Node(tag, {k: v or "" for k, v in attrs}))

    def handle_endtag(self, tag):
        assert self.stack[-1].tag == tag, f"</{tag}> closes <{self.stack[-1].tag}>"
        self.stack.pop()

    def handle_data(self, data):
        self.stack[-1].children.append(data)


def parse(html: str) -> Node:
    tree = _Tree()
    tree.feed(html)
    tree.close()
    assert tree.stack == [tree.root], "an element was left open"
    return tree.root


def make_class(out: Path) -> list[StudentOutcome]:
    """OUT as grade-batch leaves it: the five students' reports, a stand-in feedback.html for all but carol,
    eve whose grading failed, and frank whose report.json is not JSON."""
    outcomes = []
    for student, graded in CLASS.items():
        folder = student_folder(out, student)
        write_report_json(graded, folder / "report.json")
        if student != "carol":
            (folder / "feedback.html").write_text(f"<!DOCTYPE html><title>{len(student)}</title>")
        outcomes.append(StudentOutcome(student, "skipped" if student == "zed" else "graded", 1.0))
    student_folder(out, "eve").mkdir()
    outcomes.append(StudentOutcome("eve", "failed", 3.0, FAILED_DETAIL))
    student_folder(out, "frank").mkdir()
    (student_folder(out, "frank") / "report.json").write_text(
        '{"submission": "frank", "exercises": {'
    )
    outcomes.append(StudentOutcome("frank", "graded", 2.0))
    return outcomes[::-1]  # the order they finished in: the page sorts them


@pytest.fixture
def out(tmp_path) -> Path:
    return tmp_path / "fall-2026"


@pytest.fixture
def written(out) -> tuple[Path, Node]:
    path = write_class_page(out, make_class(out))
    return path, parse(path.read_text(encoding="utf-8"))


def test_the_header_counts_the_class(written):
    path, page = written
    assert path.name == "index.html"
    header = page.all("header")[0]
    # without a course name the page says what it is; the folder is its subtitle, never its title
    assert header.one("h1").text == "shardlab class"
    assert header.one(**{"class": "subtitle"}).text == "graded class in fall-2026"
    assert (
        header.one(data_students="7")
        and header.one(data_graded="5")
        and header.one(data_not_graded="2")
    )
    # totals 23.33, 3.33, 10, 23.33, 26.67: mean 17.33, median 23.33
    figures = header.one(data_mean="17.33")
    assert figures.attrs["data-median"] == "23.33" and "of 30 points" in figures.text


def test_every_student_has_a_row_sorted_by_name(written):
    _, page = written
    rows = [r for r in page.all("tr") if "data-student" in r.attrs]
    assert [r.attrs["data-student"] for r in rows] == [
        ODD,
        "alice",
        "bob",
        "carol",
        "eve",
        "frank",
        "zed",
    ]
    by_name = {r.attrs["data-student"]: r for r in rows}
    cells = [td.text for td in by_name["bob"].all("td")]
    assert cells == ["bob", "3.33/30", "3.33", "0", "graded"]
    # zed was graded by an earlier run (as every student is after an override, which grades nothing)
    assert by_name["zed"].all("td")[-1].text == "graded"
    assert by_name["zed"].attrs["data-status"] == "skipped"
    assert [td.text for td in by_name["eve"].all("td")][1:] == [
        "-",
        "-",
        "-",
        "could not be graded",
    ]
    assert by_name["frank"].attrs["data-status"] == "unreadable"
    assert by_name["alice"].attrs["data-total"] == "23.33"
    assert {
        td.attrs["data-exercise"]: td.classes()
        for td in by_name["alice"].all("td")
        if "data-exercise" in td.attrs
    } == {EX01: {"num", "full"}, EX04: {"num", "partial"}}


def test_names_link_to_their_own_page_relative_and_quoted(written, out):
    _, page = written
    links = {a.text: a.attrs["href"] for a in page.one("table").all("a")}
    assert links == {
        ODD: "students/a%22b%3Cc%20d/feedback.html",
        "alice": "students/alice/feedback.html",
        "bob": "students/bob/feedback.html",
        "zed": "students/zed/feedback.html",
    }
    for name, href in links.items():  # each resolves, from OUT, to that student's page
        assert (out / unquote(href)).resolve() == (
            student_folder(out, name) / "feedback.html"
        ).resolve()
    # carol's page, eve's and frank's do not exist: their names are not links
    assert {"carol", "eve", "frank"} <= {
        span.text for span in page.all("span", **{"class": "student"})
    }


def test_each_exercise_has_its_histogram_mean_and_attempts(written):
    _, page = written
    figures = {
        f.attrs["data-exercise"]: f for f in page.all("figure") if "exercise-stats" in f.classes()
    }
    assert list(figures) == [EX01, EX04]
    # ex01: 10, 3.33, 10, 10, 6.67 of 10; ex04: 13.33, 0, 0, 13.33, 20 of 20
    assert figures[EX01].one("svg").attrs["data-counts"] == "0,0,0,1,0,0,1,0,0,3"
    assert figures[EX04].one("svg").attrs["data-counts"] == "2,0,0,0,0,0,2,0,0,1"
    assert [int(r.attrs["data-count"]) for r in figures[EX04].all("rect")] == [
        2,
        0,
        0,
        0,
        0,
        0,
        2,
        0,
        0,
        1,
    ]
    assert (figures[EX01].attrs["data-attempted"], figures[EX04].attrs["data-attempted"]) == (
        "5",
        "4",
    )
    assert "mean 8/10, attempted by 5 of 5" in figures[EX01].text
    assert "mean 9.33/20, attempted by 4 of 5" in figures[EX04].text


def test_what_to_teach_again_groups_failures_by_function_and_message(written):
    _, page = written
    section = page.one("section", id="teach-again")
    entries = section.all("article")
    # ex04 values: alice, bob, the odd name of 4 attempts (carol did not attempt); manual: bob, exactly a
    # quarter. ex01's two tests are failed by 1 of 5 each (bob twice over the parameters): below a quarter.
    assert [
        (e.attrs["data-test"], e.attrs["data-failing"], e.attrs["data-attempted"]) for e in entries
    ] == [(VALUES, "3", "4"), (MANUAL, "1", "4")]
    assert entries[0].attrs["data-not-attempted"] == "1" and "carol" not in section.text
    assert "failed by 3 of 4 (75%); 1 did not attempt it" in entries[0].text
    assert "hidden test" in entries[0].text and "hidden test" not in entries[1].text
    groups = [(g.attrs["data-key"], g.attrs["data-count"]) for g in entries[0].all("li")]
    # bob's two failed parameters fall in one group, counted once; the numbers masked
    assert groups == [
        ("failed: max abs error #", "2"),
        (f"timeout: the test ran longer than # s {MARKUP}", "1"),
    ]
    example = entries[0].all("li")[0].one("pre").text
    # alice's, the first by name, in full
    assert example == "failed: max abs error 0.123\n  at index (0, 1)"
    assert "at least 25%" in section.text and "at most 20" in section.text


def test_the_rule_caps_the_list_and_masks_only_numbers(out):
    tests = [
        case(f"tests/exercises/{EX04}/test_hidden.py::test_{i:02d}", "", F, f"wrong {i}")
        for i in range(25)
    ]
    graded = GradingResults("x", {EX04: score_exercise(catalog.get(EX04), tests)})
    write_report_json(graded, student_folder(out, "x") / "report.json")
    page = parse(class_page(out, [StudentOutcome("x", "graded")]))
    entries = page.one("section", id="teach-again").all("article")
    assert len(entries) == page_module.TEACH_MAX == 20
    assert message_key("max abs error 0.123 at [2dev]\nmore") == "max abs error # at [#dev]"
    assert (
        message_key("ex04: float32 of shape (8, 4), 0x7f3a") == "ex04: float32 of shape (#, #), #"
    )


def test_who_could_not_be_graded_and_why(written):
    _, page = written
    items = {
        li.attrs["data-student"]: li for li in page.one("ul", **{"class": "not-graded"}).all("li")
    }
    assert list(items) == ["eve", "frank"]
    assert items["eve"].one("pre").text == FAILED_DETAIL
    assert "report.json cannot be read: JSONDecodeError" in items["frank"].text
    assert "Could not be graded (2)" in page.one("section", id="not-graded").text


def test_a_graded_student_without_a_report_is_listed(out):
    student_folder(out, "ghost").mkdir(parents=True)
    page = parse(class_page(out, [StudentOutcome("ghost", "graded")]))
    item = page.one("ul", **{"class": "not-graded"}).one("li", data_student="ghost")
    assert "report.json does not exist" in item.text
    assert "No exercise was graded." in page.text and "no scores" in page.text


def test_a_refused_student_is_listed_and_never_linked_to_another_folder(out):
    """A student refused for a name that differs only in case from another's: on a case-insensitive disk their
    folder is the other's, whose page is not theirs."""
    other = student_folder(out, "bob")
    other.mkdir(parents=True)
    (other / "feedback.html").write_text("<!DOCTYPE html><title>bob</title>")
    page = parse(
        class_page(out, [StudentOutcome("bob", REFUSED, detail="Bob and bob differ only in case")])
    )
    item = page.one("ul", **{"class": "not-graded"}).one("li", data_student="bob")
    assert "not graded" in item.text and "differ only in case" in item.text
    assert not page.one("table").all("a")


def test_report_text_never_becomes_markup(written):
    path, page = written
    html = path.read_text(encoding="utf-8")
    assert "<script" not in html and "<b>" not in html and "<img" not in html
    # a message and eve's detail
    assert html.count("&lt;script&gt;alert(&#x27;x&#x27;)&lt;/script&gt;") >= 2
    assert 'data-student="a&quot;b&lt;c d"' in html
    assert (
        not page.all("script")
        and not page.all("b")
        and not any("style" in n.attrs for n in page.all())
    )


def test_the_same_inputs_give_the_same_bytes(out):
    outcomes = make_class(out)
    first = class_page(out, outcomes)
    assert class_page(out, list(reversed(outcomes))) == first
    assert write_class_page(out, outcomes).read_text(encoding="utf-8") == first


# -- in a browser ----------------------------------------------------------------------------------------

# `browser` (Chromium launched once, or a skip saying what is missing) and `page_visit` come from conftest.py.


def test_the_page_in_chromium_fetches_nothing_and_links_to_the_students(
    browser, page_visit, written, out
):
    path, _ = written
    with page_visit(browser, path) as seen:
        page = seen.page
        assert page.title() == "shardlab class: fall-2026"
        links = page.locator("table.students a")
        assert links.count() == 4
        targets = {
            links.nth(i).inner_text(): links.nth(i).evaluate("a => a.href") for i in range(4)
        }
        bars = {
            figure.get_attribute("data-exercise"): [
                int(r.get_attribute("data-count")) for r in figure.locator("rect.bin").all()
            ]
            for figure in page.locator("figure.exercise-stats").all()
        }
        heights = [
            float(r.get_attribute("height"))
            for r in page.locator(f"[data-exercise='{EX04}'] rect.bin").all()
        ]
        page.get_by_text("one message in full").first.click()  # a <details> opens without script
        assert page.locator("#teach-again pre").first.is_visible()
        assert seen.requests == [] and seen.console == [] and seen.errors == []
    for name, url in targets.items():
        assert url == (student_folder(out, name) / "feedback.html").resolve().as_uri()
        assert (student_folder(out, name) / "feedback.html").is_file()
    assert bars == {EX01: [0, 0, 0, 1, 0, 0, 1, 0, 0, 3], EX04: [2, 0, 0, 0, 0, 0, 2, 0, 0, 1]}
    assert heights[0] == heights[6] == 52 and heights[9] == 26 and heights[1] == 0


def test_the_links_open_the_students_pages(browser, page_visit, written, out):
    """Each link, as Chromium resolves it, opens that student's stand-in feedback.html."""
    path, _ = written
    with page_visit(browser, path) as seen:
        hrefs = seen.page.locator("table.students a").evaluate_all(
            "links => links.map(a => a.href)"
        )
    assert len(hrefs) == 4
    for href in hrefs:
        target = Path(unquote(urlparse(href).path))
        assert (
            target.parent.parent == student_folder(out, "").resolve()
            and target.name == "feedback.html"
        )
        with page_visit(browser, target) as opened:
            assert opened.page.title() == str(len(target.parent.name))
            assert opened.requests == [] and opened.errors == []


# -- the course's name, the status, refused files, the "why" column ------------------------------------


def test_the_course_names_the_page_and_the_folder_is_its_subtitle(out):
    page = parse(class_page(out, make_class(out), course_name="Parallel JAX, autumn 2026"))
    assert page.one("h1").text == "Parallel JAX, autumn 2026"
    assert page.one("head").one("title").text == "Parallel JAX, autumn 2026: fall-2026"
    assert "fall-2026" in page.one(**{"class": "subtitle"}).text


def late(student: str) -> GradingResults:
    """alice's grading with a late ex04 (20% off) and a regrade of ex01 recorded."""
    from grader.course.term import Lateness
    from grader.grading.results import Regrade

    graded = CLASS[student]
    ex04 = graded.exercises[EX04]
    late_ex04 = type(ex04)(
        ex04.id,
        ex04.title,
        ex04.max_score,
        ex04.tests,
        ex04.note,
        ex04.bonus,
        Lateness(
            "2026-10-13T23:59:00+00:00",
            "2026-10-12T23:59:00+00:00",
            86400.0,
            20.0,
            "1 d after the due date (2026-10-12T23:59:00+00:00): "
            + "a long reason " * 30
            + "20% off",
        ),
    )
    return GradingResults(
        student,
        {EX01: graded.exercises[EX01], EX04: late_ex04},
        regrades=[Regrade(EX01, "2026-10-07T10:00:00+00:00", 3.33, 10.0)],
        problems=["ex01_meshes.ipynb is not a readable notebook (JSONDecodeError: x): not graded"],
        refused=["ex01_meshes.ipynb is not a readable notebook (JSONDecodeError: x): not graded"],
    )


def test_a_refused_file_of_a_graded_student_is_on_the_class_page(out):
    """Intake refused alice's notebook but graded her module: the table's status and a section say so, not
    only her own page."""
    write_report_json(late("alice"), student_folder(out, "alice") / "report.json")
    write_report_json(CLASS["bob"], student_folder(out, "bob") / "report.json")
    page = parse(
        class_page(out, [StudentOutcome("alice", "graded"), StudentOutcome("bob", "graded")])
    )
    rows = {r.attrs["data-student"]: r for r in page.all("tr") if "data-student" in r.attrs}
    assert (
        rows["alice"].all("td")[-2].text
        == "graded; regraded ex01_meshes at 2026-10-07T10:00:00+00:00; 1 file refused"
    )
    assert rows["bob"].all("td")[-2].text == "graded"
    section = page.one("section", id="refused")
    assert [li.attrs["data-student"] for li in section.all("li", data_refused="1")] == ["alice"]
    assert "ex01_meshes.ipynb is not a readable notebook" in section.text


def test_the_status_names_each_exercise_regraded_once(out):
    """Five re-runs once grew a student's status by a line each: an exercise regraded again is counted."""
    from grader.grading.results import Regrade

    graded = dataclasses.replace(
        CLASS["bob"],
        regrades=[Regrade(EX01, f"2026-10-0{day}T10:00:00+00:00", 3.33, 10.0) for day in (5, 6, 7)]
        + [Regrade(EX04, "2026-10-06T09:00:00+00:00", 0.0, 0.0)],
    )
    write_report_json(graded, student_folder(out, "bob") / "report.json")
    page = parse(class_page(out, [StudentOutcome("bob", "graded")]))
    row = next(r for r in page.all("tr") if r.attrs.get("data-student") == "bob")
    assert row.all("td")[-1].text == (
        "graded; regraded ex01_meshes at 2026-10-07T10:00:00+00:00 (3 times); regraded "
        "ex04_sharded_layer at 2026-10-06T09:00:00+00:00"
    )


def test_no_refused_section_when_nothing_was_refused(written):
    _, page = written
    assert not page.all("section", id="refused")


def test_the_why_column_wraps_inside_the_window(browser, page_visit, out):
    """A long reason wraps within its cell, and at a laptop's width the whole "why" cell is on screen."""
    outcomes = make_class(out)
    write_report_json(late("alice"), student_folder(out, "alice") / "report.json")
    path = write_class_page(out, outcomes)
    for width in (1400, 1000):
        with page_visit(browser, path) as seen:
            seen.page.set_viewport_size({"width": width, "height": 900})
            cell = seen.page.locator("tr[data-student='alice'] td.why")
            box = cell.bounding_box()
            overflow = cell.evaluate("td => td.scrollWidth - td.clientWidth")
            lines = cell.locator("li").first.evaluate(
                "li => Math.round(li.getBoundingClientRect().height / "
                "parseFloat(getComputedStyle(li).lineHeight))"
            )
        assert overflow <= 0, (width, overflow)
        assert lines > 1, (width, lines)
        if width == 1400:
            assert box["x"] + box["width"] <= width, box


def test_with_thirteen_exercises_the_status_and_why_stay_in_a_1400_px_window(
    browser, page_visit, out
):
    """An instructor's term of 13 exercises ran both columns off a 1400 px window."""
    many = [e for e in catalog.EXERCISES][:13]
    graded = late("alice")
    exercises = {
        e.id: score_exercise(
            e, [TestResult(f"tests/exercises/{e.id}/test_hidden.py::t", e.id, True, 1.0, P)]
        )
        for e in many
    }
    exercises[EX04] = graded.exercises[EX04]  # late, with a long reason
    graded.exercises = exercises
    write_report_json(graded, student_folder(out, "alice") / "report.json")
    path = write_class_page(out, [StudentOutcome("alice", "graded")])
    with page_visit(browser, path) as seen:
        seen.page.set_viewport_size({"width": 1400, "height": 900})
        row = seen.page.locator("tr[data-student='alice']")
        assert row.locator("td[data-exercise]").count() == 13
        for cell in ("td.status", "td.why"):
            box = row.locator(cell).bounding_box()
            assert box["x"] + box["width"] <= 1400, (cell, box)
        page = seen.page.evaluate(
            "document.documentElement.scrollWidth - document.documentElement.clientWidth"
        )
    assert page <= 0, page


def test_after_an_override_the_statuses_say_graded_and_who_was_adjusted(out):
    """An override grades nothing: every student read back from OUT is "skipped" to it, and the page still
    says graded, with "adjusted" for the student the adjustment names."""
    from grader.commands.term import class_outcomes, make_adjustment, record_override
    from grader.course import term

    make_class(out)
    (out / "grades.csv").write_text("student,status\n")
    course_file = out.parent / "course.toml"
    course_file.write_text(
        'name = "Autumn"\n[[assignment]]\nname = "w1"\nexercises = ["ex01", "ex04"]\n'
    )
    course = term.load(course_file)
    assert {o.status for o in class_outcomes(out) if o.student == "bob"} == {"skipped"}
    adjustment = make_adjustment("bob", "ex04", None, None, 2.0, "flaky timing", "Ann")
    published = record_override(out, course, adjustment, "after_due_date")
    page = parse(published.page.read_text(encoding="utf-8"))
    rows = {r.attrs["data-student"]: r for r in page.all("tr") if "data-student" in r.attrs}
    status = {
        name: row.one("td", **{"class": "status status-ok"}).text
        for name, row in rows.items()
        if row.all("td", **{"class": "status status-ok"})
    }
    assert status["bob"] == "graded; adjusted"
    assert status["alice"] == status["zed"] == "graded"
    assert "graded earlier" not in page.text
    assert page.one("h1").text == "Autumn"


def test_a_refused_files_name_never_becomes_markup(out):
    """A student names a file as they like: its name reaches the class page as text."""
    graded = late("alice")
    graded.refused = [f"{MARKUP}.py is a symbolic link: ignored"]
    write_report_json(graded, student_folder(out, "alice") / "report.json")
    html = class_page(out, [StudentOutcome("alice", "graded")])
    assert "<script>" not in html and "&lt;script&gt;" in html
    assert parse(html).one("section", id="refused").one("code").text == graded.refused[0]


def test_a_status_says_when_the_report_was_graded(out):
    """A report that records when it was graded says so in the status (a report older than that field, as
    the others here are, says graded alone)."""
    import dataclasses

    make_class(out)
    stamped = dataclasses.replace(CLASS["bob"], graded_at="2026-10-07T10:00:00+00:00")
    write_report_json(stamped, student_folder(out, "bob") / "report.json")
    outcomes = [StudentOutcome("bob", "skipped"), StudentOutcome("alice", "graded")]
    page = parse(write_class_page(out, outcomes).read_text(encoding="utf-8"))
    rows = {r.attrs["data-student"]: r for r in page.all("tr") if "data-student" in r.attrs}
    assert rows["bob"].one("td", **{"class": "status status-ok"}).text == (
        "graded 2026-10-07T10:00:00+00:00"
    )
    assert rows["alice"].one("td", **{"class": "status status-ok"}).text == "graded"
