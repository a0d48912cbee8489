"""When a submission came in, and what the course's late policy makes of it.

A submission's time comes from, in this order: the instructor (`grade --submitted-at TIME`, or grade-batch's
`--submitted-at FILE.csv` with a `student,submitted_at` line per student, or a
`student,assignment,submitted_at` line per student and assignment), Gradescope's
submission_metadata.json (run_autograder), nbgrader's timestamp.txt in a submitted folder, or the last
commit of a submission that is a git clone (GitHub Classroom). timestamp.txt's time and a commit's are what
the student's machine said: the instructor's times, or Gradescope's, are the ones to trust when it matters;
report.json records where the time came from.

Each exercise records the time it was judged with: a grading of one assignment (or one exercise) keeps every
other exercise's time, so its lateness is judged again (an extension granted since) from its own time, never
from the time of what was graded after it.
"""

from __future__ import annotations

import csv
import dataclasses
import io
import os
import stat
import sys
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import NamedTuple

from grader.core.errors import ShardlabError
from grader.course import catalog
from grader.course.term import Course
from grader.grading import git_clone
from grader.grading.results import GradingResults, Submitted, TermRecord


class SubmissionTimeError(ShardlabError, ValueError):
    pass


@dataclass(frozen=True)
class SubmissionTime:
    at: datetime  # with its offset
    source: str  # where it came from, as report.json records it


def moment(text: str, where: str) -> datetime:
    """An ISO 8601 date and time with its offset ("2026-10-05T23:59:00+02:00", or Z)."""
    try:
        value = datetime.fromisoformat(text.strip())
    except ValueError:
        raise SubmissionTimeError(
            f"{where}: {text!r} is not an ISO 8601 date and time (write 2026-10-05T23:59:00+02:00)"
        ) from None
    if value.tzinfo is None:
        raise SubmissionTimeError(
            f"{where}: {text!r} has no UTC offset: add one (+02:00, Z), so that it means "
            "one moment wherever it is read"
        )
    return value


# Where a time came from, when it is what the student's own machine wrote (a commit, nbgrader's timestamp.txt)
FROM_GIT = "the last commit of the git clone"
FROM_NBGRADER = "nbgrader's timestamp.txt (the student's clock)"
STUDENT_CLOCK = frozenset({FROM_GIT, FROM_NBGRADER})


@dataclass(frozen=True)
class Times:
    """The submission times one grading applies: `every` to each exercise it grades, an assignment's own time
    (keyed by the course file's name for it) to that assignment's exercises in its place. `student_clock`, a
    time the submission's own files give (git, timestamp.txt), counts only where neither these nor an earlier
    grading's time from the instructor or a platform does (`stamped`)."""

    every: SubmissionTime | None = None
    assignments: dict[str, SubmissionTime] = field(default_factory=dict)
    student_clock: SubmissionTime | None = None

    def of(self, course: Course, exercise_id: str) -> SubmissionTime | None:
        assignment = course.assignment_of(catalog.get(exercise_id).id)
        found = self.assignments.get(assignment.name) if assignment is not None else None
        return found or self.every

    def __bool__(self) -> bool:
        return self.every is not None or bool(self.assignments)

    def arguments(self) -> list[str]:
        """As `grade --submitted-at` takes them (a batch's child, a Slurm task): TIME, or ASSIGNMENT=TIME."""
        every = [self.every.at.isoformat()] if self.every is not None else []
        return every + [f"{name}={t.at.isoformat()}" for name, t in self.assignments.items()]

    @classmethod
    def parse(cls, values: list[str], course: Course, source: str) -> Times:
        """`grade --submitted-at` values: TIME applies to every exercise graded, ASSIGNMENT=TIME (its name or
        slug) to that assignment's exercises. An unknown assignment, or two times for one, is an error."""
        every, assignments = None, {}
        for value in values:
            name, _, text = value.rpartition("=")  # an ISO 8601 time holds no "="
            at = SubmissionTime(moment(text, "--submitted-at"), source)
            if not name:
                if every is not None:
                    raise SubmissionTimeError(
                        f"--submitted-at: {value!r}: a time for all was given already"
                    )
                every = at
                continue
            try:
                assignment = course.assignment(name).name
            except KeyError as exc:
                raise SubmissionTimeError(f"--submitted-at: {value!r}: {exc.args[0]}") from None
            if assignment in assignments:
                raise SubmissionTimeError(
                    f"--submitted-at: {value!r}: {assignment} has a time already"
                )
            assignments[assignment] = at
        return cls(every, assignments)


@dataclass(frozen=True)
class TimesFile:
    """grade-batch's `--submitted-at FILE.csv`, read: each student's times (Times), and the line that gave
    each student's first time."""

    path: Path
    students: dict[str, Times]
    lines: dict[str, int]


class Known(NamedTuple):
    """The students a times file may name (the roster's and the class folder's), and where they are, as said."""

    students: set[str]
    where: str  # "in the class folder nor on the roster"


def read_times(path: Path, course: Course, known: Known | None = None) -> TimesFile:
    """grade-batch's `--submitted-at FILE.csv`: a `student,submitted_at` header and a time per student, applied
    to the exercises each grading grades; or `student,assignment,submitted_at` and a time per student and
    assignment (the course file's name for it, or its slug), applied to that assignment's exercises only.
    Every problem is an error naming its line, all of them at once: a student not `known` among them (a
    typo that would leave the real student without a time)."""
    try:
        text = Path(path).read_text(encoding="utf-8-sig")
    except OSError as exc:
        raise SubmissionTimeError(f"{path}: cannot read it: {exc.strerror or exc}") from None
    reader = csv.DictReader(io.StringIO(text))
    header = {name.strip() for name in reader.fieldnames or ()}
    if not {"student", "submitted_at"} <= header:
        raise SubmissionTimeError(
            f"{path}: line 1: the header must name student and submitted_at (and assignment, for a "
            "time per assignment)"
        )
    per_assignment = "assignment" in header
    every: dict[str, SubmissionTime] = {}
    assignments: dict[str, dict[str, SubmissionTime]] = {}
    lines: dict[str, int] = {}
    named: set[str] = set()
    problems = []
    source = f"{Path(path).name}"
    for row in reader:
        row = {
            (k or "").strip(): (v or "").strip() if isinstance(v, str) else ""
            for k, v in row.items()
        }
        where = f"line {reader.line_num}"
        student = row["student"]
        if not student:
            continue
        if known is not None and student not in known.students and student not in named:
            problems.append(f"{where}: {student!r} is not {known.where}")
        named.add(student)
        try:
            at = SubmissionTime(moment(row["submitted_at"], where), source)
            if per_assignment:
                try:
                    name = course.assignment(row["assignment"]).name
                except KeyError as exc:
                    raise SubmissionTimeError(f"{where}: {exc.args[0]}") from None
                if name in assignments.setdefault(student, {}):
                    raise SubmissionTimeError(f"{where}: {student} has a time for {name} already")
                assignments[student][name] = at
            else:
                if student in every:
                    raise SubmissionTimeError(f"{where}: {student} has a time already")
                every[student] = at
        except SubmissionTimeError as exc:
            problems.append(str(exc))
            continue
        lines.setdefault(student, reader.line_num)
    if problems:
        raise SubmissionTimeError(f"{path}:\n  " + "\n  ".join(problems))
    students = {s: Times(every.get(s), assignments.get(s, {})) for s in lines}
    return TimesFile(Path(path), students, lines)


def from_git(submission: Path) -> SubmissionTime | None:
    """The committer time of the last commit of a submission that is a git clone; None when it is not one,
    or when its last commit cannot be read (said on stderr: it is graded without a time, so without a late
    penalty). Read without running git (grader.grading.git_clone says why)."""
    found = git_clone.last_commit_time(Path(submission))
    if found is None:
        return None
    if found.at is None:
        print(
            f"shardlab: {submission}: {found.problem}: graded without a submission time, "
            "so without a late penalty",
            file=sys.stderr,
        )
        return None
    return SubmissionTime(found.at, FROM_GIT)


# nbgrader's timestamp.txt: "2026-10-05 18:00:00.000000 UTC" (nbgrader writes UTC), or ISO 8601 with an offset
NBGRADER_TIMESTAMP = "timestamp.txt"
_TIMESTAMP_BYTES = 100


def from_nbgrader(submission: Path) -> SubmissionTime | None:
    """The time in the timestamp.txt of an nbgrader submitted folder (`nbgrader submit` writes it, as the
    student, so it ranks with a commit's time: the student's clock); None when there is none. A plain read of
    at most 100 bytes of a regular file, never following a symbolic link; a time it cannot read is an error
    naming the file, since grading without it would drop the late policy unsaid."""
    if not Path(submission).is_dir():
        return None
    path = Path(submission) / NBGRADER_TIMESTAMP
    try:
        # no link followed, and a pipe put there never blocks the open
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise SubmissionTimeError(f"{path}: not read: {exc.strerror or exc}") from None
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise SubmissionTimeError(f"{path}: not a regular file: not read")
    with os.fdopen(fd, "rb") as file:
        data = file.read(_TIMESTAMP_BYTES + 1)
    text = data.decode("utf-8", "replace").strip()
    if len(data) > _TIMESTAMP_BYTES:
        raise SubmissionTimeError(f"{path}: over {_TIMESTAMP_BYTES} bytes: not a timestamp")
    given = text.removesuffix(" UTC").removesuffix("Z")
    try:
        at = datetime.fromisoformat(given)
    except ValueError:
        raise SubmissionTimeError(
            f"{path}: {text[:60]!r} is not a time as nbgrader writes it "
            "(2026-10-05 18:00:00.000000 UTC)"
        ) from None
    if at.tzinfo is None:  # nbgrader's own form: UTC without an offset
        at = at.replace(tzinfo=timezone.utc)
    return SubmissionTime(at, FROM_NBGRADER)


def stamped(
    results: GradingResults,
    course: Course,
    times: Times,
    earlier: GradingResults | None = None,
) -> GradingResults:
    """`results`, a grading just made, with the time each exercise came in: its assignment's, else the one for
    all; an exercise given none keeps the time an earlier grading of it recorded from the instructor or a
    platform; else the submission's own (git, timestamp.txt), which a student can write, so it never takes
    the place of a time the instructor gave before (a forced regrade without the times file)."""
    kept = earlier.exercises if earlier is not None else {}

    def when(ex_id: str) -> Submitted | None:
        given = _submitted(times.of(course, ex_id))
        before = kept[ex_id].submitted if ex_id in kept else None
        if given is not None:
            return given
        if before is not None and before.source not in STUDENT_CLOCK:
            return before
        return _submitted(times.student_clock) or before

    return dataclasses.replace(
        results,
        exercises={
            ex_id: dataclasses.replace(ex, submitted=when(ex_id))
            for ex_id, ex in results.exercises.items()
        },
    )


def _submitted(time: SubmissionTime | None) -> Submitted | None:
    return Submitted(time.at.isoformat(), time.source) if time is not None else None


def with_term(results: GradingResults, course: Course, student: str) -> GradingResults:
    """`results` recording the course that judged it and the student, each exercise with its lateness under
    the course's late policy (the student's extension applied) from the time that exercise records: an
    exercise kept from an earlier grading keeps its own time, so judging one assignment never re-judges
    another's. Without a time, no late policy applies; where a due date would have, the exercise says so
    (`untimed`)."""
    exercises = {}
    for ex_id, ex in results.exercises.items():
        at = datetime.fromisoformat(ex.submitted.at) if ex.submitted is not None else None
        due = course.due(ex_id, student)[0]
        exercises[ex_id] = dataclasses.replace(
            ex,
            late=course.lateness(ex_id, student, at) if at is not None and not ex.note else None,
            untimed=at is None and due is not None and not ex.note,
        )
    timed = [ex.submitted for ex in exercises.values() if ex.submitted is not None]
    latest = max(timed, key=lambda s: datetime.fromisoformat(s.at), default=None)
    source = course.source
    record = TermRecord(
        course.name,
        source.path if source else None,
        source.digest if source else None,
        student,
        latest.at if latest else None,
        latest.source if latest else None,
    )
    return dataclasses.replace(results, exercises=exercises, term=record)
