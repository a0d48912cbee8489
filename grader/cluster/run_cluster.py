"""run_cluster: the course's entry point to a multi-process run (ex12), with the launcher it asks for
(grader.cluster.local by default, grader.cluster.srun), driven by the one event loop (grader.cluster.events).
Nothing in grader.cluster imports it, so the launchers can import the run's record freely."""

from __future__ import annotations

import tempfile
from pathlib import Path

import numpy as np

from grader.cluster.driver import Driver
from grader.cluster.events import drive
from grader.cluster.local import LocalLaunch
from grader.cluster.run import LIMIT_SECONDS, QUIET_SECONDS, ClusterRun
from grader.cluster.srun import NOT_WITH_ISOLATION, LauncherRefused, SrunLaunch
from grader.core.options import LAUNCHERS
from grader.course.implementations import NotAttempted
from grader.sandbox import confinement


def run_cluster(
    driver: Driver,
    module_path: Path,
    *,
    processes: int = 2,
    devices_per_process: int = 4,
    isolation: confinement.Isolation | None = None,
    quiet_seconds: float = QUIET_SECONDS,
    limit_seconds: float = LIMIT_SECONDS,
    scratch: Path | None = None,
    launcher: str = "local",
    limits: confinement.WorkerLimits | None = None,
) -> ClusterRun:
    """Run the student's module in `processes` processes, each running `driver` (a course's driver, never a
    submission's), and collect what each reports. isolation None: a plain process tree of its own (a
    student's `shardlab check`). launcher "srun": one srun step's tasks (grader.cluster.srun), never
    with isolation. limits: each process's, as a worker's (--memory-limit); the worker's default if None."""
    if launcher not in LAUNCHERS:
        raise ValueError(f"launcher must be 'local' or 'srun', not {launcher!r}")
    if launcher == "srun" and isolation is not None:
        raise LauncherRefused(NOT_WITH_ISOLATION)
    module_path = Path(module_path).resolve()
    if not module_path.is_file():
        raise NotAttempted(f"{module_path.name} is missing from {module_path.parent}")
    level = isolation or confinement.Isolation.PROCESS
    # Unseeded: no process can know another's inputs in advance.
    inputs = driver.draw(np.random.default_rng(), processes, devices_per_process)
    run = ClusterRun(
        processes,
        devices_per_process,
        driver.steps,
        inputs,
        level.value,
        proof_step=driver.proof_step,
    )
    run.workdir = tempfile.mkdtemp(prefix="cluster-", dir=scratch)
    if launcher == "srun":
        run.launcher, run.observed_joins, run.separated = "srun", False, False
        launch = SrunLaunch(run, driver, module_path, limit_seconds)
    else:
        launch = LocalLaunch(run, driver, module_path, level, limits)
    return drive(launch, quiet_seconds=quiet_seconds, limit_seconds=limit_seconds)
