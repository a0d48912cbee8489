"""What a term's outputs cost a class of N students, beside grading them: publishing (each student's late
penalties judged again, adjustments applied, results.json and feedback.html written again, grades.csv and the
class page), the exports, and the similarity check over every exercise.

Grades the example submission once (`shardlab grade`, timed: the unit the other figures are shares of), then
makes a class of --students copies of its report (each with its own submission time, a few adjusted by hand)
and of the reference modules (each student's with its own variable names: every pair a near-copy, the
similarity check's worst case), and times each step --runs times.

    python bench/term_outputs.py [--students 30] [--runs 3] [--report graded/report.json]
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path

from grader.commands import publish, term as term_commands
from grader.course import adjustments, catalog, paths, term
from grader.grading import batch, similarity
from grader.grading.results import GradingResults
from grader.reports import writers

COURSE = """timezone = "UTC"
roster = "roster.csv"
[late]
percent = 10
cap = 50
[[assignment]]
name = "all"
due = 2026-10-05T23:59:00
exercises = [{exercises}]
lms_id = 1
"""


def timed(action, runs: int) -> float:
    seconds = []
    for _ in range(runs):
        begun = time.perf_counter()
        action()
        seconds.append(time.perf_counter() - begun)
    return statistics.median(seconds)


def make_class(root: Path, report: GradingResults, students: int) -> tuple[Path, Path, term.Course]:
    ids = ", ".join(f'"{e.id}"' for e in catalog.EXERCISES)
    (root / "course.toml").write_text(COURSE.format(exercises=ids))
    (root / "roster.csv").write_text(
        "student,name,lms_id\n"
        + "".join(f"s{i:03d},Student {i},{1000 + i}\n" for i in range(students))
    )
    out, submissions = root / "graded", root / "submissions"
    due = datetime(2026, 10, 5, 23, 59, tzinfo=timezone.utc)
    for i in range(students):
        student = f"s{i:03d}"
        folder = batch.student_folder(out, student)
        folder.mkdir(parents=True)
        writers.write_report_json(report, folder / batch.REPORT)
        (submissions / student).mkdir(parents=True)
        for exercise in catalog.EXERCISES:
            text = exercise.solution_path().read_text()
            (submissions / student / exercise.module_file).write_text(
                re.sub(r"\bx\b", f"x{i}", text)
            )
        stamped = json.loads((folder / batch.REPORT).read_text())
        stamped["term"] = {
            "course": "bench",
            "student": student,
            "submitted_at": (due + timedelta(hours=7 * i)).isoformat(),
            "submitted_from": "bench",
        }
        (folder / batch.REPORT).write_text(json.dumps(stamped))
    course = term.load(root / "course.toml")
    for i in range(0, students, 7):
        term_commands.append(
            course.adjustments,
            adjustments.Adjustment(
                f"s{i:03d}", "ex04_sharded_layer", None, None, 1.0, "bench", "bench"
            ),
        )
    return out, submissions, course


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--students", type=int, default=30)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument(
        "--report", type=Path, help="use this report.json instead of grading the example"
    )
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="shardlab-bench-term-") as scratch:
        scratch = Path(scratch)
        if args.report:
            report_path, grading = args.report, None
        else:
            report_path = scratch / "example" / "report.json"
            begun = time.perf_counter()
            example = paths.REPO_ROOT / "examples" / "submission"
            subprocess.run(
                [
                    sys.executable,
                    "-m",
                    "grader.cli",
                    "grade",
                    str(example),
                    "--out",
                    str(report_path.parent),
                    "--quiet",
                ],
                check=True,
            )
            grading = time.perf_counter() - begun
        report = GradingResults.from_dict(json.loads(report_path.read_text()))
        out, submissions, course = make_class(scratch, report, args.students)
        klass = batch.find_submissions(submissions)
        outcomes = term_commands.class_outcomes(out)
        figures = {
            "publish (pages, results.json, grades.csv, class page)": timed(
                lambda: publish.publish_class(
                    out, outcomes, publish.class_term(course), hidden_visibility="after_due_date"
                ),
                args.runs,
            ),
            "exports (Canvas CSV and long CSV)": timed(
                lambda: term_commands.export_grades(
                    out, course, canvas=scratch / "canvas.csv", long=scratch / "long.csv"
                ),
                args.runs,
            ),
            "similarity (every exercise)": timed(
                lambda: similarity.compare_class(klass.students, [e.id for e in course.exercises]),
                args.runs,
            ),
        }
    print(f"class of {args.students} students, median of {args.runs} runs")
    if grading is not None:
        print(
            f"grading the example submission once: {grading:.1f} s; a class of {args.students} graded one at a "
            f"time: about {grading * args.students:.0f} s"
        )
    for name, seconds in figures.items():
        share = (
            f" ({100 * seconds / (grading * args.students):.2f}% of grading the class)"
            if grading
            else ""
        )
        print(
            f"  {name}: {seconds:.2f} s, {1000 * seconds / args.students:.0f} ms per student{share}"
        )


if __name__ == "__main__":
    main()
