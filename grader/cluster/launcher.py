"""Inside one sandbox: start the coordinator and the processes of a multi-process run, relay their reports.

The sandbox's network is the run's own (a loopback no other grading job sees). The launcher picks the
coordinator's port, starts the grader's coordinator there (grader.cluster.coordinator) and the P
processes (grader.cluster.process), and hands each process its task once the coordinator listens.

Each process is kept apart from the others and from the launcher and the coordinator: a folder of its
own (its working folder, HOME and TMPDIR) and, where the kernel has Landlock, a ruleset of its own
applied before it starts (grader.sandbox.launch): it writes only its folder, reads only Python, the
system, the grader package and the student's module (no other process's folder), and cannot trace,
signal or read the memory of any process outside its own domain. Its output goes through a pipe of its
own into the launcher's. So nothing the processes can write is common to two of them: what one process
learns of another's rows comes over the network.

    python -I -B -m grader.cluster.launcher REPORT_FD TASKS_FD HOLD_FD MODULE_PATH

TASKS_FD carries the run's Spec (grader.cluster.messages): every process's task, what every process may
read and write. Relayed to REPORT_FD (messages.Relayed): where the coordinator listens, whether each process
got a Landlock ruleset of its own, what the coordinator reported, each process's pid here, its reports and its
exit status, and Finished once every process has finished: the processes then wait until the harness writes
"go" to HOLD_FD (or closes it), so that none leaves before the harness has read every report. HOLD_FD also
carries "census I" lines: the harness has looked at process I's connections (after its join step and its
proof step, which I waits on: grader.cluster.process), which the launcher passes on to process I.
This ends when every process has.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading
from dataclasses import dataclass
from pathlib import Path

import msgspec

from grader.cluster import messages
from grader.cluster.messages import (
    Coordinator,
    Exited,
    Finished,
    Reported,
    Separated,
    Service,
    Spec,
    Started,
    Task,
)
from grader.sandbox.launch import landlock_abi
from grader.worker import framing, protocol_errors

REPORT_LIMIT = 1 << 20  # a process's report holds a few small arrays; anything larger is dropped
LISTEN_SECONDS = 120.0  # how long the processes wait for the coordinator before trying anyway
# once the coordinator has ended, how long its last reports may take to relay
COMPLETE_SECONDS = 5.0
HOLD_SECONDS = 10.0  # then how long the harness may take to read every report before they leave
# where the student's process 0 starts jax's service, which no one joins
UNUSED_BIND_ADDRESS = "127.0.0.1:0"


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class Relay:
    """Messages to the harness, one at a time from several threads."""

    def __init__(self, fd: int):
        self.fd, self.lock = fd, threading.Lock()

    def __call__(self, message: messages.Relayed) -> None:
        with self.lock:
            messages.send(self.fd, message)


def start_coordinator(address: str, processes: int, relay: Relay) -> tuple[subprocess.Popen, dict]:
    """The grader's coordinator, and events set when it listens, when every process has registered, and
    when it has ended (or failed) and everything it reported has been relayed."""
    events = {name: threading.Event() for name in ("listening", "registered", "ended", "stopping")}
    read_fd, write_fd = os.pipe()
    coordinator = subprocess.Popen(
        [
            sys.executable,
            "-I",
            "-B",
            "-m",
            "grader.cluster.coordinator",
            str(write_fd),
            address,
            str(processes),
        ],
        pass_fds=(write_fd,),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    os.close(write_fd)

    def forward() -> None:
        try:
            while True:
                message = framing.receive(read_fd, REPORT_LIMIT)
                relay(Service(message))
                for name in ("listening", "registered"):
                    if message.get(name) is True:
                        events[name].set()
                if "failed" in message:
                    break
        except (EOFError, protocol_errors.ProtocolError, OSError):
            if not events["stopping"].is_set():
                relay(
                    Service({"failed": f"the coordinator ended (exit status {coordinator.wait()})"})
                )
        events["ended"].set()
        # the processes are not kept waiting for a coordinator that is gone
        events["listening"].set()
        os.close(read_fd)

    threading.Thread(target=forward, daemon=True).start()
    return coordinator, events


def filtered() -> bool:
    """Whether this launcher runs under a seccomp filter (the run's): its processes then get theirs on top."""
    try:
        with open("/proc/self/status") as status:
            return any(line.split() == ["Seccomp:", "2"] for line in status)
    except OSError:
        return False


def child_command(
    folder: Path,
    spec: Spec,
    report_fd: int,
    release_fd: int,
    census_fd: int,
    module_path: str,
    separated: bool,
    filtered: bool,
) -> list[str]:
    """The process's command: grader.sandbox.launch applies its own Landlock ruleset and seccomp filter (no
    UNIX, datagram or System V sockets and memory: grader.sandbox.seccomp), then becomes it."""
    config: dict = {"cwd": str(folder)}
    if separated:
        config["landlock"] = {
            "read": list(spec.readable),
            "write": [str(folder), *spec.writable],
            "network": True,
        }
    if filtered:
        config["seccomp"] = {"profile": "process"}
    process = [
        sys.executable,
        "-I",
        "-B",
        "-m",
        "grader.cluster.process",
        str(report_fd),
        str(release_fd),
        str(census_fd),
        module_path,
    ]
    return [*launched_with(config), *process]


def launched_with(config: dict) -> list[str]:
    """The command prefix that applies `config` (grader.sandbox.launch) to a process of the run, then runs it."""
    return [sys.executable, "-I", "-B", "-m", "grader.sandbox.launch", json.dumps(config), "--"]


def copy_output(fd: int, lock: threading.Lock) -> None:
    """A process's output, into the launcher's (the run's output file, which no process holds)."""
    while chunk := os.read(fd, 1 << 16):
        with lock:
            os.write(1, chunk)
    os.close(fd)


def pass_on_the_harness_word(hold_fd: int, census: list[int], let_go: threading.Event) -> None:
    """Each "census I" line from the harness, to process I; "go" (or the harness's end) lets every process go."""
    with os.fdopen(hold_fd, "rb", buffering=0) as hold:
        for line in hold:
            word, _, index = line.decode(errors="replace").strip().partition(" ")
            if word == "go":
                break
            if word == "census" and index.isdigit() and int(index) < len(census):
                try:
                    os.write(census[int(index)], b"1")
                except OSError:  # that process is gone
                    pass
    let_go.set()


@dataclass
class Child:
    """One process of the run, as the launcher started it."""

    index: int
    process: subprocess.Popen
    read_fd: int  # its reports
    census_fd: int  # the harness's word that it has looked at it
    copy: threading.Thread  # its output, into the launcher's


def start_process(
    index: int,
    task: Task,
    spec: Spec,
    release_r: int,
    module_path: str,
    output_lock: threading.Lock,
    separated: bool,
    own_filter: bool,
) -> Child:
    """Process `index`, in a folder of its own, its task still to come (on its stdin: serve())."""
    folder = Path.cwd() / f"process-{index}"
    folder.mkdir(mode=0o700)
    read_fd, write_fd = os.pipe()
    output_r, output_w = os.pipe()
    census_r, census_w = os.pipe()
    env = {
        **os.environ,
        "HOME": str(folder),
        "TMPDIR": str(folder),
        "SHARDLAB_PROCESS": str(index),
        "XLA_FLAGS": f"--xla_force_host_platform_device_count={task.devices}",
        "JAX_PLATFORMS": "cpu",
        "JAX_COORDINATOR_BIND_ADDRESS": UNUSED_BIND_ADDRESS,
    }
    child = subprocess.Popen(
        child_command(
            folder, spec, write_fd, release_r, census_r, module_path, separated, own_filter
        ),
        stdin=subprocess.PIPE,
        stdout=output_w,
        stderr=output_w,
        cwd=folder,
        env=env,
        pass_fds=(write_fd, release_r, census_r),
    )
    for fd in (write_fd, output_w, census_r):
        os.close(fd)
    copy = threading.Thread(target=copy_output, args=(output_r, output_lock), daemon=True)
    copy.start()
    return Child(index, child, read_fd, census_w, copy)


def serve(
    child: Child,
    task: Task,
    coordinator_address: str,
    listening: threading.Event,
    relay: Relay,
    unfinished: threading.Semaphore,
) -> None:
    """Hand `child` its task once the coordinator listens, relay its reports until it has finished (then
    `unfinished` is released), and its exit status once it has ended."""
    listening.wait(LISTEN_SECONDS)
    try:
        child.process.stdin.write(
            messages.encode(msgspec.structs.replace(task, coordinator=coordinator_address))
        )
        child.process.stdin.close()
    except OSError:  # it died before reading its task
        pass
    try:
        while (message := framing.receive(child.read_fd, REPORT_LIMIT)).get("finished") is not True:
            relay(Reported(child.index, message))
    except (EOFError, protocol_errors.ProtocolError, RecursionError, OSError):
        pass
    unfinished.release()
    try:
        while os.read(child.read_fd, 1 << 16):  # after "finished" nothing more is relayed
            pass
    except OSError:
        pass
    os.close(child.read_fd)
    relay(Exited(child.index, child.process.wait()))


def main(argv: list[str]) -> int:
    report_fd, hold_fd, module_path = int(argv[0]), int(argv[2]), argv[3]
    with os.fdopen(int(argv[1]), "rb") as given:
        spec = messages.decode(given.read(), Spec)
    relay = Relay(report_fd)
    coordinator_address = f"127.0.0.1:{free_port()}"
    relay(Coordinator(coordinator_address))
    separated = landlock_abi() >= 1
    relay(Separated(separated))
    own_filter = filtered()
    coordinator, events = start_coordinator(coordinator_address, len(spec.tasks), relay)

    # A process that has finished waits for the others before it exits: a process that leaves early
    # takes its devices from the others' last collectives.
    release_r, release_w = os.pipe()
    unfinished = threading.Semaphore(0)
    output_lock = threading.Lock()
    children = []
    for index, task in enumerate(spec.tasks):
        children.append(
            start_process(
                index, task, spec, release_r, module_path, output_lock, separated, own_filter
            )
        )
        relay(Started(index, children[-1].process.pid))

    let_go = threading.Event()
    threading.Thread(
        target=pass_on_the_harness_word,
        args=(hold_fd, [c.census_fd for c in children], let_go),
        daemon=True,
    ).start()
    threads = [
        threading.Thread(
            target=serve,
            args=(child, task, coordinator_address, events["listening"], relay, unfinished),
        )
        for child, task in zip(children, spec.tasks)
    ]
    for thread in threads:
        thread.start()
    for _ in threads:
        unfinished.acquire()
    # Every process has finished (or died): the gate reported each request before the service saw it.
    relay(Finished())
    let_go.wait(HOLD_SECONDS)  # the harness's word (or its end)
    os.close(release_w)
    for thread in threads:
        thread.join()
    # the processes' last words (a daemon of theirs may hold the pipe: not for long)
    for child in children:
        child.copy.join(timeout=2)
    events["stopping"].set()
    coordinator.kill()
    coordinator.wait()
    # what it reported last is relayed before the launcher goes
    events["ended"].wait(COMPLETE_SECONDS)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
