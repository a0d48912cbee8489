"""ex12_multi_controller: one program, several processes.

On a cluster, JAX runs one process per host (or per GPU), every one of them running the same
program: "multi-controller" JAX. `jax.distributed.initialize` joins the processes, after which
`jax.devices()` lists every process's devices, `jax.local_devices()` only this process's own, and an
array sharded over a mesh of all devices is a *global* array of which each process holds only some
blocks (it is not fully addressable: no process can read all of it directly).

The tests start P processes on this machine (2 by default, 4 host CPU devices each; the hidden tests
also use 4 processes of 2 devices), each of which calls your functions in this order:

  1. `initialize(coordinator_address, num_processes, process_id)`
  2. `process_summary()`
  3. `global_from_local(local_rows, mesh)` with this process's own rows
  4. `global_sum(arr)`, `gather_to_host(arr)` with a global array the tests built
  5. `barrier(name)`: one process, chosen at random, arrives 1 to 2 s late; the others must wait
     for it, and leave as soon as it has come.

`mesh` is a 1-D mesh with one axis "d" over all devices of all processes, in process order (process
0's devices first), so process i's rows are block i of the global array. Each process is given only
its own rows, drawn at random per run: a sum or a gather is right only if it really went through the
processes' collectives. A call that never returns (a collective that one process does not join)
hangs the run: it is stopped after 10 s without progress, and the steps left unfinished score 0.

Values are float32; sums are checked at rtol=1e-5 against the NumPy sum of all processes' rows.

The tests watch the cluster form, from outside your processes: right after `initialize` they run a
collective of their own over every device of every process, and they stand between your processes and
jax's coordination service, letting through only what jax itself writes there (each process's
devices, and the rendezvous of jax's CPU collectives). A process whose jax did not join the others, or
did not exchange data with them in that collective, scores nothing for any step; a key of your own in
the service's key-value store cuts that process off. Rows cross between processes through jax's
collectives, nothing else.

On a cluster the same program is started once per process by the scheduler (Slurm's `srun`, say),
which also tells each process who it is; see the handout's README. Here the tests play that part.

Grading: 15 points: initialize 1.25, process_summary 2.5, global_from_local 3.75, global_sum 2.5,
gather_to_host 2.5, barrier 2.5; of each, 40% with 2 processes (the visible tests, 6 points) and 60%
with 4 (hidden, 9 points). Each counts only in the processes the tests saw join the others.
"""

import jax
import jax.numpy as jnp  # noqa: F401  (for your code)
import numpy as np
from jax.experimental import multihost_utils  # noqa: F401  (for your code)
from jax.sharding import NamedSharding, PartitionSpec as P  # noqa: F401  (for your code)


def initialize(coordinator_address: str, num_processes: int, process_id: int) -> None:
    """Join this process to the others: afterwards `jax.devices()` lists every process's devices.

    coordinator_address: "host:port" of the coordination service every process joins (while grading,
    the grader runs it and checks that each process joined); num_processes: how many
    processes take part; process_id: this one's number, 0 to num_processes - 1.
    Hint: one call to the jax.distributed API, before anything else asks jax for its devices.
    """
    ### BEGIN SOLUTION
    jax.distributed.initialize(
        coordinator_address=coordinator_address, num_processes=num_processes, process_id=process_id
    )
    ### END SOLUTION


def process_summary() -> dict:
    """A dict with four ints: "process_index" (this process's number), "process_count", "device_count"
    (all processes' devices) and "local_device_count" (this process's own)."""
    ### BEGIN SOLUTION
    return {
        "process_index": jax.process_index(),
        "process_count": jax.process_count(),
        "device_count": jax.device_count(),
        "local_device_count": jax.local_device_count(),
    }
    ### END SOLUTION


def global_from_local(local_rows: np.ndarray, mesh) -> jax.Array:
    """One global array from every process's rows: process i's (rows, ...) block is block i of the
    (num_processes * rows, ...) result, split P("d") over `mesh`. Each process calls this with its own
    rows; the result is not fully addressable (each process holds only its own blocks).
    Hint: jax has a function that makes a global array from process-local data."""
    ### BEGIN SOLUTION
    return jax.make_array_from_process_local_data(NamedSharding(mesh, P("d")), local_rows)
    ### END SOLUTION


def global_sum(arr: jax.Array) -> float:
    """The sum of every element of the global array `arr`, as a Python float, the same in every process.
    Hint: a jitted reduction whose result is replicated can be read by every process."""
    ### BEGIN SOLUTION
    mesh = arr.sharding.mesh
    total = jax.jit(jnp.sum, out_shardings=NamedSharding(mesh, P()))(arr)
    return float(total)
    ### END SOLUTION


def gather_to_host(arr: jax.Array) -> np.ndarray:
    """The whole global array as a NumPy array, in every process.
    Hint: no process can read the blocks it does not hold; jax.experimental.multihost_utils can
    gather them (tiled, so that the result has the global shape)."""
    ### BEGIN SOLUTION
    return np.asarray(multihost_utils.process_allgather(arr, tiled=True))
    ### END SOLUTION


def barrier(name: str) -> None:
    """Return only once every process has called barrier(name).
    Hint: multihost_utils has a function that synchronizes all devices of all processes."""
    ### BEGIN SOLUTION
    multihost_utils.sync_global_devices(name)
    ### END SOLUTION
