"""Multi-controller runs (ex12) in a row: wall time per run, and what is left behind afterwards.

Runs the reference's processes N times (2 processes of 4 host devices, the visible tests' setting), the
last two of them side by side as two grading jobs would, at the best isolation this machine has and,
with --also-process, at the plain process level (where the ports are the machine's own). After every
run it looks for any process of the run still alive and any socket still open on the run's
coordinator port, and counts the runs in which the grader saw every process join its coordinator.

    python bench/cluster_runs.py [--runs 10] [--also-process]
"""

from __future__ import annotations

import argparse
import statistics
import time
from concurrent.futures import ThreadPoolExecutor

from grader.cluster.driver import load_driver
from grader.cluster.run_cluster import run_cluster
from grader.course import catalog
from grader.sandbox import confinement

EX12 = catalog.get("ex12_multi_controller")
DRIVER = load_driver(EX12.tests_dir() / "driver.py")


def one(isolation) -> dict:
    begun = time.monotonic()
    run = run_cluster(DRIVER, EX12.solution_path(), isolation=isolation)
    wall = time.monotonic() - begun
    complete = all(
        (p, s) in run.reports and "ok" in run.reports[(p, s)]
        for p in range(run.processes)
        for s in run.steps
    )
    joined = all(run.not_joined(p) is None for p in range(run.processes))
    return {
        "wall": wall,
        "complete": complete,
        "joined": joined,
        "stopped": run.stopped_after is not None,
        "run": run,
    }


def series(isolation, runs: int) -> None:
    label = isolation.value if isolation else "process (no sandbox)"
    results = [one(isolation) for _ in range(runs - 2)]
    with ThreadPoolExecutor(2) as pool:
        results += list(pool.map(one, [isolation, isolation]))
    left = [tuple(map(len, r["run"].left_behind())) for r in results]
    walls = [r["wall"] for r in results]
    print(f"{label}: {runs} runs ({runs - 2} in a row, then 2 side by side)")
    print(
        f"  wall per run: median {statistics.median(walls):.2f} s, min {min(walls):.2f} s, max {max(walls):.2f} s"
        f" (side by side: {walls[-2]:.2f} s and {walls[-1]:.2f} s)"
    )
    print(
        f"  every step reported by every process: {sum(r['complete'] for r in results)}/{runs};"
        f" every process seen joining the grader's coordinator: {sum(r['joined'] for r in results)}/{runs};"
        f" stopped for hanging: {sum(r['stopped'] for r in results)}"
    )
    print(f"  coordinator ports: {len({r['run'].coordinator for r in results})} distinct of {runs}")
    print(
        f"  left behind after the runs: {sum(a for a, _ in left)} processes, {sum(s for _, s in left)} open sockets"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--also-process", action="store_true", help="also run without a sandbox")
    args = parser.parse_args()
    best = confinement.choose_isolation("auto")
    series(best, args.runs)
    if args.also_process and best is not confinement.Isolation.PROCESS:
        series(None, args.runs)


if __name__ == "__main__":
    main()
