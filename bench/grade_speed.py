"""How long grading takes, against running the same tests in-process, as ratios measured in one run.

- grade: `grade_submission` of the reference solutions, every test (visible and hidden), as
  `shardlab grade` runs it: a harness process per exercise, the module in a confined worker, traced
  programs exported by the worker and compiled and timed by the harness.
- in-process: one plain `python -m pytest` of the same tests with the module imported in the test
  process (a student's own `shardlab check`): what the tests cost without the split.
- floor: one fresh process that imports jax on the forced devices and calls each reference function
  about once (the visible tests, in-process).
- batch: `grade_batch` over copies of the reference with --jobs 1 and --jobs 2 (submissions/minute).

    python bench/grade_speed.py [--students 4] [--skip-batch]
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from grader.course import paths
from grader.grading.batch import grade_batch
from grader.grading.engine import grade_submission


def pytest_seconds(*extra: str) -> float:
    started = time.monotonic()
    subprocess.run([sys.executable, "-m", "pytest", str(paths.EXERCISE_TESTS_DIR), "-q", "-p", "no:cacheprovider",
                    "--impl=reference", *extra], cwd=paths.REPO_ROOT, check=True, capture_output=True)
    return time.monotonic() - started


def grade_seconds() -> tuple[float, float, str]:
    started = time.monotonic()
    results = grade_submission(paths.SOLUTIONS_DIR)
    return time.monotonic() - started, results.score, results.environment["isolation"]["level"]


def batch_rate(students: int, jobs: int, workdir: Path) -> float:
    submissions = workdir / f"class-{jobs}"
    for i in range(students):
        shutil.copytree(paths.SOLUTIONS_DIR, submissions / f"student{i:02d}")
    started = time.monotonic()
    summary = grade_batch(submissions, workdir / f"graded-{jobs}", jobs=jobs)
    seconds = time.monotonic() - started
    assert summary.count("graded") == students, summary.outcomes
    return students / seconds * 60


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--students", type=int, default=4)
    parser.add_argument("--skip-batch", action="store_true")
    args = parser.parse_args()
    floor = pytest_seconds("--visible-only")
    inside = pytest_seconds()
    graded, score, level = grade_seconds()
    print(f"floor (fresh process, jax import, each function once):  {floor:.1f} s")
    print(f"the same tests in-process (plain pytest, every test):    {inside:.1f} s")
    print(f"grade the reference, split (score {score:.1f}, {level}): {graded:.1f} s")
    print(f"ratio grade / in-process:                               {graded / inside:.2f}x (goal: at most 1.25x)")
    print(f"ratio grade / floor:                                    {graded / floor:.2f}x")
    if not args.skip_batch:
        with tempfile.TemporaryDirectory(prefix="shardlab-bench-") as tmp:
            one = batch_rate(args.students, 1, Path(tmp))
            two = batch_rate(args.students, 2, Path(tmp))
        print(f"batch of {args.students}, --jobs 1: {one:.2f} submissions/min")
        print(f"batch of {args.students}, --jobs 2: {two:.2f} submissions/min ({two / one:.2f}x --jobs 1)")


if __name__ == "__main__":
    main()
