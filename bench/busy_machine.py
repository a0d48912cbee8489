"""Grades beside busy loops: an honest grading must keep its marks however loaded the machine, because the
wall-clock cap forgives the time the grading's processes waited for a processor (grader.core.wall_cap).

    python bench/busy_machine.py [--loops 16] [--quiet-too] [--part ex15|ex01|tests ...] [--visible-only]

Starts LOOPS busy loops (tests/grader/busy_loops.py: each in a session of its own, as each grading is),
then grades, each as a whole `shardlab grade` process:
- the reference's ex15 (solutions/), with its speedup tests;
- ex01's reference holding 3 GiB in every call (tests/grader/hostile/test_time_attacks.py's HOLDING_3_GIB)
  at --memory-limit 16, after touching 4 GiB once as that test does;
and runs the suite's two tests of the time rules (a loop in a compiled program, a sleep that never ends).
For each grading it prints the score, every test that did not pass with its message, and what each
timeout was judged on; with --quiet-too, the same gradings without the loops first, to set beside them.
docs/measurements.md ("A busy machine") quotes it.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from grader.course import catalog  # noqa: E402
from grader.grading.results import read_report  # noqa: E402

PARTS = ("ex15", "ex01", "tests")
TIME_TESTS = [
    "tests/grader/grading/test_speed.py::test_a_loop_in_a_compiled_program_also_stops_after_two_timeouts",
    "tests/grader/hostile/test_time_attacks.py::"
    "test_a_function_that_sleeps_forever_is_ended_by_the_wall_clock_cap",
]


def load(name: str, path: Path):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def holding_3_gib(folder: Path) -> Path:
    """ex01's reference, each function holding 3 GiB while it runs, as the suite's test builds it; and, as
    that test does, 4 GiB touched once first (on a virtual machine that gives idle memory back to its host,
    the first touch costs seconds of processor time that would be charged to the first graded call)."""
    attacks = load("time_attacks", REPO / "tests" / "grader" / "hostile" / "test_time_attacks.py")
    attacks.touch_memory(4)
    return attacks.module(folder, catalog.get("ex01"), attacks.HOLDING_3_GIB)


def grade(label: str, folder: Path, exercise: str, out: Path, *extra: str) -> None:
    command = [str(Path(sys.executable).with_name("shardlab")), "grade", str(folder)]
    command += ["--out", str(out), "--quiet", "--exercise", exercise, *extra]
    started = time.monotonic()
    done = subprocess.run(command, cwd=REPO, capture_output=True, text=True)
    wall = time.monotonic() - started
    report = read_report(out / "report.json")
    if report is None:
        print(f"{label}: no report (exit {done.returncode}):\n{done.stderr[-2000:]}")
        return
    graded = report.exercises[catalog.get(exercise).id]
    print(f"{label}: {graded.score:g}/{graded.max_score:g} in {wall:.0f} s of wall time")
    for test in graded.tests:
        if test.category != "passed":
            print(f"  {test.category:8s} {test.name}: {test.message.splitlines()[0][:140]}")
        if test.timeout is not None:
            t = test.timeout
            print(
                f"    judged on {t.by}: limit {t.limit:.1f} s, cap {t.cap:.1f} s; user {t.cpu:.1f}, "
                f"system {t.system:.1f}, wall {t.wall:.1f}, waited {t.waited:.1f}, "
                f"asleep {t.asleep:.1f}, counted {t.counted:.1f}"
            )
    slowest = max(graded.tests, key=lambda t: t.duration)
    print(f"  slowest test: {slowest.name}, {slowest.duration:.1f} s")


def run_all(label: str, tmp: Path, parts: list[str], extra: list[str]) -> None:
    """The parts asked for (PARTS), `extra` given to each grading."""
    if "ex15" in parts:
        grade(f"{label}: ex15 reference", REPO / "solutions", "ex15", tmp / f"{label}-ex15", *extra)
    if "ex01" in parts:
        holding = holding_3_gib(tmp / f"{label}-holding")
        grade(
            f"{label}: ex01 holding 3 GiB per call",
            holding,
            "ex01",
            tmp / f"{label}-ex01",
            "--memory-limit",
            "16",
            *extra,
        )
    if "tests" in parts:
        started = time.monotonic()
        done = subprocess.run(
            [sys.executable, "-m", "pytest", "-q", "--slow", "-p", "no:cacheprovider", *TIME_TESTS],
            cwd=REPO,
            capture_output=True,
            text=True,
        )
        last = done.stdout.strip().splitlines()[-1] if done.stdout.strip() else done.stderr[-500:]
        print(f"{label}: the suite's time-rule tests: {last} ({time.monotonic() - started:.0f} s)")
        if done.returncode:
            print(done.stdout[-4000:])


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--loops", type=int, default=16, help="busy loops beside the gradings")
    parser.add_argument("--quiet-too", action="store_true", help="grade without the loops first")
    parser.add_argument(
        "--part", action="append", choices=PARTS, help="only these (default: all of them)"
    )
    parser.add_argument(
        "--visible-only", action="store_true", help="grade the visible tests only (a shorter run)"
    )
    args = parser.parse_args(argv)
    parts, extra = args.part or list(PARTS), ["--visible-only"] if args.visible_only else []
    print(f"{os.cpu_count()} cores; load average before: {os.getloadavg()[0]:.1f}")
    with tempfile.TemporaryDirectory(prefix="shardlab-busy-") as tmp:
        if args.quiet_too:
            run_all("quiet", Path(tmp), parts, extra)
        loops = load("busy_loops", REPO / "tests" / "grader" / "busy_loops.py")
        with loops.spinning(args.loops):
            run_all(f"beside {args.loops} busy loops", Path(tmp), parts, extra)
            print(f"load average at the end: {os.getloadavg()[0]:.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
