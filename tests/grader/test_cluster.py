"""Multi-controller runs (ex12) for real: the reference's processes join over a loopback and report
every step; a run that hangs is stopped and says where each process stood; a process that dies is
reported; nothing is left running and no port stays open afterwards, also when runs overlap.

The hostile modules are the reference with one twist each. The hang tests stop a run after 6 s of
silence instead of grading's 10 (grader.worker.cluster.QUIET_SECONDS), to keep the suite short."""

from __future__ import annotations

import textwrap
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from grader.course import catalog
from grader.harness.implementations import ImplementationImportError
from grader.worker import confinement
from grader.worker.cluster import ClusterCrashed, ClusterTimeout, run_cluster
from grader.worker.cluster_process import STEPS
from grader.worker.confinement import Isolation

EX12 = catalog.get("ex12_multi_controller")
QUIET = 6.0


def reference_with(twist: str = "") -> str:
    source = "".join(line for line in EX12.solution_path().read_text().splitlines(keepends=True) if "### " not in line)
    return source + textwrap.dedent(twist)


def module(tmp_path: Path, twist: str = "") -> Path:
    path = tmp_path / EX12.module_file
    path.write_text(reference_with(twist))
    tmp_path.chmod(0o755)   # the processes run as nobody when the tests run as root
    return path


def sandbox() -> Isolation:
    return confinement.choose_isolation("auto")


def assert_nothing_left(run) -> None:
    processes, sockets = run.left_behind()
    assert processes == [], "a process of the run is still there"
    assert sockets == [], f"the coordinator's port {run.coordinator} is still open"


@pytest.mark.parametrize("level", sorted({Isolation.PROCESS, sandbox()}, key=str))
def test_the_reference_joins_reports_every_step_and_leaves_nothing(level):
    run = run_cluster(EX12.solution_path(), processes=2, devices_per_process=4,
                      isolation=None if level is Isolation.PROCESS else level)
    assert run.stopped_after is None and run.exits == {0: 0, 1: 0}, run.output[-2000:]
    for process in range(2):
        for step in STEPS:
            run.result(process, step)   # raises what the step raised, or why it never finished
    assert run.result(1, "process_summary")["device_count"] == 8
    assert run.coordinator.startswith("127.0.0.1:")
    assert_nothing_left(run)


HANG_IN_SUM = """
    def global_sum(arr):   # the collective in process 0 only: it waits forever for the others
        if jax.process_index() == 0:
            return float(jax.jit(jnp.sum, out_shardings=NamedSharding(arr.sharding.mesh, P()))(arr))
        return 0.0
"""


def test_a_run_that_hangs_is_stopped_and_says_where_each_process_stood(tmp_path):
    begun = time.monotonic()
    run = run_cluster(module(tmp_path, HANG_IN_SUM), isolation=sandbox(), quiet_seconds=QUIET)
    assert run.stopped_after is not None and time.monotonic() - begun < QUIET + 20
    for process in range(2):
        for step in ("initialize", "process_summary", "global_from_local"):
            run.result(process, step)
    with pytest.raises(ClusterTimeout, match=r"process 0 was still in global_sum\(\) and never finished global_sum"):
        run.result(0, "global_sum")
    assert run.result(1, "global_sum") == {"type": "float", "value": 0.0}   # it returned; the gather then waits
    with pytest.raises(ClusterTimeout, match=r"process 1 was still in gather_to_host\(\)"):
        run.result(1, "gather_to_host")
    with pytest.raises(ClusterTimeout):
        run.result(1, "barrier")
    assert_nothing_left(run)


def test_a_process_that_dies_is_reported_and_the_others_are_stopped(tmp_path):
    twist = """
        import os as _os
        _original = global_from_local
        def global_from_local(local_rows, mesh):
            if jax.process_index() == 1:
                _os._exit(3)
            return _original(local_rows, mesh)
    """
    run = run_cluster(module(tmp_path, twist), isolation=sandbox(), quiet_seconds=QUIET)
    with pytest.raises(ClusterCrashed, match=r"process 1 ended during global_from_local\(\).*exited with status 3"):
        run.result(1, "global_from_local")
    run.result(0, "global_from_local")   # building it needs no other process
    with pytest.raises((ClusterTimeout, ClusterCrashed)):
        run.result(0, "global_sum")
    assert_nothing_left(run)


def test_a_module_that_fails_to_import_fails_every_step_alike(tmp_path):
    run = run_cluster(module(tmp_path, "raise RuntimeError('broken on purpose')\n"), isolation=sandbox())
    for step in ("initialize", "barrier"):
        with pytest.raises(ImplementationImportError, match="broken on purpose"):
            run.result(0, step)
    assert_nothing_left(run)


def test_runs_side_by_side_never_meet_on_a_port():
    """Two grading jobs at once, at the plain process level, where the ports are the machine's own."""
    with ThreadPoolExecutor(2) as pool:
        runs = list(pool.map(lambda _: run_cluster(EX12.solution_path(), isolation=None), range(2)))
    for run in runs:
        assert run.stopped_after is None, run.output[-2000:]
        assert run.result(0, "global_sum")["value"] == pytest.approx(float(run.expected.sum()), rel=1e-5, abs=1e-4)
        assert_nothing_left(run)
