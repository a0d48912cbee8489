"""When a submission came in, and what the course's late policy makes of it.

A submission's time comes from, in this order: the instructor (`grade --submitted-at TIME`, or grade-batch's
`--submitted-at FILE.csv` with a `student,submitted_at` line per student), Gradescope's
submission_metadata.json (run_autograder), or the last commit of a submission that is a git clone (GitHub
Classroom). A commit's time is what the student's machine said: the instructor's times, or the platform's,
are the ones to trust when it matters; report.json records where the time came from.
"""

from __future__ import annotations

import csv
import dataclasses
import io
import sys
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from grader.core.errors import ShardlabError
from grader.course.term import Course
from grader.grading import git_clone
from grader.grading.results import GradingResults, TermRecord


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


def read_times(path: Path) -> dict[str, datetime]:
    """grade-batch's `--submitted-at FILE.csv`: a `student,submitted_at` header, then a line per student."""
    try:
        text = Path(path).read_text(encoding="utf-8-sig")
    except OSError as exc:
        raise SubmissionTimeError(f"{path}: cannot read it: {exc.strerror or exc}") from None
    reader = csv.DictReader(io.StringIO(text))
    if not {"student", "submitted_at"} <= {name.strip() for name in reader.fieldnames or ()}:
        raise SubmissionTimeError(f"{path}: line 1: the header must name student and submitted_at")
    times: dict[str, datetime] = {}
    problems = []
    for row in reader:
        row = {
            (k or "").strip(): (v or "").strip() if isinstance(v, str) else ""
            for k, v in row.items()
        }
        where = f"line {reader.line_num}"
        if not row["student"]:
            continue
        if row["student"] in times:
            problems.append(f"{where}: {row['student']} has a time already")
            continue
        try:
            times[row["student"]] = moment(row["submitted_at"], where)
        except SubmissionTimeError as exc:
            problems.append(str(exc))
    if problems:
        raise SubmissionTimeError(f"{path}:\n  " + "\n  ".join(problems))
    return times


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
    return SubmissionTime(found.at, "the last commit of the git clone")


def with_term(
    results: GradingResults, course: Course, student: str, submitted: SubmissionTime | None
) -> GradingResults:
    """`results` recording the course that graded it, the student and the submission time, each exercise with
    its lateness under the course's late policy (the student's extension applied). Without a time, no late
    policy applies, and the record says so."""
    source = course.source
    record = TermRecord(
        course.name,
        source.path if source else None,
        source.digest if source else None,
        student,
        submitted.at.isoformat() if submitted else None,
        submitted.source if submitted else None,
    )
    exercises = {
        ex_id: dataclasses.replace(
            ex,
            late=course.lateness(ex_id, student, submitted.at)
            if submitted is not None and not ex.note
            else None,
        )
        for ex_id, ex in results.exercises.items()
    }
    return dataclasses.replace(results, exercises=exercises, term=record)


def recorded_time(results: GradingResults) -> SubmissionTime | None:
    """The submission time an earlier grading recorded, if any."""
    term = results.term
    if term is None or term.submitted_at is None:
        return None
    return SubmissionTime(
        datetime.fromisoformat(term.submitted_at), term.submitted_from or "an earlier grading"
    )
