"""The first grading of a term's first assignment, as an instructor runs it: a class of --students, each
handing in the reference of HW1's four exercises (ex01-ex04) of a three-assignment term, graded with
`shardlab grade-batch --assignment HW1 --jobs 2` into a fresh output folder, as a whole process:

- with its calibration (a fresh cache: the reference of the exercises graded is timed first, and only
  those: the calibration once timed the term's every exercise, 13 for 4 graded, 424 s);
- without one (`--test-timeout 60`: every test's limit given, nothing timed).

Prints each run's wall time, the calibration's own share (its line in the output), and the grades.

    python bench/first_assignment.py [--students 5]
"""

from __future__ import annotations

import argparse
import csv
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from grader.course import catalog  # noqa: E402

COURSE = """name = "Three homeworks"
timezone = "UTC"

[[assignment]]
name = "HW1"
due = 2026-10-05T23:59:00
exercises = ["ex01", "ex02", "ex03", "ex04"]

[[assignment]]
name = "HW2"
due = 2026-10-19T23:59:00
exercises = ["ex05", "ex06", "ex07", "ex08"]

[[assignment]]
name = "HW3"
due = 2026-11-02T23:59:00
exercises = ["part 2"]
"""
HW1 = ("ex01", "ex02", "ex03", "ex04")


def run(root: Path, out: str, *extra: str) -> None:
    command = [
        str(Path(sys.executable).with_name("shardlab")),
        "grade-batch",
        "class",
        "--out",
        out,
    ]
    command += ["--assignment", "HW1", "--jobs", "2", "--course", "course.toml", *extra]
    started = time.monotonic()
    done = subprocess.run(command, cwd=root, capture_output=True, text=True)
    wall = time.monotonic() - started
    said = done.stdout + done.stderr
    timed = [
        line
        for line in said.splitlines()
        if line.startswith(("timing the reference", "calibrated"))
    ]
    print(
        f"{' '.join(extra) or 'with its calibration'}: exit {done.returncode}, {wall:.0f} s of wall time"
    )
    for line in timed:
        print(f"  {line[:160]}")
    with (root / out / "grades.csv").open(newline="") as handle:
        totals = sorted({row["total"] + "/" + row["max_score"] for row in csv.DictReader(handle)})
    print(f"  totals: {', '.join(totals)}; last line: {said.strip().splitlines()[-1][:160]}")


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--students", type=int, default=5)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="shardlab-first-") as tmp:
        root = Path(tmp)
        (root / "course.toml").write_text(COURSE)
        for i in range(args.students):
            folder = root / "class" / f"student{i + 1}"
            folder.mkdir(parents=True)
            for name in HW1:
                exercise = catalog.get(name)
                shutil.copy(exercise.solution_path(), folder / exercise.module_file)
        run(root, "calibrated")
        run(root, "uncalibrated", "--test-timeout", "60")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
