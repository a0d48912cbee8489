"""A student's feedback.html: one self-contained page per grading, from the same GradingResults as report.json.

Per exercise its score and every test with its category and message, visible tests first; for every sharding
check the expected and the actual layout as device grids side by side, for every compiled program its checks
read one table (each rule's expected figure beside the executed one, what each device executed, its
instructions folded away, the pictures its checks add), for every speed test a chart; then the environment the
grading ran in. Everything drawn comes from the results' structured facts (grader.core.results), never from
parsing a message.

Hidden tests follow results.json's visibility policy (`--hidden-visibility`): unless it is "hidden"
(instructors only) they are listed with their names and messages, never their code, marked with when
Gradescope shows them; with "hidden" the page names none, and gives per exercise only how the visible tests
went, as results.json's top-level text does.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from grader.core.bounds import TEST_FACTS_CHARS
from grader.core.layout_grid import grid_words
from grader.core.results import (
    Category,
    CollectivesCheck,
    Environment,
    LayoutCheck,
    TestResult,
)
from grader.course import catalog
from grader.grading.results import ExerciseResult, GradingResults
from grader.grading.standing import Standing
from grader.reports import executed_facts, pictures, program_facts
from grader.reports.files import write_atomically
from grader.reports.html import Markup, document, element
from grader.reports.memory_picture import memory_figure
from grader.reports.program_page import exchange_table, program_figure
from grader.reports.ring_picture import ring_figure
from grader.reports.schedule_picture import schedule_figure
from grader.reports.text import (
    COUNTED,
    category_counts,
    changes_score,
    counts_text,
    explained_once,
    ignored_line,
    points,
    printable,
    reachable,
    score_text,
    shown_when,
    signed_points,
    speedup_figures,
    standing_reasons,
    visible_share,
    visible_total,
)

FILE_NAME = "feedback.html"
_ATTENTION = frozenset(COUNTED) - {Category.PASSED, Category.SKIPPED}  # shown open, first
# of a message whose facts are drawn: the rest (a grid as text) goes under <details>
_HEAD_LINES = 3
# one test's pictures on the page, at most: as much as its facts may hold as text (a grid draws each name
# many times, so the pictures of facts within their bound could still make a page hundreds of KB a test)
PICTURE_CHARS = TEST_FACTS_CHARS


def css_class(category: str) -> str:
    return "cat-" + str(category).replace(" ", "-")


def badge(category: str) -> Markup:
    return element("span", str(category), class_=f"badge {css_class(category)}")


def score_class(score: float, max_score: float) -> str:
    if max_score and score >= max_score - 1e-9:
        return "full"
    return "none" if score <= 0 else "partial"


# -- one test -------------------------------------------------------------------------------------------


def layout_figure(check: LayoutCheck) -> Markup:
    """The expected and the actual layout side by side, the same devices in the same colour in both."""
    colours = pictures.device_colours([check.expected, check.actual])
    verdict = element(
        "span",
        "as expected" if check.passed else "differs from what was asked",
        class_="verdict-pass" if check.passed else "verdict-fail",
    )
    return element(
        "figure",
        element(
            "figcaption",
            f"{check.name}: which devices hold each block "
            f"({grid_words(len(check.expected.global_shape))}) ",
            verdict,
        ),
        element(
            "div",
            pictures.device_grid(check.expected, colours, "expected"),
            pictures.device_grid(check.actual, colours, "actual"),
            class_="pair",
        ),
        class_="layout-check",
        data_name=check.name,
        data_passed=str(check.passed).lower(),
    )


def _rule(check: CollectivesCheck) -> str:
    """What the check's rule asks, in words."""
    asked = []
    if check.exactly is not None:
        asked.append(
            "exactly "
            + (", ".join(f"{n} {op}" for op, n in sorted(check.exactly.items())) or "none")
        )
    if check.present:
        asked.append("at least one " + ", ".join(check.present))
    if check.absent:
        asked.append("no " + ", ".join(check.absent))
    if check.only is not None:
        asked.append("nothing but " + (", ".join(check.only) or "no collective"))
    if check.rule is not None:
        asked.append(check.rule)
    return "; ".join(asked) or "the test's own rule (its message says which)"


def executed_figures(check: CollectivesCheck) -> list[Markup]:
    """The pictures of an executed-program check's facts, for a check no program table holds (an older
    report.json's; none for one older still)."""
    figures = []
    if (pipeline := executed_facts.pipeline_figures(check)) is not None:
        figures.append(schedule_figure(pipeline))
    if (pairs := executed_facts.pair_figures(check)) is not None:
        figures.append(ring_figure(pairs))
    if (exchange := executed_facts.exchange_rows(check)) is not None:
        figures.append(exchange_table(exchange))
    return figures


def collectives_table(check: CollectivesCheck) -> Markup:
    """A check of an older report.json, which has no program tables: the collectives the compiled program
    holds (op, group size, the mesh axes it runs over), the rule, and each op's HLO line on demand."""
    held = "held" if check.passed else "not held" if check.passed is False else "judged by the test"
    counted = executed_facts.counted(check)
    rows = [
        element(
            "tr",
            element("td", c.op),
            element("td", "?" if c.group_size is None else c.group_size, class_="num"),
            element(
                "td",
                ", ".join(c.mesh_axes)
                if c.mesh_axes
                else "none found"
                if c.mesh_axes is not None
                else "not recorded",
            ),
            element(
                "td",
                executed_facts.executed_words(c.executed, c.unknown_trip_count),
                class_="runs",
            )
            if counted
            else None,
            element("td", element("details", element("summary", "HLO"), element("pre", c.line))),
            class_="collective",
            data_op=c.op,
        )
        for c in check.found
    ]
    if not rows:
        rows = [
            element(
                "tr",
                element(
                    "td",
                    "no collective in the compiled program",
                    colspan=4 + counted,
                    class_="note",
                ),
            )
        ]
    head = element(
        "tr",
        element("th", "op"),
        element("th", "group size", class_="num"),
        element("th", "mesh axes"),
        element("th", "runs") if counted else None,
        element("th", "instruction"),
    )
    return element(
        "figure",
        element(
            "figcaption",
            f"collectives of {check.what}: the rule asks {_rule(check)} (",
            element("span", held, class_="verdict-pass" if check.passed else "verdict-fail"),
            ")",
        ),
        element("table", element("thead", head), element("tbody", rows), class_="collectives"),
        executed_figures(check),
        class_="collectives-check",
        data_what=check.what,
        data_passed="null" if check.passed is None else str(check.passed).lower(),
    )


def message_block(message: str, drawn: bool) -> Markup | None:
    """The test's message as text. When its facts are drawn below, only its first lines stay open: the rest
    (the layouts as text, which the grids show) is one click away, for a reader who wants it."""
    lines = message.splitlines()
    if not drawn or len(lines) <= _HEAD_LINES + 1:
        return element("pre", message, class_="message")
    return element(
        "div",
        element("pre", "\n".join(lines[:_HEAD_LINES]), class_="message"),
        element(
            "details",
            element("summary", "the whole message, as text"),
            element("pre", message, class_="message-text"),
        ),
    )


@dataclass(frozen=True)
class Picture:
    """One picture of a test's facts, and whether the check it draws held (None: the test judged it)."""

    held: bool | None
    markup: Markup


def pictures_of(test: TestResult) -> list[Picture]:
    """Every picture of the test's facts, in the order its checks ran."""
    drawn = [Picture(check.passed, layout_figure(check)) for check in test.layouts]
    drawn += [
        Picture(table.passed, program_figure(table)) for table in program_facts.program_tables(test)
    ]
    drawn += [
        Picture(check.passed, collectives_table(check))
        for check in program_facts.unplaced_checks(test)
    ]
    drawn += [Picture(check.passed, memory_figure(check)) for check in test.memory]
    if test.speedup is not None:
        chart = element(
            "figure",
            element("figcaption", printable(speedup_figures(test.speedup))),
            pictures.speed_chart(test.speedup),
            class_="speed",
        )
        drawn.append(Picture(test.speedup.met, chart))
    return drawn


def within_budget(drawn: list[Picture]) -> tuple[list[Picture], int]:
    """The pictures that fit in PICTURE_CHARS, in order (the first always does), and how many did not."""
    kept, size = [], 0
    for picture in drawn:
        size += len(picture.markup)
        if kept and size > PICTURE_CHARS:
            break
        kept.append(picture)
    return kept, len(drawn) - len(kept)


def facts_block(test: TestResult, failing: bool) -> Markup | None:
    """The test's pictures. A failing test's open with what failed, first; the checks of it that held are
    one click away. Past PICTURE_CHARS a note says how many more report.json holds."""
    drawn = pictures_of(test)
    if not drawn:
        return None
    if failing:  # a stable sort: the failed ones first, each group in the order its checks ran
        drawn.sort(key=lambda picture: picture.held is not False)
    kept, left = within_budget(drawn)
    shown = [p.markup for p in kept if not failing or p.held is False]
    held = [p.markup for p in kept if failing and p.held is not False]
    more = (
        element(
            "p",
            f"{left} more picture{'' if left == 1 else 's'} not drawn: a test's pictures are held to "
            f"{PICTURE_CHARS:,} characters on this page. report.json has every fact.",
            class_="note",
        )
        if left
        else None
    )
    if held:
        shown.append(
            element(
                "details",
                element("summary", f"{len(held)} more that held"),
                element("div", held, class_="facts"),
                class_="held",
            )
        )
    return element("div", shown, more, class_="facts")


def test_line(test: TestResult) -> list[Markup]:
    """What a test's one line holds: its category, its name, and its points."""
    return [
        badge(test.category),
        element("span", test.name, class_="name"),
        element("span", "hidden test", class_="hidden-mark") if test.hidden else None,
        element("span", f"{points(test.score)}/{points(test.max_score)} points", class_="pts"),
    ]


def test_card(test: TestResult, explained: str = "") -> Markup:
    """One test. One that needs attention is open: its message, what its JAX error means (`explained`: the
    explanation, or where it is said), then the pictures of what failed first. Any other is one line, its
    message and pictures on demand."""
    failing = test.category in _ATTENTION
    message = printable(test.message).strip()
    facts = facts_block(test, failing)
    printed = printable(test.output).strip()
    body = [
        message_block(message, facts is not None)
        if message
        else None,  # a passed test has one if its facts were cut
        element("pre", explained, class_="explanation") if explained else None,
        facts,
        element("details", element("summary", "what your code printed"), element("pre", printed))
        if printed
        else None,
    ]
    attributes = dict(
        class_="test",
        data_nodeid=test.nodeid,
        data_category=str(test.category),
        data_hidden=str(test.hidden).lower(),
    )
    if failing:
        return element("article", element("header", test_line(test)), body, **attributes)
    if not any(body):
        return element("article", element("div", test_line(test), class_="line"), **attributes)
    return element(
        "article",
        element("details", element("summary", test_line(test), class_="line"), body),
        **attributes,
    )


def _test_group(
    tests: list[TestResult], heading: str, explained: dict[str, str] | None = None
) -> list[Markup]:
    """Tests that need attention first, open; the others inside one <details>. `explained`: what each
    test's JAX error is told as (grader.reports.text.explained_once)."""
    if not tests:
        return []
    explained = explained or {}
    attention = [t for t in tests if t.category in _ATTENTION]
    fine = [t for t in tests if t not in attention]
    parts = [
        element("h3", heading),
        *[test_card(t, explained.get(t.nodeid, "")) for t in attention],
    ]
    if fine:
        parts.append(
            element(
                "details",
                element("summary", f"{len(fine)} passed or skipped: what they checked"),
                *[test_card(t, explained.get(t.nodeid, "")) for t in fine],
                class_="fine",
                open=not attention,
            )
        )
    return parts


# -- one exercise -----------------------------------------------------------------------------------------


def one_error(tests: list[TestResult]) -> str | None:
    """The message, when every one of several tests ended in the same error (a module that cannot be
    imported: a syntax error stops them all): said once, not in a card per test."""
    messages = {(printable(t.message).strip(), t.explanation) for t in tests}
    if len(tests) < 2 or len(messages) != 1 or any(t.category != Category.ERROR for t in tests):
        return None
    return messages.pop()[0] or None


def stopped_block(message: str, tests: list[TestResult]) -> Markup:
    """The one error, what it means when JAX's error is a known one, and the tests it stopped, a line each."""
    explanation = printable(tests[0].explanation)
    return element(
        "div",
        element("p", badge(Category.ERROR), " ", element("strong", "Every test stopped on this:")),
        element("pre", message, class_="message"),
        element("pre", explanation, class_="explanation") if explanation else None,
        element(
            "details",
            element("summary", f"the {len(tests)} tests it stopped"),
            element(
                "ul",
                [
                    element(
                        "li",
                        element("code", t.name),
                        " (hidden)" if t.hidden else None,
                        f" · 0/{points(t.max_score)} points",
                    )
                    for t in tests
                ],
                class_="stopped-tests",
            ),
        ),
        class_="stopped",
        data_tests=len(tests),
    )


def _hint(exercise: ExerciseResult) -> str:
    """The catalog's hint, for an exercise some test of which did not earn its points: what the terminal
    shows after a failing check."""
    if all(t.earns for t in exercise.tests):
        return ""
    try:
        return catalog.get(exercise.id).hint
    except catalog.UnknownExercise:
        return ""


def exercise_section(
    exercise: ExerciseResult, hidden_visibility: str, visible_only: bool = False
) -> Markup:
    visible = [t for t in exercise.tests if not t.hidden]
    hidden = [t for t in exercise.tests if t.hidden]
    show_hidden = hidden_visibility != "hidden"
    # how much of the exercise its visible tests check, never a score out of them alone
    if visible_only:
        score = element(
            "span", visible_share(exercise), class_=score_class(exercise.score, exercise.checked)
        )
    elif show_hidden or not hidden:
        score = element(
            "span",
            f"{points(exercise.score)}/{points(exercise.max_score)} points",
            class_=score_class(exercise.score, exercise.max_score),
        )
    else:  # the score would tell how hidden tests went
        score = element(
            "span", f"{sum(t.passed for t in visible)} of {len(visible)} visible tests passed"
        )
    parts = [
        element("h2", exercise.id, " ", element("small", exercise.title)),
        element(
            "p",
            score,
            " · ",
            counts_text(exercise.tests if show_hidden else visible),
            " · bonus" if exercise.bonus else None,
            class_="lede",
        ),
    ]
    if exercise.note:
        parts.append(element("p", exercise.note, class_="note"))
    if hint := _hint(exercise):
        parts.append(element("p", element("strong", "Hint: "), hint, class_="hint"))
    shown = visible + hidden if show_hidden else visible
    explained = explained_once(shown)
    if stopped := one_error(shown):
        parts.append(stopped_block(stopped, shown))
    else:
        parts += _test_group(visible, f"Visible tests ({len(visible)})", explained)
    if hidden and show_hidden and not stopped:
        # the page is what this grading writes; who sees it, and when, is the course's hidden_visibility
        parts += _test_group(
            hidden,
            f"Hidden tests ({len(hidden)}): names and messages, for students "
            f"{shown_when(hidden_visibility)} (hidden_visibility = {hidden_visibility})",
            explained,
        )
    elif hidden and not show_hidden:
        parts.append(
            element("p", f"{len(hidden)} hidden tests, shown to instructors only.", class_="note")
        )
    return element("section", parts, class_="exercise", id=exercise.id, data_exercise=exercise.id)


# -- the page ---------------------------------------------------------------------------------------------


def summary_table(results: GradingResults, hidden_visibility: str) -> Markup:
    show_hidden = hidden_visibility != "hidden"
    rows = []
    shown_tests = [t for t in results.tests() if show_hidden or not t.hidden]
    columns = [
        c for c in COUNTED if c is Category.PASSED or any(t.category == c for t in shown_tests)
    ]
    for exercise in results.exercises.values():
        tests = exercise.tests if show_hidden else [t for t in exercise.tests if not t.hidden]
        # a visible-only run has no hidden test
        if show_hidden or len(tests) == len(exercise.tests):
            score = element(
                "td",
                score_text(exercise, results.visible_only),
                class_=f"num {score_class(exercise.score, reachable(exercise, results.visible_only))}",
            )
        else:
            score = element(
                "td", f"{sum(t.passed for t in tests)}/{len(tests)} visible", class_="num"
            )
        counts = category_counts(tests)
        rows.append(
            element(
                "tr",
                element("td", element("a", exercise.id, href=f"#{exercise.id}")),
                element("td", exercise.title),
                score,
                *[element("td", counts[c] or "", class_="num") for c in columns],
                data_exercise=exercise.id,
            )
        )
    head = element(
        "tr",
        element("th", "exercise"),
        element("th", "title"),
        element("th", "score", class_="num"),
        *[element("th", str(c), class_="num") for c in columns],
    )
    return element("table", element("thead", head), element("tbody", rows), class_="summary")


def environment_table(environment: Environment) -> Markup:
    """The isolation level, devices, cores and the limits in force, as report.json records them."""
    isolation = environment.isolation
    memory, per_test = environment.worker_memory_bytes, environment.test_timeout
    rows = [
        ("isolation", isolation.level if isolation is not None else None),
        ("devices", environment.devices),
        ("cores", environment.cores),
        ("speedup thresholds", environment.timing),
        (
            "time limit per test",
            f"{per_test:g} s for every test" if per_test else environment.time_limits_source,
        ),
        (
            "your code's memory",
            f"{memory / (1 << 30):g} GiB of address space"
            if memory
            else "no limit"
            if environment.worker_memory_limited is False
            else None,
        ),
        ("harnesses at once", environment.parallel),
        ("versions", ", ".join(f"{k} {v}" for k, v in (environment.versions or {}).items() if v)),
    ]
    if isolation is not None and isolation.not_applied:
        rows.append(("not applied", "; ".join(isolation.not_applied)))
    return element(
        "table",
        [
            element("tr", element("td", name), element("td", value), data_key=name)
            for name, value in rows
            if value not in (None, "", {})
        ],
        class_="env",
    )


def grade_table(standing: Standing) -> Markup:
    """Per exercise what the tests gave, the late penalty, the adjustments and the final score, with why."""
    rows = [
        element(
            "tr",
            element("td", element("a", e.id, href=f"#{e.id}")),
            element("td", points(e.raw), class_="num"),
            element("td", f"-{points(e.penalty)}" if e.penalty else "", class_="num"),
            element("td", signed_points(e.override) if e.adjustments else "", class_="num"),
            element("td", f"{points(e.final)}/{points(e.max_score)}", class_="num"),
            element("td", "; ".join(standing_reasons(e))),
            data_exercise=e.id,
        )
        for e in standing.exercises
    ]
    head = element(
        "tr",
        *[
            element("th", name, class_="num" if name not in ("exercise", "why") else None)
            for name in ("exercise", "tests", "late", "adjusted", "grade", "why")
        ],
    )
    return element(
        "section",
        element("h2", "Your grade"),
        element("table", element("thead", head), element("tbody", rows), class_="summary grade"),
        id="grade",
    )


def feedback_page(
    results: GradingResults,
    *,
    hidden_visibility: str = "after_due_date",
    standing: Standing | None = None,
) -> str:
    """The whole page, as text: the same results give the same bytes. With a `standing` that a late penalty or
    an adjustment changes (and scores the page may show), the grade and its reasons come first."""
    shown_when(hidden_visibility)  # a ValueError for a visibility Gradescope does not know
    reached = score_class(results.score, reachable(results, results.visible_only))
    total = element(
        "p",
        element("span", score_text(results, results.visible_only), class_=f"score {reached}"),
        "" if results.visible_only else " points",  # a visible-only score names its points
        class_="total",
    )
    graded = (
        changes_score(standing)
        and not results.visible_only
        and (hidden_visibility != "hidden" or not any(t.hidden for t in results.tests()))
    )
    if graded:
        total = element(
            "p",
            element(
                "span",
                f"{points(standing.final)}/{points(standing.max_score)}",
                class_=f"score {score_class(standing.final, standing.max_score)}",
            ),
            f" points ({points(standing.raw)} from the tests)",
            class_="total",
        )
    notes = []
    if results.visible_only:
        notes.append(
            element(
                "p",
                f"Only the visible tests were run: {visible_total(results)}. The hidden tests "
                "check the rest, on other sizes and inputs, when you are graded.",
                class_="note",
            )
        )
    elif hidden_visibility not in ("hidden", "visible") and any(t.hidden for t in results.tests()):
        notes.append(
            element(
                "p",
                "This page names the hidden tests and shows their messages: it is for students "
                f"{shown_when(hidden_visibility)} (hidden_visibility = {hidden_visibility}).",
                class_="note",
            )
        )
    problems = [
        element(
            "div",
            element("strong", "Problems with the submission"),
            element("ul", [element("li", p) for p in results.problems]),
            class_="problems",
        )
        if results.problems
        else None
    ]
    if results.ignored:
        notes.append(element("p", ignored_line(results.ignored), class_="note"))
    body = [
        element(
            "header",
            element("h1", "shardlab feedback"),
            element("p", results.submission, class_="lede"),
            total,
            notes,
        ),
        problems,
        grade_table(standing) if graded else None,
        element("nav", summary_table(results, hidden_visibility), class_="toc"),
        [
            exercise_section(exercise, hidden_visibility, results.visible_only)
            for exercise in results.exercises.values()
        ],
        element(
            "section",
            element("h2", "Where this ran"),
            environment_table(results.environment),
            id="environment",
        ),
    ]
    return document(f"shardlab feedback: {printable(results.submission)}", *body)


def write_feedback_html(
    results: GradingResults,
    path: str | Path,
    *,
    hidden_visibility: str = "after_due_date",
    standing: Standing | None = None,
) -> Path:
    return write_atomically(
        path, feedback_page(results, hidden_visibility=hidden_visibility, standing=standing)
    )
