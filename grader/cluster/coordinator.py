"""The coordinator of a multi-process run (ex12): jax's coordination service, run by the grader behind its gate.

    python -I -B -m grader.cluster.coordinator REPORT_FD ADDRESS PROCESSES

On a cluster process 0 hosts the service that `jax.distributed.initialize` joins. Here the grader hosts
it, so that what it sees is the grader's and not a process's word: the student's process 0 still starts
a service of its own, on an address nobody uses (the launcher sets JAX_COORDINATOR_BIND_ADDRESS), and
every process, process 0 included, joins this one at ADDRESS. ADDRESS is the grader's gate
(grader.cluster.gate), which reads every request before the service sees it; the service itself
listens on a UNIX socket in this process's own folder, which no process of the run can reach (their
seccomp filter lets them make no UNIX socket).

The service is made for PROCESSES + 1 tasks, the last being this process's own observer (on the UNIX
socket). The service lets no task go on until every task has registered, so the observer's own connection
returns only once every process has joined. It reports, over REPORT_FD, to the launcher:

    {"listening": true}             the service and the gate are up (the launcher then hands the processes
                                    their tasks)
    {"registered": true}            every process has registered with the service
    {"gate": ...}                   what the gate saw: who registered over which connection, what each wrote,
                                    what it refused (grader.cluster.gate)
    {"failed": "why"}               the service or the observer could not go on

It runs in the run's sandbox, outside every process's own Landlock domain (grader.cluster.launcher):
no process can signal it, trace it or read its memory. Its reports are relayed by the launcher.
"""

from __future__ import annotations

import os
import sys
import tempfile
import threading

from grader.cluster.gate import Gate
from grader.worker import framing

WAIT_MS = 300_000  # how long the observer waits for every process to register


def main(argv: list[str]) -> int:
    report_fd, address, processes = int(argv[0]), argv[1], int(argv[2])
    lock = threading.Lock()

    def report(message: dict) -> None:
        with lock:
            framing.send(report_fd, message)

    service_path = os.path.join(
        tempfile.mkdtemp(prefix="service-", dir=os.getcwd()), "service.sock"
    )
    try:
        from jaxlib import _jax

        service = _jax.get_distributed_runtime_service(f"unix:{service_path}", processes + 1)
        gate = Gate(address, service_path, lambda seen: report({"gate": seen}), processes=processes)
    except Exception as exc:  # the port taken, say: the run cannot be observed
        report({"failed": f"the coordination service could not start at {address}: {exc}"[:500]})
        return 1
    threading.Thread(target=gate.serve, daemon=True).start()
    report({"listening": True})
    observer = _jax.get_distributed_runtime_client(
        f"unix:{service_path}", processes, init_timeout=WAIT_MS // 1000
    )
    try:
        observer.connect()  # returns once every task has registered
        report({"registered": True})
    except Exception as exc:
        report({"failed": f"the grader's observer stopped: {exc}"[:500]})
    threading.Event().wait()  # the service lives until the launcher ends the run
    del service
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
