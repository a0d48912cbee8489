"""ex12 that never joins the processes: initialize leaves jax alone (as if the tests or the scheduler made
the cluster), and everything after it is written right. Each process then has only its own devices, so
the tests never see it join the others, and nothing it reports counts: every test fails on the join,
the visible ones (2 processes) as the hidden ones (4)."""

import jax
import jax.numpy as jnp
import numpy as np
from jax.experimental import multihost_utils
from jax.sharding import NamedSharding, PartitionSpec as P


def initialize(coordinator_address, num_processes, process_id):
    # The mistake: no jax.distributed.initialize, so this process stays a cluster of one.
    print(f"process {process_id} of {num_processes}, coordinator {coordinator_address}")


def process_summary():
    return {"process_index": jax.process_index(), "process_count": jax.process_count(),
            "device_count": jax.device_count(), "local_device_count": jax.local_device_count()}


def global_from_local(local_rows, mesh):
    return jax.make_array_from_process_local_data(NamedSharding(mesh, P("d")), local_rows)


def global_sum(arr):
    return float(jax.jit(jnp.sum, out_shardings=NamedSharding(arr.sharding.mesh, P()))(arr))


def gather_to_host(arr):
    return np.asarray(multihost_utils.process_allgather(arr, tiled=True))


def barrier(name):
    multihost_utils.sync_global_devices(name)
