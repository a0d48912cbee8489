"""Where one grading of the course goes, phase by phase and exercise by exercise, against the floor: the same
tests in a plain in-process pytest on the same cores.

    python bench/grading_phases.py [--json phases.json] [--runs cold,warm,loop,floor]

Runs, each a whole process as a user starts it, one after the other:
- cold: `shardlab grade solutions` with a compile cache folder of its own, empty (as on a new machine: the
  time limits from the course's shipped reference times);
- warm: the same again, the cache now filled;
- loop: the reference with an endless loop in every call of ex01's make_data_mesh, the cache warm: what
  the loop costs over `warm`;
- floor: `python -m pytest tests/exercises --impl=reference -n 2`, the module imported in the test processes,
  no compile cache.

Every harness (and pytest worker) samples its own stack (grader.harness.phase_profile); the grading process
samples its own here. The table gives seconds of each process's main thread: with two harnesses side by side,
their seconds add up to about twice the wall time.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections import Counter, defaultdict
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from grader.course import catalog, paths  # noqa: E402
from grader.harness import phase_profile  # noqa: E402

GRADING = "grading process"
# The grading process's phases: the innermost frame that names one decides.
PREFLIGHT, INTAKE, HARNESSES, SCORING, WRITING, SETUP = (
    "preflight",
    "the submission's intake",
    "waiting for the harnesses",
    "scoring",
    "writing outputs",
    "options, course, set-up",
)
_GRADING_MARKERS = {
    ("grading/preflight.py", "prove_worker"): PREFLIGHT,
    ("grading/submission.py", "prepare_submission"): INTAKE,
    ("concurrent/futures/_base.py", "result"): HARNESSES,
    ("grading/results.py", None): SCORING,
    ("reports/writers.py", None): WRITING,
    ("grader/cli.py", "main"): SETUP,
}
# Columns of the per-exercise table: the harness's phases, grouped.
GROUPS = {
    "start": (
        phase_profile.PROCESS_START,
        phase_profile.COLLECTION,
        phase_profile.WORKER_START,
    ),
    "worker calls": (phase_profile.WORKER_CALLS, phase_profile.STUDENT_IN_PROCESS),
    "worker exports": (phase_profile.WORKER_EXPORTS, phase_profile.CALLBACKS),
    "ex12 runs": (phase_profile.CLUSTER_RUNS,),
    "deserialize": (phase_profile.DESERIALIZE,),
    "references": (phase_profile.REFERENCES,),
    "speed": (phase_profile.SPEED,),
    "trace+lower": (phase_profile.TRACE, phase_profile.LOWER),
    "compile": (phase_profile.COMPILE,),
    "run+place": (phase_profile.RUN, phase_profile.DEVICE_PUT),
    "checks": (phase_profile.CHECKS,),
    "lock": (phase_profile.TIMING_LOCK,),
    "other": (phase_profile.TEST_CODE, phase_profile.OTHER),
}


class GradingClassifier:
    """The grading process's phase: the innermost frame that names one."""

    def phase(self, frame) -> str:
        while frame is not None:
            code = frame.f_code
            for (ending, name), phase in _GRADING_MARKERS.items():
                if code.co_filename.endswith(ending) and name in (None, code.co_name):
                    return phase
            frame = frame.f_back
        return "imports, exit"


def profiled_grade(arguments: list[str]) -> int:
    """`shardlab <arguments>` in this process, its main thread sampled into $SHARDLAB_PHASE_PROFILE."""
    from grader import cli

    sampler = phase_profile.Sampler(GradingClassifier(), "grading").start()
    try:
        return cli.main(arguments)
    finally:
        sampler.stop(phase_profile.folder())


def timed(command: list[str], profile: Path, **kwargs) -> float:
    profile.mkdir(parents=True)
    env = {**os.environ, phase_profile.PROFILE_DIR: str(profile)}
    started = time.perf_counter()
    done = subprocess.run(command, env=env, cwd=REPO, capture_output=True, text=True, **kwargs)
    seconds = time.perf_counter() - started
    if done.returncode not in (0, 1):  # pytest's 1: a test failed (the loop's run has none such)
        raise SystemExit(
            f"{command[:4]} exited {done.returncode}:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
        )
    return seconds


def grade(submission: Path, out: Path, cache: Path, profile: Path) -> float:
    command = [sys.executable, __file__, "--profiled-grade", "grade", str(submission)]
    return timed(command + ["--out", str(out), "--cache", str(cache)], profile)


def floor(profile: Path) -> float:
    command = [sys.executable, "-m", "pytest", str(paths.EXERCISE_TESTS_DIR), "--impl=reference"]
    return timed(command + ["-q", "-p", "no:cacheprovider", "-n", "2"], profile)


def endless_loop(folder: Path) -> Path:
    shutil.copytree(paths.SOLUTIONS_DIR, folder)
    module = folder / catalog.get("ex01").module_file
    module.write_text(
        module.read_text()
        + "\n\ndef make_data_mesh(*args, **kwargs):\n    while True:\n        pass\n"
    )
    return folder


def read_profiles(folder: Path) -> dict:
    """Seconds by exercise and phase summed over the run's processes; jax's counts; the grading's own."""
    seconds: dict[str, Counter] = defaultdict(Counter)
    counts: dict[str, Counter] = defaultdict(Counter)
    jax_seconds: dict[str, Counter] = defaultdict(Counter)
    grading: Counter = Counter()
    processes = 0
    spans = []  # each process's lifetime and exercises
    for path in sorted(folder.glob("*.json")):
        found = json.loads(path.read_text())
        if found["role"] == "grading":
            grading.update(found["seconds"].get(phase_profile.OUTSIDE_TESTS, {}))
            continue
        if set(found["seconds"]) == {phase_profile.OUTSIDE_TESTS}:
            continue  # ran no test: pytest-xdist's controller
        processes += 1
        spans.append(
            {
                "seconds": found["ended"] - found["created"],
                "exercises": sorted(
                    {exercise_of(n) for n in found["seconds"]} - {phase_profile.OUTSIDE_TESTS}
                ),
            }
        )
        for key, into in (
            ("seconds", seconds),
            ("jax_counts", counts),
            ("jax_seconds", jax_seconds),
        ):
            for nodeid, phases in found[key].items():
                into[nodeid].update(phases)
    return {
        "processes": processes,
        "spans": spans,
        "seconds": seconds,
        "jax_counts": counts,
        "jax_seconds": jax_seconds,
        "grading": grading,
    }


def by_phase(profile: dict) -> Counter:
    total = Counter()
    for phases in profile["seconds"].values():
        total.update(phases)
    return total


def print_phase_totals(runs: dict[str, dict], walls: dict[str, float]) -> None:
    names = list(runs)
    print("\nseconds by phase (harnesses and test processes, main threads, summed)")
    print("phase".ljust(40) + "".join(f"{n:>10}" for n in names))
    totals = {n: by_phase(runs[n]) for n in names}
    for phase in phase_profile.PHASES:
        if any(totals[n][phase] >= 0.05 for n in names):
            print(phase.ljust(40) + "".join(f"{totals[n][phase]:>10.1f}" for n in names))
    print("all".ljust(40) + "".join(f"{sum(totals[n].values()):>10.1f}" for n in names))
    print("processes".ljust(40) + "".join(f"{runs[n]['processes']:>10}" for n in names))
    for n in names:
        for span in runs[n]["spans"]:
            ids = ", ".join(e.split("_")[0] for e in span["exercises"])
            print(f"  {n}: a process of {span['seconds']:.1f} s: {ids}")
    grading_phases = sorted({p for n in names for p in runs[n]["grading"]})
    print("\nthe grading process (main thread)")
    for phase in grading_phases:
        print(phase.ljust(40) + "".join(f"{runs[n]['grading'][phase]:>10.1f}" for n in names))
    print("wall time, the whole process".ljust(40) + "".join(f"{walls[n]:>10.1f}" for n in names))
    counts = {n: Counter() for n in names}
    for n in names:
        for phases in runs[n]["jax_counts"].values():
            counts[n].update(phases)
    print("\njax's own count (and seconds) of its work in the harnesses")
    for what in (phase_profile.TRACE, phase_profile.LOWER, phase_profile.COMPILE, "cache hits"):
        seconds = {n: sum(p[what] for p in runs[n]["jax_seconds"].values()) for n in names}
        print(
            what.ljust(40)
            + "".join(
                f"{counts[n][what]:>6} {seconds[n]:>5.1f}s"
                if what != "cache hits"
                else f"{counts[n][what]:>10}"
                for n in names
            )
        )


def exercise_of(nodeid: str) -> str:
    """tests/exercises/<id>/test_x.py::test_y -> <id>; anything else is no test's."""
    parts = nodeid.split("::")[0].split("/")
    return (
        parts[-2]
        if len(parts) >= 2 and parts[-2] in {e.id for e in catalog.EXERCISES}
        else phase_profile.OUTSIDE_TESTS
    )


def by_exercise(profile: dict) -> dict[str, Counter]:
    found: dict[str, Counter] = defaultdict(Counter)
    for nodeid, phases in profile["seconds"].items():
        found[exercise_of(nodeid)].update(phases)
    return found


def row(label: str, phases: Counter, width: int) -> str:
    cells = [sum(phases[p] for p in group) for group in GROUPS.values()]
    return (
        label[: width - 1].ljust(width)
        + "".join(f"{c:>{len(g) + 2}.1f}" for g, c in zip(GROUPS, cells))
        + f"{sum(cells):>7.1f}"
    )


def print_exercises(name: str, profile: dict, slowest: int) -> None:
    print(f"\n{name}: seconds by exercise (rows) and phase group (columns)")
    header = "".join(f"  {g}" for g in GROUPS) + f"{'all':>7}"
    print("exercise".ljust(24) + header)
    exercises = by_exercise(profile)
    for label in [e.id for e in catalog.EXERCISES] + [phase_profile.OUTSIDE_TESTS]:
        print(row(label, exercises.get(label, Counter()), 24))
    if slowest:
        print(f"\n{name}: the {slowest} slowest tests")
        print("test".ljust(60) + header)
        tests = sorted(profile["seconds"].items(), key=lambda item: -sum(item[1].values()))
        for nodeid, phases in [t for t in tests if t[0] != phase_profile.OUTSIDE_TESTS][:slowest]:
            print(row(nodeid.replace("tests/exercises/", ""), phases, 60))


def markdown(runs: dict[str, dict], walls: dict[str, float]) -> str:
    """The tables docs/measurements.md shows: phases by run, and the cold run by exercise."""
    names = list(runs)
    totals = {n: by_phase(runs[n]) for n in names}
    lines = ["| phase | " + " | ".join(names) + " |", "|---" * (len(names) + 1) + "|"]
    for phase in phase_profile.PHASES:
        if any(totals[n][phase] >= 0.05 for n in names):
            cells = " | ".join(f"{totals[n][phase]:.1f}" for n in names)
            lines.append(f"| {phase} | {cells} |")
    cells = " | ".join(f"{sum(totals[n].values()):.1f}" for n in names)
    lines.append(f"| all (the harnesses' main threads) | {cells} |")
    lines.append(
        "| wall time, the whole process | " + " | ".join(f"{walls[n]:.1f}" for n in names) + " |"
    )
    if "cold" in runs:
        exercises = by_exercise(runs["cold"])
        lines += ["", "| exercise (cold) | " + " | ".join(GROUPS) + " | all |"]
        lines.append("|---" * (len(GROUPS) + 2) + "|")
        for label in [e.id for e in catalog.EXERCISES] + [phase_profile.OUTSIDE_TESTS]:
            cells = [sum(exercises[label][p] for p in group) for group in GROUPS.values()]
            lines.append(
                f"| {label} | " + " | ".join(f"{c:.1f}" for c in cells) + f" | {sum(cells):.1f} |"
            )
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    if argv[:1] == ["--profiled-grade"]:
        return profiled_grade(argv[1:])
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", default="cold,warm,loop,floor")
    parser.add_argument("--json", type=Path, help="write every figure here too")
    parser.add_argument(
        "--slowest", type=int, default=0, help="list this many slowest tests per run"
    )
    parser.add_argument("--markdown", action="store_true", help="also print the tables as Markdown")
    args = parser.parse_args(argv)
    wanted = args.runs.split(",")
    runs, walls = {}, {}
    with tempfile.TemporaryDirectory(prefix="shardlab-phases-") as tmp:
        tmp = Path(tmp)
        cache = tmp / "cache"
        for name in wanted:
            profile = tmp / f"profile-{name}"
            if name in ("cold", "warm"):
                walls[name] = grade(paths.SOLUTIONS_DIR, tmp / f"out-{name}", cache, profile)
            elif name == "loop":
                looping = endless_loop(tmp / "looping")
                walls[name] = grade(looping, tmp / "out-loop", cache, profile)
            elif name == "floor":
                walls[name] = floor(profile)
            else:
                raise SystemExit(f"no run named {name}")
            runs[name] = read_profiles(profile)
            print(f"{name}: {walls[name]:.1f} s", flush=True)
            if name in ("cold", "warm", "loop"):
                report = json.loads((tmp / f"out-{name}" / "report.json").read_text())
                print(
                    f"  score {report['score']:.2f}/{report['max_score']:.0f}, graded in {report['duration']:.1f} s"
                )
    if "loop" in walls and "warm" in walls:
        print(
            f"the endless loop costs {walls['loop'] - walls['warm']:+.1f} s over the warm grading"
        )
    print_phase_totals(runs, walls)
    for name in runs:
        print_exercises(name, runs[name], args.slowest)
    if args.json:
        args.json.write_text(json.dumps({"walls": walls, "runs": runs}, indent=1))
    if args.markdown:
        print("\n" + markdown(runs, walls))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
