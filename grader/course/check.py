"""What `shardlab course check` finds beyond the course file's own reading: the roster, the extensions and the
adjustments checked against each other and against the term, each problem that grading or exporting would
otherwise meet without a word. An error is what grading or the export would get wrong (a student it cannot
match, a file it cannot read); a warning is what it would do by a rule the instructor may not expect."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from grader.course import adjustments as adjustments_file, roster as roster_file
from grader.course.term import Assignment, Course, line_of

ERROR, WARNING = "error", "warning"
# Canvas's gradebook import finds a student by one of these (lms_export.CANVAS_STUDENT_COLUMNS): a roster
# with none of them matches students by name only
ID_COLUMNS = ("lms_id", "sis_user_id", "sis_login_id")


@dataclass(frozen=True)
class Finding:
    severity: str  # ERROR or WARNING
    path: Path | str  # the file the problem is in
    line: int | None
    message: str

    def describe(self) -> str:
        where = f"{self.path}, line {self.line}" if self.line else str(self.path)
        return f"{self.severity}: {where}: {self.message}"


def _course_line(course: Course, where: tuple[str | int, ...]) -> int | None:
    if course.source is None:
        return None
    try:
        return line_of(Path(course.source.path).read_text(encoding="utf-8"), where)
    except (OSError, UnicodeDecodeError):
        return None


def _course_path(course: Course) -> str:
    return course.source.path if course.source else "course.toml"


def check(course: Course) -> list[Finding]:
    """Every problem of `course`'s files beyond the course file's own reading, errors before warnings."""
    found: list[Finding] = []
    roster = _roster(course, found)
    _extensions(course, roster, found)
    _adjustments(course, roster, found)
    _due_dates(course, found)
    return sorted(found, key=lambda f: f.severity != ERROR)


def _roster(course: Course, found: list[Finding]) -> roster_file.Roster | None:
    here = _course_path(course)
    if course.roster is None:
        if course.extensions or course.adjustments and Path(course.adjustments).is_file():
            found.append(
                Finding(
                    WARNING,
                    here,
                    None,
                    "it names no roster: the students of its extensions and adjustments are not checked "
                    'against one, and `shardlab export --canvas` needs one (roster = "roster.csv")',
                )
            )
        return None
    line = _course_line(course, ("roster",))
    if not Path(course.roster).is_file():
        found.append(
            Finding(ERROR, here, line, f"roster {course.roster} does not exist (no such file)")
        )
        return None
    try:
        roster = roster_file.load(course.roster)
    except roster_file.RosterError as exc:
        found += [Finding(ERROR, course.roster, None, problem) for problem in exc.problems]
        return None
    header = Path(course.roster).read_text(encoding="utf-8-sig").splitlines()[:1]
    columns = {
        roster_file.CANVAS_NAMES.get(name.strip(), name.strip())
        for name in (header[0] if header else "").split(",")
    }
    if not columns & set(ID_COLUMNS):
        found.append(
            Finding(
                ERROR,
                course.roster,
                1,
                f"the header has none of the id columns Canvas's gradebook import matches students by "
                f"({', '.join(ID_COLUMNS)}; or Canvas's ID, SIS User ID, SIS Login ID): it would match "
                "them by name only",
            )
        )
    else:
        for entry in roster:
            if not (entry.lms_id or entry.sis_user_id or entry.sis_login_id):
                found.append(
                    Finding(
                        WARNING,
                        course.roster,
                        entry.line,
                        f"{entry.student} has no lms_id, sis_user_id or sis_login_id: Canvas would "
                        "match them by name only",
                    )
                )
    return roster


def _extensions(course: Course, roster: roster_file.Roster | None, found: list[Finding]) -> None:
    here = _course_path(course)
    granted: dict[tuple[str, str], int] = {}
    for i, extension in enumerate(course.extensions):
        line = _course_line(course, ("extension", i, "student"))
        if roster is not None and extension.student not in roster:
            found.append(
                Finding(
                    ERROR,
                    here,
                    line,
                    f"extension {i + 1} names {extension.student!r}, who is not on the roster "
                    f"{roster.path}: the extension would apply to no one",
                )
            )
        for assignment in course.assignments:
            if not extension.applies(assignment.name):
                continue
            if assignment.due is None:
                found.append(
                    Finding(
                        WARNING,
                        here,
                        line,
                        f"extension {i + 1} ({extension.student}) extends {assignment.name!r}, "
                        "which has no due date: it changes nothing",
                    )
                )
            else:
                # the line of what sets the new due date: until, or days
                said = _course_line(
                    course, ("extension", i, "until" if extension.until else "days")
                )
                _extended_due(
                    course, i, said or line, assignment, extension.due(assignment.due), found
                )
            key = (extension.student, assignment.name)
            if key in granted:
                found.append(
                    Finding(
                        ERROR,
                        here,
                        line,
                        f"extension {i + 1} gives {extension.student} a second extension of "
                        f"{assignment.name!r} (extension {granted[key] + 1} comes first and is the "
                        "one grading applies)",
                    )
                )
            else:
                granted[key] = i


def _adjustments(course: Course, roster: roster_file.Roster | None, found: list[Finding]) -> None:
    try:
        adjustments = adjustments_file.load(course.adjustments)
    except adjustments_file.AdjustmentsError as exc:
        found += [Finding(ERROR, exc.path, None, problem) for problem in exc.problems]
        return
    term = {e.id for e in course.exercises}
    for adjustment in adjustments:
        where = (course.adjustments or "adjustments.csv", adjustment.line)
        if roster is not None and adjustment.student not in roster:
            found.append(
                Finding(
                    ERROR,
                    *where,
                    f"an adjustment for {adjustment.student!r}, who is not on the roster "
                    f"{roster.path}",
                )
            )
        if adjustment.exercise not in term:
            found.append(
                Finding(
                    ERROR,
                    *where,
                    f"an adjustment for {adjustment.exercise}, which is not in this term's course file "
                    f"(its exercises: {', '.join(sorted(term))}): grading would apply it to nothing",
                )
            )


def _extended_due(
    course: Course,
    i: int,
    line: int | None,
    assignment: Assignment,
    new: datetime,
    found: list[Finding],
) -> None:
    """An extension's due date that takes time away, or that the late policy's last moment voids."""
    who = f"extension {i + 1} ({course.extensions[i].student})"
    if new < assignment.due:
        found.append(
            Finding(
                ERROR,
                _course_path(course),
                line,
                f"{who} gives {assignment.name!r} the due date {new.isoformat()}, before its own "
                f"{assignment.due.isoformat()}: it would make the student late sooner",
            )
        )
    zero_after = course.late.zero_after
    if zero_after is not None and new > zero_after:
        found.append(
            Finding(
                ERROR,
                _course_path(course),
                line,
                f"{who} moves {assignment.name!r} to {new.isoformat()}, after the late policy's "
                f"zero_after {zero_after.isoformat()}: work handed in after that gets 0 points, "
                "extension or not",
            )
        )


def _due_dates(course: Course, found: list[Finding]) -> None:
    late = course.late
    for i, assignment in enumerate(course.assignments):
        if (
            late.zero_after is not None
            and assignment.due is not None
            and assignment.due > late.zero_after
        ):
            found.append(
                Finding(
                    ERROR,
                    _course_path(course),
                    _course_line(course, ("assignment", i, "due")),
                    f"assignment {assignment.name!r} is due {assignment.due.isoformat()}, after the "
                    f"late policy's zero_after {late.zero_after.isoformat()}: work handed in on time "
                    "after that gets 0 points",
                )
            )
    if not (late.percent or late.zero_after):
        return
    for i, assignment in enumerate(course.assignments):
        if assignment.due is None:
            found.append(
                Finding(
                    WARNING,
                    _course_path(course),
                    _course_line(course, ("assignment", i, "name")),
                    f"assignment {assignment.name!r} has no due date while a late policy is set: "
                    "none of its work is ever late",
                )
            )
