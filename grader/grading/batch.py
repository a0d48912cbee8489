"""Grading a whole class: one submission per student folder or .zip, each graded by `shardlab grade` in
a fresh process, N at a time, with a progress bar. Resumable, exercise by exercise: of the exercises a batch
grades, a student's grading grades those their report.json does not hold yet and those graded from a
submission that changed since (each exercise records its digest: grader.grading.submission_digest), and the
batch says why; a student with none left is skipped, unless forced. One broken or hostile submission never
stops the batch.

OUT's layout keeps the class's names apart from the batch's own files: students' names come from the LMS
export, so from students, and a student named `grades.tmp`, `index.html` or `.cache` must not take the
place of one of the batch's files. Every student's files are in OUT/students/<student>/, and only there;
the batch's own files (grades.csv, index.html, .cache, .timing-lock, .slurm, and any added later) are at
OUT's top, where no student's name is ever used.

Speedup tests stay fair with several jobs: every grading child shares a timing lock
(grader.harness.timing_lock) and a speedup measurement holds it alone, so no other test runs on the cores
while one is being timed.
"""

from __future__ import annotations

import dataclasses
import os
import signal
import subprocess
import sys
import time
from collections import defaultdict
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass, field
from pathlib import Path
from typing import NamedTuple

import psutil

from grader.core.errors import ShardlabError
from grader.core.options import GRADE, GradingOptions
from grader.course import catalog
from grader.course.adjustments import Adjustment
from grader.course.devices import cores
from grader.course.term import Course, default_course
from grader.grading import lateness, regrade, spreadsheet
from grader.grading.results import GradingResults, read_report
from grader.grading.standing import Standing, standing
from grader.grading.submission_digest import exercise_digests
from grader.harness import timing_lock
from grader.sandbox import cgroups, confinement, disk

# OUT's layout, declared once: the batch's own files at the top, every student's files below STUDENTS.
STUDENTS = "students"
GRADES = "grades.csv"
CACHE = ".cache"  # the compile cache and the calibration, unless --cache says otherwise
SIMILARITY = "similarity"  # in CACHE: what the similarity check keeps between runs
TIMING_LOCK = ".timing-lock"  # what grading children share so that speed measurements never overlap
REPORT = "report.json"  # in each student's folder
REFUSED = "refused"  # a student's status when their submission is not graded (ClassFolder.refused)


def student_folder(out: Path, student: str) -> Path:
    """Where `student`'s report, feedback and log go: never one of the batch's own files, whatever the name."""
    return Path(out) / STUDENTS / student


@dataclass
class StudentOutcome:
    student: str
    status: str  # "graded", "skipped" (already graded), "failed" (grading itself failed),
    # REFUSED (not graded: detail says why)
    seconds: float = 0.0
    detail: str = ""
    # the student's grade, from report.json as it was written (grades.csv's row)
    standing: Standing | None = None


@dataclass
class BatchSummary:
    outcomes: list[StudentOutcome] = field(default_factory=list)
    grades_csv: Path | None = None
    seconds: float = 0.0

    def count(self, status: str) -> int:
        return sum(o.status == status for o in self.outcomes)


@dataclass(frozen=True)
class ClassFolder:
    """A class's submissions folder as read: every student's row, in name order."""

    students: dict[str, Path]  # student -> their folder or .zip
    refused: dict[str, str] = field(default_factory=dict)  # student -> why they are not graded
    ignored: list[str] = field(default_factory=list)  # entries that are not submissions

    @property
    def to_grade(self) -> dict[str, Path]:
        return {s: path for s, path in self.students.items() if s not in self.refused}


def find_submissions(folder: Path) -> ClassFolder:
    """Every sub-folder and .zip file, each a student: a folder is named as it is; a .zip by its stem, unless
    that is another entry's name (bob/ beside bob.zip), then by its whole name, so that both are graded.
    Entries whose names start with "." or "__" (.DS_Store, __MACOSX) and other files are not submissions."""
    entries, ignored = [], []
    for entry in sorted(Path(folder).iterdir()):
        if entry.name.startswith((".", "__")) or not (entry.is_dir() or entry.suffix == ".zip"):
            ignored.append(entry.name)
        else:
            entries.append(entry)
    # Names are compared as a case-insensitive filesystem (macOS's, Windows') compares them: there Bob.zip's
    # stem is bob/'s folder.
    taken = {entry.name.casefold() for entry in entries}
    students = {}
    for entry in entries:
        zipped = entry.suffix == ".zip" and not entry.is_dir()
        students[entry.stem if zipped and entry.stem.casefold() not in taken else entry.name] = (
            entry
        )
    same = defaultdict(list)
    for student in students:
        same[student.casefold()].append(student)
    refused = {
        student: f"{' and '.join(group)} differ only in case, and would share one folder where "
        "OUT is on a case-insensitive filesystem (macOS, Windows): rename one and grade again"
        for group in same.values()
        if len(group) > 1
        for student in group
    }
    return ClassFolder(students, refused, ignored)


@dataclass(frozen=True)
class ClassTerm:
    """What a class is graded and published against: the course, the instructor's adjustments and the
    submission times given for the batch (grade-batch --submitted-at FILE.csv: each student's, one or one per
    assignment)."""

    course: Course = field(default_factory=default_course)
    adjustments: tuple[Adjustment, ...] = ()
    times: dict[str, lateness.Times] = field(default_factory=dict)

    def standing(self, report: Path, student: str) -> Standing | None:
        """`student`'s grade from their report.json: its late penalties judged again by this course (an extension
        granted since counts) and the adjustments applied; None when there is no report to read."""
        results = read_report(report)
        return None if results is None else self.standing_of(results, student)

    def standing_of(self, results: GradingResults, student: str) -> Standing:
        return standing(self.judged(results, student), list(self.adjustments), student)

    def judged(self, results: GradingResults, student: str) -> GradingResults:
        """`results` with this course's late penalties, each exercise's from the time it records."""
        return lateness.with_term(results, self.course, student)


def chosen_ids(options: GradingOptions, course: Course) -> tuple[str, ...]:
    """The ids of the exercises a grading grades of the term: those --assignment, --part and --exercise
    choose, else every one (a ShardlabError, saying why, for a choice the term does not have)."""
    try:
        chosen = course.chosen(options.assignment, options.part, options.exercises)
    except KeyError as exc:
        raise ShardlabError(exc.args[0]) from None
    return chosen or tuple(e.id for e in course.exercises)


class Pending(NamedTuple):
    """What a student's grading in a batch must grade of the exercises chosen, and why."""

    exercises: tuple[str, ...]  # () : nothing, the student is already graded
    why: str = ""  # "": a first grading, or one forced
    whole: bool = True  # every exercise chosen (else only `exercises`, into the earlier report)


def pending(earlier: GradingResults | None, submission: Path, chosen: tuple[str, ...]) -> Pending:
    """Which of the `chosen` exercises (ids) `earlier`, the student's report, leaves to grade: those it does
    not hold, and those whose files changed since their grading (each exercise records the digest of what it
    was graded from: grader.grading.submission_digest; an older report's that records none cannot tell, and
    is kept)."""
    if earlier is None:
        return Pending(chosen)
    held = earlier.exercises
    new = [e for e in chosen if e not in held]
    recorded = [e for e in chosen if e in held and held[e].graded_from is not None]
    now = exercise_digests(submission, [catalog.get(e) for e in recorded])
    changed = [e for e in recorded if held[e].graded_from != now[e]]
    why = []
    if changed:
        times = sorted({held[e].graded_at or "an unknown time" for e in changed})
        why.append(f"submission changed since its grading at {', '.join(times)}")
    if new:
        why.append(f"{', '.join(e.split('_', 1)[0] for e in new)} (not graded before)")
    todo = tuple(e for e in chosen if e in new or e in changed)
    return Pending(todo, "; ".join(why), whole=len(todo) == len(chosen))


def grade_one(
    student: str,
    submission: Path,
    out: Path,
    *,
    options: GradingOptions,
    timeout: float,
    env: dict[str, str],
    class_term: ClassTerm | None = None,
    why: str = "",
) -> StudentOutcome:
    """`shardlab grade` with `options`, in a session of its own, so that a timeout kills all it started. An
    earlier report in the student's folder is graded into (grader.grading.regrade), never lost: a grading
    that fails leaves it as it was. A graded outcome's detail says why it was graded again (`why`) and each
    exercise's score before -> after."""
    term = class_term or ClassTerm()
    target = student_folder(out, student)
    target.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    submitted = term.times.get(student, lateness.Times())
    earlier = read_report(target / REPORT)
    command = [
        sys.executable,
        "-m",
        "grader.cli",
        "grade",
        str(submission),
        "--out",
        str(target),
        "--quiet",
        # --flag=value: a student named "-2+3" is a value, not a flag
        f"--student={student}",
        *(f"--submitted-at={value}" for value in submitted.arguments()),
        *options.arguments(GRADE),
    ]
    child = subprocess.Popen(
        command,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=env,
        stdin=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        log, _ = child.communicate(timeout=timeout)
        code = child.returncode
    except subprocess.TimeoutExpired:
        os.killpg(child.pid, signal.SIGKILL)
        log, code = (
            f"grading took longer than {timeout:.0f} s and was stopped\n{child.communicate()[0]}",
            None,
        )
    (target / "grading.log").write_text(log[-20_000:])
    seconds = time.monotonic() - started
    now = read_report(target / REPORT) if code == 0 else None
    if now is not None:
        changes = regrade.regraded(earlier, now)
        detail = "; ".join(([why] if why else []) + changes)
        return StudentOutcome(
            student,
            "graded",
            seconds,
            # "regraded": an exercise it held was graded again
            f"regraded, {detail}" if changes else detail,
            standing=term.standing_of(now, student),
        )
    return StudentOutcome(student, "failed", seconds, f"exit status {code}: {log.strip()[-300:]}")


def _row(graded: Standing, failure: str | None) -> dict:
    """A student's grades.csv line: each exercise's final score, then what the tests gave, the late penalty,
    the adjustments, the total and why."""
    return {
        **{e.id: round(e.final, 2) for e in graded.exercises},
        "raw": round(graded.raw, 2),
        "late_penalty": round(graded.penalty, 2),
        "adjusted": round(graded.override, 2),
        "total": round(graded.final, 2),
        "max_score": round(graded.max_score, 2),
        "status": "; ".join(
            [
                "graded",
                *filter(None, [graded.untimed, failure]),
                *(f"refused {r}" for r in graded.refused),
            ]
        ),
        "late": "; ".join(graded.late),
        "adjustments": "; ".join(graded.adjusted),
    }


def write_grades_csv(
    out: Path,
    students: list[str],
    standings: dict[str, Standing],
    failures: dict[str, str],
    course: Course | None = None,
) -> Path:
    """One line per student, from the standings this batch holds (read once, as each grading ended)."""
    course = course or default_course()
    extra = sorted(
        {e.id for g in standings.values() for e in g.exercises} - {e.id for e in course.exercises}
    )
    columns = [
        "student",
        *(e.id for e in course.exercises),
        *extra,
        "raw",
        "late_penalty",
        "adjusted",
        "total",
        "max_score",
        "status",
        "late",
        "adjustments",
    ]
    lines = [
        {"student": s, **_row(standings[s], failures.get(s))}
        if s in standings
        else {"student": s, "status": f"not graded: {failures.get(s, 'unknown')}"}
        for s in students
    ]
    return spreadsheet.write_csv(Path(out) / GRADES, columns, lines)


def grade_batch(
    submissions_dir: str | Path,
    out: str | Path,
    options: GradingOptions | None = None,
    *,
    jobs: int = 1,
    force: bool = False,
    timeout: float = 3600.0,
    progress=None,
    class_term: ClassTerm | None = None,
    **overrides,
) -> BatchSummary:
    """Grade every submission in `submissions_dir` into `out`/students/<student>/ and write `out`/grades.csv.
    class_term: the course (options.course names its file, for each student's grading), the adjustments and the
    submission times.

    options: how each student is graded (grader.core.options.GradingOptions), with `overrides` by field
    name (exercises=["ex01"]). Every core is kept busy: `jobs` students at once, each with cores / jobs
    harnesses (unless options.parallel says otherwise). `progress(student, outcome)` is called as each
    student finishes (the CLI draws a bar with it)."""
    options = dataclasses.replace(options or GradingOptions(), **overrides)
    term = class_term or ClassTerm()
    started = time.monotonic()
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    klass = find_submissions(Path(submissions_dir))
    confinement.become_subreaper()  # a killed grader's children come back to us to be reaped
    keep = {child.pid for child in psutil.Process().children()}
    # grading writes nothing into the checkout
    env = dict(os.environ) | {"PYTHONDONTWRITEBYTECODE": "1"}
    # a lock already set (several batches, or a test suite, sharing the machine) is kept
    if jobs > 1:
        env.setdefault(timing_lock.LOCK_DIR, str(out / TIMING_LOCK))
    if options.parallel is None:
        options = dataclasses.replace(options, parallel=max(1, cores() // max(1, jobs)))
    summary = BatchSummary()
    failures: dict[str, str] = {}
    standings: dict[str, Standing] = {}
    todo = {}
    for student, why in klass.refused.items():
        failures[student] = why
        summary.outcomes.append(StudentOutcome(student, REFUSED, detail=why))
        if progress:
            progress(student, summary.outcomes[-1])
    why: dict[str, str] = {}
    chosen = chosen_ids(options, term.course)
    for student, path in klass.to_grade.items():
        earlier = None if force else read_report(student_folder(out, student) / REPORT)
        left = pending(earlier, path, chosen)
        if not left.exercises:
            graded = term.standing_of(earlier, student)
            standings[student] = graded
            summary.outcomes.append(
                StudentOutcome(student, "skipped", detail="already graded", standing=graded)
            )
            if progress:
                progress(student, summary.outcomes[-1])
        else:
            todo[student] = (
                (path, options)
                if left.whole
                else (path, dataclasses.replace(options, exercises=left.exercises))
            )
            why[student] = left.why
    with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
        futures = {
            pool.submit(
                grade_one,
                s,
                p,
                out,
                options=graded_with,
                timeout=timeout,
                env=env,
                class_term=term,
                why=why[s],
            ): s
            for s, (p, graded_with) in todo.items()
        }
        for future in as_completed(futures):
            student = futures[future]
            try:
                outcome = future.result()
            except Exception as exc:  # the batch goes on whatever one student's grading does
                outcome = StudentOutcome(student, "failed", detail=f"{type(exc).__name__}: {exc}")
            cgroups.sweep()  # a grading killed on timeout leaves its groups, its harnesses still in them
            disk.sweep()  # and its sandboxes' tmpfs, once no process of it is left
            if outcome.status == "failed":
                failures[student] = outcome.detail
            else:
                standings[student] = outcome.standing
            summary.outcomes.append(outcome)
            summary.grades_csv = write_grades_csv(
                out, list(klass.students), standings, failures, term.course
            )
            if progress:
                progress(student, outcome)
    confinement.reap_orphans(keep)
    summary.grades_csv = write_grades_csv(
        out, list(klass.students), standings, failures, term.course
    )
    summary.seconds = time.monotonic() - started
    return summary
