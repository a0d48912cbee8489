"""What the HTML pages cost: the size of a student's feedback.html and the time writing it adds to a grading, and
the class page's time for a class of N students.

Grades the example submission once (every exercise, `shardlab grade` as an instructor runs it, timed), then
renders its feedback page --runs times from the report.json that grading wrote, and reports the page's size
(beside report.json's) and the median time to write it as a share of the grading's time. Then writes
--students copies of that report as a class and times the class page (index.html) over them.

    python bench/feedback_pages.py [--runs 5] [--students 20] [--report graded/report.json]
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from grader.course import paths
from grader.grading.batch import StudentOutcome, student_folder
from grader.grading.results import GradingResults
from grader.reports import class_page, feedback_page


def timed(action, runs: int) -> list[float]:
    seconds = []
    for _ in range(runs):
        begun = time.perf_counter()
        action()
        seconds.append(time.perf_counter() - begun)
    return seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--students", type=int, default=20)
    parser.add_argument(
        "--report", type=Path, help="use this report.json instead of grading the example"
    )
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="shardlab-bench-pages-") as scratch:
        scratch = Path(scratch)
        if args.report:
            report, grading = args.report, None
        else:
            out = scratch / "graded"
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
                    str(out),
                    "--quiet",
                ],
                check=True,
            )
            grading = time.perf_counter() - begun
            report = out / "report.json"
        results = GradingResults.from_dict(json.loads(report.read_text()))
        page = scratch / "feedback.html"
        writes = timed(lambda: feedback_page.write_feedback_html(results, page), args.runs)
        size, json_size = page.stat().st_size, report.stat().st_size
        print(
            f"feedback.html: {size / 1024:.0f} KiB ({size / json_size:.2f}x report.json's {json_size / 1024:.0f} "
            f"KiB) for {len(results.tests())} tests, {sum(len(t.layouts) for t in results.tests())} sharding checks"
        )
        print(
            f"  written in median {statistics.median(writes) * 1000:.0f} ms (min {min(writes) * 1000:.0f}, "
            f"max {max(writes) * 1000:.0f}, n={args.runs})"
        )
        if grading is not None:
            print(
                f"  the grading took {grading:.1f} s: the page adds {statistics.median(writes) / grading:.2%}"
            )

        klass = scratch / "class"
        outcomes = []
        for i in range(args.students):
            student = f"student{i:03d}"
            student_folder(klass, student).mkdir(parents=True)
            shutil.copy(report, student_folder(klass, student) / "report.json")
            outcomes.append(StudentOutcome(student, "graded", 60.0))
        index = timed(lambda: class_page.write_class_page(klass, outcomes), max(1, args.runs // 2))
        index_size = (klass / "index.html").stat().st_size
        print(
            f"index.html for {args.students} students: {index_size / 1024:.0f} KiB, written in median "
            f"{statistics.median(index):.2f} s"
        )


if __name__ == "__main__":
    main()
