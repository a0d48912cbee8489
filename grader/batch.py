"""Grading a whole class: one submission per student folder or .zip, each graded by `shardlab grade` in
a fresh process, N at a time, with a progress bar. Resumable: a student whose report.json exists is
skipped unless forced. One broken or hostile submission never stops the batch.

Speedup tests stay fair with several jobs: every grading child shares a timing lock
(grader.timing_lock) and a speedup measurement holds it alone, so no other test runs on the cores
while one is being timed.
"""

from __future__ import annotations

import csv
import json
import os
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass, field
from pathlib import Path

from grader import catalog, sandbox, timing_lock

REPORT = "report.json"


@dataclass
class StudentOutcome:
    student: str
    status: str                 # "graded", "skipped" (already graded), "failed" (grading itself failed)
    seconds: float = 0.0
    detail: str = ""


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


def grade_one(student: str, submission: Path, out: Path, *, grade_args: list[str], timeout: float,
              env: dict[str, str]) -> StudentOutcome:
    target = out / student
    target.mkdir(parents=True, exist_ok=True)
    (target / REPORT).unlink(missing_ok=True)
    started = time.monotonic()
    command = [sys.executable, "-m", "grader.cli", "grade", str(submission), "--out", str(target), "--quiet",
               *grade_args]
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=timeout, env=env,
                              stdin=subprocess.DEVNULL)
        log, code = done.stdout + done.stderr, done.returncode
    except subprocess.TimeoutExpired as exc:
        log, code = f"grading took longer than {timeout:.0f} s and was stopped\n{exc.stdout or ''}", None
    (target / "grading.log").write_text(log[-20_000:] if isinstance(log, str) else str(log))
    seconds = time.monotonic() - started
    if (target / REPORT).exists():
        return StudentOutcome(student, "graded", seconds)
    return StudentOutcome(student, "failed", seconds, f"exit status {code}: {log.strip()[-300:]}")


def write_grades_csv(out: Path, students: list[str], failures: dict[str, str]) -> Path:
    """One row per student from the reports on disk (so a resumed batch lists everyone)."""
    path = out / "grades.csv"
    columns = ["student", *(e.id for e in catalog.EXERCISES), "total", "max_score", "status"]
    rows = []
    for student in students:
        report = out / student / REPORT
        if report.exists():
            data = json.loads(report.read_text())
            scores = {ex_id: round(ex["score"], 2) for ex_id, ex in data["exercises"].items()}
            rows.append({"student": student, **scores, "total": round(data["score"], 2),
                         "max_score": round(data["max_score"], 2), "status": "graded"})
        else:
            rows.append({"student": student, "status": f"not graded: {failures.get(student, 'unknown')}"})
    tmp = path.with_suffix(".tmp")
    with open(tmp, "w", newline="") as handle:
        writer = csv.DictWriter(handle, columns, restval="")
        writer.writeheader()
        writer.writerows(rows)
    os.replace(tmp, path)
    return path


def grade_batch(submissions_dir: str | Path, out: str | Path, *, jobs: int = 1, force: bool = False,
                grade_args: list[str] = (), timeout: float = 3600.0, progress=None) -> BatchSummary:
    """Grade every submission in `submissions_dir` into `out`/<student>/ and write `out`/grades.csv.

    `progress(student, outcome)` is called as each student finishes (the CLI draws a bar with it)."""
    started = time.monotonic()
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    submissions = find_submissions(Path(submissions_dir))
    sandbox.become_subreaper()   # a killed grader's children come back to us to be reaped
    keep = sandbox.children_of(os.getpid())
    env = dict(os.environ)
    if jobs > 1:
        env[timing_lock.LOCK_DIR] = str(out / ".timing-lock")
    summary = BatchSummary()
    failures: dict[str, str] = {}
    todo = {}
    for student, path in submissions.items():
        if not force and (out / student / REPORT).exists():
            summary.outcomes.append(StudentOutcome(student, "skipped", detail="already graded"))
            if progress:
                progress(student, summary.outcomes[-1])
        else:
            todo[student] = path
    with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
        futures = {pool.submit(grade_one, s, p, out, grade_args=list(grade_args), timeout=timeout, env=env): s
                   for s, p in todo.items()}
        for future in as_completed(futures):
            student = futures[future]
            try:
                outcome = future.result()
            except Exception as exc:   # the batch goes on whatever one student's grading does
                outcome = StudentOutcome(student, "failed", detail=f"{type(exc).__name__}: {exc}")
            if outcome.status == "failed":
                failures[student] = outcome.detail
            summary.outcomes.append(outcome)
            summary.grades_csv = write_grades_csv(out, list(submissions), failures)
            if progress:
                progress(student, outcome)
    sandbox.reap_strays(keep)
    summary.grades_csv = write_grades_csv(out, list(submissions), failures)
    summary.seconds = time.monotonic() - started
    return summary
