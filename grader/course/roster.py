"""The class roster: who each student is outside the grader. A CSV file the instructor keeps beside the course
file (course.toml's `roster`), one row per student, that ties the student's folder name (as grading names
them) to their name and their LMS identities, for the gradebook exports (grader.reports.lms_export).

    student,name,lms_id,sis_user_id,sis_login_id,section,email
    alice,"Doe, Alice",4321,S001,adoe,Section A,alice@example.edu
    bob,"Roe, Bob",4322,,,,

`student` (the folder name) and `name` are required; the rest may be left out or empty. `lms_id` is the LMS's
number for the student (Canvas: the "ID" column of its gradebook export, the number in the student's address);
`sis_user_id` and `sis_login_id` are the institution's ids, as Canvas's export shows them.

Canvas's own column names are accepted too ("Student" for name, "ID", "SIS User ID", "SIS Login ID",
"Section"), so a Canvas gradebook export with one column `student` added (the folder names) is a roster: its
"Points Possible" row and its "Manual Posting" row are skipped, its assignment columns ignored. Canvas's
export alone is not one: it does not know the students' folder names, which is what a roster is for.

Every problem is reported at once, each with its line.
"""

from __future__ import annotations

import csv
import io
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from grader.core.errors import FileProblems
from grader.course.term import Course

COLUMNS = ("student", "name", "lms_id", "sis_user_id", "sis_login_id", "section", "email")
REQUIRED = ("student", "name")
# the columns of Canvas's gradebook export, as this roster names them
CANVAS_NAMES = {
    "Student": "name",
    "ID": "lms_id",
    "SIS User ID": "sis_user_id",
    "SIS Login ID": "sis_login_id",
    "Section": "section",
}


class RosterError(FileProblems):
    """The roster cannot be used."""


@dataclass(frozen=True)
class RosterEntry:
    student: str  # the student's folder name, as grading names them
    name: str
    lms_id: str | None = None  # the LMS's number for the student (Canvas: the export's "ID")
    sis_user_id: str | None = None
    sis_login_id: str | None = None
    section: str | None = None
    email: str | None = None
    line: int = 0  # in the roster file


@dataclass(frozen=True)
class Roster:
    """The roster's students, in the file's order, found by folder name with `get` or `roster[student]`."""

    entries: tuple[RosterEntry, ...] = ()
    path: Path | None = None
    _by_student: dict[str, RosterEntry] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        by_student = {entry.student: entry for entry in self.entries}
        if len(by_student) != len(self.entries):
            raise ValueError("two roster entries have the same student")
        object.__setattr__(self, "_by_student", by_student)

    def get(self, student: str) -> RosterEntry | None:
        return self._by_student.get(student)

    def __getitem__(self, student: str) -> RosterEntry:
        return self._by_student[student]

    def __contains__(self, student: object) -> bool:
        return student in self._by_student

    def __iter__(self) -> Iterator[RosterEntry]:
        return iter(self.entries)

    def __len__(self) -> int:
        return len(self.entries)

    @property
    def students(self) -> tuple[str, ...]:
        return tuple(entry.student for entry in self.entries)


def _header(fieldnames: list[str] | None) -> tuple[dict[str, str], list[str]]:
    """{column in the file: the roster's name for it}, and the problems of the header."""
    names = [(name or "").strip() for name in fieldnames or ()]
    mapping: dict[str, str] = {}
    problems = []
    for name in names:
        ours = name if name in COLUMNS else CANVAS_NAMES.get(name)
        if ours is None:
            continue  # another column (an assignment of a Canvas export, a note): not the roster's
        if ours in mapping.values():
            problems.append(
                f"line 1: two columns give {ours} ({', '.join(k for k, v in mapping.items() if v == ours)}"
                f" and {name})"
            )
            continue
        mapping[name] = ours
    missing = [column for column in REQUIRED if column not in mapping.values()]
    if missing:
        hint = (
            " (Canvas's gradebook export has no folder names: add a column `student` with each student's "
            "folder name)"
            if "student" in missing and "Student" in names
            else ""
        )
        problems.append(
            f"line 1: the header lacks {', '.join(missing)} (a roster's columns: {','.join(COLUMNS)}; "
            f"{', '.join(REQUIRED)} required){hint}"
        )
    return mapping, problems


def _skipped(row: dict[str, str]) -> bool:
    """An empty line, or the rows of a Canvas export that are not students ("Points Possible",
    "Manual Posting")."""
    return not any(row.values()) or not row.get("student") and row.get("name") == "Points Possible"


def parse(text: str, path: Path | str = "roster.csv") -> Roster:
    """The roster `text` holds; every problem at once, each with its line."""
    reader = csv.DictReader(io.StringIO(text))
    mapping, problems = _header(reader.fieldnames)
    if problems:
        raise RosterError(path, problems)
    entries: list[RosterEntry] = []
    seen: dict[str, int] = {}
    lms_ids: dict[str, int] = {}
    for raw in reader:
        line = reader.line_num
        row = {ours: (raw.get(name) or "").strip() for name, ours in mapping.items()}
        if _skipped(row):
            continue
        empty = [column for column in REQUIRED if not row.get(column)]
        if empty:
            problems.append(
                f"line {line}: {' and '.join(empty)} {'is' if len(empty) == 1 else 'are'} empty"
            )
            continue
        student = row["student"]
        if student in seen:
            problems.append(f"line {line}: student {student!r} is already on line {seen[student]}")
            continue
        seen[student] = line
        lms_id = row.get("lms_id") or None
        if lms_id is not None:
            if not lms_id.isdigit():
                problems.append(
                    f'line {line}: lms_id = {lms_id!r} is not a number (Canvas: the "ID" column of '
                    "its gradebook export)"
                )
                continue
            if lms_id in lms_ids:
                problems.append(
                    f"line {line}: lms_id {lms_id} is already {lms_ids[lms_id]}'s (line "
                    f"{seen[lms_ids[lms_id]]})"
                )
                continue
            lms_ids[lms_id] = student
        entries.append(
            RosterEntry(
                student,
                row["name"],
                lms_id,
                row.get("sis_user_id") or None,
                row.get("sis_login_id") or None,
                row.get("section") or None,
                row.get("email") or None,
                line,
            )
        )
    if problems:
        raise RosterError(path, problems)
    return Roster(tuple(entries), Path(path))


def load(path: Path | str) -> Roster:
    """The roster in `path`."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8-sig")
    except UnicodeDecodeError:
        raise RosterError(path, ["it is not UTF-8 text"]) from None
    except OSError as exc:
        raise RosterError(path, [f"cannot read it: {exc.strerror or exc}"]) from None
    return parse(text, path)


def for_course(course: Course) -> Roster:
    """The roster `course`'s file names; an error naming what to write when it names none."""
    if course.roster is None:
        where = course.source.path if course.source else "course.toml"
        raise RosterError(
            where,
            [
                'it names no roster: add roster = "roster.csv" at its top, a CSV file with the '
                f"columns {','.join(COLUMNS)}"
            ],
        )
    return load(course.roster)
