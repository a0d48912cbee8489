"""The harness's side of a multi-process run (ex12): the student's module in several processes.

One sandbox (grader.worker.confinement) holds a launcher (grader.worker.cluster_launch), the grader's
coordinator (grader.worker.cluster_coordinator) and the P processes (grader.worker.cluster_process), each
with its own forced host devices and a folder and Landlock ruleset of its own, joined by the student's
join step over the sandbox's network (a loopback of its own, so parallel grading jobs never meet on a
port). What the processes do is the exercise's driver (grader.worker.cluster_driver): the harness draws
each process's inputs with it, at random, per run, gives each process only its own, and hands every
process the driver's source; it reads what each reports, and kills the whole tree when the run ends or
when no process has reported anything for `quiet_seconds`. Nothing here knows an exercise's functions.

What the verdicts rest on. A process's reports are data from the student's side (the student's code can
rewrite the driver and the reporting code), so they pass only by being the right answer, and the harness
checks what it can see itself (ClusterRun.not_joined): that every process joined jax's coordination
service, which the grader runs and observes (every process registered, its jax published devices of its
own there), and held its own connection to it when its join step returned (read from /proc by the
harness). The processes share no writable file, so what one learned of another's inputs came over the
network; the exercise's checks judge the answers against the draw (ClusterRun.inputs).

launcher="srun" (`shardlab check --launcher srun`, never with isolation): the processes are one srun step's
tasks instead (grader.worker.cluster_srun), each joining through jax's own reading of Slurm's environment.
There is no coordinator of the grader's there, so no join is observed (ClusterRun.observed_joins is False):
each process's devices are its own report, and the answers alone are judged (a process that never joined
reports a process_count of 1).
"""

from __future__ import annotations

import json
import os
import queue
import shutil
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import psutil

from grader.core.errors import ShardlabError
from grader.course.implementations import ImplementationImportError, NotAttempted
from grader.worker import cluster_census, confinement, protocol
from grader.worker.cluster_driver import DrawnInputs, Driver
from grader.worker.failures import WorkerCrashed, WorkerTimeout, describe_death, remote_exception

# No report from any process for this long, once every process has started: the run hangs. An honest
# run's longest silence after that is the processes joining, about a second; 10 s keeps a hang in both
# of ex12's configurations within 30 s (grader.harness.time_limits).
QUIET_SECONDS = 10.0
# Until then the processes import jax, the grader's own start-up: 1 to 4 s here with two grading jobs on
# two cores, far more when several gradings share them.
STARTUP_SECONDS = 60.0
LIMIT_SECONDS = 120.0    # the whole run, whatever it reports
OUTPUT_CHARS = 8000
REPORT_BYTES = 4 << 20   # the largest message relayed from a run (a report holds a few small arrays)
RUN_VARIABLE = "SHARDLAB_CLUSTER_RUN"   # in every process of a srun run: its run's folder (ClusterRun.left_behind)


class ClusterTimeout(WorkerTimeout):
    """The run was stopped before this process finished this step."""


class ClusterCrashed(WorkerCrashed):
    """This process died before it finished this step."""


class NotJoined(ShardlabError, AssertionError):
    """The step returned, but the grader did not see this process join the others."""


@dataclass
class ClusterRun:
    processes: int
    devices_per_process: int
    steps: tuple[str, ...]                 # the driver's, the join first
    inputs: DrawnInputs                    # the driver's draw for this run: each process got only its own part
    isolation: str
    reports: dict[tuple[int, str], dict] = field(default_factory=dict)   # (process, step) -> its answer
    started: dict[int, str] = field(default_factory=dict)   # the last step each process began
    exits: dict[int, int] = field(default_factory=dict)
    ready: set[int] = field(default_factory=set)   # processes that imported jax (before the student's module)
    import_error: str | None = None
    stopped_after: float | None = None     # seconds, when the run was killed for hanging
    seconds: float = 0.0
    output: str = ""                       # what the processes printed, truncated
    coordinator: str = ""                  # "127.0.0.1:port", as the launcher chose it
    workdir: str = ""                      # the run's folder: each process works in a folder of its own in it
    seen: dict[tuple[int, str, str], float] = field(default_factory=dict)   # (process, step, "started" or
    #                                        "done") -> when the harness received it, in seconds from the start
    # What the grader saw itself, rather than a process's word:
    separated: bool = False                # each process had a Landlock ruleset of its own (no common file)
    sandbox_pids: dict[int, int] = field(default_factory=dict)   # process -> its pid in the sandbox (the launcher's)
    registered: bool = False               # the grader's coordinator saw every process register
    published: dict[int, list[int]] = field(default_factory=dict)   # process -> the global ids of the devices its
    #                                        jax published to the grader's coordinator
    connection: dict[int, str | None] = field(default_factory=dict)   # process -> None when the harness saw it
    #                                        hold a connection to the coordinator as its join step returned
    service_error: str | None = None       # the grader's coordinator failed (the grader's fault, not the student's)
    launcher: str = "local"                # or "srun" (grader.worker.cluster_srun)
    observed_joins: bool = True            # False under srun: no coordinator of the grader's, published is each
    #                                        process's own report and not_joined() sees nothing
    launch_error: str | None = None        # srun started no process: it failed, or waited too long (what it said)

    @property
    def join_step(self) -> str:
        return self.steps[0]

    def not_joined(self, process: int) -> str | None:
        """None when the grader saw `process` join the others through its coordinator, else why not (always
        None when the run had no coordinator of the grader's to watch: observed_joins is False)."""
        if not self.observed_joins:
            return None
        where = f"the coordinator at {self.coordinator}"
        seen = self.connection.get(process, f"its {self.join_step} never returned")
        if seen is not None:
            return f"process {process} was not connected to {where} when its {self.join_step} returned ({seen})"
        if not self.registered:
            return f"not every process registered with {where}"
        devices = self.published.get(process)
        if devices is None:
            return f"process {process}'s jax never published its devices to {where}"
        if len(devices) != self.devices_per_process:
            return (f"process {process}'s jax published {len(devices)} devices to {where}, "
                    f"not {self.devices_per_process}")
        return None

    def result(self, process: int, step: str):
        """What `step` returned in `process`; raises what it raised, or why it never finished, or
        NotJoined when the grader did not see the process join the others (nothing it returns counts then)."""
        if step not in self.steps:
            raise ValueError(f"{step!r} is not a step of this run's driver: {', '.join(self.steps)}")
        if self.import_error is not None:
            raise ImplementationImportError(self.import_error)
        report = self.reports.get((process, step))
        if report is not None and "error" in report:
            raise remote_exception(report["error"])
        reason = self.not_joined(process) if report is not None else None
        if self.service_error is not None and (report is None or reason is not None):
            raise ClusterCrashed(f"the grader's coordinator failed, so the run could not be observed: "
                                 f"{self.service_error}")
        if report is None and self.launch_error is not None:
            raise (ClusterCrashed if self.stopped_after is None else ClusterTimeout)(self.launch_error)
        if report is None:
            raise self._unfinished(process, step)
        if reason is not None:
            raise NotJoined(f"{reason}: the grader did not see process {process} join the others, so nothing it "
                            f"reports counts ({self.join_step} must join them with jax.distributed.initialize)")
        return report["ok"]

    def left_behind(self) -> tuple[list[psutil.Process], list]:
        """What of the finished run is still there: its processes (each worked in the run's folder) and
        the sockets open on its coordinator's port. Both empty once run_cluster has returned."""
        inside = self.workdir + os.sep

        def of_run(info: dict) -> bool:   # under srun, the tasks are told their run (they work elsewhere)
            if self.launcher == "srun":
                return (info["environ"] or {}).get(RUN_VARIABLE) == self.workdir
            return info["cwd"] == self.workdir or (info["cwd"] or "").startswith(inside)

        attributes = ["cmdline", "environ" if self.launcher == "srun" else "cwd"]
        processes = [p for p in psutil.process_iter(attributes) if of_run(p.info)
                     and any("grader.worker.cluster" in part for part in p.info["cmdline"] or ())]
        port = int(self.coordinator.rsplit(":", 1)[1]) if self.coordinator else None
        sockets = [c for c in psutil.net_connections("tcp") if c.laddr and c.laddr.port == port
                   and c.status in (psutil.CONN_LISTEN, psutil.CONN_ESTABLISHED)]
        return processes, sockets

    def seconds_in(self, process: int, step: str) -> float:
        return float(self.reports[(process, step)]["seconds"])

    def _unfinished(self, process: int, step: str) -> BaseException:
        join = self.reports.get((process, self.join_step))
        if step != self.join_step and join is not None and "error" in join:
            failure = remote_exception(join["error"])   # a stub's NotImplementedError stays "not attempted"
            failure.args = (f"process {process} never got to {step}: {self.join_step} raised "
                            f"{type(failure).__name__}: {failure}",)
            return failure
        where = self.started.get(process)
        code = self.exits.get(process)
        if code not in (None, 0):
            return ClusterCrashed(f"process {process} ended during {where or 'start-up'}(), before {step}() "
                                  f"finished: {describe_death(code)}")
        if self.stopped_after is not None:
            return ClusterTimeout(
                f"the run of {self.processes} processes was stopped after {self.stopped_after:.0f} s: process "
                f"{process} " + (f"was still in {where}()" if where else "had not started yet")
                + f" and never finished {step}() (a collective that not every process calls waits forever)")
        return ClusterCrashed(f"process {process} ended without reporting {step}()")


def _spec(run: ClusterRun, driver: Driver, module_path: Path) -> bytes:
    """What the launcher is given: each process's task, the driver every process runs, and what each
    process may read and write."""
    tasks = [{"process_id": i, "processes": run.processes, "devices": run.devices_per_process,
              "inputs": protocol.encode(run.inputs.for_process(i))} for i in range(run.processes)]
    readable = [*confinement.SYSTEM_PATHS, *confinement.python_paths(), str(module_path.parent), "/proc", "/sys",
                *confinement.DEVICES[2:]]
    return json.dumps({"tasks": tasks, "driver": {"source": driver.source, "name": f"<driver {driver.path.name}>"},
                       "readable": readable, "writable": list(confinement.DEVICES[:2])}).encode()


def _read_reports(fd: int, into: queue.Queue) -> None:
    try:
        while True:
            into.put(protocol.receive(fd, REPORT_BYTES))
    except (EOFError, protocol.ProtocolError, RecursionError, OSError):
        pass
    into.put(None)


def _observe_service(run: ClusterRun, message: dict) -> None:
    """A report of the grader's coordinator (relayed by the launcher)."""
    if message.get("registered") is True:
        run.registered = True
    elif isinstance(message.get("failed"), str) and not run.registered and run.service_error is None:
        run.service_error = message["failed"][:500]
    process, devices = message.get("topology"), message.get("devices")
    if (type(process) is int and 0 <= process < run.processes and message.get("node") == process
            and isinstance(devices, list) and all(type(d) is int for d in devices)):
        run.published[process] = devices


def _record(run: ClusterRun, raw: dict, when: float, sandbox: confinement.ConfinedProcess | None) -> None:
    """One relayed message, checked: anything malformed is ignored (it can only cost the student). Without
    a sandbox (srun) no census is taken."""
    if isinstance(raw.get("coordinator"), str):
        run.coordinator = raw["coordinator"][:100]
        return
    if isinstance(raw.get("separated"), bool):
        run.separated = raw["separated"]
        return
    if isinstance(raw.get("service"), dict):
        _observe_service(run, raw["service"])
        return
    process = raw.get("process")
    if type(process) is not int or not 0 <= process < run.processes:
        return
    if "exit" in raw:
        if type(raw["exit"]) is int:
            run.exits[process] = raw["exit"]
        return
    if "pid" in raw:
        if type(raw["pid"]) is int:
            run.sandbox_pids[process] = raw["pid"]
        return
    try:
        message = protocol.decode(raw.get("report"))
    except (protocol.ProtocolError, TypeError, ValueError, RecursionError):
        return
    if not isinstance(message, dict):
        return
    if message.get("ready") is True:
        run.ready.add(process)
        return
    devices = message.get("devices")
    if not run.observed_joins and isinstance(devices, list) and all(type(d) is int for d in devices):
        run.published[process] = devices   # its own word: only where no coordinator of the grader's saw them
        return
    if isinstance(message.get("import_error"), str) and run.import_error is None:
        run.import_error = message["import_error"]
    step = message.get("step")
    if step not in run.steps:
        return
    if message.get("started") is True:
        run.started[process] = step
        run.seen[(process, step, "started")] = when
    elif ("ok" in message or isinstance(message.get("error"), dict)) and isinstance(message.get("seconds"), float):
        run.reports[(process, step)] = message
        run.seen[(process, step, "done")] = when
        if step == run.join_step and "ok" in message and process not in run.connection and sandbox is not None:
            run.connection[process] = _connection(run, process, sandbox)


def _connection(run: ClusterRun, process: int, sandbox: confinement.ConfinedProcess) -> str | None:
    """The harness's own look, as the process's join step has just returned: None when it holds a
    connection to the coordinator, else what the harness saw."""
    pid = run.sandbox_pids.get(process)
    launcher = cluster_census.launcher_pid(sandbox.pid)
    if pid is None or launcher is None:
        return "the grader found no launcher in the sandbox" if launcher is None else "the launcher named no pid"
    host = cluster_census.host_pid(launcher, pid)
    if host is None:
        return f"the grader found no process of pid {pid} among the launcher's children"
    port = run.coordinator.rpartition(":")[2]
    return cluster_census.connected_to(host, int(port)) if port.isdigit() else "the run had no coordinator"


def _let_go(hold_w: int) -> None:
    try:
        os.write(hold_w, b"1")
    except OSError:   # the launcher is gone
        pass


def run_cluster(driver: Driver, module_path: Path, *, processes: int = 2, devices_per_process: int = 4,
                isolation: confinement.Isolation | None = None, quiet_seconds: float = QUIET_SECONDS,
                limit_seconds: float = LIMIT_SECONDS, scratch: Path | None = None,
                launcher: str = "local") -> ClusterRun:
    """Run the student's module in `processes` processes, each running `driver` (a course's driver, never a
    submission's), and collect what each reports. isolation None: a plain process tree of its own (a
    student's `shardlab check`). launcher "srun": one srun step's tasks (grader.worker.cluster_srun), never
    with isolation."""
    from grader.worker import cluster_srun

    if launcher not in ("local", "srun"):
        raise ValueError(f"launcher must be 'local' or 'srun', not {launcher!r}")
    if launcher == "srun" and isolation is not None:
        raise cluster_srun.LauncherRefused(cluster_srun.NOT_WITH_ISOLATION)
    module_path = Path(module_path).resolve()
    if not module_path.is_file():
        raise NotAttempted(f"{module_path.name} is missing from {module_path.parent}")
    level = isolation or confinement.Isolation.PROCESS
    # Unseeded: no process can know another's inputs in advance.
    inputs = driver.draw(np.random.default_rng(), processes, devices_per_process)
    run = ClusterRun(processes, devices_per_process, driver.steps, inputs, level.value)
    workdir = Path(tempfile.mkdtemp(prefix="cluster-", dir=scratch))
    run.workdir = str(workdir)
    if launcher == "srun":
        run.launcher, run.observed_joins, run.separated = "srun", False, False
        return cluster_srun.run_srun(run, driver, module_path, quiet_seconds=quiet_seconds,
                                     limit_seconds=limit_seconds)
    output_path = workdir.parent / f"{workdir.name}.out"
    report_r, report_w = os.pipe()
    tasks_r, tasks_w = os.pipe()
    hold_r, hold_w = os.pipe()   # the harness's word that the processes may leave (cluster_launch)
    env = confinement.sandbox_environment(workdir, JAX_PLATFORMS="cpu")
    argv = [sys.executable, "-I", "-B", "-m", "grader.worker.cluster_launch", str(report_w), str(tasks_r),
            str(hold_r), str(module_path)]
    begun = time.monotonic()
    with open(output_path, "ab") as output:
        process = confinement.spawn_confined(argv, level=level, workdir=workdir, readable=[module_path.parent],
                                             env=env, pass_fds=(report_w, tasks_r, hold_r), stdout=output,
                                             network=True)
    for fd in (report_w, tasks_r, hold_r):
        os.close(fd)
    messages: queue.Queue = queue.Queue()
    reader = threading.Thread(target=_read_reports, args=(report_r, messages), daemon=True)
    reader.start()
    try:
        try:
            os.write(tasks_w, _spec(run, driver, module_path))
        except BrokenPipeError:
            pass
        os.close(tasks_w)
        while True:
            left = limit_seconds - (time.monotonic() - begun)
            try:
                silence = quiet_seconds if len(run.ready) == run.processes else max(quiet_seconds, STARTUP_SECONDS)
                raw = messages.get(timeout=max(0.0, min(silence, left)))
            except queue.Empty:
                run.stopped_after = time.monotonic() - begun
                break
            if raw is None:
                break
            if raw.get("finished") is True:   # every report before it is recorded, every census taken
                _let_go(hold_w)
                continue
            _record(run, raw, time.monotonic() - begun, process)
    finally:
        process.kill_tree()   # whatever is left of the run, the sandbox's loopback with it
        reader.join(timeout=10)
        os.close(report_r)
        os.close(hold_w)
        run.seconds = time.monotonic() - begun
        text = output_path.read_bytes().decode(errors="replace")
        run.output = text if len(text) <= OUTPUT_CHARS else text[-OUTPUT_CHARS:]
        output_path.unlink(missing_ok=True)
        shutil.rmtree(workdir, ignore_errors=True)
    return run
