"""nbgrader autograde against shardlab's fast path on the same submitted notebooks, in one run.

Builds the nbgrader course for every exercise, releases it, submits the reference notebooks for
STUDENTS students, then times `nbgrader autograde` (one kernel per notebook) and `shardlab grade
submitted/<student> --gradebook ...` (the notebooks' modules graded in isolated children, the scores
recorded through nbgrader's API) and checks both gave the same total.

    python bench/nbgrader_speed.py [--students 2]
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from nbgrader.api import Gradebook

from grader.course import catalog
from grader.platforms.nbgrader_course import build_course


def run(command: list[str], cwd: Path) -> float:
    started = time.monotonic()
    subprocess.run(command, cwd=cwd, check=True, capture_output=True)
    return time.monotonic() - started


def totals(root: Path) -> dict[str, float]:
    with Gradebook(f"sqlite:///{root / 'gradebook.db'}", "shardlab") as gradebook:
        return {student.id: sum(s.score for s in student.submissions) for student in gradebook.students}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--students", type=int, default=2)
    args = parser.parse_args()
    ids = [e.id for e in catalog.EXERCISES]
    with tempfile.TemporaryDirectory(prefix="shardlab-nbbench-") as tmp:
        root = Path(tmp)
        build_course(root)
        for exercise_id in ids:
            run([sys.executable, "-m", "nbgrader", "generate_assignment", exercise_id, "--force"], root)
        students = [f"s{i}" for i in range(args.students)]
        for student in students:
            for exercise_id in ids:
                target = root / "submitted" / student / exercise_id
                target.mkdir(parents=True)
                shutil.copy(root / "source" / exercise_id / f"{exercise_id}.ipynb", target)
        autograde = sum(run([sys.executable, "-m", "nbgrader", "autograde", exercise_id, "--student", student],
                            root) for student in students for exercise_id in ids)
        fast = sum(run([sys.executable, "-m", "grader.cli", "grade", str(root / "submitted" / student), "--out",
                        str(root / "fast" / student), "--quiet", "--gradebook", f"sqlite:///{root / 'gradebook.db'}",
                        "--student", f"fast-{student}"], root) for student in students)
        scores = totals(root)
    notebooks = len(students) * len(ids)
    print(f"{notebooks} notebooks ({len(students)} students x {len(ids)} exercises), reference answers")
    print(f"nbgrader autograde: {autograde:.1f} s, {autograde / notebooks:.1f} s per notebook")
    print(f"shardlab fast path: {fast:.1f} s, {fast / notebooks:.1f} s per notebook")
    print(f"ratio autograde / fast path: {autograde / fast:.2f}x")
    print("totals (autograde, fast): " + ", ".join(f"{s}: {scores[s]:.2f}, {scores['fast-' + s]:.2f}"
                                                   for s in students))


if __name__ == "__main__":
    main()
