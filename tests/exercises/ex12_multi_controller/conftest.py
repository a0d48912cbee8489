"""What ex12's visible and hidden tests share: the runs (each configuration of processes runs once per
session; every test reads what all of its processes reported) and the checks of those reports.

What the processes do is this exercise's driver (driver.py, beside this file). Each process is given
only its own rows, drawn at random per run by the harness (run.inputs, the driver's Inputs): a sum or a
gather that is right in every process went through the processes' collectives. Nothing a process reports
counts unless the grader saw it join the others through the grader's own coordinator (run.result
raises otherwise; see grader.cluster.run). The layout of the array global_from_local built is
judged here from the blocks every process reports, and its rows, drawn for that call only, must come
back whole in every process when the grader gathers that array."""

from pathlib import Path

import numpy as np
import pytest

from grader.checks import compare
from grader.cluster.driver import load_driver
from grader.cluster.run import ClusterRun

DRIVER = Path(__file__).with_name("driver.py")
USE_STEP = load_driver(DRIVER).module.USE_STEP

# How soon after the last process arrives every process must have left the barrier: a barrier takes
# milliseconds here (0.02 to 0.04 s measured), a loaded machine relays reports late by a little.
LEAVE_WITHIN = 1.0
# How much earlier than the late process's "arrived" another's "left" may reach the harness: each process's
# reports come through a relay thread of its own, which may deliver two nearly simultaneous reports in
# either order. A barrier that does not wait leaves a second or more early.
RELAY_JITTER = 0.1
SUM_TOL = 1e-5  # relative to the sum of the absolute values: float32 sums in another order
SUMMARY_KEYS = ("process_index", "process_count", "device_count", "local_device_count")


@pytest.fixture
def cluster(run_processes, exercise):
    """cluster(processes, devices_per_process): the run of the module under test by that many processes."""
    return lambda processes, devices: run_processes(
        exercise, DRIVER, processes=processes, devices_per_process=devices
    )


def _typename(value) -> str:
    return type(value).__name__


class Checks:
    @staticmethod
    def initialize(run: ClusterRun) -> None:
        for p in range(run.processes):
            got = run.result(p, "initialize")
            assert got is None, f"initialize should return None, process {p} got {got!r}"

    @staticmethod
    def process_summary(run: ClusterRun) -> None:
        total = run.processes * run.devices_per_process
        for p in range(run.processes):
            got = run.result(p, "process_summary")
            want = {
                "process_index": p,
                "process_count": run.processes,
                "device_count": total,
                "local_device_count": run.devices_per_process,
            }
            assert isinstance(got, dict), (
                f"process_summary should return a dict, process {p} got a {_typename(got)}"
            )
            assert sorted(got) == sorted(SUMMARY_KEYS), (
                f"process_summary's keys should be {', '.join(SUMMARY_KEYS)}; process {p} gave {sorted(got)}"
            )
            wrong = {
                k: got[k] for k in SUMMARY_KEYS if type(got[k]) is not int or got[k] != want[k]
            }
            assert not wrong, (
                f"process {p} of {run.processes} ({run.devices_per_process} devices each) reported {wrong}, expected "
                f"{ {k: want[k] for k in wrong} }"
                + (
                    ": a process_count of 1 or a device_count of only this process's devices means the processes "
                    "never joined (did initialize run jax.distributed.initialize?)"
                    if got.get("process_count") == 1
                    or got.get("device_count") == run.devices_per_process
                    else ""
                )
            )

    @staticmethod
    def global_from_local(run: ClusterRun) -> None:
        """The layout, from the blocks every process says it holds: each process holds its own rows and no
        other, one block per device of its own, in the mesh's order; then the rows the grader gathers from
        the array in every process are the rows of every process (they reach a process only through it)."""
        expected = run.inputs.expected
        rows = len(run.inputs.rows[0])
        per_device = rows // run.devices_per_process
        owners = {}  # device -> the process whose block is on it
        for p in range(run.processes):
            got = run.result(p, "global_from_local")
            assert got.get("type") == "jax.Array", (
                f"global_from_local should return a jax.Array; process {p} got a {got.get('type')}"
            )
            assert tuple(got["shape"]) == expected.shape, (
                f"the global array should have shape {expected.shape} ({run.processes} processes x {rows} rows); "
                f"process {p} got {tuple(got['shape'])}: did each process build an array of its own rows only?"
            )
            assert got["dtype"] == "float32", (
                f"the global array should be float32, process {p} got {got['dtype']}"
            )
            own = range(p * rows, (p + 1) * rows)
            held = []
            for shard in sorted(got["shards"], key=lambda s: s["device"]):
                (r0, r1), *columns = shard["index"]
                assert columns == [[0, expected.shape[1]]], (
                    f"process {p} holds a block of columns {columns}: the array should be split over its rows only "
                    f"(P('d')), got {got['sharding']}"
                )
                assert r0 in own and r1 - 1 in own, (
                    f"process {p} holds rows {r0}:{r1}, which are not its own (rows {own.start}:{own.stop}): each "
                    f"process holds only its own block of the global array, so the array is not fully addressable"
                )
                problem = compare(
                    shard["data"],
                    expected[r0:r1],
                    rtol=0,
                    atol=0,
                    name=f"process {p}'s block of rows {r0}:{r1}",
                )
                assert problem is None, problem + (
                    f" (process i's rows must be block i of the global array; process {p}'s are rows "
                    f"{own.start}:{own.stop})"
                )
                assert (
                    shard["device"] in run.published[p]
                    and owners.setdefault(shard["device"], p) == p
                ), (
                    f"process {p} says it holds rows {r0}:{r1} on device {shard['device']}, which is not one of its "
                    f"own devices {run.published[p]} (as its jax told the coordinator)"
                )
                held.append((r0, r1))
            starts = [r0 for r0, _ in held]
            assert sorted(r for r0, r1 in held for r in range(r0, r1)) == list(own), (
                f"process {p} holds rows {sorted(set(held))} of the global array, expected its own rows "
                f"{own.start}:{own.stop}, each once"
            )
            assert (
                len(held) == run.devices_per_process
                and starts == sorted(starts)
                and all(r1 - r0 == per_device for r0, r1 in held)
            ), (
                f"the global array should be split P('d') over the mesh it was given: each of process {p}'s "
                f"{run.devices_per_process} devices holds {per_device} rows, in the mesh's order; process {p} holds "
                f"{held} on devices {sorted(s['device'] for s in got['shards'])} ({got['sharding']})"
            )
        for p in range(run.processes):
            gathered = run.result(p, USE_STEP)
            value = gathered.get("value")
            name = f"the array global_from_local built, gathered in process {p}"
            problem = None if value is None else compare(value, expected, rtol=0, atol=0, name=name)
            assert problem is None, (
                problem or f"the grader could not gather the array in process {p}"
            ) + (
                ": the array global_from_local returns must hold every process's rows, which reach a process only "
                "through it"
            )

    @staticmethod
    def global_sum(run: ClusterRun) -> None:
        want = float(np.sum(run.inputs.given, dtype=np.float64))
        tol = SUM_TOL * float(np.sum(np.abs(run.inputs.given), dtype=np.float64))
        own = [float(np.sum(r, dtype=np.float64)) for r in run.inputs.given_rows]
        for p in range(run.processes):
            got = run.result(p, "global_sum")
            assert "value" in got, (
                f"global_sum should return a Python float; process {p} got a {got['type']}"
            )
            if abs(got["value"] - want) <= tol:
                continue
            hint = (
                " which is the sum of its own rows only: the other processes' rows never reached it"
                if abs(got["value"] - own[p]) <= tol
                else ""
            )
            raise AssertionError(
                f"global_sum in process {p} returned {got['value']:.6g}, expected {want:.6g} "
                f"(the sum over all {run.processes} processes' rows){hint}"
            )

    @staticmethod
    def gather_to_host(run: ClusterRun) -> None:
        for p in range(run.processes):
            got = run.result(p, "gather_to_host")
            assert got.get("type") == "numpy.ndarray", (
                f"gather_to_host should return a NumPy array; process {p} got a {got.get('type')}"
                + (
                    " (a jax.Array lives on devices: bring it to the host)"
                    if got.get("type") == "jax.Array"
                    else ""
                )
            )
            value = got["value"]
            own = run.inputs.given_rows[p]
            if value.shape == own.shape and np.array_equal(value, own):
                raise AssertionError(
                    f"gather_to_host in process {p} returned only its own {len(value)} rows, not "
                    f"the whole {run.inputs.given.shape} array of all processes"
                )
            problem = compare(
                value, run.inputs.given, rtol=0, atol=0, name=f"gather_to_host in process {p}"
            )
            assert problem is None, problem

    @staticmethod
    def barrier(run: ClusterRun) -> None:
        """Read from when the harness received each process's "arrived" and "left" (not from what the
        processes claim): the others leave after the late one arrives, and soon after it."""
        late, lateness = run.inputs.late_process, run.inputs.lateness
        for p in range(run.processes):
            got = run.result(p, "barrier")
            assert got is None, f"barrier should return None, process {p} got {got!r}"
        arrived = run.seen[(late, "barrier", "started")]
        for p in range(run.processes):
            left = run.seen[(p, "barrier", "done")] - arrived
            if p != late and left < -RELAY_JITTER:
                raise AssertionError(
                    f"process {p} left the barrier {-left:.2f} s before process {late} arrived ({lateness:.1f} s "
                    f"late): a barrier must hold every process until all have called it"
                )
            if left > LEAVE_WITHIN:
                raise AssertionError(
                    f"process {p} left the barrier {left:.2f} s after the last process (process {late}) arrived: a "
                    f"barrier lets everyone go once all have come (waiting a fixed time is not a barrier)"
                )


@pytest.fixture
def check():
    return Checks
