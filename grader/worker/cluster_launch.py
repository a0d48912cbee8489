"""Inside one sandbox: start the coordinator and the processes of a multi-process run, relay their reports.

The sandbox's network is the run's own (a loopback no other grading job sees). The launcher picks the
coordinator's port, starts the grader's coordinator there (grader.worker.cluster_coordinator) and the P
processes (grader.worker.cluster_process), and hands each process its task once the coordinator listens.

Each process is kept apart from the others and from the launcher and the coordinator: a folder of its
own (its working folder, HOME and TMPDIR) and, where the kernel has Landlock, a ruleset of its own
applied before it starts (grader.worker.launch): it writes only its folder, reads only Python, the
system, the grader package and the student's module (no other process's folder), and cannot trace,
signal or read the memory of any process outside its own domain. Its output goes through a pipe of its
own into the launcher's. So nothing the processes can write is common to two of them: what one process
learns of another's rows comes over the network.

    python -I -B -m grader.worker.cluster_launch REPORT_FD TASKS_FD HOLD_FD MODULE_PATH

TASKS_FD carries one JSON object: {"tasks": [one per process], "driver": {"source", "name"} (the exercise's
driver, added to every process's task), "readable": [what every process may read], "writable": [devices
every process may write]}. Relayed to REPORT_FD: {"coordinator": "host:port"},
{"separated": bool} (each process got a Landlock ruleset of its own), {"service": what the coordinator
reported}, {"process": i, "pid": its pid here}, {"process": i, "report": ...}, {"process": i, "exit": code},
and {"finished": true} once every process has finished: the processes then wait until the harness writes
to HOLD_FD (or closes it), so that none leaves before the harness has looked at it (its census of each
process's connection, taken when its report of the join step arrives). This ends when every process has.
"""

from __future__ import annotations

import json
import os
import select
import socket
import subprocess
import sys
import threading
from pathlib import Path

from grader.worker import protocol
from grader.worker.launch import landlock_abi

REPORT_LIMIT = 1 << 20          # a process's report holds a few small arrays; anything larger is dropped
LISTEN_SECONDS = 120.0          # how long the processes wait for the coordinator before trying anyway
COMPLETE_SECONDS = 5.0          # once every process has finished, how long the coordinator may still report
HOLD_SECONDS = 10.0             # then how long the harness may take to read every report before they leave
UNUSED_BIND_ADDRESS = "127.0.0.1:0"   # where the student's process 0 starts jax's service, which no one joins


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class Relay:
    """Messages to the harness, one at a time from several threads."""

    def __init__(self, fd: int):
        self.fd, self.lock = fd, threading.Lock()

    def __call__(self, message: dict) -> None:
        with self.lock:
            protocol.send(self.fd, message)


def start_coordinator(address: str, processes: int, relay: Relay) -> tuple[subprocess.Popen, dict]:
    """The grader's coordinator, and events set when it listens, when every process has registered, when
    it has seen every process publish its devices, and when it has ended (or failed)."""
    events = {name: threading.Event() for name in ("listening", "registered", "complete", "ended", "stopping")}
    read_fd, write_fd = os.pipe()
    coordinator = subprocess.Popen([sys.executable, "-I", "-B", "-m", "grader.worker.cluster_coordinator",
                                    str(write_fd), address, str(processes)],
                                   pass_fds=(write_fd,), stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                   stderr=subprocess.DEVNULL)
    os.close(write_fd)

    def forward() -> None:
        try:
            while True:
                message = protocol.receive(read_fd, REPORT_LIMIT)
                relay({"service": message})
                for name in ("listening", "registered", "complete"):
                    if message.get(name) is True:
                        events[name].set()
                if "failed" in message:
                    break
        except (EOFError, protocol.ProtocolError, OSError):
            if not events["stopping"].is_set():
                relay({"service": {"failed": f"the coordinator ended (exit status {coordinator.wait()})"}})
        events["ended"].set()
        events["listening"].set()   # the processes are not kept waiting for a coordinator that is gone
        os.close(read_fd)

    threading.Thread(target=forward, daemon=True).start()
    return coordinator, events


def child_command(folder: Path, spec: dict, report_fd: int, release_fd: int, module_path: str,
                  separated: bool) -> list[str]:
    """The process's command: grader.worker.launch applies its own Landlock ruleset, then becomes it."""
    config: dict = {"cwd": str(folder)}
    if separated:
        config["landlock"] = {"read": spec["readable"], "write": [str(folder), *spec["writable"]], "network": True}
    process = [sys.executable, "-I", "-B", "-m", "grader.worker.cluster_process", str(report_fd), str(release_fd),
               module_path]
    return [sys.executable, "-I", "-B", "-m", "grader.worker.launch", json.dumps(config), "--", *process]


def copy_output(fd: int, lock: threading.Lock) -> None:
    """A process's output, into the launcher's (the run's output file, which no process holds)."""
    while chunk := os.read(fd, 1 << 16):
        with lock:
            os.write(1, chunk)
    os.close(fd)


def main(argv: list[str]) -> int:
    report_fd, hold_fd, module_path = int(argv[0]), int(argv[2]), argv[3]
    with os.fdopen(int(argv[1]), "rb") as given:
        spec = json.loads(given.read())
    tasks = spec["tasks"]
    relay = Relay(report_fd)
    coordinator_address = f"127.0.0.1:{free_port()}"
    relay({"coordinator": coordinator_address})
    separated = landlock_abi() >= 1
    relay({"separated": separated})
    coordinator, events = start_coordinator(coordinator_address, len(tasks), relay)

    # A process that has finished waits for the others before it exits: a process that leaves early
    # takes its devices from the others' last collectives.
    release_r, release_w = os.pipe()
    unfinished = threading.Semaphore(0)
    output_lock = threading.Lock()
    children, copies = [], []
    for index, task in enumerate(tasks):
        folder = Path.cwd() / f"process-{index}"
        folder.mkdir(mode=0o700)
        read_fd, write_fd = os.pipe()
        output_r, output_w = os.pipe()
        env = {**os.environ, "HOME": str(folder), "TMPDIR": str(folder), "SHARDLAB_PROCESS": str(index),
               "XLA_FLAGS": f"--xla_force_host_platform_device_count={int(task['devices'])}",
               "JAX_PLATFORMS": "cpu", "JAX_COORDINATOR_BIND_ADDRESS": UNUSED_BIND_ADDRESS}
        child = subprocess.Popen(child_command(folder, spec, write_fd, release_r, module_path, separated),
                                 stdin=subprocess.PIPE, stdout=output_w, stderr=output_w, cwd=folder, env=env,
                                 pass_fds=(write_fd, release_r))
        for fd in (write_fd, output_w):
            os.close(fd)
        copies.append(threading.Thread(target=copy_output, args=(output_r, output_lock), daemon=True))
        copies[-1].start()
        relay({"process": index, "pid": child.pid})
        children.append((child, read_fd))

    def serve(index: int, task: dict, child: subprocess.Popen, read_fd: int) -> None:
        events["listening"].wait(LISTEN_SECONDS)
        try:
            child.stdin.write(json.dumps({**task, "coordinator": coordinator_address,
                                          "driver": spec["driver"]}).encode())
            child.stdin.close()
        except OSError:   # it died before reading its task
            pass
        try:
            while (message := protocol.receive(read_fd, REPORT_LIMIT)).get("finished") is not True:
                relay({"process": index, "report": message})
        except (EOFError, protocol.ProtocolError, RecursionError, OSError):
            pass
        unfinished.release()
        try:
            while os.read(read_fd, 1 << 16):   # after "finished" nothing more is relayed
                pass
        except OSError:
            pass
        os.close(read_fd)
        relay({"process": index, "exit": child.wait()})

    threads = [threading.Thread(target=serve, args=(i, task, *children[i])) for i, task in enumerate(tasks)]
    for thread in threads:
        thread.start()
    for _ in threads:
        unfinished.acquire()
    # Every process has finished (or died): what the coordinator saw is reported before any leaves.
    if events["registered"].is_set() and not events["ended"].is_set():
        events["complete"].wait(COMPLETE_SECONDS)
    relay({"finished": True})
    select.select([hold_fd], [], [], HOLD_SECONDS)   # the harness's word (or its end)
    os.close(hold_fd)
    os.close(release_w)
    for thread in threads:
        thread.join()
    for thread in copies:   # the processes' last words (a daemon of theirs may hold the pipe: not for long)
        thread.join(timeout=2)
    events["stopping"].set()
    coordinator.kill()
    coordinator.wait()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
