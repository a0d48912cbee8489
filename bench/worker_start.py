"""How long a worker takes to be ready: from a fresh sandbox (cold: its zygote imports jax first) and
forked from a ready zygote (warm: a worker replaced after a crash, a hang or a protocol break).

For each level: the time from asking for a worker to its "ready" message, both ways; what replacing a
worker costs before that (killing it and everything it started, the zygote reaping them); and a first
jax call after "ready" (jax's backend starts in the worker on either route: the zygote never starts it).
Medians of --runs, with min and max.

    python bench/worker_start.py [--runs 10] [--levels bubblewrap,process]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

from grader.sandbox import confinement
from grader.worker.stand_in import RemoteModule
from grader.worker.supervisor import Worker

MODULE = (
    "import jax.numpy as jnp\n\ndef first_jax_call():\n    return float(jnp.arange(8.0).sum())\n"
)


def figure(name: str, seconds: list[float]) -> str:
    return (
        f"  {name:<40} median {statistics.median(seconds) * 1000:8.1f} ms"
        f"  (min {min(seconds) * 1000:.1f}, max {max(seconds) * 1000:.1f}, n={len(seconds)})"
    )


def series(level: confinement.Isolation, runs: int, scratch: Path) -> None:
    folder = scratch / "submission"
    folder.mkdir(exist_ok=True)
    (folder / "student.py").write_text(MODULE)
    cold, cold_call, warm, warm_call, replace = [], [], [], [], []
    for _ in range(runs):  # each a new Worker: sandbox, zygote importing jax, fork, "ready"
        worker = Worker(folder, isolation=level, scratch=scratch)
        module = RemoteModule(folder / "student.py", worker)
        begun = time.perf_counter()
        worker._spawn()
        cold.append(time.perf_counter() - begun)
        begun = time.perf_counter()
        module.first_jax_call()
        cold_call.append(time.perf_counter() - begun)
        worker.stop()
    worker = Worker(folder, isolation=level, scratch=scratch)
    module = RemoteModule(folder / "student.py", worker)
    worker._spawn()
    try:
        # one Worker: replace its worker as after a crash, then ask for the next
        for _ in range(runs):
            module.first_jax_call()
            zygote = worker._zygote
            begun = time.perf_counter()
            worker._discard_worker()
            replace.append(time.perf_counter() - begun)
            begun = time.perf_counter()
            worker._spawn()
            warm.append(time.perf_counter() - begun)
            assert worker._zygote == zygote, "the worker was not forked from the same zygote"
            begun = time.perf_counter()
            module.first_jax_call()
            warm_call.append(time.perf_counter() - begun)
    finally:
        worker.stop()
    print(f"{level.value}:")
    print(figure("cold: asked -> ready", cold))
    print(figure("warm (forked): asked -> ready", warm))
    print(figure("warm: killing the replaced worker", replace))
    print(figure("first jax call after ready, cold", cold_call))
    print(figure("first jax call after ready, warm", warm_call))
    print(f"  ready warm / cold: {statistics.median(warm) / statistics.median(cold):.3f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument(
        "--levels", default="bubblewrap,process", help="comma-separated isolation levels"
    )
    args = parser.parse_args()
    for name in args.levels.split(","):
        try:
            level = confinement.choose_isolation(name)
        except confinement.IsolationUnavailable as exc:
            print(f"{name}: skipped ({exc})")
            continue
        with tempfile.TemporaryDirectory(prefix="worker-start-") as scratch:
            series(level, args.runs, Path(scratch))


if __name__ == "__main__":
    main()
