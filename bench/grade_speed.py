"""How fast grading is, as figures from one run on this machine (the issue's goals beside them).

- calibrate: `shardlab calibrate` into a fresh cache folder (the reference timed; each test's limit
  follows from it) and what it costs.
- one submission: the reference, every exercise and test, as `shardlab grade` runs it (harnesses in
  parallel, the module in a confined worker), with the compile cache cold (empty) and warm (the same
  folder again), and with one harness instead of one per core.
- in-process: one plain pytest of the same tests, the module imported in the test process (a
  student's `shardlab check`): what the tests cost without the split.
- honest but different: the corpus's alternative correct solutions (tests/grader/submissions/
  alt_correct), graded with the calibrated limits: their slowest test against its limit.
- batch: N submissions (reference copies, the corpus's wrong ones, one with an endless loop in one
  exercise) through `grade_batch` with --jobs 1 and 2, the cache cold then warm; throughput, and what
  the endless loop cost.

    python bench/grade_speed.py [--students 20] [--exercises ex01,ex03,ex04,ex05,ex13]
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from grader.course import catalog, paths
from grader.grading.batch import grade_batch
from grader.grading.calibration import calibrate
from grader.grading.compile_cache import CompileCache
from grader.grading.engine import grade_submission
from grader.harness import time_limits

CORPUS = paths.REPO_ROOT / "tests" / "grader" / "submissions"
LOOPING = "ex05_collectives"  # the exercise the endless loop is in


def in_process_seconds() -> float:
    started = time.monotonic()
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            str(paths.EXERCISE_TESTS_DIR),
            "-q",
            "-p",
            "no:cacheprovider",
            "--impl=reference",
        ],
        cwd=paths.REPO_ROOT,
        check=True,
        capture_output=True,
    )
    return time.monotonic() - started


def graded(submission: Path, cache: CompileCache, **options):
    results = grade_submission(
        submission, cache=cache, time_limits=time_limits.load(cache.folder), **options
    )
    return results, results.environment.compile_cache


def endless_loop(folder: Path) -> Path:
    """The reference, but one function of LOOPING never returns."""
    shutil.copytree(paths.SOLUTIONS_DIR, folder)
    module = folder / catalog.get(LOOPING).module_file
    module.write_text(
        module.read_text() + "\n\ndef all_gather(x, mesh):\n    while True:\n        pass\n"
    )
    return folder


def make_class(folder: Path, students: int) -> list[str]:
    """Reference copies and the corpus's wrong submissions, one endless loop: `students` in all."""
    wrong = sorted(
        p.name
        for p in CORPUS.iterdir()
        if p.is_dir() and p.name not in ("expectations", "alt_correct")
    )
    endless_loop(folder / "zz_endless_loop")
    names = ["zz_endless_loop"]
    for name in wrong[: max(0, students - 1 - (students - 1) // 3)]:
        shutil.copytree(CORPUS / name, folder / name)
        names.append(name)
    for i in range(students - len(names)):
        shutil.copytree(paths.SOLUTIONS_DIR, folder / f"reference_{i:02d}")
        names.append(f"reference_{i:02d}")
    return names


def batch(
    submissions: Path, out: Path, cache_folder: Path, jobs: int, exercises: list[str]
) -> tuple[float, dict]:
    started = time.monotonic()
    summary = grade_batch(
        submissions, out, jobs=jobs, force=True, exercises=exercises, cache=cache_folder
    )
    seconds = time.monotonic() - started
    assert summary.count("graded") == len(summary.outcomes), [
        o.detail for o in summary.outcomes if o.detail
    ]
    return seconds, {o.student: o.seconds for o in summary.outcomes}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--students", type=int, default=20)
    parser.add_argument(
        "--exercises",
        default="ex01,ex03,ex04,ex05,ex13",
        help="the batch's exercises (the single-submission figures use every exercise)",
    )
    args = parser.parse_args()
    exercises = [catalog.get(e).id for e in args.exercises.split(",")]
    with tempfile.TemporaryDirectory(prefix="shardlab-bench-") as tmp:
        tmp = Path(tmp)
        course = tmp / "course-cache"
        started = time.monotonic()
        calibration = calibrate(course, cache=CompileCache(course))
        print(
            f"calibrate (reference timed, cache filled):          {time.monotonic() - started:5.1f} s "
            f"({len(calibration.reference)} tests)"
        )

        def fresh(name: str) -> CompileCache:  # the calibrated limits, an empty compile cache
            (tmp / name).mkdir()
            shutil.copy(course / time_limits.FILE_NAME, tmp / name / time_limits.FILE_NAME)
            return CompileCache(tmp / name)

        one = fresh("one")
        cold, cold_cache = graded(paths.SOLUTIONS_DIR, one, parallel=2)
        warm, warm_cache = graded(paths.SOLUTIONS_DIR, one, parallel=2)
        single, _ = graded(paths.SOLUTIONS_DIR, fresh("single"), parallel=1)
        inside = in_process_seconds()
        level = cold.environment.isolation.level
        print(f"one submission, every exercise ({cold.max_score:.0f} points, {level}):")
        print(
            f"  cache cold, 2 harnesses: {cold.duration:5.1f} s  score {cold.score:.2f}  "
            f"(goal: at most 60 s)  misses {cold_cache['misses']}, hits {cold_cache['hits']}"
        )
        print(
            f"  cache warm, 2 harnesses: {warm.duration:5.1f} s  score {warm.score:.2f}  "
            f"({cold.duration / warm.duration:.2f}x cold)  misses {warm_cache['misses']}, hits {warm_cache['hits']}"
        )
        print(
            f"  cache cold, 1 harness:   {single.duration:5.1f} s  score {single.score:.2f}  "
            f"(2 harnesses: {single.duration / cold.duration:.2f}x faster)"
        )
        print(
            f"  in-process pytest, same tests, no cache: {inside:5.1f} s (grading cold / in-process: "
            f"{cold.duration / inside:.2f}x)"
        )

        alt, _ = graded(CORPUS / "alt_correct", one)
        ratios = [
            (
                t.duration / calibration.limit(t.nodeid),
                t.duration / max(calibration.reference[t.nodeid], 1e-3),
                t.nodeid,
            )
            for e in alt.exercises.values()
            for t in e.tests
            if t.nodeid in calibration.reference
        ]
        worst = max(ratios)
        print(
            f"honest but different (alt_correct, score {alt.score:.2f}): slowest test against its limit "
            f"{worst[0]:.2f} ({worst[2].split('/')[-1]}); largest time against the reference's "
            f"{max(r[1] for r in ratios if calibration.reference[r[2]] >= 0.2):.2f}x (tests the reference "
            "takes 0.2 s or more)"
        )

        submissions = tmp / "class"
        names = make_class(submissions, args.students)
        print(
            f"batch: {len(names)} submissions ({sum(n.startswith('reference') for n in names)} reference copies, "
            f"{sum(not n.startswith(('reference', 'zz')) for n in names)} corpus, 1 endless loop in {LOOPING}), "
            f"exercises {', '.join(e.split('_')[0] for e in exercises)}"
        )
        rates = {}
        for jobs in (1, 2):
            folder = fresh(f"batch-{jobs}").folder
            for state in ("cold", "warm"):
                seconds, per_student = batch(
                    submissions, tmp / f"out-{jobs}-{state}", folder, jobs, exercises
                )
                rates[jobs, state] = len(names) / seconds * 60
                copies = [s for n, s in per_student.items() if n.startswith("reference")]
                loop_cost = per_student["zz_endless_loop"] - statistics.median(copies)
                print(
                    f"  --jobs {jobs}, cache {state}: {seconds:6.1f} s, {rates[jobs, state]:5.2f} submissions/min; "
                    f"reference copy median {statistics.median(copies):.1f} s, the endless loop costs "
                    f"{loop_cost:+.1f} s (goal: at most 30 s)"
                )
        for jobs in (1, 2):
            gain = rates[jobs, "warm"] / rates[jobs, "cold"]
            print(f"  --jobs {jobs}: warm / cold throughput {gain:.2f}x (goal: 3x)")
        print(f"  --jobs 2 / --jobs 1 (cold): {rates[2, 'cold'] / rates[1, 'cold']:.2f}x")
        report = json.loads((tmp / "out-2-warm" / "zz_endless_loop" / "report.json").read_text())
        looped = [t for t in report["exercises"][LOOPING]["tests"] if t["category"] == "timeout"]
        print(
            f"  the endless loop's {LOOPING}: {len(looped)} tests timed out or not run, "
            f"{sum(t['duration'] for t in looped):.1f} s spent on them"
        )


if __name__ == "__main__":
    main()
