"""Gradescope's submission_metadata.json, in the format Gradescope documents
(https://gradescope-autograders.readthedocs.io/en/latest/submission_metadata/) with the per-user "sid" and
"assignment" its files carry: reading it, refusing a malformed one by file and key, and a term given the dates
Gradescope knows."""

import json
from datetime import datetime, timedelta, timezone
from pathlib import Path
from zoneinfo import ZoneInfo

import pytest

from grader.core.errors import ShardlabError
from grader.course import term
from grader.grading.gradescope_metadata import (
    SubmissionMetadata,
    SubmissionMetadataError,
    Submitter,
    course_student,
    course_with_platform_dates,
    read_metadata,
)

PACIFIC = timezone(timedelta(hours=-7))


def documented(**changes) -> dict:
    """The documented example, a group of two with an extension for the second member."""
    metadata = {
        "id": 123456,
        "created_at": "2018-07-01T14:22:32.365935-07:00",
        "assignment": {
            "due_date": "2018-07-31T23:00:00.000000-07:00",
            "group_size": 4,
            "group_submission": True,
            "id": 25828,
            "course_id": 1234,
            "late_due_date": None,
            "release_date": "2018-07-02T00:00:00.000000-07:00",
            "title": "week1",
            "total_points": "20.0",
        },
        "submission_method": "upload",
        "users": [
            {"email": "student@example.com", "id": 1234, "name": "Student User", "sid": "s1234"},
            {
                "email": "bob@example.com",
                "id": 1235,
                "name": "Bob",
                "sid": 5678,
                "assignment": {
                    "due_date": "2018-08-03T23:00:00.000000-07:00",
                    "late_due_date": "2018-08-05T23:00:00.000000-07:00",
                    "release_date": "2018-07-02T00:00:00.000000-07:00",
                    "title": "week1",
                },
            },
        ],
        "previous_submissions": [
            {
                "submission_time": "2018-06-30T14:24:48.087023-07:00",
                "score": 0.0,
                "results": {"tests": []},
            },
        ],
    }
    return metadata | changes


def written(tmp_path, data) -> Path:
    path = tmp_path / "submission_metadata.json"
    path.write_text(data if isinstance(data, str) else json.dumps(data))
    return path


def test_reads_the_documented_format(tmp_path):
    meta = read_metadata(written(tmp_path, documented()))
    assert meta.submitted_at == datetime(2018, 7, 1, 14, 22, 32, 365935, tzinfo=PACIFIC)
    # Bob's own dates (an extension) win over the assignment's: the group's latest counts.
    assert meta.due == datetime(2018, 8, 3, 23, 0, tzinfo=PACIFIC) and meta.extended
    assert meta.late_due == datetime(2018, 8, 5, 23, 0, tzinfo=PACIFIC)
    assert meta.title == "week1"
    assert meta.students == (
        Submitter("Student User", "student@example.com", "s1234"),
        Submitter("Bob", "bob@example.com", "5678"),
    )
    assert meta.students[1].names() == ("5678", "bob@example.com", "bob", "Bob")


def test_without_own_dates_the_assignments_count(tmp_path):
    data = documented(users=[{"email": "student@example.com", "id": 1234, "name": "Student User"}])
    meta = read_metadata(written(tmp_path, data))
    assert meta.due == datetime(2018, 7, 31, 23, 0, tzinfo=PACIFIC) and not meta.extended
    assert meta.late_due is None
    assert meta.students == (Submitter("Student User", "student@example.com", None),)
    # The 2017 format: no assignment object, no users.
    meta = read_metadata(
        written(
            tmp_path,
            {
                "id": 1,
                "created_at": "2017-06-01T14:22:32.365935-07:00",
                "assignment_id": 1,
                "previous_submissions": [],
            },
        )
    )
    assert meta == SubmissionMetadata(
        datetime(2017, 6, 1, 14, 22, 32, 365935, tzinfo=PACIFIC), None, None, ()
    )


@pytest.mark.parametrize(
    "data, key, problem",
    [
        ("{not json", None, "not JSON"),
        ("[]", "(the file)", "must be a JSON object"),
        (documented(created_at=None), "created_at", "is null"),
        ({k: v for k, v in documented().items() if k != "created_at"}, "created_at", "missing"),
        (
            documented(created_at="yesterday"),
            "created_at",
            "'yesterday' is not an ISO 8601 date and time",
        ),
        (documented(created_at="2018-07-01T14:22:32"), "created_at", "has no UTC offset"),
        (
            documented(assignment={"due_date": 5}),
            "assignment.due_date",
            "must be a date and time written as text",
        ),
        (documented(assignment="week1"), "assignment", "must be a JSON object"),
        (documented(users={"email": "a@b"}), "users", "must be a list of users"),
        (
            documented(users=[{"email": "a@b", "assignment": {"due_date": "soon"}}]),
            "users[0].assignment.due_date",
            "'soon' is not an ISO 8601",
        ),
        (documented(users=[{"email": ["a@b"]}]), "users[0].email", "must be text"),
    ],
)
def test_a_malformed_file_is_refused_naming_the_file_and_the_key(tmp_path, data, key, problem):
    path = written(tmp_path, data)
    with pytest.raises(SubmissionMetadataError) as raised:
        read_metadata(path)
    assert isinstance(raised.value, ShardlabError)
    assert raised.value.key == key and raised.value.path == path
    assert str(raised.value).startswith(f"{path}: {key}: " if key else f"{path}: ")
    assert problem in str(raised.value)


def test_a_missing_file_is_refused(tmp_path):
    with pytest.raises(SubmissionMetadataError, match="cannot read it"):
        read_metadata(tmp_path / "nothing.json")


COURSE = """
name = "JAX parallelism, summer 2018"
timezone = "America/Los_Angeles"

[[assignment]]
name = "week1"
exercises = ["ex01", "ex02"]

[[assignment]]
name = "week2"
due = 2018-08-10T23:00:00
exercises = ["ex03"]

[[assignment]]
name = "week3"
exercises = ["ex04"]

[[extension]]
student = "bob"
days = 2
"""


def course(tmp_path, text=COURSE) -> term.Course:
    path = tmp_path / "course.toml"
    path.write_text(text)
    return term.load(path)


def test_course_takes_gradescopes_dates_where_it_has_none(tmp_path):
    meta = read_metadata(written(tmp_path, documented()))
    original = course(tmp_path)
    dated = course_with_platform_dates(original, meta)
    dues = {a.name: a.due for a in dated.assignments}
    # week1 is the Gradescope assignment (its title): Bob's own due date; week2 keeps its own; week3 is another.
    assert dues == {
        "week1": meta.due,
        "week2": datetime(2018, 8, 10, 23, 0, tzinfo=ZoneInfo("America/Los_Angeles")),
        "week3": None,
    }
    assert dated.late.zero_after == meta.late_due
    assert dated.exercises == original.exercises and dated.extensions == original.extensions
    assert dated.source == original.source
    assert original.assignments[0].due is None  # frozen: the course itself is unchanged
    # Judged against Gradescope's dates: an hour after Bob's due date is late, after the late due date, 0.
    late = dated.lateness("ex01_meshes", None, meta.due + timedelta(hours=1))
    assert late.late_seconds == 3600 and late.due == meta.due.isoformat()
    assert dated.lateness("ex01_meshes", None, meta.late_due + timedelta(seconds=1)).percent == 100
    assert dated.lateness("ex01_meshes", None, meta.submitted_at).percent == 0


def test_a_title_no_assignment_has_dates_every_assignment_without_one(tmp_path):
    meta = read_metadata(written(tmp_path, documented(users=[])))
    meta = SubmissionMetadata(
        meta.submitted_at, meta.due, meta.late_due, meta.students, "Programming Assignment 1"
    )
    dated = course_with_platform_dates(course(tmp_path), meta)
    assert [a.due for a in dated.assignments] == [
        meta.due,
        course(tmp_path).assignments[1].due,
        meta.due,
    ]
    assert dated.late.zero_after is None  # Gradescope has no late due date here


def test_the_course_files_zero_after_wins(tmp_path):
    text = COURSE.replace(
        "\n[[assignment]]",
        "\n[late]\npercent = 10\nzero_after = 2018-09-01T00:00:00\n\n[[assignment]]",
        1,
    )
    own = course(tmp_path, text)
    dated = course_with_platform_dates(own, read_metadata(written(tmp_path, documented())))
    assert dated.late == own.late and dated.late.percent == 10


def test_the_student_to_grade_is_the_one_an_extension_names(tmp_path):
    meta = read_metadata(written(tmp_path, documented()))
    # Bob's email before the @ names the extension
    assert course_student(course(tmp_path), meta) == "bob"
    assert course_student(course(tmp_path, COURSE.replace('"bob"', '"nobody"')), meta) == "s1234"
    assert (
        course_student(course(tmp_path), SubmissionMetadata(meta.submitted_at, None, None, ()))
        is None
    )
