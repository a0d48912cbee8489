"""A class's index.html, written by `shardlab grade-batch` beside grades.csv: an instructor's page, so hidden
tests are named too.

Every student in one table (linked to their feedback.html), the distribution of each exercise's scores, the
tests most of the class fails with their messages grouped ("what to teach again"), and every student who
could not be graded with the reason, so that nobody silently disappears.

A class can have hundreds of students with reports of a few MB each: the reports are read one at a time, and
only a small summary per student and running tallies per exercise and per test function are kept. Students
are read in name order and nothing here reads a clock, so the same reports give the same bytes.
"""

from __future__ import annotations

import json
import math
import re
import statistics
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import quote

from grader.core.results import Category, TestResult, function_id
from grader.course import catalog
from grader.grading.batch import REFUSED, REPORT, STUDENTS, StudentOutcome, student_folder
from grader.grading.results import GradingResults
from grader.grading.standing import standing
from grader.reports import pictures
from grader.reports.feedback_page import FILE_NAME as FEEDBACK, badge, score_class
from grader.reports.files import write_atomically
from grader.reports.html import Markup, document, element
from grader.reports.text import points, printable, signed_points, verdict

FILE_NAME = "index.html"
FAILING = frozenset({Category.FAILED, Category.ERROR, Category.TIMEOUT, Category.CRASHED})
# a test failed by at least this share of the students who attempted its exercise
TEACH_SHARE = 0.25
TEACH_MAX = 20  # tests listed at most
GROUPS_SHOWN = 8  # message groups shown per test; the rest are counted
# A number on its own (not the digits of a name such as "ex04" or "float32"): "max abs error 0.123" and
# "max abs error 4.5e-07" fall together, as do "test_x[2dev]" and "test_x[8dev]".
_NUMBER = re.compile(r"(?<![A-Za-z0-9_])(?:0x[0-9a-fA-F]+|\d+(?:\.\d+)?(?:[eE][-+]?\d+)?)")


def message_key(message: str) -> str:
    """What messages are compared by: their first line, numbers masked as "#"."""
    first = printable(message).strip().split("\n", 1)[0].strip()
    return _NUMBER.sub("#", first)


# -- what is kept per student, and per class ------------------------------------------------------------


@dataclass(frozen=True)
class StudentSummary:
    """One student's line of the table: all that is kept of their report."""

    student: str
    status: str  # "graded", "skipped" (graded by an earlier batch), "failed", "refused",
    # "unreadable"
    detail: str = ""  # why a student could not be graded
    total: float = 0.0  # the final score: late penalties and adjustments applied
    max_score: float = 0.0
    scores: dict[str, float] = field(default_factory=dict)  # {exercise id: final score}
    has_page: bool = False  # OUT/students/<student>/feedback.html exists
    raw: float = 0.0  # what the tests gave
    penalty: float = 0.0  # what the late policy took off
    override: float = 0.0  # what the instructor's adjustments changed
    reasons: tuple[str, ...] = ()  # why: each late penalty's and adjustment's reason
    adjusted: bool = False  # an adjustment of the instructor's applies
    regraded: tuple[str, ...] = ()  # "ex04 at 2026-10-07T10:00:00+00:00", oldest first
    refused: tuple[str, ...] = ()  # files handed in and not graded, each with why
    graded_at: str | None = (
        None  # when its report was graded (ISO 8601, UTC); None: an older report
    )

    @property
    def graded(self) -> bool:
        return self.status in ("graded", "skipped")


@dataclass
class ExerciseTally:
    id: str
    title: str
    max_score: float
    bonus: bool = False
    scores: list[float] = field(default_factory=list)  # of the graded students whose report has it
    attempted: int = 0  # students with a test not "not attempted"


@dataclass
class MessageGroup:
    key: str  # the first line, numbers masked
    category: str  # the example's
    students: int = 0
    example: str = ""  # the whole message of the first student (in name order) with it


@dataclass
class TestTally:
    """One test function over the class: who did not earn it, who did not attempt it, and what they read."""

    exercise: str
    # grader.core.results.function_id: "tests/exercises/ex04_x/test_hidden.py::test_y"
    function: str
    hidden: bool = False
    failing: int = 0  # students with a failed, error, timeout or crashed instance
    not_attempted: int = 0  # students for whom every instance was not attempted
    groups: dict[str, MessageGroup] = field(default_factory=dict)

    @property
    def name(self) -> str:
        return self.function.rsplit("::", 1)[-1]


@dataclass
class ClassTallies:
    students: list[StudentSummary] = field(default_factory=list)
    exercises: dict[str, ExerciseTally] = field(default_factory=dict)
    tests: dict[tuple[str, str], TestTally] = field(default_factory=dict)


def _read(path: Path) -> GradingResults:
    return GradingResults.from_dict(json.loads(path.read_text(encoding="utf-8")))


def _add_tests(tallies: ClassTallies, exercise: str, tests: list[TestResult]) -> None:
    by_function: dict[str, list[TestResult]] = {}
    for test in tests:
        by_function.setdefault(function_id(test.nodeid), []).append(test)
    for function, instances in by_function.items():
        tally = tallies.tests.setdefault((exercise, function), TestTally(exercise, function))
        tally.hidden = tally.hidden or any(t.hidden for t in instances)
        failed = [t for t in instances if t.category in FAILING]
        if failed:
            tally.failing += 1
            seen = set()
            for test in failed:
                message = verdict(test)
                key = message_key(message)
                if key in seen:
                    continue
                seen.add(key)
                group = tally.groups.setdefault(
                    key, MessageGroup(key, str(test.category), example=message)
                )
                group.students += 1
        elif all(t.category == Category.NOT_ATTEMPTED for t in instances):
            tally.not_attempted += 1


def _add_student(tallies: ClassTallies, out: Path, outcome: StudentOutcome) -> None:
    folder = student_folder(out, outcome.student)
    # A refused student was never graded: a folder of that name (another's, on a case-insensitive disk) is not theirs.
    has_page = outcome.status != REFUSED and (folder / FEEDBACK).is_file()
    if outcome.status not in ("graded", "skipped"):
        tallies.students.append(
            StudentSummary(
                outcome.student,
                outcome.status,
                outcome.detail or "no reason given",
                has_page=has_page,
            )
        )
        return
    try:
        results = _read(folder / REPORT)
    except FileNotFoundError:
        tallies.students.append(
            StudentSummary(
                outcome.student, "unreadable", f"{REPORT} does not exist", has_page=has_page
            )
        )
        return
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
        reason = f"{REPORT} cannot be read: {type(exc).__name__}: {exc}"
        tallies.students.append(
            StudentSummary(outcome.student, "unreadable", reason, has_page=has_page)
        )
        return
    graded = outcome.standing or standing(results, student=outcome.student)
    for exercise in results.exercises.values():
        tally = tallies.exercises.setdefault(
            exercise.id,
            ExerciseTally(exercise.id, exercise.title, exercise.max_score, exercise.bonus),
        )
        tally.max_score = max(tally.max_score, exercise.max_score)
        tally.scores.append(exercise.score)
        tally.attempted += any(t.category != Category.NOT_ATTEMPTED for t in exercise.tests)
        _add_tests(tallies, exercise.id, exercise.tests)
    tallies.students.append(
        StudentSummary(
            outcome.student,
            outcome.status,
            total=graded.final,
            max_score=graded.max_score,
            scores={e.id: e.final for e in graded.exercises},
            has_page=has_page,
            raw=graded.raw,
            penalty=graded.penalty,
            override=graded.override,
            reasons=tuple(graded.late + graded.adjusted),
            adjusted=bool(graded.adjusted),
            regraded=_regraded(results),
            refused=graded.refused,
            graded_at=results.graded_at,
        )
    )


def _regraded(results: GradingResults) -> tuple[str, ...]:
    """Each exercise graded again, once, at its latest regrade: "ex04 at 2026-10-07T10:00:00+00:00 (3 times)"
    (a status that listed every regrade grew a line per run)."""
    latest: dict[str, str] = {}
    times: Counter = Counter()
    for record in results.regrades:
        latest[record.exercise] = record.at
        times[record.exercise] += 1
    return tuple(
        f"{ex} at {at}" + (f" ({times[ex]} times)" if times[ex] > 1 else "")
        for ex, at in latest.items()
    )


def tally_class(out: Path, outcomes: Iterable[StudentOutcome]) -> ClassTallies:
    """Every student's report read once, in name order, into the page's figures."""
    tallies = ClassTallies()
    for outcome in sorted(outcomes, key=lambda o: o.student):
        _add_student(tallies, out, outcome)
    return tallies


def _exercise_order(exercise_id: str) -> tuple[int, str]:
    known = [e.id for e in catalog.EXERCISES]
    return (known.index(exercise_id) if exercise_id in known else len(known), exercise_id)


def teach_again(tallies: ClassTallies) -> list[TestTally]:
    """The tests failed by at least TEACH_SHARE of the graded students who attempted their exercise, most
    failed first, at most TEACH_MAX."""
    chosen = []
    for tally in tallies.tests.values():
        attempted = tallies.exercises[tally.exercise].attempted
        if attempted and tally.failing and tally.failing >= TEACH_SHARE * attempted:
            chosen.append((tally.failing / attempted, tally))
    chosen.sort(
        key=lambda pair: (
            -pair[0],
            -pair[1].failing,
            _exercise_order(pair[1].exercise),
            pair[1].function,
        )
    )
    return [tally for _, tally in chosen[:TEACH_MAX]]


# -- the page ---------------------------------------------------------------------------------------------


def _mean(values: list[float]) -> float:
    return math.fsum(values) / len(values) if values else 0.0


def student_link(summary: StudentSummary) -> Markup:
    """The name, linking to the student's page when it exists: relative, the name quoted whole."""
    if not summary.has_page:
        return element("span", summary.student, class_="student")
    return element(
        "a",
        summary.student,
        href=f"{STUDENTS}/{quote(summary.student, safe='')}/{FEEDBACK}",
        class_="student",
    )


# "skipped" is a student this run did not grade again (an earlier grading stands, as after an override, which
# grades nothing): to the reader of the page they are graded all the same
STATUS_TEXT = {
    "graded": "graded",
    "skipped": "graded",
    "failed": "could not be graded",
    REFUSED: "not graded",
    "unreadable": "report unreadable",
}


def status_text(summary: StudentSummary) -> str:
    """What the status column says: graded or why not; for a graded student, what changed the grading since
    (a regrade, an adjustment) and how many of their files were refused."""
    said = [STATUS_TEXT.get(summary.status, summary.status)]
    if summary.graded and summary.graded_at:
        said[0] += f" {summary.graded_at}"
    if summary.graded:
        said += [f"regraded {r}" for r in summary.regraded]
        said += ["adjusted"] if summary.adjusted else []
        if summary.refused:
            count = len(summary.refused)
            said.append(f"{count} file{'s' if count != 1 else ''} refused")
    return "; ".join(said)


def students_table(tallies: ClassTallies, exercises: list[ExerciseTally]) -> Markup:
    """A row per student: the final total and each exercise's final score; when a late penalty or an
    adjustment changed anyone's grade, also what the tests gave, the penalty, the adjustments and why."""
    changed = any(s.penalty or s.reasons for s in tallies.students)
    head = element(
        "tr",
        element("th", "student"),
        element("th", "total", class_="num"),
        *(
            [
                element(
                    "th",
                    element(
                        "abbr",
                        "from tests",
                        title="points the tests gave, before the late penalty and the adjustments",
                    ),
                    class_="num",
                ),
                element("th", "late", class_="num"),
                element("th", "adjusted", class_="num"),
            ]
            if changed
            else []
        ),
        *[
            element(
                "th",
                element("abbr", e.id.split("_", 1)[0], title=f"{e.id}: {e.title}"),
                class_="num",
            )
            for e in exercises
        ],
        element("th", "status"),
        element("th", "why") if changed else None,
    )
    rows = []
    for s in tallies.students:
        if s.graded:
            total = element(
                "td",
                f"{points(s.total)}/{points(s.max_score)}",
                class_=f"num {score_class(s.total, s.max_score)}",
            )
            cells = [
                element(
                    "td",
                    points(s.scores[e.id]),
                    class_=f"num {score_class(s.scores[e.id], e.max_score)}",
                    data_exercise=e.id,
                )
                if e.id in s.scores
                else element("td", "-", class_="num", data_exercise=e.id)
                for e in exercises
            ]
            parts = (
                [
                    element("td", points(s.raw), class_="num", data_raw=points(s.raw)),
                    element(
                        "td",
                        f"-{points(s.penalty)}" if s.penalty else "",
                        class_="num",
                        data_penalty=points(s.penalty),
                    ),
                    element(
                        "td",
                        signed_points(s.override) if round(s.override, 2) else "",
                        class_="num",
                        data_override=points(s.override),
                    ),
                ]
                if changed
                else []
            )
        else:
            total = element("td", "-", class_="num")
            cells = [element("td", "-", class_="num", data_exercise=e.id) for e in exercises]
            parts = [element("td", "-", class_="num")] * 3 if changed else []
        status = element(
            "td",
            status_text(s),
            class_="status status-ok" if s.graded and not s.refused else "status status-bad",
        )
        why = (
            element(
                "td",
                element("ul", [element("li", r) for r in s.reasons]) if s.reasons else "",
                class_="why",
            )
            if changed
            else None
        )
        rows.append(
            element(
                "tr",
                element("td", student_link(s)),
                total,
                *parts,
                *cells,
                status,
                why,
                data_student=s.student,
                data_status=s.status,
                data_total=points(s.total) if s.graded else None,
            )
        )
    return element(
        "div",
        element("table", element("thead", head), element("tbody", rows), class_="students"),
        class_="wide",
    )


def exercise_figure(exercise: ExerciseTally) -> Markup:
    mean = _mean(exercise.scores)
    graded = len(exercise.scores)
    return element(
        "figure",
        element(
            "figcaption",
            element("strong", exercise.id),
            " ",
            exercise.title,
            element("br"),
            f"mean {points(mean)}/{points(exercise.max_score)}, attempted by {exercise.attempted} of {graded}",
            " · bonus" if exercise.bonus else None,
        ),
        pictures.histogram(
            exercise.scores,
            exercise.max_score,
            f"{exercise.id}: scores of {graded} students out of {points(exercise.max_score)}",
        ),
        class_="exercise-stats",
        data_exercise=exercise.id,
        data_mean=points(mean),
        data_attempted=exercise.attempted,
        data_graded=graded,
    )


def teach_entry(tally: TestTally, attempted: int) -> Markup:
    groups = sorted(tally.groups.values(), key=lambda g: (-g.students, g.key))
    shown = [
        element(
            "li",
            element(
                "span", f"{g.students} student{'s' if g.students != 1 else ''}", class_="count"
            ),
            " ",
            badge(g.category),
            " ",
            element("code", g.key),
            element(
                "details", element("summary", "one message in full"), element("pre", g.example)
            ),
            class_="message-group",
            data_count=g.students,
            data_key=g.key,
        )
        for g in groups[:GROUPS_SHOWN]
    ]
    rest = groups[GROUPS_SHOWN:]
    more = (
        element(
            "li",
            f"{len(rest)} other messages, from {sum(g.students for g in rest)} students",
            class_="note",
        )
        if rest
        else None
    )
    not_attempted = f"; {tally.not_attempted} did not attempt it" if tally.not_attempted else ""
    return element(
        "article",
        element(
            "header",
            element("span", tally.name, class_="name"),
            " ",
            element("span", tally.exercise, class_="exercise-id"),
            element("span", "hidden test", class_="hidden-mark") if tally.hidden else None,
            element(
                "span",
                f"failed by {tally.failing} of {attempted} "
                f"({round(100 * tally.failing / attempted)}%){not_attempted}",
                class_="pts",
            ),
        ),
        element("p", tally.function, class_="function"),
        element("ul", shown, more, class_="messages"),
        class_="test teach",
        data_test=tally.function,
        data_exercise=tally.exercise,
        data_failing=tally.failing,
        data_attempted=attempted,
        data_not_attempted=tally.not_attempted,
    )


def refused_section(refused: list[StudentSummary]) -> Markup:
    """Files intake refused from students who were otherwise graded: who, which file and why (intake's words),
    so that a notebook that could not be read is not named on its student's own page only."""
    return element(
        "section",
        element("h2", f"Files refused at intake ({sum(len(s.refused) for s in refused)})"),
        element(
            "p",
            "Files these students handed in that were not graded; the rest of their work was.",
            class_="note",
        ),
        element(
            "ul",
            [
                element(
                    "li",
                    element("strong", s.student),
                    element("ul", [element("li", element("code", why)) for why in s.refused]),
                    data_student=s.student,
                    data_refused=len(s.refused),
                )
                for s in refused
            ],
            class_="refused",
        ),
        id="refused",
    )


def class_page(
    out: Path,
    outcomes: list[StudentOutcome],
    similarity: Markup | None = None,
    course_name: str | None = None,
) -> str:
    """The whole page, as text: the same reports and outcomes give the same bytes. similarity: the section of
    similar submissions (grader.reports.similarity_section), when one was computed. course_name: the course
    file's name of the term, the page's title (the output folder its subtitle)."""
    out = Path(out)
    tallies = tally_class(out, outcomes)
    exercises = sorted(tallies.exercises.values(), key=lambda e: _exercise_order(e.id))
    graded = [s for s in tallies.students if s.graded]
    not_graded = [s for s in tallies.students if not s.graded]
    refused = [s for s in graded if s.refused]
    totals = [s.total for s in graded]
    top = max((s.max_score for s in graded), default=0.0)
    name = out.resolve().name
    title = course_name or "shardlab class"
    figures = (
        f"mean {points(_mean(totals))}, median {points(statistics.median(totals))} of {points(top)} points"
        if totals
        else "no scores"
    )
    header = element(
        "header",
        element("h1", title),
        element("p", "graded class in ", element("code", name), class_="subtitle"),
        element(
            "p",
            element(
                "span", f"{len(tallies.students)} students", data_students=len(tallies.students)
            ),
            " · ",
            element("span", f"{len(graded)} graded", data_graded=len(graded)),
            " · ",
            element(
                "span",
                f"{len(not_graded)} could not be graded",
                class_="status-bad" if not_graded else None,
                data_not_graded=len(not_graded),
            ),
            " · ",
            element(
                "span",
                figures,
                data_mean=points(_mean(totals)) if totals else None,
                data_median=points(statistics.median(totals)) if totals else None,
            ),
            class_="lede",
        ),
        element(
            "p",
            "An instructor's page: it names the hidden tests. Each name links to the student's own page.",
            class_="note",
        ),
    )
    teach = teach_again(tallies)
    teach_section = element(
        "section",
        element("h2", "What to teach again"),
        element(
            "p",
            f'The test functions failed (failed, error, timeout or crashed; not "not attempted" nor '
            f"skipped) by at least {round(100 * TEACH_SHARE)}% of the graded students who attempted their "
            f"exercise, most failed first, at most {TEACH_MAX}. A student counts once per test function, "
            "whatever its parameters. Messages are grouped by their first line with numbers shown as #.",
            class_="note",
        ),
        [teach_entry(t, tallies.exercises[t.exercise].attempted) for t in teach]
        or element("p", "No test is failed by that many students.", class_="note"),
        id="teach-again",
    )
    not_graded_section = element(
        "section",
        element("h2", f"Could not be graded ({len(not_graded)})"),
        element(
            "ul",
            [
                element(
                    "li",
                    element("strong", s.student),
                    " ",
                    element("span", STATUS_TEXT.get(s.status, s.status), class_="status-bad"),
                    element("pre", s.detail),
                    data_student=s.student,
                    data_status=s.status,
                )
                for s in not_graded
            ],
            class_="not-graded",
        )
        if not_graded
        else element("p", "Every student was graded.", class_="note"),
        id="not-graded",
    )
    body = [
        header,
        element(
            "section", element("h2", "Students"), students_table(tallies, exercises), id="students"
        ),
        element(
            "section",
            element("h2", "Scores per exercise"),
            element("div", [exercise_figure(e) for e in exercises], class_="histograms")
            if exercises
            else element("p", "No exercise was graded.", class_="note"),
            id="exercises",
        ),
        teach_section,
        similarity,
        not_graded_section,
        refused_section(refused) if refused else None,
    ]
    return document(
        f"{printable(title)}: {printable(name)}", element("main", body, class_="class-page")
    )


def write_class_page(
    out: Path,
    outcomes: list[StudentOutcome],
    similarity: Markup | None = None,
    course_name: str | None = None,
) -> Path:
    """OUT/index.html, written atomically."""
    out = Path(out)
    return write_atomically(out / FILE_NAME, class_page(out, outcomes, similarity, course_name))
