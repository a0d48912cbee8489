"""Gradescope's submission metadata: when a submission came in, its assignment's due dates, and who submitted it.

Gradescope writes /autograder/submission_metadata.json before run_autograder runs; `shardlab grade
--submission-metadata FILE` reads it with `read_metadata`. Its format, as Gradescope documents it
(https://gradescope-autograders.readthedocs.io/en/latest/submission_metadata/), with the fields read here:

    {
      "id": 123456,                                         # the submission
      "created_at": "2018-07-01T14:22:32.365935-07:00",     # when it was submitted: submitted_at
      "assignment": {
        "due_date": "2018-07-31T23:00:00.000000-07:00",     # due
        "late_due_date": null,                              # late_due: the last time Gradescope accepts work
        "release_date": "2018-07-02T00:00:00.000000-07:00",
        "title": "Programming Assignment 1",                # title
        "group_submission": true, "group_size": 4, "id": 25828, "course_id": 1234, "total_points": "20.0"
      },
      "submission_method": "upload",
      "users": [{"email": "student@example.com", "id": 1234, "name": "Student User"}],   # several for a group
      "previous_submissions": [{"submission_time": "...", "score": 0.0, "results": {}}]
    }

Beyond that page, Gradescope's files give each user a "sid" (the student id of the course roster) and an
"assignment" object of their own: the assignment with that user's dates, an extension Gradescope gave
them included (autograders read metadata["users"][0]["assignment"]["due_date"] for a student's own
window). Both are read when present: a user's own dates win over the assignment's, and in a group
submission the latest of the members' dates counts (Gradescope took the submission under it).

Re-running a submission keeps its created_at: lateness judged from it is the same on every run.
`course_with_platform_dates` gives the term the dates Gradescope knows where its course file gives none.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from grader.core.errors import ShardlabError
from grader.course import term

FILE_NAME = "submission_metadata.json"


class SubmissionMetadataError(ShardlabError, ValueError):
    """Gradescope's metadata file cannot be used: which file, which key and why."""

    def __init__(self, path: Path | str, key: str | None, problem: str):
        self.path, self.key, self.problem = Path(path), key, problem
        super().__init__(f"{path}: {key}: {problem}" if key else f"{path}: {problem}")


@dataclass(frozen=True)
class Submitter:
    """One user of a submission, as Gradescope gives them (any of these may be missing)."""

    name: str | None = None
    email: str | None = None
    sid: str | None = None  # the student id of the course's roster

    def names(self) -> tuple[str, ...]:
        """Every way a course file may name this student: sid, email, email before the @, name."""
        found = [
            self.sid,
            self.email,
            self.email.partition("@")[0] if self.email else None,
            self.name,
        ]
        return tuple(dict.fromkeys(name for name in found if name))


@dataclass(frozen=True)
class SubmissionMetadata:
    submitted_at: datetime  # created_at: when the student submitted (kept on a re-run)
    # the submitters' own due date when Gradescope gives one, else the assignment's
    due: datetime | None
    late_due: datetime | None  # likewise: after it, Gradescope accepts nothing
    students: tuple[Submitter, ...]  # the users, in Gradescope's order
    title: str | None = None  # the Gradescope assignment's title
    extended: bool = False  # a submitter's own due date is later than the assignment's


# -- reading --------------------------------------------------------------------------------------------


class _Reader:
    def __init__(self, path: Path):
        self.path = path

    def fail(self, key: str | None, problem: str):
        raise SubmissionMetadataError(self.path, key, problem)

    def table(self, data: Any, key: str) -> dict:
        if not isinstance(data, dict):
            self.fail(key, f"must be a JSON object, not {_shown(data)}")
        return data

    def moment(
        self, table: dict, key: str, where: str, *, required: bool = False
    ) -> datetime | None:
        """An ISO 8601 date and time with its UTC offset, as Gradescope writes them; null when not required."""
        value = table.get(key)
        name = f"{where}.{key}" if where else key
        if value is None:
            if required:
                self.fail(name, "missing" if key not in table else "is null")
            return None
        if not isinstance(value, str):
            self.fail(name, f"must be a date and time written as text, not {_shown(value)}")
        try:
            moment = datetime.fromisoformat(value.strip())
        except ValueError:
            self.fail(name, f"{value!r} is not an ISO 8601 date and time")
        if moment.tzinfo is None or moment.utcoffset() is None:
            self.fail(name, f"{value!r} has no UTC offset: which moment it is cannot be known")
        return moment

    def text(self, table: dict, key: str, where: str) -> str | None:
        value = table.get(key)
        if value is None or value == "":
            return None
        if isinstance(value, bool) or not isinstance(value, (str, int)):
            self.fail(f"{where}.{key}", f"must be text, not {_shown(value)}")
        return str(value)


def _shown(value: Any) -> str:
    return f"{type(value).__name__} {json.dumps(value)[:60]}" if value is not None else "null"


def read_metadata(path: str | Path = Path("/autograder") / FILE_NAME) -> SubmissionMetadata:
    """Gradescope's submission metadata file, read; SubmissionMetadataError names the file and the key of
    anything it cannot use."""
    path = Path(path)
    r = _Reader(path)
    try:
        data = json.loads(path.read_bytes())
    except OSError as exc:
        r.fail(None, f"cannot read it: {exc.strerror or exc}")
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        r.fail(None, f"not JSON: {exc}")
    data = r.table(data, "(the file)")
    submitted_at = r.moment(data, "created_at", "", required=True)
    assignment = r.table(data.get("assignment") or {}, "assignment")
    due, late_due = (
        r.moment(assignment, "due_date", "assignment"),
        r.moment(assignment, "late_due_date", "assignment"),
    )
    title = r.text(assignment, "title", "assignment")
    users = data.get("users") or []
    if not isinstance(users, list):
        r.fail("users", f"must be a list of users, not {_shown(users)}")
    students, own_dues, own_late_dues = [], [], []
    for i, user in enumerate(users):
        where = f"users[{i}]"
        user = r.table(user, where)
        students.append(Submitter(*(r.text(user, key, where) for key in ("name", "email", "sid"))))
        if user.get("assignment") is not None:
            own = r.table(user["assignment"], f"{where}.assignment")
            own_dues.append(r.moment(own, "due_date", f"{where}.assignment"))
            own_late_dues.append(r.moment(own, "late_due_date", f"{where}.assignment"))
    own_due = max((d for d in own_dues if d is not None), default=None)
    own_late_due = max((d for d in own_late_dues if d is not None), default=None)
    extended = own_due is not None and (due is None or own_due > due)
    return SubmissionMetadata(
        submitted_at, own_due or due, own_late_due or late_due, tuple(students), title, extended
    )


# -- the term with Gradescope's dates ---------------------------------------------------------------------


def _targets(course: term.Course, title: str | None, assignment: str | None = None) -> set[str]:
    """The course's assignments the Gradescope assignment is: the one the zip grades (`grade --assignment`,
    as run_autograder passes it), else the one whose name or slug is its title (case aside), else all."""
    if assignment is not None:
        try:
            return {course.assignment(assignment).name}
        except KeyError:
            pass  # course_and_options said so already
    if title:
        wanted = title.strip().casefold()
        named = {
            a.name
            for a in course.assignments
            if wanted in (a.name.strip().casefold(), a.slug.casefold())
        }
        if named:
            return named
    return {a.name for a in course.assignments}


def course_with_platform_dates(
    course: term.Course, meta: SubmissionMetadata, assignment: str | None = None
) -> term.Course:
    """The course with the dates Gradescope knows where the course file gives none: an assignment without a
    due date of its own takes Gradescope's (the submitter's, an extension included): only `assignment`, the
    one graded, when given; else the one named as the Gradescope assignment's title when one is; else every
    one. A late policy without
    zero_after takes Gradescope's late due date as it: Gradescope accepts nothing after it anyway. The
    course file's own dates and extensions always win."""
    targets = _targets(course, meta.title, assignment)
    assignments = tuple(
        dataclasses.replace(a, due=meta.due)
        if a.due is None and meta.due is not None and a.name in targets
        else a
        for a in course.assignments
    )
    late = course.late
    if late.zero_after is None and meta.late_due is not None:
        late = dataclasses.replace(late, zero_after=meta.late_due)
    return dataclasses.replace(course, assignments=assignments, late=late)


def course_student(course: term.Course, meta: SubmissionMetadata) -> str | None:
    """The name to grade the submission under: the first of the submitters' names (sid, email, email before
    the @, name) that a course file's [[extension]] names, so that its extension applies; else the first
    submitter's sid, email or name; None when Gradescope names no one."""
    extended = {extension.student for extension in course.extensions}
    for student in meta.students:
        for name in student.names():
            if name in extended:
                return name
    return next((student.names()[0] for student in meta.students if student.names()), None)


__all__ = [
    "FILE_NAME",
    "SubmissionMetadata",
    "SubmissionMetadataError",
    "Submitter",
    "course_student",
    "course_with_platform_dates",
    "read_metadata",
]
