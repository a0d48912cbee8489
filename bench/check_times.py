"""How long a student waits for `shardlab check`: each exercise alone, `--all`, and with nothing pending.

    python bench/check_times.py [--repeat 3]             # this checkout, the reference copied in as the work
    python bench/check_times.py WORK [--repeat 3]        # every Python .ci/student_route.py installed in WORK

Each figure is the whole `shardlab check` process (start, collection, jax, the visible tests) as a student
starts it, median of N runs (default 3), the exercises taken in turn so that a noisy moment does not fall on
one of them. `--all` is timed after the per-exercise runs; "nothing pending" is `shardlab check` once every
exercise passed its last check. The first run of each exercise fills the check's compile cache
(.shardlab/compile-cache): it is given apart, as "first".

A student's Python writes bytecode; where this machine's environment says PYTHONDONTWRITEBYTECODE, the runs
leave it out, as a student's shell would (--no-bytecode keeps it: every module compiled from source each run).
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from grader.course import catalog, paths  # noqa: E402

GOAL_SECONDS = 3.0  # one exercise (median), ex12 excepted
GOAL_EX12_SECONDS = 6.0
GOAL_ALL_SECONDS = 12.0


@dataclass(frozen=True)
class Route:
    """Where `shardlab check` runs: a shardlab executable, the folder it runs in, and its arguments."""

    name: str
    shardlab: Path
    cwd: Path
    extra: list[str]

    def check(self, *args: str, bytecode: bool = True) -> tuple[float, int]:
        dropped = ("VIRTUAL_ENV", "PYTHONPATH", *(("PYTHONDONTWRITEBYTECODE",) if bytecode else ()))
        env = {k: v for k, v in os.environ.items() if k not in dropped}
        begun = time.perf_counter()
        done = subprocess.run(
            [self.shardlab, "check", *args, *self.extra],
            cwd=self.cwd,
            env=env,
            capture_output=True,
            text=True,
        )
        return time.perf_counter() - begun, done.returncode


def this_checkout(work: Path) -> Route:
    """The reference as a student's finished work, in a folder of its own (its status file beside it)."""
    shutil.copytree(paths.SOLUTIONS_DIR, work / "exercises")
    shardlab = Path(sys.executable).parent / "shardlab"
    return Route("this checkout", shardlab, REPO, ["--impl", str(work / "exercises")])


def installed_routes(work: Path) -> list[Route]:
    return [
        Route(p.name, p / "venv" / "bin" / "shardlab", p / "handout", [])
        for p in sorted(work.iterdir())
        if (p / "venv" / "bin" / "shardlab").exists()
    ]


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("work", type=Path, nargs="?", help="the student route's folder")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument(
        "--no-bytecode", action="store_true", help="keep PYTHONDONTWRITEBYTECODE if set"
    )
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="shardlab-check-times-") as tmp:
        routes = installed_routes(args.work) if args.work else [this_checkout(Path(tmp))]
        if not routes:
            print(f"no installed route in {args.work}: run .ci/student_route.py {args.work} first")
            return 2
        times = {r.name: {e.id: [] for e in catalog.EXERCISES} for r in routes}
        for _ in range(args.repeat):
            for exercise in catalog.EXERCISES:
                for route in routes:
                    seconds, code = route.check(exercise.number, bytecode=not args.no_bytecode)
                    if code != 0:
                        print(f"{route.name} {exercise.id}: exit {code}")
                    times[route.name][exercise.id].append(seconds)
        every = {r.name: [] for r in routes}
        pending = {r.name: [] for r in routes}
        for _ in range(args.repeat):
            for route in routes:
                every[route.name].append(route.check("--all", bytecode=not args.no_bytecode)[0])
                pending[route.name].append(route.check(bytecode=not args.no_bytecode)[0])
    print("median of", args.repeat, "runs".ljust(24) + "".join(f"{r.name:>16}" for r in routes))
    for exercise in catalog.EXERCISES:
        goal = GOAL_EX12_SECONDS if exercise.number == "ex12" else GOAL_SECONDS
        medians = [statistics.median(times[r.name][exercise.id]) for r in routes]
        firsts = [times[r.name][exercise.id][0] for r in routes]
        print(
            exercise.id.ljust(32)
            + "".join(f"{m:>15.1f}s" for m in medians)
            + "   first: "
            + ", ".join(f"{f:.1f}s" for f in firsts)
            + ("" if max(medians) <= goal else f"   (goal: at most {goal:.0f} s)")
        )
    for label, found, goal in (
        ("--all", every, GOAL_ALL_SECONDS),
        ("nothing pending", pending, None),
    ):
        medians = [statistics.median(found[r.name]) for r in routes]
        print(
            label.ljust(32)
            + "".join(f"{m:>15.1f}s" for m in medians)
            + (f"   (goal: at most {goal:.0f} s)" if goal and max(medians) > goal else "")
        )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
