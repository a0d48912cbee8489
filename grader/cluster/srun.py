"""A multi-process run (ex12) as one srun step: `shardlab check --launcher srun`, on a Slurm cluster.

The harness starts `srun --ntasks=P ...`, whose tasks are the run's processes: each task's index is its
SLURM_PROCID, its host devices are forced in its environment (XLA_FLAGS, JAX_PLATFORMS=cpu, set before
it imports jax), and it runs the exercise's driver like a local process (grader.cluster.process),
except that its join step calls the student's initialize(None, None, None): the reference's
jax.distributed.initialize() then reads Slurm's environment itself (the coordinator is the step's first
node, at a port jax derives from the job id; the process count and index from SLURM_NTASKS and
SLURM_PROCID), as on a real cluster. From inside an allocation (salloc, sbatch) the step uses it;
outside one srun asks for its own.

Reports travel over TCP: the harness listens, and each task connects back to srun's own host as srun
tells it (SLURM_SRUN_COMM_HOST: the compute nodes reach srun there for its own I/O, so they reach the
harness beside it), says who it is with the run's token, receives its task (only its own inputs) and
sends the same length-prefixed reports as a local process (grader.worker.framing), then waits for the
harness's word that every process has finished. A socket rather than the tasks' output through srun:
frames of any size (srun --label cuts long lines), never mixed with what the student's code prints,
and received the moment they are sent (the barrier check times them). The tasks' output goes, labelled
with their index, into the run's output.

What this route cannot see: there is no coordinator of the grader's, so no join is observed
(ClusterRun.observed_joins is False); each process reports its own devices, and the checks judge the
answers alone. It is the student's own check, never grading: with isolation run_cluster refuses it.

    python -B -m grader.cluster.srun HOST:PORT MODULE_PATH     (one task; the token in its environment)

A run that hangs is stopped like a local one (grader.cluster.events, the same loop); stopping it kills the
step's tasks through Slurm (scancel --signal=KILL JOB.STEP) and then srun, so nothing of it is left.
"""

from __future__ import annotations

import hmac
import math
import os
import queue
import re
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

import psutil

from grader.cluster import messages
from grader.cluster.driver import Driver
from grader.cluster.events import Launch
from grader.cluster.messages import DriverSource, Hello, Reported, Task
from grader.cluster.run import REPORT_BYTES, RUN_VARIABLE, ClusterRun
from grader.core.errors import ShardlabError
from grader.sandbox import processor_wait
from grader.worker import codec, framing, protocol_errors

NOT_WITH_ISOLATION = (
    "--launcher srun cannot grade: under srun there is no coordinator of the grader's to see each process "
    "join and no sandbox around the processes, and those are what make a grading verdict trustworthy. Use it "
    "with `shardlab check` or a plain pytest run, not with --isolate"
)
TOKEN_VARIABLE = "SHARDLAB_CLUSTER_TOKEN"
# One CPU per task, several tasks per CPU allowed: the processes' devices are XLA host devices (threads)
# doing a few tiny collectives, and the hidden configuration's 4 tasks must fit a small allocation.
CPUS_PER_TASK = 1
HELLO_BYTES = 4096  # a task's first message: who it is
TASK_BYTES = 16 << 20  # the task the harness sends: the driver's source and this process's inputs
CONNECT_SECONDS = 60.0  # how long a task tries to reach the harness
SETTLE_SECONDS = 3.0  # once the tasks on this host are killed, how long srun may take to end
SCANCEL_SECONDS = 20.0  # how long scancel may take
STOP_SECONDS = 15.0  # then how long srun may take to end once its tasks are killed
DRAIN_SECONDS = 2.0  # once srun has ended, how long the last reports may take to be read
OUTPUT_LINES = 20  # srun's own last lines, in the message of a run it could not start


class LauncherRefused(ShardlabError, ValueError):
    """--launcher srun asked for where it cannot apply (grading)."""


class SrunMissing(ShardlabError, FileNotFoundError):
    """No srun on the PATH."""


def srun_command(
    run: ClusterRun, module_path: Path, address: str, limit_seconds: float
) -> list[str]:
    """One step of `run.processes` tasks; outside an allocation, a job of its own that outlives the
    harness by a minute at most."""
    own_job = (
        []
        if "SLURM_JOB_ID" in os.environ
        else [f"--time={math.ceil(limit_seconds / 60) + 1}", "--job-name=shardlab-cluster"]
    )
    return [
        "srun",
        f"--ntasks={run.processes}",
        f"--cpus-per-task={CPUS_PER_TASK}",
        "--overcommit",
        "--kill-on-bad-exit=1",
        "--label",
        "--export=ALL",
        *own_job,
        sys.executable,
        "-B",
        "-m",
        "grader.cluster.srun",
        address,
        str(module_path),
    ]


def srun_environment(run: ClusterRun, token: str) -> dict[str, str]:
    """The harness's environment (srun exports it to every task) with each task's host devices forced."""
    return {
        **os.environ,
        "XLA_FLAGS": f"--xla_force_host_platform_device_count={run.devices_per_process}",
        "JAX_PLATFORMS": "cpu",
        TOKEN_VARIABLE: token,
        RUN_VARIABLE: run.workdir,
    }


def task_exits(output: str, processes: int) -> dict[int, int]:
    """What srun said of each task that ended badly ("task 1: Exited with exit code 3", "tasks 0,2-3:
    Killed"): its exit status, or minus the signal that ended it."""
    signals = {signal.strsignal(s): -int(s) for s in signal.Signals if signal.strsignal(s)}
    exits = {}
    for tasks, how in re.findall(
        r"^srun: error: \S+: tasks? ([\d,-]+): (.+?)\s*$", output, re.MULTILINE
    ):
        code = re.fullmatch(r"Exited with exit code (\d+)", how)
        status = int(code[1]) if code else signals.get(how)
        for part in tasks.split(","):
            first, _, last = part.partition("-")
            if status is not None and first.isdigit() and (last or first).isdigit():
                exits.update(
                    {i: status for i in range(int(first), int(last or first) + 1) if i < processes}
                )
    return exits


@dataclass(frozen=True)
class Done:
    """The task has finished, or gone."""

    process: int


@dataclass(frozen=True)
class Closed:
    """The task's connection has closed."""

    process: int


@dataclass(frozen=True)
class SrunEnded:
    code: int


class Connections:
    """The tasks that reached the harness: one connection per process, each served by a thread of its own
    that puts what the task says on `events`: its Hello, its reports (messages.Reported), Done when it has
    finished or gone, Closed once its connection has closed."""

    def __init__(self, run: ClusterRun, driver: Driver, token: str, events: queue.Queue):
        self.run, self.driver, self.token, self.events = run, driver, token, events
        self.lock = threading.Lock()
        self.sockets: dict[int, socket.socket] = {}
        self.threads: list[threading.Thread] = []
        self.listener = (
            socket.create_server(("", 0), family=socket.AF_INET6, dualstack_ipv6=True)
            if socket.has_dualstack_ipv6()
            else socket.create_server(("", 0))
        )
        self.port = self.listener.getsockname()[1]

    def accept(self) -> None:
        while True:
            try:
                connection, _ = self.listener.accept()
            except OSError:  # the listener is closed: the run is over
                return
            thread = threading.Thread(target=self._serve, args=(connection,), daemon=True)
            with self.lock:
                self.threads.append(thread)
            thread.start()

    def _task(self, process: int) -> Task:
        return Task(
            process,
            self.run.processes,
            self.run.devices_per_process,
            None,
            codec.encode(self.run.inputs.for_process(process)),
            DriverSource(self.driver.source, f"<driver {self.driver.path.name}>"),
        )

    def _serve(self, connection: socket.socket) -> None:
        fd = connection.fileno()
        try:
            hello = messages.receive(fd, Hello, HELLO_BYTES)
            process = hello.process
            if not (
                hmac.compare_digest(hello.token.encode(), self.token.encode())
                and 0 <= process < self.run.processes
            ):
                raise protocol_errors.ProtocolError("not a task of this run")
            with self.lock:
                if process in self.sockets:
                    raise protocol_errors.ProtocolError(f"process {process} is already connected")
                self.sockets[process] = connection
            self.events.put(hello)
            messages.send(fd, self._task(process))
        except (EOFError, protocol_errors.ProtocolError, RecursionError, OSError, AttributeError):
            connection.close()
            return
        try:
            while (message := framing.receive(fd, REPORT_BYTES)).get("finished") is not True:
                self.events.put(Reported(process, message))
        except (EOFError, protocol_errors.ProtocolError, RecursionError, OSError):
            pass
        self.events.put(Done(process))
        try:
            while os.read(fd, 1 << 16):  # after "finished" nothing more is read
                pass
        except OSError:
            pass
        self.events.put(Closed(process))

    def release(self) -> None:
        """Every process has finished: each may leave."""
        with self.lock:
            for connection in self.sockets.values():
                try:
                    connection.send(b"1")
                except OSError:
                    pass

    def close(self) -> None:
        self.listener.close()
        with self.lock:
            for connection in self.sockets.values():
                try:
                    connection.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
                connection.close()

    def join(self, seconds: float) -> None:
        deadline = time.monotonic() + seconds
        with self.lock:
            threads = list(self.threads)
        for thread in threads:
            thread.join(timeout=max(0.0, deadline - time.monotonic()))


def _kill_here(pids: list[int], workdir: str) -> None:
    """The run's tasks on this host, by the pids they gave, each checked to be one (its environment names
    the run): at once, whatever Slurm is doing with the step. Slurm may be slow to: a step that srun is
    already ending (--kill-on-bad-exit) got SIGTERM, which jax's preemption notifier catches, and gets
    SIGKILL only after the cluster's KillWait (30 s by default), scancel's word waiting behind it."""
    for pid in pids:
        try:
            task = psutil.Process(pid)
            if task.environ().get(RUN_VARIABLE) == workdir:
                task.kill()
        except psutil.Error:
            pass


def _stop(srun: subprocess.Popen, step: str | None, here: list[int], workdir: str) -> None:
    """Kill the step's tasks: those on this host directly, the others through Slurm (they are slurmstepd's
    children, on whatever nodes); then srun (SIGTERM cancels a job it is still waiting for), then whatever
    is left of srun's process group."""
    _kill_here(here, workdir)
    try:
        srun.wait(timeout=SETTLE_SECONDS)  # every task was here: srun ends at once
    except subprocess.TimeoutExpired:
        if step is not None:
            try:
                subprocess.run(
                    ["scancel", "--signal=KILL", "--quiet", step],
                    stdin=subprocess.DEVNULL,
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL,
                    timeout=SCANCEL_SECONDS,
                )
            except (OSError, subprocess.TimeoutExpired):
                pass
            try:
                srun.wait(timeout=STOP_SECONDS)
            except subprocess.TimeoutExpired:
                pass
    if srun.poll() is None:
        srun.terminate()
        try:
            srun.wait(timeout=STOP_SECONDS)
        except subprocess.TimeoutExpired:
            pass
    try:
        os.killpg(srun.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    srun.wait()


class SrunLaunch(Launch):
    """The run as one srun step, its tasks' reports over TCP (Connections)."""

    def __init__(self, run: ClusterRun, driver: Driver, module_path: Path, limit_seconds: float):
        if shutil.which("srun") is None:
            raise SrunMissing(
                "--launcher srun needs Slurm's srun on the PATH (run it on a cluster's login node, "
                "or inside an allocation)"
            )
        super().__init__(run)
        self.module_path, self.limit_seconds = module_path, limit_seconds
        self.token = secrets.token_hex(16)
        self.connections = Connections(run, driver, self.token, self.events)
        threading.Thread(target=self.connections.accept, daemon=True).start()
        self.step: str | None = None  # "JOB.STEP", as the tasks said
        self.done: set[int] = set()
        self.code: int | None = None  # srun's exit status, once it has ended
        self.said = ""  # srun's word before the harness stops it
        self.here: list[int] = []  # the pids of the tasks on this host
        self.greeted: set[int] = set()  # the processes that reached the harness

    def start(self, output: BinaryIO) -> None:
        self.output_name = output.name
        address = f"{socket.gethostname()}:{self.connections.port}"
        self.srun = subprocess.Popen(
            srun_command(self.run, self.module_path, address, self.limit_seconds),
            stdin=subprocess.DEVNULL,
            stdout=output,
            stderr=subprocess.STDOUT,
            env=srun_environment(self.run, self.token),
            start_new_session=True,
        )
        threading.Thread(
            target=lambda: self.events.put(SrunEnded(self.srun.wait())), daemon=True
        ).start()

    def handle(self, event, answered: str | None) -> bool:
        if isinstance(event, SrunEnded):
            self.code = event.code
            return True
        if isinstance(event, Hello):
            self.greeted.add(event.process)
            if event.host == socket.gethostname():
                self.here.append(event.pid)
            if self.step is None and str(event.job).isdigit() and str(event.step).isdigit():
                self.step = f"{event.job}.{event.step}"
        elif isinstance(event, Done):
            self.done.add(event.process)
            if len(self.done) == self.run.processes:
                self.connections.release()
        return False

    def pids(self) -> list[int]:
        # the tasks on this host are slurmstepd's, not srun's: the rest are other hosts' to count
        return [*processor_wait.tree(self.srun.pid), *self.here]

    def ended(self) -> bool:
        if self.code is None:
            return False
        self.connections.join(DRAIN_SECONDS)  # the tasks are gone: their last reports are read
        return True

    def stop(self) -> None:
        self.said = Path(self.output_name).read_bytes().decode(errors="replace")
        self.connections.close()
        if self.srun.poll() is None:
            _stop(self.srun, self.step, self.here, self.run.workdir)

    def concluded(self) -> None:
        run, said = self.run, self.said
        # how tasks ended, not by the harness's hand
        run.exits.update(task_exits(said, run.processes))
        # srun failed, or still waited
        if not self.greeted and (self.code is None or self.code != 0):
            lines = [line for line in said.splitlines() if line.startswith("srun:")][-OUTPUT_LINES:]
            run.launch_error = (
                (
                    f"srun ended ({self.code}) before any process started"
                    if self.code is not None
                    else f"srun had started no process after {run.stopped_after:.0f} s and was stopped"
                )
                + ": "
                + ("\n".join(lines) or "it said nothing")
            )


# ---- in each task ------------------------------------------------------------------------------------


def main(argv: list[str]) -> int:
    from grader.cluster.process import run_and_report

    host, _, port = argv[0].rpartition(":")
    module_path = Path(argv[1])
    # srun's own address, as the nodes reach it
    host = os.environ.get("SLURM_SRUN_COMM_HOST") or host
    connection = socket.create_connection((host, int(port)), timeout=CONNECT_SECONDS)
    connection.settimeout(None)
    fd = connection.fileno()
    messages.send(
        fd,
        Hello(
            os.environ.pop(TOKEN_VARIABLE, ""),
            int(os.environ["SLURM_PROCID"]),
            os.environ.get("SLURM_JOB_ID"),
            os.environ.get("SLURM_STEP_ID"),
            socket.gethostname(),
            os.getpid(),
        ),
    )
    import jax  # noqa: F401  (its devices forced by the environment srun gave this task)

    task = messages.receive(fd, Task, TASK_BYTES)
    # Released when every process has finished (or the harness is gone).
    run_and_report(task, module_path, fd, lambda: connection.recv(1))


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
