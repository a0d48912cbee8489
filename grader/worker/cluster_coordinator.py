"""The coordinator of a multi-process run (ex12): jax's coordination service, run by the grader.

    python -I -B -m grader.worker.cluster_coordinator REPORT_FD ADDRESS PROCESSES

On a cluster process 0 hosts the service that `jax.distributed.initialize` joins. Here the grader hosts
it, so that what it sees is the grader's and not a process's word: the student's process 0 still starts
a service of its own, on an address nobody uses (the launcher sets JAX_COORDINATOR_BIND_ADDRESS), and
every process, process 0 included, joins this one at ADDRESS.

The service is made for PROCESSES + 1 tasks, the last being this process's own observer. The service
lets no task go on until every task has registered, so the observer's own connection returns only once
every process has joined. The observer then waits for what each process's jax publishes there when its
backend starts (a process joined with devices of its own), and reports, over REPORT_FD, to the launcher:

    {"listening": true}             the service is up (the launcher then hands the processes their tasks)
    {"registered": true}            every process has registered with the service
    {"topology": i, "node": n, "devices": [global device ids]}   what process i's jax published
    {"complete": true}              every process has published
    {"failed": "why"}               the service or the observer could not go on

It runs in the run's sandbox, outside every process's own Landlock domain (grader.worker.cluster_launch):
no process can signal it, trace it or read its memory. Its reports are relayed by the launcher.
"""

from __future__ import annotations

import sys
import threading

from grader.worker import protocol

# Where jax 0.10's CPU client publishes each process's devices when its backend starts (a
# LocalTopologyProto under "<prefix>/<node id>"), and how long the observer waits for them.
TOPOLOGY_KEY = "cpu:local_topology/cpu/{}"
WAIT_MS = 300_000


def _fields(data: bytes):
    """The (field number, value) pairs of a protobuf message: varints as ints, length-delimited as bytes
    (the only two wire types of the messages read here; anything else ends the walk)."""
    at = 0

    def varint() -> int:
        nonlocal at
        value, shift = 0, 0
        while True:
            byte = data[at]
            at += 1
            value |= (byte & 0x7F) << shift
            shift += 7
            if not byte & 0x80:
                return value

    while at < len(data):
        key = varint()
        number, wire = key >> 3, key & 7
        if wire == 0:
            yield number, varint()
        elif wire == 2:
            size = varint()
            yield number, data[at:at + size]
            at += size
        else:
            return


def read_topology(data: bytes) -> tuple[int, list[int]]:
    """A LocalTopologyProto's node id (field 1) and its devices' global ids (field 3, each a DeviceProto
    whose global_device_id is field 4); a field left out is 0, as protobuf has it."""
    node, devices = 0, []
    for number, value in _fields(data):
        if number == 1 and isinstance(value, int):
            node = value
        elif number == 3 and isinstance(value, bytes):
            devices.append(next((v for n, v in _fields(value) if n == 4 and isinstance(v, int)), 0))
    return node, devices


def main(argv: list[str]) -> int:
    report_fd, address, processes = int(argv[0]), argv[1], int(argv[2])
    lock = threading.Lock()

    def report(message: dict) -> None:
        with lock:
            protocol.send(report_fd, message)

    try:
        from jaxlib import _jax

        service = _jax.get_distributed_runtime_service(address, processes + 1)
    except Exception as exc:   # the port taken, say: the run cannot be observed
        report({"failed": f"the coordination service could not start on {address}: {exc}"[:500]})
        return 1
    report({"listening": True})
    observer = _jax.get_distributed_runtime_client(address, processes, init_timeout=WAIT_MS // 1000)
    try:
        observer.connect()   # returns once every task has registered
        report({"registered": True})
        for process in range(processes):
            node, devices = read_topology(observer.blocking_key_value_get_bytes(TOPOLOGY_KEY.format(process),
                                                                                WAIT_MS))
            report({"topology": process, "node": node, "devices": devices})
        report({"complete": True})
    except Exception as exc:
        report({"failed": f"the grader's observer stopped: {exc}"[:500]})
    threading.Event().wait()   # the service lives until the launcher ends the run
    del service
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
