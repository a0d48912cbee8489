"""The roster and the LMS exports: Canvas's gradebook import CSV and the long CSV, from standings built by hand
(no grading runs), a course file and a roster written to a temporary folder."""

from __future__ import annotations

import csv
import io
import math
import re
from pathlib import Path

import pytest

from grader.core.cells import FORMULA_STARTS
from grader.course import roster as roster_module, term
from grader.course.adjustments import Adjustment
from grader.course.roster import Roster, RosterError
from grader.course.term import Lateness
from grader.grading.standing import ExerciseStanding, Standing
from grader.reports import lms_export

COURSE = """\
name = "test term"
timezone = "UTC"
roster = "roster.csv"

[[assignment]]
name = "week1"
exercises = ["ex01", "ex02"]
lms_id = 12345

[[assignment]]
name = "week2"
exercises = ["ex03"]
lms_id = "67890"

[[assignment]]
name = "week3"
exercises = ["ex04"]
"""

ROSTER = """\
student,name,lms_id,sis_user_id,sis_login_id,section,email
alice,"Doe, Alice",4321,S001,adoe,Section A,alice@example.edu
bob,"Roe, Bob",4322,S002,broe,Section B,
dave,"Poe, Dave",4323,,,,
"""

CANVAS_HEADER = ["Student", "ID", "SIS User ID", "SIS Login ID", "Section"]
HOSTILE_NAMES = ['=HYPERLINK("x")', "@SUM(1)", "-1+2"]


@pytest.fixture
def course(tmp_path: Path) -> term.Course:
    (tmp_path / "course.toml").write_text(COURSE)
    (tmp_path / "roster.csv").write_text(ROSTER)
    return term.load(tmp_path / "course.toml")


@pytest.fixture
def roster(course: term.Course) -> Roster:
    return roster_module.for_course(course)


def exercise(
    course: term.Course,
    name: str,
    raw: float,
    penalty: float = 0.0,
    override: float = 0.0,
    adjustments: tuple[Adjustment, ...] = (),
) -> ExerciseStanding:
    ex = course.exercise(name)
    late = (
        Lateness(
            "2026-10-06T10:00:00+00:00",
            "2026-10-05T23:59:00+00:00",
            36060.0,
            100 * penalty / raw,
            f"late: {100 * penalty / raw:g}% off",
        )
        if penalty
        else None
    )
    return ExerciseStanding(
        ex.id,
        ex.title,
        float(ex.points),
        ex.bonus,
        raw,
        penalty,
        override,
        raw - penalty + override,
        late,
        adjustments,
    )


def student(
    course: term.Course, name: str, finals: dict[str, tuple[float, float, float]]
) -> Standing:
    """`finals`: {exercise: (raw, penalty, override)}."""
    adjusted = (
        Adjustment(
            name, "ex03_computation_follows_data", None, None, 1.5, "flaky test; regraded", "Ann", 2
        ),
    )
    return Standing(
        name,
        tuple(
            exercise(course, ex, *values, adjustments=adjusted if values[2] else ())
            for ex, values in finals.items()
        ),
    )


@pytest.fixture
def standings(course: term.Course) -> dict[str, Standing]:
    return {
        "alice": student(
            course,
            "alice",
            {
                "ex01": (10.0, 2.5, 0.0),
                "ex02": (3.333, 0.0, 0.0),
                "ex03": (12.0, 1.2, 1.5),
                "ex04": (20.0, 0.0, 0.0),
            },
        ),
        "bob": student(
            course,
            "bob",
            {
                "ex01": (4.0, 0.0, 0.0),
                "ex02": (10.0, 0.0, 0.0),
                "ex03": (0.0, 0.0, 0.0),
                "ex04": (7.25, 0.0, -2.0),
            },
        ),
    }


def read(path: Path) -> list[list[str]]:
    return list(csv.reader(io.StringIO(path.read_text(encoding="utf-8"))))


def by_id(rows: list[list[str]]) -> dict[str, dict[str, str]]:
    header = rows[0]
    return {row[1]: dict(zip(header, row, strict=True)) for row in rows[1:] if row[1]}


# -- Canvas ----------------------------------------------------------------------------------------------------


def test_the_header_is_canvas_student_columns_then_the_assignments_as_canvas_names_them(
    tmp_path, course, roster, standings
):
    export = lms_export.canvas_csv(standings, course, roster, tmp_path / "canvas.csv")
    rows = read(export.path)
    assert rows[0] == [*CANVAS_HEADER, "week1 (12345)", "week2 (67890)", "week3"]
    # Canvas reads "Name (id)" with /\A(.*)\s\((\d+)\)\z/ (Assignment.title_and_id): the ids come back whole
    assert [re.fullmatch(r"(.*)\s\((\d+)\)", h).groups() for h in rows[0][5:7]] == [
        ("week1", "12345"),
        ("week2", "67890"),
    ]
    assert re.fullmatch(r"(.*)\s\((\d+)\)", rows[0][7]) is None
    # the Points Possible row, second as in Canvas's export: each assignment's exercises' points
    assert rows[1][0].strip() == "Points Possible" and rows[1][1:5] == ["", "", "", ""]
    points = {
        a.name: sum(e.points for e in course.exercises if e.id in a.exercises)
        for a in course.assignments
    }
    assert [float(x) for x in rows[1][5:]] == [points["week1"], points["week2"], points["week3"]]
    assert any("week3" in p and "no lms_id" in p for p in export.problems)
    without = lms_export.canvas_csv(
        standings, course, roster, tmp_path / "bare.csv", points_possible=False
    )
    assert not any("Points Possible" in row[0] for row in read(without.path))


def test_each_cell_is_the_assignment_sum_of_final_scores_under_the_right_student(
    tmp_path, course, roster, standings
):
    export = lms_export.canvas_csv(standings, course, roster, tmp_path / "canvas.csv")
    assert export.students == ("alice", "bob")
    rows = by_id(read(export.path))
    alice, bob = rows["4321"], rows["4322"]
    assert (alice["Student"], alice["SIS User ID"], alice["SIS Login ID"], alice["Section"]) == (
        "Doe, Alice",
        "S001",
        "adoe",
        "Section A",
    )
    assert (bob["Student"], bob["SIS User ID"], bob["SIS Login ID"]) == ("Roe, Bob", "S002", "broe")
    # finals, not raw scores: 7.5 + 3.333 (the late penalty taken), 12 - 1.2 + 1.5, 7.25 - 2
    assert float(alice["week1 (12345)"]) == 10.83
    assert float(alice["week2 (67890)"]) == 12.3
    assert float(alice["week3"]) == 20
    assert [float(bob[c]) for c in ("week1 (12345)", "week2 (67890)", "week3")] == [14, 0, 5.25]
    # the scores are numbers: written bare, never quoted as text
    text = export.path.read_text()
    assert ",10.83," in text and '"10.83"' not in text


def test_a_graded_student_the_roster_lacks_is_reported_and_not_exported(
    tmp_path, course, roster, standings
):
    standings["carol"] = student(
        course,
        "carol",
        {
            "ex01": (9.0, 0.0, 0.0),
            "ex02": (9.0, 0.0, 0.0),
            "ex03": (9.0, 0.0, 0.0),
            "ex04": (9.0, 0.0, 0.0),
        },
    )
    export = lms_export.canvas_csv(standings, course, roster, tmp_path / "canvas.csv")
    assert export.unrostered == ("carol",)
    assert any(p.startswith("carol:") and "not in the roster" in p for p in export.problems)
    rows = read(export.path)
    assert len(rows) == 1 + 1 + 2  # header, points, alice and bob
    assert not any("9" in cell for row in rows[2:] for cell in row[5:])
    # dave is on the roster but was not graded: no row at all, so Canvas keeps what it holds for him
    assert export.ungraded == ("dave",)
    assert "4323" not in {row[1] for row in rows}
    assert any(p.startswith("dave:") for p in export.problems)


def test_an_assignment_nobody_was_graded_on_gets_no_column(tmp_path, course, roster, standings):
    partial = {
        name: Standing(name, tuple(e for e in s.exercises if not e.id.startswith("ex04")))
        for name, s in standings.items()
    }
    export = lms_export.canvas_csv(partial, course, roster, tmp_path / "canvas.csv")
    assert read(export.path)[0] == [*CANVAS_HEADER, "week1 (12345)", "week2 (67890)"]
    assert any(p.startswith("assignment week3") and "no column" in p for p in export.problems)


def test_formula_like_names_are_neutralized_in_every_csv(tmp_path, course, standings):
    lines = ["student,name,lms_id,sis_user_id,sis_login_id,section,email"]
    lines += [
        f'alice,"{HOSTILE_NAMES[0].replace(chr(34), chr(34) * 2)}",4321,,,,',
        f"bob,{HOSTILE_NAMES[1]},4322,,,=cmd|x,",
        f"=evil,{HOSTILE_NAMES[2]},4324,,,,",
    ]
    (tmp_path / "hostile.csv").write_text("\n".join(lines) + "\n")
    hostile = roster_module.load(tmp_path / "hostile.csv")
    assert [e.name for e in hostile] == HOSTILE_NAMES
    standings["=evil"] = Standing("=evil", standings["bob"].exercises)
    canvas = lms_export.canvas_csv(standings, course, hostile, tmp_path / "canvas.csv").path
    long = lms_export.long_csv(standings, course, hostile, tmp_path / "long.csv")
    # (Canvas's: no folders)
    for path, names in ((canvas, HOSTILE_NAMES), (long, [*HOSTILE_NAMES, "=evil"])):
        cells = [cell for row in read(path) for cell in row]
        for name in names:
            assert name not in cells and "'" + name in cells, (path.name, name)
        for cell in cells:
            if cell.startswith(FORMULA_STARTS):  # only a number may start so (a negative override)
                assert math.isfinite(float(cell)), (path.name, cell)
    assert "'=cmd|x" in [cell for row in read(canvas) for cell in row]


# -- the long CSV ----------------------------------------------------------------------------------------------


def test_the_long_csv_has_a_row_per_student_and_exercise_and_its_scores_add_up(
    tmp_path, course, roster, standings
):
    standings["carol"] = Standing("carol", standings["bob"].exercises)
    path = lms_export.long_csv(standings, course, roster, tmp_path / "long.csv")
    rows = read(path)
    assert tuple(rows[0]) == lms_export.LONG_COLUMNS
    records = [dict(zip(rows[0], row, strict=True)) for row in rows[1:]]
    assert len(records) == sum(len(s.exercises) for s in standings.values())
    # roster order, then the others
    assert [r["student"] for r in records[::4]] == ["alice", "bob", "carol"]
    for record in records:
        raw, penalty, override, final = (
            float(record[k]) for k in ("raw", "penalty", "override", "final")
        )
        assert math.isclose(raw - penalty + override, final, abs_tol=1e-9), record
    want = {(s.student, e.id): e for s in standings.values() for e in s.exercises}
    for record in records:
        expected = want[(record["student"], record["exercise"])]
        assert float(record["final"]) == pytest.approx(expected.final, abs=1e-4)
        assert float(record["max_score"]) == expected.max_score
    alice_ex01 = next(
        r for r in records if r["student"] == "alice" and r["exercise"].startswith("ex01")
    )
    assert (
        alice_ex01["name"],
        alice_ex01["lms_id"],
        alice_ex01["sis_user_id"],
        alice_ex01["assignment"],
    ) == ("Doe, Alice", "4321", "S001", "week1")
    assert float(alice_ex01["penalty"]) == 2.5 and "25% off" in alice_ex01["late_reason"]
    alice_ex03 = next(
        r for r in records if r["student"] == "alice" and r["exercise"].startswith("ex03")
    )
    assert (
        float(alice_ex03["override"]) == 1.5 and "flaky test; regraded" in alice_ex03["adjustments"]
    )
    carol = [r for r in records if r["student"] == "carol"]
    assert carol and all(r["name"] == "" and r["lms_id"] == "" for r in carol)


# -- the roster ------------------------------------------------------------------------------------------------


def test_the_roster_reads_its_columns_and_finds_a_student(roster):
    assert roster.students == ("alice", "bob", "dave")
    alice = roster["alice"]
    assert (
        alice.name,
        alice.lms_id,
        alice.sis_user_id,
        alice.sis_login_id,
        alice.section,
        alice.email,
        alice.line,
    ) == ("Doe, Alice", "4321", "S001", "adoe", "Section A", "alice@example.edu", 2)
    assert (
        roster.get("dave").sis_user_id is None and roster.get("zoe") is None and "zoe" not in roster
    )


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (
            "student,name\nalice,Alice\nbob,Bob\nalice,Alice again\n",
            ["line 4: student 'alice' is already on line 2"],
        ),
        ("student,lms_id\nalice,1\n", ["line 1: the header lacks name"]),
        (
            "student,name,lms_id\nalice,Alice,1\n,Nobody,2\nbob,,3\n",
            ["line 3: student is empty", "line 4: name is empty"],
        ),
        (
            "student,name,lms_id\nalice,Alice,12a\nbob,Bob,7\ncarol,Carol,7\n",
            [
                "line 2: lms_id = '12a' is not a number",
                "line 4: lms_id 7 is already bob's (line 3)",
            ],
        ),
    ],
)
def test_a_roster_error_names_its_line(tmp_path, text, expected):
    (tmp_path / "roster.csv").write_text(text)
    with pytest.raises(RosterError) as caught:
        roster_module.load(tmp_path / "roster.csv")
    assert len(caught.value.problems) == len(expected)
    for problem, start in zip(caught.value.problems, expected, strict=True):
        assert problem.startswith(start), problem


def test_a_course_without_a_roster_says_what_to_write(tmp_path):
    (tmp_path / "course.toml").write_text(COURSE.replace('roster = "roster.csv"\n', ""))
    with pytest.raises(RosterError, match='roster = "roster.csv"'):
        roster_module.for_course(term.load(tmp_path / "course.toml"))


def test_a_canvas_export_with_a_student_column_added_is_a_roster(tmp_path):
    (tmp_path / "export.csv").write_text(
        "student,Student,ID,SIS User ID,SIS Login ID,Section,week1 (12345),Current Score\n"
        ",,,,,,Manual Posting,\n"
        ",    Points Possible,,,,,25,(read only)\n"
        'alice,"Doe, Alice",4321,S001,adoe,Section A,20,80\n'
    )
    roster = roster_module.load(tmp_path / "export.csv")
    assert [
        (e.student, e.name, e.lms_id, e.sis_user_id, e.sis_login_id, e.section) for e in roster
    ] == [("alice", "Doe, Alice", "4321", "S001", "adoe", "Section A")]
    (tmp_path / "plain.csv").write_text(
        'Student,ID,SIS User ID,SIS Login ID,Section\n"Doe, Alice",4321,,,\n'
    )
    with pytest.raises(RosterError, match="add a column `student`"):
        roster_module.load(tmp_path / "plain.csv")
