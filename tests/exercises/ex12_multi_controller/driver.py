"""ex12's driver (grader.cluster.driver says what a driver is): what the harness gives each of the
run's processes, and what each process does with the student's module.

Every process calls initialize, then takes part in the grader's own collective over every device of
every process (PROOF_STEP: the harness looks, at jax's coordination service and in /proc, for gloo's
rendezvous and connections between the processes at its ports), then calls process_summary,
global_from_local, global_sum, gather_to_host and barrier, in that order, then the grader's own use of
the array global_from_local returned (USE_STEP).
Each process is given only its own rows, drawn per run: separate rows for global_from_local and for the
grader's array passed to global_sum and gather_to_host, so a sum or a gather right in every process took
rows from the other processes (over TCP: docs/trust-model.md says how far the grader sees which way),
and the rows of global_from_local's array are given for that call only. One process, told only here,
comes late to the barrier: a barrier that really waits holds the others until it comes.

Trusted course code: the harness reads this file and hands its source to every process (which cannot read
tests/). It ships to students with the visible tests; its top level runs in the harness too, so jax is
imported only inside the functions the processes run.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np

# The grader's own step, after the student's: the rows of the array global_from_local built, gathered in
# every process. They are rows the processes are given for that call only, so they reach a process only
# through that array (the grader's array for global_sum and gather_to_host holds other rows).
USE_STEP = "use_global_array"
# The grader's own collective, right after the join: a sum over every device of every process. Whether it went
# through jax's collectives (gloo) is what the harness checks before anything a process reports counts.
PROOF_STEP = "sum_over_every_device"
STEPS = (
    "initialize",
    PROOF_STEP,
    "process_summary",
    "global_from_local",
    "global_sum",
    "gather_to_host",
    "barrier",
    USE_STEP,
)
BARRIER_NAME = "shardlab-ex12"
ROWS_PER_PROCESS = 8
# seconds the late process comes to the barrier after the others, drawn per run
LATENESS = (1.0, 2.0)


@dataclass(frozen=True)
class Inputs:
    """What the harness drew for one run: the checks read it, each process gets only its own part."""

    rows: list[np.ndarray]  # each process's rows for global_from_local; the harness's secret
    # each process's rows of the grader's array (global_sum, gather_to_host)
    given_rows: list[np.ndarray]
    late_process: int  # arrives `lateness` seconds late at the barrier
    lateness: float

    @property
    def expected(self) -> np.ndarray:
        """The global array global_from_local builds: process i's rows are block i."""
        return np.concatenate(self.rows)

    @property
    def given(self) -> np.ndarray:
        """The grader's global array, given to global_sum and gather_to_host."""
        return np.concatenate(self.given_rows)

    def for_process(self, process: int) -> dict:
        return {
            "rows": self.rows[process],
            "given": self.given_rows[process],
            "barrier_sleep": self.lateness if process == self.late_process else 0.0,
        }


def draw(rng: np.random.Generator, processes: int, devices_per_process: int) -> Inputs:
    """No process can know another's rows in advance, nor which process comes late to the barrier and
    by how much (only that one is told, so a barrier that just sleeps cannot pass)."""

    def rows() -> list[np.ndarray]:
        return [rng.normal(size=(ROWS_PER_PROCESS, 3)).astype(np.float32) for _ in range(processes)]

    return Inputs(
        rows(),
        rows(),
        late_process=int(rng.integers(processes)),
        lateness=float(rng.uniform(*LATENESS)),
    )


# ---- in each process -------------------------------------------------------------------------------


def describe_global_array(arr) -> dict:
    """What global_from_local returned: its type, shape, sharding, and the blocks this process holds (with
    the global ids of their devices). The harness judges the layout from the blocks of every process."""
    import jax

    if not isinstance(arr, jax.Array):
        return {"type": f"{type(arr).__module__}.{type(arr).__qualname__}"}
    shards = []
    for shard in arr.addressable_shards:
        index = [
            [s.start or 0, dim if s.stop is None else s.stop]
            for s, dim in zip(shard.index, arr.shape)
        ]
        shards.append(
            {"device": int(shard.device.id), "index": index, "data": np.asarray(shard.data)}
        )
    return {
        "type": "jax.Array",
        "shape": list(arr.shape),
        "dtype": np.dtype(arr.dtype).name,
        "sharding": str(arr.sharding),
        "shards": shards,
    }


def use_global_array(arr):
    """The grader's use of the array global_from_local returned: all of it, gathered in every process."""
    import jax
    from jax.experimental import multihost_utils

    if not isinstance(arr, jax.Array):
        raise TypeError(f"global_from_local returned a {type(arr).__qualname__}, not a jax.Array")
    whole = multihost_utils.process_allgather(arr, tiled=True)
    return np.asarray(whole)


def sum_over_every_device(mesh) -> float:
    """The grader's collective: every device of every process contributes a one; each process gets the total."""
    import jax
    import jax.numpy as jnp
    from jax.sharding import NamedSharding, PartitionSpec

    ones = jax.make_array_from_process_local_data(
        NamedSharding(mesh, PartitionSpec("d")), np.ones(jax.local_device_count(), np.float32)
    )
    return float(jax.jit(jnp.sum, out_shardings=NamedSharding(mesh, PartitionSpec()))(ones))


def describe_host_array(value) -> dict:
    import jax

    if isinstance(value, np.ndarray):
        return {"type": "numpy.ndarray", "value": value}
    kind = (
        "jax.Array"
        if isinstance(value, jax.Array)
        else f"{type(value).__module__}.{type(value).__qualname__}"
    )
    return {"type": kind}


def describe_number(value) -> dict:
    import jax

    if isinstance(value, (int, float, np.integer, np.floating)) and not isinstance(
        value, (bool, np.bool_)
    ):
        return {"type": type(value).__name__, "value": float(value)}
    kind = (
        "jax.Array"
        if isinstance(value, jax.Array)
        else f"{type(value).__module__}.{type(value).__qualname__}"
    )
    return {"type": kind}


def run(process) -> None:
    """grader.cluster.process.Process `process`: the student's functions, in the exercise's order."""
    import jax
    from jax.sharding import Mesh, NamedSharding, PartitionSpec

    module, inputs, step = process.module, process.inputs, process.step
    # (coordinator, count, index); under srun (None, None, None): jax reads them from Slurm's environment.
    initialized, _ = step("initialize", lambda: module.initialize(*process.join_arguments))
    if not initialized:
        return  # without the other processes nothing after this means anything
    # jax's backend starts here (unless initialize started it): once joined, it publishes this process's
    # devices to the coordinator, where the grader sees them.
    devices = sorted(jax.devices(), key=lambda d: (d.process_index, d.id))
    # The grader's own mesh, so that each function is graded on correct inputs: devices in process order, so
    # process i's rows are block i of the global array.
    mesh = Mesh(np.array(devices), ("d",), axis_types=(jax.sharding.AxisType.Explicit,))
    step(PROOF_STEP, lambda: sum_over_every_device(mesh))
    step("process_summary", lambda: module.process_summary())
    given = jax.make_array_from_process_local_data(
        NamedSharding(mesh, PartitionSpec("d")), inputs["given"]
    )
    _, built = step(
        "global_from_local",
        lambda: module.global_from_local(inputs["rows"].copy(), mesh),
        describe_global_array,
    )
    step("global_sum", lambda: module.global_sum(given), describe_number)
    step("gather_to_host", lambda: module.gather_to_host(given), describe_host_array)
    if inputs["barrier_sleep"]:
        time.sleep(float(inputs["barrier_sleep"]))
    step("barrier", lambda: module.barrier(BARRIER_NAME))
    step(USE_STEP, lambda: use_global_array(built), describe_host_array)
