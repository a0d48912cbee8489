"""The instructor's term commands: `shardlab course check`, `shardlab override` and `shardlab export`, over a
graded class's folder (grade-batch's OUT) and the course file."""

from __future__ import annotations

import csv
import sys
from pathlib import Path

from grader.commands.publish import Publication, class_term, publish_class
from grader.core.cells import as_data
from grader.core.errors import ShardlabError
from grader.core.options import DEFAULTS
from grader.course import (
    adjustments as adjustments_file,
    catalog,
    check as course_checks,
    roster,
    term as course_file,
)
from grader.course.adjustments import Adjustment
from grader.course.term import Course
from grader.grading import batch, spreadsheet
from grader.grading.standing import Standing
from grader.reports import lms_export
from grader.reports.text import printable


class TermCommandError(ShardlabError):
    pass


def class_outcomes(out: Path) -> list[batch.StudentOutcome]:
    """Every student of a graded class: each folder under OUT/students (graded when it holds a report), and the
    students grades.csv lists without one (refused, failed), with the status it gave them."""
    out = Path(out)
    students = out / batch.STUDENTS
    if not students.is_dir():
        raise TermCommandError(
            f"{out} holds no graded class ({batch.STUDENTS}/ is missing): grade it with "
            "`shardlab grade-batch SUBMISSIONS --out OUT` first"
        )
    outcomes = {}
    for folder in sorted(students.iterdir()):
        if folder.is_dir():
            graded = (folder / batch.REPORT).is_file()
            outcomes[folder.name] = batch.StudentOutcome(
                folder.name,
                "skipped" if graded else "failed",
                detail="" if graded else "no report.json",
            )
    grades = out / batch.GRADES
    if grades.is_file():
        with grades.open(newline="", encoding="utf-8") as handle:
            for row in csv.DictReader(handle):
                student = as_data(row.get("student") or "")  # written neutralized
                if student and student not in outcomes:
                    why = (row.get("status") or "").removeprefix("not graded: ")
                    outcomes[student] = batch.StudentOutcome(student, batch.REFUSED, detail=why)
    return list(outcomes.values())


def republish(out: Path, course: Course, hidden_visibility: str) -> Publication:
    return publish_class(
        out, class_outcomes(out), class_term(course), hidden_visibility=hidden_visibility
    )


def record_override(
    out: Path, course: Course, adjustment: Adjustment, hidden_visibility: str
) -> Publication:
    """Add `adjustment` to the course's adjustments file, then publish the class again with it."""
    if course.source is None or course.adjustments is None:
        raise TermCommandError(
            "an adjustment is kept in the course's adjustments file: give the course file "
            "(--course course.toml, or run where course.toml is)"
        )
    known = {o.student for o in class_outcomes(out)}
    if adjustment.student not in known:
        raise TermCommandError(
            f"no student {adjustment.student!r} in {out} (graded: {', '.join(sorted(known))})"
        )
    course.exercise(adjustment.exercise)  # an exercise of this term, or UnknownExercise
    append(course.adjustments, adjustment)
    return republish(out, course, hidden_visibility)


def append(path: Path, adjustment: Adjustment) -> None:
    """`adjustment` added at the end of the adjustments file (made with its header when missing), every earlier
    adjustment kept; the file is read first, so a broken one is reported before it grows. Written through
    the spreadsheet-safe writer: a name or a reason is never read as a formula."""
    earlier = adjustments_file.load(path)
    rows = [
        {
            "student": a.student,
            "exercise": a.exercise,
            "test": a.test or "",
            "set": a.set,
            "add": a.add,
            "reason": a.reason,
            "by": a.by,
        }
        for a in [*earlier, adjustment]
    ]
    spreadsheet.write_csv(path, list(adjustments_file.COLUMNS), rows)


def make_adjustment(
    student: str,
    exercise: str,
    test: str | None,
    set_to: float | None,
    add: float | None,
    reason: str,
    by: str,
) -> Adjustment:
    if (set_to is None) == (add is None):
        raise TermCommandError(
            "give one of --set (a new score) or --add (points added, negative to take off)"
        )
    if set_to is not None and set_to < 0:
        raise TermCommandError(f"--set {set_to:g}: a score is at least 0")
    if not reason.strip() or not by.strip():
        raise TermCommandError("an adjustment says why (--reason) and who made it (--by)")
    return Adjustment(
        student, catalog.get(exercise).id, test or None, set_to, add, reason.strip(), by.strip()
    )


def class_standings(out: Path, course: Course) -> dict[str, Standing]:
    """Every graded student's standing as the class page shows it: late penalties by this course, adjustments
    applied."""
    term = class_term(course)
    found = {}
    for outcome in class_outcomes(out):
        graded = term.standing(
            batch.student_folder(out, outcome.student) / batch.REPORT, outcome.student
        )
        if graded is not None:
            found[outcome.student] = graded
    return found


def export_grades(
    out: Path, course: Course, *, canvas: Path | None, long: Path | None
) -> list[str]:
    """Canvas's gradebook import CSV and the long CSV of a graded class, for the course's roster; what the
    instructor should know (students left out, and why), one line each."""
    standings = class_standings(out, course)
    said = []
    the_roster = roster.for_course(course)
    if canvas is not None:
        made = lms_export.canvas_csv(standings, course, the_roster, canvas)
        said += [*made.problems, f"wrote {made.path}: {len(made.students)} students"]
    if long is not None:
        said.append(f"wrote {lms_export.long_csv(standings, course, the_roster, long)}")
    return said


# -- the command line's handlers -------------------------------------------------------------------------


def load_course(args, command: str):
    """The course --course names (or the current folder's course.toml); None after saying why it cannot be read."""
    try:
        return course_file.load(args.course)
    except ShardlabError as exc:
        print(f"shardlab {command}: {exc}", file=sys.stderr)
        return None


def course_check_command(args) -> int:
    """The term, then every problem of the roster, extensions and adjustments with its file and line: 1 when
    one is an error (grading or the export would get it wrong without a word), 0 with warnings only."""
    course = load_course(args, "course check")
    if course is None:
        return 2
    for line in course_file.describe(course):
        print(line)
    findings = course_checks.check(course)
    if course.adjustments is not None and not any(
        f.path == course.adjustments and f.line is None for f in findings
    ):
        count = len(adjustments_file.load(course.adjustments))
        print(
            f"  adjustments: {count} in {course.adjustments}"
            if count
            else f"  adjustments: none yet ({course.adjustments})"
        )
    for finding in findings:
        print(printable(f"shardlab course check: {finding.describe()}"), file=sys.stderr)
    return 1 if any(f.severity == course_checks.ERROR for f in findings) else 0


def override_command(args) -> int:
    course = load_course(args, "override")
    if course is None:
        return 2
    try:
        adjustment = make_adjustment(
            args.student, args.exercise, args.test, args.set, args.add, args.reason, args.by
        )
        published = record_override(
            args.out, course, adjustment, course.hidden_visibility or DEFAULTS.hidden_visibility
        )
    except ShardlabError as exc:
        print(f"shardlab override: {exc}", file=sys.stderr)
        return 2
    for problem in published.problems:
        print(printable(f"adjustments: {problem}"), file=sys.stderr)
    graded = published.standings.get(adjustment.student)
    if graded is not None:
        print(
            printable(
                f"{adjustment.student}: {graded.final:.2f}/{graded.max_score:g} after the adjustment "
                f"({graded.raw:.2f} from the tests)"
            )
        )
    print(f"recorded in {course.adjustments}; wrote {published.grades_csv} and {published.page}")
    return 0


def export_command(args) -> int:
    course = load_course(args, "export")
    if course is None:
        return 2
    if args.canvas is None and args.long is None:
        print(
            "shardlab export: say what to write: --canvas FILE, --long FILE or both",
            file=sys.stderr,
        )
        return 2
    try:
        lines = export_grades(args.out, course, canvas=args.canvas, long=args.long)
    except ShardlabError as exc:
        print(f"shardlab export: {exc}", file=sys.stderr)
        return 2
    for line in lines:
        print(printable(line))
    return 0
