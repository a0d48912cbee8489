"""`shardlab course check` over a term's files: each problem grading or the Canvas export would meet without a
word is named with its file and line; an error exits 1, warnings print and exit 0."""

from __future__ import annotations

from pathlib import Path

import pytest

from grader.cli import main

COURSE = """
name = "Autumn"
timezone = "Europe/Paris"
{roster}

[late]
percent = 10

[[assignment]]
name = "HW1"
due = 2026-10-05T23:59:00
exercises = ["ex01", "ex04"]

[[assignment]]
name = "HW2"
{hw2_due}
exercises = ["ex05"]

[[extension]]
student = "{extended}"
days = 3
assignments = ["HW1"]
"""

ROSTER = """student,name,lms_id,sis_user_id
alice,"Doe, Alice",4321,S001
bob,"Roe, Bob",4322,S002
"""


def term(
    folder: Path,
    *,
    roster: str | None = ROSTER,
    named: bool = True,
    extended: str = "bob",
    hw2_due: str = 'due = "2026-10-12 23:59"',
    adjustments: str | None = None,
) -> Path:
    if roster is not None:
        (folder / "roster.csv").write_text(roster)
    if adjustments is not None:
        (folder / "adjustments.csv").write_text(adjustments)
    path = folder / "course.toml"
    path.write_text(
        COURSE.format(
            roster='roster = "roster.csv"' if named else "", extended=extended, hw2_due=hw2_due
        )
    )
    return path


def check(path: Path, capsys) -> tuple[int, str]:
    code = main(["course", "check", "--course", str(path)])
    return code, capsys.readouterr().err


def line(path: Path, text: str) -> int:
    return next(i for i, row in enumerate(path.read_text().splitlines(), 1) if text in row)


def test_a_sound_term_passes(tmp_path, capsys):
    assert check(term(tmp_path), capsys) == (0, "")


def test_an_extension_for_a_student_not_on_the_roster_is_an_error_with_its_line(tmp_path, capsys):
    path = term(tmp_path, extended="bobby")
    code, err = check(path, capsys)
    assert code == 1
    assert f"error: {path.resolve()}, line {line(path, 'bobby')}: extension 1 names 'bobby'" in err


def test_a_roster_that_does_not_exist_is_an_error_naming_the_course_files_line(tmp_path, capsys):
    path = term(tmp_path, roster=None)
    code, err = check(path, capsys)
    assert code == 1
    assert f"line {line(path, 'roster =')}: roster {tmp_path / 'roster.csv'} does not exist" in err


def test_a_roster_without_the_id_columns_canvas_matches_by_is_an_error(tmp_path, capsys):
    code, err = check(term(tmp_path, roster="student,name,email\nbob,Bob,b@x\n"), capsys)
    assert code == 1
    assert "roster.csv, line 1: the header has none of the id columns" in err


def test_a_roster_student_without_an_id_is_a_warning(tmp_path, capsys):
    code, err = check(term(tmp_path, roster=ROSTER + "carol,Carol,,\n"), capsys)
    assert code == 0
    assert "warning: " in err and "roster.csv, line 4: carol has no lms_id" in err


def test_an_unreadable_roster_is_an_error_with_its_line(tmp_path, capsys):
    code, err = check(term(tmp_path, roster=ROSTER + "alice,Again,4399,S009\n"), capsys)
    assert code == 1
    assert "line 4: student 'alice' is already on line 2" in err


@pytest.mark.parametrize(
    "row, says",
    [
        ("bobby,ex01,,,1,typo,Ann", "line 2: an adjustment for 'bobby', who is not on the roster"),
        ("bob,ex07,,,1,wrong exercise,Ann", "line 2: an adjustment for ex07_"),
    ],
)
def test_an_adjustment_grading_would_apply_to_no_one_is_an_error(tmp_path, capsys, row, says):
    adjustments = f"student,exercise,test,set,add,reason,by\n{row}\n"
    code, err = check(term(tmp_path, adjustments=adjustments), capsys)
    assert code == 1
    assert says in err


def test_two_extensions_of_one_assignment_for_one_student_is_an_error(tmp_path, capsys):
    path = term(tmp_path)
    path.write_text(
        path.read_text() + '\n[[extension]]\nstudent = "bob"\ndays = 5\nassignments = ["HW1"]\n'
    )
    code, err = check(path, capsys)
    assert code == 1
    assert "extension 2 gives bob a second extension of 'HW1' (extension 1 comes first" in err


def test_an_assignment_without_a_due_date_under_a_late_policy_is_a_warning(tmp_path, capsys):
    path = term(tmp_path, hw2_due="")
    code, err = check(path, capsys)
    assert code == 0
    hw2 = line(path, 'name = "HW2"')
    assert f"line {hw2}: assignment 'HW2' has no due date" in err


def test_without_a_roster_the_extensions_are_said_to_be_unchecked(tmp_path, capsys):
    code, err = check(term(tmp_path, named=False, extended="anyone"), capsys)
    assert code == 0
    assert "warning: " in err and "names no roster: the students of its extensions" in err


@pytest.mark.parametrize(
    "late, extension, says",
    [
        # an until before the due date: the "extension" makes the student late sooner
        ("", "until = 2026-10-01T12:00:00", "before its own 2026-10-05T23:59:00+02:00"),
        # an extension past the last moment late work counts: worth nothing after it
        (
            "zero_after = 2026-10-07T23:59:00",
            "days = 5",
            "after the late policy's zero_after 2026-10-07T23:59:00+02:00",
        ),
    ],
)
def test_an_extension_that_takes_time_away_is_an_error(tmp_path, capsys, late, extension, says):
    path = term(tmp_path)
    text = path.read_text().replace("percent = 10", f"percent = 10\n{late}")
    path.write_text(text.replace("days = 3", extension))
    code, err = check(path, capsys)
    assert code == 1
    # the line that sets the new due date (it once named the student's)
    given = line(path, extension)
    assert f"line {given}: extension 1 (bob)" in err and says in err


def test_an_assignment_due_after_zero_after_is_an_error(tmp_path, capsys):
    path = term(tmp_path)
    path.write_text(
        path.read_text().replace("percent = 10", "percent = 10\nzero_after = 2026-10-10T00:00:00")
    )
    code, err = check(path, capsys)
    assert code == 1
    assert f"line {line(path, '2026-10-12 23:59')}: assignment 'HW2' is due" in err
    assert "work handed in on time after that gets 0 points" in err
