"""nbgrader autograde against shardlab's fast path on the same submitted notebooks, in one run.

Builds the nbgrader course for every exercise, releases it, submits the reference notebooks for
STUDENTS students, then times `nbgrader autograde` (one kernel per notebook) and `shardlab grade
submitted/<student> --gradebook ...` (the notebooks' modules graded by harnesses in parallel, the
student's code in confined workers, the scores recorded through nbgrader's API), and compares the two
cell by cell in the gradebook. The fast path uses a course cache calibrated once beforehand (`shardlab
calibrate`, timed and printed apart: it is done once per course and machine, not per student).

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


def cell_scores(root: Path) -> dict[str, dict[tuple[str, str], float]]:
    """{student: {(notebook, cell): auto score}} as the gradebook holds them."""
    found: dict[str, dict[tuple[str, str], float]] = {}
    with Gradebook(f"sqlite:///{root / 'gradebook.db'}", "shardlab") as gradebook:
        for student in gradebook.students:
            found[student.id] = {
                (notebook.name, grade.name): grade.auto_score
                for submission in student.submissions
                for notebook in submission.notebooks
                for grade in notebook.grades
            }
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--students", type=int, default=2)
    args = parser.parse_args()
    ids = [e.id for e in catalog.EXERCISES]
    with tempfile.TemporaryDirectory(prefix="shardlab-nbbench-") as tmp:
        root = Path(tmp)
        # outside the course folder the notebooks are graded in
        cache = root.parent / f"{root.name}-cache"
        calibration = run(
            [sys.executable, "-m", "grader.cli", "calibrate", "--cache", str(cache)], root
        )
        build_course(root)
        for exercise_id in ids:
            run(
                [sys.executable, "-m", "nbgrader", "generate_assignment", exercise_id, "--force"],
                root,
            )
        students = [f"s{i}" for i in range(args.students)]
        for student in students:
            for exercise_id in ids:
                target = root / "submitted" / student / exercise_id
                target.mkdir(parents=True)
                shutil.copy(root / "source" / exercise_id / f"{exercise_id}.ipynb", target)
        autograde = sum(
            run(
                [sys.executable, "-m", "nbgrader", "autograde", exercise_id, "--student", student],
                root,
            )
            for student in students
            for exercise_id in ids
        )
        fast = sum(
            run(
                [
                    sys.executable,
                    "-m",
                    "grader.cli",
                    "grade",
                    str(root / "submitted" / student),
                    "--out",
                    str(root / "fast" / student),
                    "--quiet",
                    "--gradebook",
                    f"sqlite:///{root / 'gradebook.db'}",
                    "--student",
                    f"fast-{student}",
                    "--cache",
                    str(cache),
                ],
                root,
            )
            for student in students
        )
        scores = cell_scores(root)
        shutil.rmtree(cache, ignore_errors=True)
    notebooks = len(students) * len(ids)
    print(
        f"{notebooks} notebooks ({len(students)} students x {len(ids)} exercises), reference answers"
    )
    print(f"calibration, once per course and machine: {calibration:.1f} s")
    print(f"nbgrader autograde: {autograde:.1f} s, {autograde / notebooks:.1f} s per notebook")
    print(f"shardlab fast path: {fast:.1f} s, {fast / notebooks:.1f} s per notebook")
    print(f"ratio autograde / fast path: {autograde / fast:.2f}x (goal: 5x)")
    for student in students:
        theirs, ours = scores[student], scores[f"fast-{student}"]
        # The fast path records scores rounded to 6 decimals (grader.reports.gradebook); nbgrader keeps a
        # cell's points as the notebook gives them (a third of a point, say).
        gaps = {
            cell: abs((theirs.get(cell) or 0) - (ours.get(cell) or 0))
            for cell in theirs.keys() | ours.keys()
        }
        differ = sorted(
            cell for cell, gap in gaps.items() if gap > 1e-5 or (cell in theirs) != (cell in ours)
        )
        print(
            f"{student}: {len(theirs)} cells, autograde total {sum(theirs.values()):.2f}, fast path total "
            f"{sum(v or 0 for v in ours.values()):.2f}, cells that differ by more than 1e-5: {len(differ)} "
            f"{differ[:5]} (largest difference {max(gaps.values()):.1e})"
        )


if __name__ == "__main__":
    main()
