"""Grading a whole class: one submission per student folder or .zip, each graded by `shardlab grade` in
a fresh process, N at a time, with a progress bar. Resumable: a student whose report.json exists is
skipped unless forced. One broken or hostile submission never stops the batch.

Speedup tests stay fair with several jobs: every grading child shares a timing lock
(grader.harness.timing_lock) and a speedup measurement holds it alone, so no other test runs on the cores
while one is being timed.
"""

from __future__ import annotations

import csv
import dataclasses
import json
import os
import signal
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass, field
from pathlib import Path

import psutil

from grader.core.options import GRADE, GradingOptions
from grader.course import catalog
from grader.course.devices import cores
from grader.grading import process
from grader.harness import timing_lock
from grader.worker import cgroups

REPORT = "report.json"


@dataclass
class StudentOutcome:
    student: str
    status: str                 # "graded", "skipped" (already graded), "failed" (grading itself failed)
    seconds: float = 0.0
    detail: str = ""
    row: dict | None = None     # the student's line of grades.csv, taken from report.json as it was written


@dataclass
class BatchSummary:
    outcomes: list[StudentOutcome] = field(default_factory=list)
    grades_csv: Path | None = None
    seconds: float = 0.0

    def count(self, status: str) -> int:
        return sum(o.status == status for o in self.outcomes)


def find_submissions(folder: Path) -> dict[str, Path]:
    """{student: submission}: every sub-folder and .zip file, named by folder name or zip stem."""
    found = {}
    for entry in sorted(folder.iterdir()):
        if entry.name.startswith(".") or entry.name.startswith("__"):
            continue
        if entry.is_dir() or entry.suffix == ".zip":
            found[entry.stem if entry.suffix == ".zip" else entry.name] = entry
    return found


def grade_one(student: str, submission: Path, out: Path, *, options: GradingOptions, timeout: float,
              env: dict[str, str]) -> StudentOutcome:
    """`shardlab grade` with `options`, in a session of its own, so that a timeout kills all it started."""
    target = out / student
    target.mkdir(parents=True, exist_ok=True)
    (target / REPORT).unlink(missing_ok=True)
    started = time.monotonic()
    command = [sys.executable, "-m", "grader.cli", "grade", str(submission), "--out", str(target), "--quiet",
               *options.arguments(GRADE)]
    child = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env,
                             stdin=subprocess.DEVNULL, start_new_session=True)
    try:
        log, _ = child.communicate(timeout=timeout)
        code = child.returncode
    except subprocess.TimeoutExpired:
        os.killpg(child.pid, signal.SIGKILL)
        log, code = f"grading took longer than {timeout:.0f} s and was stopped\n{child.communicate()[0]}", None
    (target / "grading.log").write_text(log[-20_000:])
    seconds = time.monotonic() - started
    row = read_row(target / REPORT) if code == 0 else None
    if row is not None:
        return StudentOutcome(student, "graded", seconds, row=row)
    return StudentOutcome(student, "failed", seconds, f"exit status {code}: {log.strip()[-300:]}")


def read_row(report: Path) -> dict | None:
    """A student's grades.csv line from their report.json, or None if there is none to read."""
    try:
        data = json.loads(report.read_text())
        scores = {ex_id: round(ex["score"], 2) for ex_id, ex in data["exercises"].items()}
        return {**scores, "total": round(data["score"], 2), "max_score": round(data["max_score"], 2),
                "status": "graded"}
    except (OSError, ValueError, KeyError, TypeError):
        return None


def write_grades_csv(out: Path, students: list[str], rows: dict[str, dict], failures: dict[str, str]) -> Path:
    """One line per student, from the rows this batch holds (read once, as each grading ended)."""
    path = out / "grades.csv"
    columns = ["student", *(e.id for e in catalog.EXERCISES), "total", "max_score", "status"]
    lines = [{"student": s, **rows[s]} if s in rows else
             {"student": s, "status": f"not graded: {failures.get(s, 'unknown')}"} for s in students]
    tmp = path.with_suffix(".tmp")
    with open(tmp, "w", newline="") as handle:
        writer = csv.DictWriter(handle, columns, restval="")
        writer.writeheader()
        writer.writerows(lines)
    os.replace(tmp, path)
    return path


def grade_batch(submissions_dir: str | Path, out: str | Path, options: GradingOptions | None = None, *,
                jobs: int = 1, force: bool = False, timeout: float = 3600.0, progress=None,
                **overrides) -> BatchSummary:
    """Grade every submission in `submissions_dir` into `out`/<student>/ and write `out`/grades.csv.

    options: how each student is graded (grader.core.options.GradingOptions), with `overrides` by field
    name (exercises=["ex01"]). Every core is kept busy: `jobs` students at once, each with cores / jobs
    harnesses (unless options.parallel says otherwise). `progress(student, outcome)` is called as each
    student finishes (the CLI draws a bar with it)."""
    options = dataclasses.replace(options or GradingOptions(), **overrides)
    started = time.monotonic()
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    submissions = find_submissions(Path(submissions_dir))
    process.become_subreaper()   # a killed grader's children come back to us to be reaped
    keep = {child.pid for child in psutil.Process().children()}
    env = dict(os.environ) | {"PYTHONDONTWRITEBYTECODE": "1"}   # grading writes nothing into the checkout
    if jobs > 1:   # a lock already set (several batches, or a test suite, sharing the machine) is kept
        env.setdefault(timing_lock.LOCK_DIR, str(out / ".timing-lock"))
    if options.parallel is None:
        options = dataclasses.replace(options, parallel=max(1, cores() // max(1, jobs)))
    summary = BatchSummary()
    failures: dict[str, str] = {}
    rows: dict[str, dict] = {}
    todo = {}
    for student, path in submissions.items():
        earlier = None if force else read_row(out / student / REPORT)
        if earlier is not None:
            rows[student] = earlier
            summary.outcomes.append(StudentOutcome(student, "skipped", detail="already graded", row=earlier))
            if progress:
                progress(student, summary.outcomes[-1])
        else:
            todo[student] = path
    with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
        futures = {pool.submit(grade_one, s, p, out, options=options, timeout=timeout, env=env): s
                   for s, p in todo.items()}
        for future in as_completed(futures):
            student = futures[future]
            try:
                outcome = future.result()
            except Exception as exc:   # the batch goes on whatever one student's grading does
                outcome = StudentOutcome(student, "failed", detail=f"{type(exc).__name__}: {exc}")
            cgroups.sweep()   # a grading killed on timeout leaves its groups, its harnesses still in them
            if outcome.status == "failed":
                failures[student] = outcome.detail
            else:
                rows[student] = outcome.row
            summary.outcomes.append(outcome)
            summary.grades_csv = write_grades_csv(out, list(submissions), rows, failures)
            if progress:
                progress(student, outcome)
    process.reap_orphans(keep)
    summary.grades_csv = write_grades_csv(out, list(submissions), rows, failures)
    summary.seconds = time.monotonic() - started
    return summary
