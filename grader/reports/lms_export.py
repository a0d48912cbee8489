"""Grades as an LMS takes them: Canvas's gradebook import CSV, and a plain long CSV (one row per student and
exercise) for any other LMS or spreadsheet. Both show what counts (each exercise's final score: raw, less
the late penalty, with the instructor's adjustments) and are written by grader.grading.spreadsheet, so every
text cell is quoted and neutralized against formula injection while the scores stay numbers.

What Canvas's gradebook import takes, read in Canvas's own code (the Instructure guide "How do I import
grades in the Gradebook?" says the same in prose; the public store searched here did not hold it):
  https://github.com/instructure/canvas-lms/blob/master/lib/gradebook_importer.rb
  https://github.com/instructure/canvas-lms/blob/master/lib/gradebook_exporter.rb
  https://github.com/instructure/canvas-lms/blob/master/ui/features/gradebook_uploads/jquery/process_gradebook_upload.js
  https://github.com/instructure/canvas-lms/blob/master/ui/features/gradebook_uploads/jquery/index.js
  https://github.com/instructure/canvas-lms/blob/master/app/models/assignment.rb (Assignment.title_and_id)
  https://teaching.resources.osu.edu/toolsets/carmencanvas/guides/calculating-final-grades/import-csv-file-carmen-grades
- The header starts with the student columns of Canvas's own export: Student, ID, SIS User ID, SIS Login ID,
  then Section (the importer checks that the first is "Student", the second "ID", and that the last student
  column is "Section"). Canvas's export puts "Integration ID" (and "Root Account") between SIS Login ID and
  Section only when the account asks for it; the importer skips them when present and needs neither, so this
  file has neither.
- The student of a row is found by ID (Canvas's number for the user) first, then SIS User ID, then SIS Login
  ID, then by name ("Student" equal to the user's name or sortable name). Section is not used to find them.
- Every further column is an assignment: "Name (id)" names Canvas's assignment `id` (Canvas's export writes
  them so); a bare name is matched to an assignment of exactly that title, and Canvas offers to create a new
  assignment of that name (with the points of the "Points Possible" row) when none has it. A header that
  contains "Current Score", "Final Grade", "Override Score" or the like is a column of totals: ignored.
- A row whose first cell contains "Points Possible" gives the assignments' points; it is optional (Canvas's
  export writes it second, as "    Points Possible") and Canvas uses it only for the assignments it creates:
  an existing assignment's points are not changed by an import.
- A score in the file replaces the score in Canvas (the review page shows each change before it is applied).
  An empty cell is no change only where Canvas holds no score either: where it holds one, an empty cell
  removes it (the review page highlights the removal). A student without a row is left as they are.
- Scores are compared at 2 decimals, the precision of Canvas's own export: the scores here are rounded so.

So a student of the roster whom this grading did not grade gets no row at all (Canvas keeps whatever it
holds for them), not a row of empty cells; a graded student the roster does not know cannot be named to
Canvas and is left out; both are told, with every other thing the instructor should know, in the export's
problems. An assignment none of whose exercises this grading graded for any exported student gets no column
(an empty column would remove the scores Canvas holds).
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from grader.core.cells import as_text
from grader.course.roster import Roster, RosterEntry
from grader.course.term import Assignment, Course
from grader.grading.results import NO_TIME
from grader.grading.spreadsheet import write_csv
from grader.grading.standing import ExerciseStanding, Standing

CANVAS_STUDENT_COLUMNS = ("Student", "ID", "SIS User ID", "SIS Login ID", "Section")
CANVAS_POINTS_ROW = "    Points Possible"  # as Canvas's export writes it
# headers the importer skips
CANVAS_TOTALS = (
    "Current Score",
    "Current Points",
    "Current Grade",
    "Final Score",
    "Final Points",
    "Final Grade",
    "Override Score",
    "Override Grade",
    "Override Status",
)
CANVAS_DECIMALS = 2
LONG_COLUMNS = (
    "student",
    "name",
    "lms_id",
    "sis_user_id",
    "assignment",
    "exercise",
    "max_score",
    "raw",
    "penalty",
    "override",
    "final",
    "late_reason",
    "adjustments",
)
LONG_DECIMALS = 4
_TRAILING_ID = re.compile(r"\s\((\d+)\)\Z")  # what Canvas reads as "Name (id)"


@dataclass(frozen=True)
class Export:
    """A written export: where, whom it holds, whom it left out, and what the instructor should know."""

    path: Path
    students: tuple[str, ...]  # the rows written, in the roster's order
    unrostered: tuple[str, ...]  # graded but not in the roster: not exported
    ungraded: tuple[str, ...]  # in the roster but not graded: no row, Canvas keeps what it holds
    problems: tuple[str, ...]  # one line each, the two above included


def canvas_column(assignment: Assignment) -> str:
    """The header of `assignment`'s column as Canvas names it: "week1 (12345)"; without an lms_id, its name."""
    return f"{assignment.name} ({assignment.lms_id})" if assignment.lms_id else assignment.name


def _number(value: float, decimals: int) -> float | int:
    rounded = round(value, decimals) + 0.0  # + 0.0: no "-0.0"
    return int(rounded) if rounded.is_integer() else rounded


def _graded(standing: Standing, assignment: Assignment) -> list[ExerciseStanding]:
    return [e for e in standing.exercises if e.id in assignment.exercises]


def assignment_score(standing: Standing, assignment: Assignment) -> float | None:
    """The sum of the final scores of `assignment`'s exercises that `standing` holds; None when it holds none."""
    graded = _graded(standing, assignment)
    return math.fsum(e.final for e in graded) if graded else None


def _points_possible(course: Course, assignment: Assignment) -> float:
    return math.fsum(
        e.points for e in course.exercises if e.id in assignment.exercises and not e.bonus
    )


def _assignment_problems(assignments: Iterable[Assignment]) -> list[str]:
    problems = []
    owners: dict[str, str] = {}
    for assignment in assignments:
        column = canvas_column(assignment)
        if assignment.lms_id is None:
            problems.append(
                f"assignment {assignment.name}: no lms_id in the course file: Canvas takes the column "
                "for the assignment of exactly that title, or offers to create a new assignment"
            )
            if _TRAILING_ID.search(assignment.name):
                problems.append(
                    f"assignment {assignment.name}: Canvas reads the number in brackets at the end of "
                    "its name as an assignment's id: give it its lms_id"
                )
        elif assignment.lms_id in owners:
            problems.append(
                f"assignment {assignment.name}: lms_id {assignment.lms_id} is also "
                f"{owners[assignment.lms_id]}'s: Canvas gets two columns for one assignment"
            )
        else:
            owners[assignment.lms_id] = assignment.name
        if any(total in column for total in CANVAS_TOTALS):
            problems.append(
                f"assignment {assignment.name}: Canvas ignores a column whose header contains "
                f"{next(t for t in CANVAS_TOTALS if t in column)!r} (it takes it for a column of totals)"
            )
        if as_text(column) != column:
            problems.append(
                f"assignment {assignment.name}: its header is written behind a ' (it starts like a "
                "formula): Canvas will not recognize it"
            )
    return problems


def _student_problems(entry: RosterEntry) -> list[str]:
    problems = []
    who = f"{entry.student} (roster line {entry.line})"
    if not (entry.lms_id or entry.sis_user_id or entry.sis_login_id):
        also = (
            ": and its name is written behind a ' (it starts like a formula), so Canvas will not find them"
            if as_text(entry.name) != entry.name
            else ""
        )
        problems.append(
            f"{who}: no lms_id, sis_user_id or sis_login_id: Canvas finds the student by name only"
            f"{also}"
        )
    for label, value in (("sis_user_id", entry.sis_user_id), ("sis_login_id", entry.sis_login_id)):
        if value is not None and as_text(value) != value:
            problems.append(
                f"{who}: {label} {value!r} is written behind a ' (it starts like a formula): Canvas "
                "will not match it"
            )
    if "Points Possible" in entry.name:
        problems.append(
            f'{who}: Canvas takes a row whose Student cell contains "Points Possible" for the row of '
            "the assignments' points, not a student"
        )
    return problems


def _split(
    standings: dict[str, Standing], roster: Roster
) -> tuple[list[RosterEntry], list[str], list[str]]:
    """The roster's graded students (its order), the graded students it lacks, its students not graded."""
    rostered = [entry for entry in roster if entry.student in standings]
    unrostered = sorted(student for student in standings if student not in roster)
    ungraded = [entry.student for entry in roster if entry.student not in standings]
    return rostered, unrostered, ungraded


def canvas_csv(
    standings: dict[str, Standing],
    course: Course,
    roster: Roster,
    path: Path | str,
    *,
    points_possible: bool = True,
) -> Export:
    """Canvas's gradebook import CSV of `standings` (by student folder name) at `path`: the student columns of
    Canvas's export, then a column per assignment of `course` holding the sum of its exercises' final scores
    (2 decimals), named "Name (lms_id)"; an assignment without an lms_id gets its bare name, which Canvas
    matches to an assignment of that exact title or, if none, offers to create as a new assignment. With
    `points_possible`, a "Points Possible" row gives each assignment's points (its exercises', bonus ones
    left out), which Canvas uses only for the assignments it creates.

    One row per roster student this grading graded, in the roster's order, found by Canvas through their ID,
    SIS User ID and SIS Login ID. Students left out and everything else worth knowing are in the result's
    problems (see the module's docstring for why)."""
    rostered, unrostered, ungraded = _split(standings, roster)
    problems: list[str] = []
    assignments = [
        a
        for a in course.assignments
        if any(_graded(standings[entry.student], a) for entry in rostered)
    ]
    for assignment in course.assignments:
        if assignment not in assignments:
            problems.append(
                f"assignment {assignment.name}: no student of the roster was graded on it: no column "
                "(Canvas keeps its scores)"
            )
    problems += _assignment_problems(assignments)
    columns = [*CANVAS_STUDENT_COLUMNS, *(canvas_column(a) for a in assignments)]
    rows: list[dict[str, object]] = []
    if points_possible:
        rows.append(
            {"Student": CANVAS_POINTS_ROW}
            | {
                canvas_column(a): _number(_points_possible(course, a), CANVAS_DECIMALS)
                for a in assignments
            }
        )
    for entry in rostered:
        standing = standings[entry.student]
        problems += _student_problems(entry)
        row: dict[str, object] = {
            "Student": entry.name,
            "ID": entry.lms_id or "",
            "SIS User ID": entry.sis_user_id or "",
            "SIS Login ID": entry.sis_login_id or "",
            "Section": entry.section or "",
        }
        for assignment in assignments:
            graded = _graded(standing, assignment)
            score = assignment_score(standing, assignment)
            if score is None:
                problems.append(
                    f"{entry.student}: not graded on any exercise of {assignment.name}: its cell is "
                    "empty, which removes a score Canvas holds there (the import's review page shows it)"
                )
                continue
            if len(graded) < len(assignment.exercises):
                lacking = sorted(set(assignment.exercises) - {e.id for e in graded})
                problems.append(
                    f"{entry.student}: {assignment.name} holds the sum of the exercises graded, not of "
                    f"{', '.join(lacking)}, which this grading did not grade"
                )
            row[canvas_column(assignment)] = _number(score, CANVAS_DECIMALS)
        rows.append(row)
    for student in unrostered:
        problems.append(
            f"{student}: graded but not in the roster ({roster.path or 'roster'}): not exported"
        )
    for student in ungraded:
        problems.append(
            f"{student}: in the roster but not in this grading: no row (Canvas keeps what it holds)"
        )
    written = write_csv(Path(path), columns, rows)
    return Export(
        written,
        tuple(entry.student for entry in rostered),
        tuple(unrostered),
        tuple(ungraded),
        tuple(problems),
    )


def _long_row(
    student: str, entry: RosterEntry | None, course: Course, exercise: ExerciseStanding
) -> dict[str, object]:
    raw, penalty, final = (
        round(value, LONG_DECIMALS) for value in (exercise.raw, exercise.penalty, exercise.final)
    )
    assignment = course.assignment_of(exercise.id)
    return {
        "student": student,
        "name": entry.name if entry else "",
        "lms_id": (entry.lms_id or "") if entry else "",
        "sis_user_id": (entry.sis_user_id or "") if entry else "",
        "assignment": assignment.name if assignment else "",
        "exercise": exercise.id,
        "max_score": _number(exercise.max_score, LONG_DECIMALS),
        "raw": _number(raw, LONG_DECIMALS),
        "penalty": _number(penalty, LONG_DECIMALS),
        # written so that raw - penalty + override is final, digit for digit
        "override": _number(final - raw + penalty, LONG_DECIMALS),
        "final": _number(final, LONG_DECIMALS),
        "late_reason": NO_TIME
        if exercise.untimed
        else exercise.late.reason
        if exercise.late is not None
        else "",
        "adjustments": "; ".join(adjustment.describe() for adjustment in exercise.adjustments),
    }


def long_csv(
    standings: dict[str, Standing], course: Course, roster: Roster, path: Path | str
) -> Path:
    """A plain CSV at `path`, one row per graded student and exercise: who (the roster's name and ids, empty
    for a student it lacks), the exercise and its assignment, its points, and raw - penalty + override = final
    (4 decimals), the late policy's reason and the adjustments (each described, joined with "; "). The roster's
    students first, in its order, then the others by name."""
    rostered, unrostered, _ = _split(standings, roster)
    order = [entry.student for entry in rostered] + unrostered
    rows = [
        _long_row(student, roster.get(student), course, exercise)
        for student in order
        for exercise in standings[student].exercises
    ]
    return write_csv(Path(path), list(LONG_COLUMNS), rows)
