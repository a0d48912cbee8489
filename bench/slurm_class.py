"""A class graded on a local Slurm (tests/grader/local_slurm.py: slurm-wlm and munge on this machine) against the
same class graded by `grade-batch --jobs J` on this machine, wall time for each, in one run.

The class: N copies of the example submission (its README removed), graded on --exercise (a few exercises,
so that a run takes minutes), every test given --test-timeout so that neither route calibrates first. The
Slurm route asks --cpus-per-task C (default 1: two tasks at once on 2 cores, each bound to its core, as
`--jobs 2` gives each student one core's harness) and waits for the collect job. Both routes' grades.csv must
agree student by student.

    python bench/slurm_class.py [--students 20] [--jobs 2] [--cpus-per-task 1] [--exercise ex01 --exercise ex04]
"""

from __future__ import annotations

import argparse
import csv
import importlib.util
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from grader.course import paths

LOCAL_SLURM = paths.REPO_ROOT / "tests" / "grader" / "local_slurm.py"


def local_slurm():
    spec = importlib.util.spec_from_file_location("shardlab_local_slurm", LOCAL_SLURM)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def grades(out: Path) -> dict[str, str]:
    return {row["student"]: row["total"] for row in csv.DictReader(open(out / "grades.csv"))}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--students", type=int, default=20)
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--cpus-per-task", type=int, default=1)
    parser.add_argument("--exercise", action="append", default=None)
    parser.add_argument("--keep", type=Path, help="copy both gradings here when they disagree")
    args = parser.parse_args()
    exercises = args.exercise or ["ex01", "ex04", "ex05"]
    local = local_slurm()
    if local.missing():
        sys.exit(f"bench/slurm_class.py: {local.missing()}")
    with tempfile.TemporaryDirectory(prefix="shardlab-bench-slurm-") as scratch:
        scratch = Path(scratch)
        klass = scratch / "class"
        for i in range(args.students):
            shutil.copytree(
                paths.REPO_ROOT / "examples" / "submission",
                klass / f"student{i:02d}",
                ignore=shutil.ignore_patterns("README.md"),
            )
        common = [arg for e in exercises for arg in ("--exercise", e)] + ["--test-timeout", "120"]
        with local.started() as cluster:
            begun = time.perf_counter()
            done = subprocess.run(
                [
                    sys.executable,
                    "-m",
                    "grader.cli",
                    "grade-batch",
                    str(klass),
                    "--out",
                    str(scratch / "slurm"),
                    "--slurm",
                    "--wait",
                    "--slurm-cpus-per-task",
                    str(args.cpus_per_task),
                    *common,
                ],
                env=cluster.env,
                capture_output=True,
                text=True,
            )
            on_slurm = time.perf_counter() - begun
            if done.returncode != 0:
                sys.exit(f"the Slurm batch failed: {done.stdout[-2000:]}{done.stderr[-2000:]}")
        begun = time.perf_counter()
        subprocess.run(
            [
                sys.executable,
                "-m",
                "grader.cli",
                "grade-batch",
                str(klass),
                "--out",
                str(scratch / "local"),
                "--jobs",
                str(args.jobs),
                *common,
            ],
            check=True,
            capture_output=True,
        )
        here = time.perf_counter() - begun
        agree = grades(scratch / "slurm") == grades(scratch / "local")
        print(f"{args.students} students, exercises {', '.join(exercises)}:")
        print(
            f"  local Slurm (job array, --cpus-per-task {args.cpus_per_task}, --wait): {on_slurm:.0f} s"
        )
        print(
            f"  grade-batch --jobs {args.jobs}: {here:.0f} s   (Slurm / local: {on_slurm / here:.2f}x)"
        )
        print(f"  the two grades.csv agree: {agree}")
        if not agree:
            slurm_rows, local_rows = grades(scratch / "slurm"), grades(scratch / "local")
            for student in sorted(slurm_rows):
                if slurm_rows[student] != local_rows.get(student):
                    print(
                        f"    {student}: Slurm {slurm_rows[student]}, here {local_rows.get(student)}"
                    )
            if args.keep:
                shutil.copytree(scratch, args.keep, dirs_exist_ok=True)
                print(f"  kept both in {args.keep}")


if __name__ == "__main__":
    main()
