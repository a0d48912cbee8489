"""How long grading takes, against the least it could take, as ratios measured in one run.

- grade: `grade_submission` of the reference solutions, every test (visible and hidden), as
  `shardlab grade` runs it: one collection child and one child per exercise.
- floor: one fresh process that imports jax on the forced devices and calls each reference function
  about once (the visible tests, which call each function once on small inputs), in-process.
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

from grader import paths
from grader.batch import grade_batch
from grader.grading import grade_submission


def floor_seconds() -> float:
    started = time.monotonic()
    subprocess.run([sys.executable, "-m", "pytest", str(paths.EXERCISE_TESTS_DIR), "--visible-only", "-q",
                    "-p", "no:cacheprovider", "--impl=reference"], cwd=paths.REPO_ROOT, check=True,
                   capture_output=True)
    return time.monotonic() - started


def grade_seconds() -> tuple[float, float]:
    started = time.monotonic()
    results = grade_submission(paths.SOLUTIONS_DIR)
    return time.monotonic() - started, results.score


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
    floor = floor_seconds()
    graded, score = grade_seconds()
    print(f"floor (fresh process, jax import, each function once): {floor:.1f} s")
    print(f"grade the reference, all tests (score {score:.1f}):      {graded:.1f} s")
    print(f"ratio grade / floor:                                   {graded / floor:.2f}x")
    if not args.skip_batch:
        with tempfile.TemporaryDirectory(prefix="shardlab-bench-") as tmp:
            one = batch_rate(args.students, 1, Path(tmp))
            two = batch_rate(args.students, 2, Path(tmp))
        print(f"batch of {args.students}, --jobs 1: {one:.2f} submissions/min")
        print(f"batch of {args.students}, --jobs 2: {two:.2f} submissions/min ({two / one:.2f}x --jobs 1)")


if __name__ == "__main__":
    main()
