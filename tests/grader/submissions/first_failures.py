"""What a student's check shows first for a corpus submission: each exercise's first failing visible test and
its message, run in-process as `shardlab check` runs (the speed tests' timings skipped).

    python tests/grader/submissions/first_failures.py FOLDER [EXERCISE ...]

For writing mistakes/<exercise>.json, the words test_submissions.py holds each first failure to."""

import sys
from pathlib import Path

from grader.course import catalog
from grader.harness.runner import run_tests


def main(folder: str, *exercises: str) -> None:
    root = Path(__file__).parent / folder
    exercises = exercises or tuple(sorted(p.stem for p in root.glob("ex*.py")))
    tests = [catalog.get(exercise).tests_dir() for exercise in exercises]
    run = run_tests(root, tests=tests, timing="skip", visible_only=True)
    shown = set()
    for result in run.results:
        if not result.earns and result.exercise not in shown:
            shown.add(result.exercise)
            print(f"== {folder}/{result.exercise}: {result.function} ({result.category})")
            print(result.message, end="\n\n")


if __name__ == "__main__":
    main(*sys.argv[1:])
