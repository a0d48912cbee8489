"""How long a student waits for `shardlab check exNN`, per exercise, on each Python the student route installed.

    .venv/bin/python .ci/student_route.py WORK      # the handout installed in WORK/<3.X>/venv, references in
    .venv/bin/python bench/check_times.py WORK [--repeat N]

Each figure is the whole `shardlab check exNN` process (start, collection, jax, the visible tests), median of
N runs (default 3), the exercises taken in turn so that a noisy moment does not fall on one of them.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from grader.course import catalog  # noqa: E402


def timed_check(venv: Path, handout: Path, exercise: catalog.Exercise) -> tuple[float, int]:
    env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "PYTHONPATH")}
    begun = time.perf_counter()
    done = subprocess.run(
        [venv / "bin" / "shardlab", "check", exercise.number],
        cwd=handout,
        env=env,
        capture_output=True,
        text=True,
    )
    return time.perf_counter() - begun, done.returncode


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("work", type=Path, help="the student route's folder")
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args(argv)
    routes = sorted(p for p in args.work.iterdir() if (p / "venv" / "bin" / "shardlab").exists())
    if not routes:
        print(f"no installed route in {args.work}: run .ci/student_route.py {args.work} first")
        return 2
    times: dict[str, dict[str, list[float]]] = {
        r.name: {e.id: [] for e in catalog.EXERCISES} for r in routes
    }
    for _ in range(args.repeat):
        for exercise in catalog.EXERCISES:
            for route in routes:
                seconds, code = timed_check(route / "venv", route / "handout", exercise)
                if code != 0:
                    print(f"{route.name} {exercise.id}: exit {code}")
                times[route.name][exercise.id].append(seconds)
    print("exercise".ljust(32) + "".join(f"{r.name:>10}" for r in routes))
    for exercise in catalog.EXERCISES:
        print(
            exercise.id.ljust(32)
            + "".join(f"{statistics.median(times[r.name][exercise.id]):>9.1f}s" for r in routes)
        )
    print(
        "total".ljust(32)
        + "".join(
            f"{sum(statistics.median(v) for v in times[r.name].values()):>9.1f}s" for r in routes
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
