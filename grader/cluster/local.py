"""The local launcher of a multi-process run: one sandbox (grader.sandbox.confinement) holding the launcher
(grader.cluster.launcher), the grader's coordinator and the processes, whose word the launcher relays.

After a census step (the join, the proof) has returned in a process, the harness looks at the TCP sockets it
holds (grader.cluster.census), then tells the launcher, which lets that process go on: what the harness sees
is the process as the step left it."""

from __future__ import annotations

import os
import queue
import sys
import threading
from pathlib import Path
from typing import BinaryIO

from grader.cluster import census, messages
from grader.cluster.census import Connection
from grader.cluster.driver import Driver
from grader.cluster.events import Launch
from grader.cluster.messages import (
    Coordinator,
    DriverSource,
    Exited,
    Finished,
    Separated,
    Service,
    Spec,
    Started,
    Task,
)
from grader.cluster.recording import observe_service
from grader.cluster.run import REPORT_BYTES, ClusterRun
from grader.sandbox import confinement, processor_wait
from grader.worker import codec, protocol_errors


def spec(run: ClusterRun, driver: Driver, module_path: Path) -> Spec:
    """What the launcher is given: each process's task, the driver every process runs, and what each
    process may read and write."""
    steps = tuple(step for step in (run.join_step, run.proof_step) if step is not None)
    source = DriverSource(driver.source, f"<driver {driver.path.name}>")
    tasks = tuple(
        Task(
            i,
            run.processes,
            run.devices_per_process,
            None,
            codec.encode(run.inputs.for_process(i)),
            source,
            steps,
        )
        for i in range(run.processes)
    )
    readable = (
        *confinement.SYSTEM_PATHS,
        *confinement.python_paths(),
        str(module_path.parent),
        "/proc",
        "/sys",
        *confinement.DEVICES[2:],
    )
    return Spec(tasks, readable, tuple(confinement.DEVICES[:2]))


def read_relay(fd: int, into: queue.Queue) -> None:
    """The launcher's relay onto `into`, then None once it ends (or breaks a frame)."""
    try:
        while True:
            try:
                into.put(messages.receive(fd, messages.RELAYED, REPORT_BYTES))
            # not a message of the relay: ignored, as it can only cost the student
            except messages.Malformed:
                pass
    except (EOFError, protocol_errors.ProtocolError, RecursionError, OSError):
        pass
    into.put(None)


def look(
    run: ClusterRun, process: int, sandbox: confinement.ConfinedProcess
) -> list[Connection] | str:
    """The harness's own look at the TCP sockets `process` holds, as one of its steps has just returned; or
    why the harness could not look."""
    pid = run.sandbox_pids.get(process)
    launcher = census.launcher_pid(sandbox.pid)
    if pid is None or launcher is None:
        return (
            "the grader found no launcher in the sandbox"
            if launcher is None
            else "the launcher named no pid"
        )
    host = census.host_pid(launcher, pid)
    if host is None:
        return f"the grader found no process of pid {pid} among the launcher's children"
    try:
        return census.tcp_connections(host)
    except OSError as exc:
        return f"the grader could not see its connections ({exc.strerror or exc})"


def connected(run: ClusterRun, held: list[Connection]) -> str | None:
    port = run.coordinator.rpartition(":")[2]
    return census.connected(held, int(port)) if port.isdigit() else "the run had no coordinator"


class LocalLaunch(Launch):
    def __init__(
        self,
        run: ClusterRun,
        driver: Driver,
        module_path: Path,
        level: confinement.Isolation,
        limits: confinement.WorkerLimits | None,
    ):
        super().__init__(run)
        self.driver, self.module_path, self.level, self.limits = driver, module_path, level, limits
        self.proved: set[int] = set()  # processes the harness has looked at after the proof step
        self.told: set[int] = set()  # of those, the ones told to go on

    def start(self, output: BinaryIO) -> None:
        workdir = Path(self.run.workdir)
        report_r, report_w = os.pipe()
        tasks_r, self.tasks_w = os.pipe()
        # The harness's word: a census taken, or the processes may leave (grader.cluster.launcher).
        hold_r, self.hold_w = os.pipe()
        env = confinement.sandbox_environment(workdir, JAX_PLATFORMS="cpu")
        argv = [
            sys.executable,
            "-I",
            "-B",
            "-m",
            "grader.cluster.launcher",
            str(report_w),
            str(tasks_r),
            str(hold_r),
            str(self.module_path),
        ]
        self.sandbox = confinement.spawn_confined(
            argv,
            level=self.level,
            workdir=workdir,
            readable=[self.module_path.parent],
            env=env,
            pass_fds=(report_w, tasks_r, hold_r),
            stdout=output,
            network=True,
            limits=self.limits or confinement.WorkerLimits(),
        )
        for fd in (report_w, tasks_r, hold_r):
            os.close(fd)
        self.report_r = report_r
        self.reader = threading.Thread(target=read_relay, args=(report_r, self.events), daemon=True)
        self.reader.start()

    def begin(self) -> None:
        try:
            os.write(self.tasks_w, messages.encode(spec(self.run, self.driver, self.module_path)))
        except BrokenPipeError:
            pass
        os.close(self.tasks_w)

    def tell(self, word: str) -> None:
        """ "census I" (process I may go on) or "go" (every process may leave): grader.cluster.launcher."""
        try:
            os.write(self.hold_w, f"{word}\n".encode())
        except OSError:  # the launcher is gone
            pass

    def handle(self, event, answered: str | None) -> bool:
        run = self.run
        if event is None:
            return True
        if isinstance(event, Finished):  # every report before it is recorded, every census taken
            self.tell("go")
            return False
        if isinstance(event, Coordinator):
            run.coordinator = event.address[:100]
        elif isinstance(event, Separated):
            run.separated = event.landlock
        elif isinstance(event, Service):
            observe_service(run, event.report)
        elif isinstance(event, (Started, Exited)) and 0 <= event.process < run.processes:
            if isinstance(event, Started):
                run.sandbox_pids[event.process] = event.pid
            else:
                run.exits[event.process] = event.code
        elif (
            answered is not None
            and answered in (run.join_step, run.proof_step)
            and (event.process, answered) not in run.sockets
        ):
            self.census(event.process, answered)
        # After the proof step every process waits until the harness has looked at all of them: the
        # gloo connections between two processes are then seen while both hold them.
        if self.proved - self.told and all(
            p in self.proved or p in run.exits or (p, run.proof_step) in run.reports
            for p in range(run.processes)
        ):
            for p in sorted(self.proved - self.told):
                self.tell(f"census {p}")
            self.told |= self.proved
        return False

    def census(self, process: int, step: str) -> None:
        """Look at `process`, which waits for it; after its join step it goes on at once."""
        run = self.run
        held = look(run, process, self.sandbox)
        if step == run.join_step:
            run.connection[process] = held if isinstance(held, str) else connected(run, held)
        if not isinstance(held, str):
            run.sockets[(process, step)] = held
        if step == run.join_step:
            self.tell(f"census {process}")
        else:
            self.proved.add(process)

    def pids(self) -> list[int]:
        return processor_wait.tree(self.sandbox.pid)

    def stop(self) -> None:
        if filled := self.sandbox.filled():  # seen while its processes still hold its /tmp
            self.run.filled_disk = (filled, (self.limits or confinement.WorkerLimits()).disk_bytes)
        self.sandbox.kill_tree()  # whatever is left of the run, the sandbox's loopback with it
        self.reader.join(timeout=10)
        os.close(self.report_r)
        os.close(self.hold_w)
