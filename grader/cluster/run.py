"""The harness's side of a multi-process run (ex12): the student's module in several processes.

One sandbox (grader.sandbox.confinement) holds a launcher (grader.cluster.launcher), the grader's
coordinator (grader.cluster.coordinator) and the P processes (grader.cluster.process), each
with its own forced host devices and a folder and Landlock ruleset of its own, joined by the student's
join step over the sandbox's network (a loopback of its own, so parallel grading jobs never meet on a
port). What the processes do is the exercise's driver (grader.cluster.driver): the harness draws
each process's inputs with it, at random, per run, gives each process only its own, and hands every
process the driver's source; it reads what each reports, and kills the whole tree when the run ends or
when no process has reported anything for `quiet_seconds`. Nothing here knows an exercise's functions.

What the verdicts rest on. A process's reports are data from the student's side (the student's code can
rewrite the driver and the reporting code), so they pass only by being the right answer, and the harness
checks what it can see itself (ClusterRun.not_joined), through the grader's gate before jax's
coordination service (grader.cluster.gate) and from /proc: that each process registered with the
service over a connection of its own (held by it when its join step returned), its jax wrote its own
topology there and process 0's the cluster's, and, after the join, that its jax took part with every
other process in the grader's own collective (the driver's PROOF_STEP): gloo, jax's CPU collectives,
met at the service for devices of every process, and each process held a connection to the others'
gloo. The gate forwards nothing jax itself would not write, so the service's key-value store carries no
rows; the processes share no writable file, no UNIX or datagram socket and no System V memory, so what
one learned of another's inputs came over TCP; the exercise's checks judge the answers against the draw
(ClusterRun.inputs).

launcher="srun" (`shardlab check --launcher srun`, never with isolation): the processes are one srun step's
tasks instead (grader.cluster.srun), each joining through jax's own reading of Slurm's environment.
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

from grader.cluster import census
from grader.cluster.census import Connection
from grader.cluster.driver import DrawnInputs, Driver
from grader.core.errors import ShardlabError
from grader.course.implementations import ImplementationImportError, NotAttempted
from grader.sandbox import confinement
from grader.worker import protocol
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


@dataclass(frozen=True)
class GlooRecord:
    """gloo's rendezvous record that a process's jax wrote, as the gate read it."""
    process: int
    clique: tuple[int, ...]    # the collective's devices, in rank order
    rank: int
    port: int                  # where that process's gloo listens


@dataclass
class GateSeen:
    """What the grader's gate reported (grader.cluster.gate): every registration, record and refusal."""
    registered: dict[int, tuple[int, int]] = field(default_factory=dict)   # connection -> (process, client port)
    global_topology: list[list[int]] | None = None   # as process 0's jax wrote it
    gloo: list[GlooRecord] = field(default_factory=list)
    refused: list[tuple[int | None, int | None, str]] = field(default_factory=list)   # (process, port, why)

    def refusal_of(self, process: int, ports: set[int]) -> str | None:
        """Why the gate cut off a connection of `process` (registered as it, or held by it), if it did."""
        return next((why for who, port, why in self.refused if who == process or port in ports), None)

    def gloo_ports(self, process: int) -> set[int]:
        return {r.port for r in self.gloo if r.process == process}

    def collectives_with_all(self, owners: dict[int, int], processes: int) -> list[tuple[int, ...]]:
        """The collectives whose rendezvous is whole (every rank's record, each written by the process
        owning that device) and whose devices belong to every process."""
        ranks: dict[tuple[int, ...], set[int]] = {}
        for r in self.gloo:
            if owners.get(r.clique[r.rank]) == r.process:
                ranks.setdefault(r.clique, set()).add(r.rank)
        return [clique for clique, seen in ranks.items() if len(seen) == len(clique)
                and {owners.get(d) for d in clique} == set(range(processes))]


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
    sockets: dict[tuple[int, str], list[Connection]] = field(default_factory=dict)   # (process, step) -> the TCP
    #                                        sockets the harness saw it hold as that step (the join, the proof) ended
    gate: GateSeen = field(default_factory=GateSeen)
    proof_step: str | None = None          # the driver's collective of the grader's (none: nothing to prove)
    service_error: str | None = None       # the grader's coordinator failed (the grader's fault, not the student's)
    launcher: str = "local"                # or "srun" (grader.cluster.srun)
    observed_joins: bool = True            # False under srun: no coordinator of the grader's, published is each
    #                                        process's own report and not_joined() sees nothing
    launch_error: str | None = None        # srun started no process: it failed, or waited too long (what it said)

    @property
    def join_step(self) -> str:
        return self.steps[0]

    def own_ports(self, process: int) -> set[int]:
        """The local ports of every TCP socket the harness saw `process` hold."""
        return {c.local_port for (p, _), held in self.sockets.items() if p == process for c in held}

    def not_joined(self, process: int) -> str | None:
        """None when the grader saw `process` join the others through jax's coordination service and take
        part, through jax, in the grader's own collective with every other process; else why not (always
        None when the run had no coordinator of the grader's to watch: observed_joins is False)."""
        if not self.observed_joins:
            return None
        where = f"the coordinator at {self.coordinator}"
        refused = self.gate.refusal_of(process, self.own_ports(process))
        if refused is not None:
            return f"the grader's gate before {where} cut process {process} off: {refused}"
        seen = self.connection.get(process, f"its {self.join_step} never returned")
        if seen is not None:
            return f"process {process} was not connected to {where} when its {self.join_step} returned ({seen})"
        if not self.registered:
            return f"not every process registered with {where}"
        ports = {c.local_port for c in self.sockets.get((process, self.join_step), ())}
        if not any(task == process and port in ports for task, port in self.gate.registered.values()):
            return (f"process {process} did not register with {where} over a connection of its own (what "
                    f"registered as process {process} was not a connection it held)")
        devices = self.published.get(process)
        if devices is None:
            return f"process {process}'s jax never published its devices to {where}"
        if len(devices) != self.devices_per_process:
            return (f"process {process}'s jax published {len(devices)} devices to {where}, "
                    f"not {self.devices_per_process}")
        return None if self.proof_step is None else self._not_together(process)

    def _not_together(self, process: int) -> str | None:
        """Why the grader did not see `process`'s jax take part in its collective with every other process."""
        step = self.proof_step
        everyone = [self.published.get(p, []) for p in range(self.processes)]
        if self.gate.global_topology != everyone:
            return ("process 0's jax never wrote the cluster's topology (every process's devices, in order) to "
                    "the coordinator: the processes never formed one jax cluster")
        if (process, step) not in self.sockets:
            return (f"process {process}'s jax never finished the grader's own collective over every device of "
                    f"every process, run right after {self.join_step}")
        owners = {d: p for p in range(self.processes) for d in everyone[p]}
        if not self.gate.collectives_with_all(owners, self.processes):
            return (f"the grader's own collective over every device of every process, run right after "
                    f"{self.join_step}, never went through jax's collectives: gloo, jax's CPU collectives, never "
                    f"met at the coordinator for devices of every process")
        for other in range(self.processes):
            if other != process and not self._gloo_met(process, other):
                return (f"process {process}'s jax held no connection with process {other}'s gloo (listening at "
                        f"{sorted(self.gate.gloo_ports(other)) or 'no port'}) after the grader's own collective: no "
                        f"data went between them through jax")
        return None

    def _gloo_met(self, process: int, other: int) -> bool:
        """Whether the census after the proof step (taken while every process waits) saw the two processes'
        gloo connected: an established socket of one with, at one end, a gloo port (its own, having accepted,
        or the other's, having connected) and, at the other end, a port the other held."""
        step = self.proof_step
        for one, two in ((process, other), (other, process)):
            ours, theirs = self.gate.gloo_ports(one), self.gate.gloo_ports(two)
            held = {c.local_port for c in self.sockets.get((two, step), ())}
            if any(c.established and (c.remote_port in theirs or (c.local_port in ours and c.remote_port in held))
                   for c in self.sockets.get((one, step), ())):
                return True
        return False

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
                     and any("grader.cluster.run" in part for part in p.info["cmdline"] or ())]
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
    census = [step for step in (run.join_step, run.proof_step) if step is not None]
    tasks = [{"process_id": i, "processes": run.processes, "devices": run.devices_per_process,
              "inputs": protocol.encode(run.inputs.for_process(i)), "census": census} for i in range(run.processes)]
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


def _ints(value) -> bool:
    return isinstance(value, list) and all(type(v) is int for v in value)


def _observe_gate(run: ClusterRun, seen: dict) -> None:
    """A report of the grader's gate (grader.cluster.gate), relayed by the coordinator and the launcher:
    they run outside every process's reach, so it is the grader's own view."""
    process, connection, port = seen.get("process"), seen.get("connection"), seen.get("port")
    if type(seen.get("registered")) is int and type(connection) is int and type(port) is int:
        run.gate.registered[connection] = (seen["registered"], port)
    elif isinstance(seen.get("refused"), str) and len(run.gate.refused) < 50:
        run.gate.refused.append((process if type(process) is int else None, port if type(port) is int else None,
                                 seen["refused"][:500]))
    elif isinstance(seen.get("wrote"), dict) and type(process) is int and 0 <= process < run.processes:
        wrote = seen["wrote"]
        if wrote.get("topology") == process and _ints(wrote.get("devices")):
            run.published[process] = wrote["devices"]
        elif isinstance(wrote.get("global"), list) and all(_ints(node) for node in wrote["global"]):
            run.gate.global_topology = wrote["global"]
        elif isinstance(gloo := wrote.get("gloo"), dict) and _ints(gloo.get("clique")) and all(
                type(gloo.get(k)) is int for k in ("rank", "port")) and 0 <= gloo["rank"] < len(gloo["clique"]):
            run.gate.gloo.append(GlooRecord(process, tuple(gloo["clique"]), gloo["rank"], gloo["port"]))


def _observe_service(run: ClusterRun, message: dict) -> None:
    """A report of the grader's coordinator (relayed by the launcher)."""
    if message.get("registered") is True:
        run.registered = True
    elif isinstance(message.get("failed"), str) and not run.registered and run.service_error is None:
        run.service_error = message["failed"][:500]
    elif isinstance(message.get("gate"), dict):
        _observe_gate(run, message["gate"])


def _record(run: ClusterRun, raw: dict, when: float, sandbox: confinement.ConfinedProcess | None) -> str | None:
    """One relayed message, checked: anything malformed is ignored (it can only cost the student). The step
    when it was a census step's report and the harness has just looked at that process (which now waits for
    its word: grader.cluster.process). Without a sandbox (srun) no census is taken."""
    if isinstance(raw.get("coordinator"), str):
        run.coordinator = raw["coordinator"][:100]
        return None
    if isinstance(raw.get("separated"), bool):
        run.separated = raw["separated"]
        return None
    if isinstance(raw.get("service"), dict):
        _observe_service(run, raw["service"])
        return None
    process = raw.get("process")
    if type(process) is not int or not 0 <= process < run.processes:
        return None
    if "exit" in raw:
        if type(raw["exit"]) is int:
            run.exits[process] = raw["exit"]
        return None
    if "pid" in raw:
        if type(raw["pid"]) is int:
            run.sandbox_pids[process] = raw["pid"]
        return None
    try:
        message = protocol.decode(raw.get("report"))
    except (protocol.ProtocolError, TypeError, ValueError, RecursionError):
        return None
    if not isinstance(message, dict):
        return None
    if message.get("ready") is True:
        run.ready.add(process)
        return None
    devices = message.get("devices")
    if not run.observed_joins and isinstance(devices, list) and all(type(d) is int for d in devices):
        run.published[process] = devices   # its own word: only where no coordinator of the grader's saw them
        return None
    if isinstance(message.get("import_error"), str) and run.import_error is None:
        run.import_error = message["import_error"]
    step = message.get("step")
    if step not in run.steps:
        return None
    if message.get("started") is True:
        run.started[process] = step
        run.seen[(process, step, "started")] = when
    elif ("ok" in message or isinstance(message.get("error"), dict)) and isinstance(message.get("seconds"), float):
        run.reports[(process, step)] = message
        run.seen[(process, step, "done")] = when
        if "ok" in message and sandbox is not None and step in (run.join_step, run.proof_step) \
                and (process, step) not in run.sockets:
            held = _census(run, process, sandbox)
            if step == run.join_step:
                run.connection[process] = held if isinstance(held, str) else _connected(run, held)
            if not isinstance(held, str):
                run.sockets[(process, step)] = held
            return step
    return None


def _census(run: ClusterRun, process: int, sandbox: confinement.ConfinedProcess) -> list[Connection] | str:
    """The harness's own look at the TCP sockets `process` holds, as one of its steps has just returned; or
    why the harness could not look."""
    pid = run.sandbox_pids.get(process)
    launcher = census.launcher_pid(sandbox.pid)
    if pid is None or launcher is None:
        return "the grader found no launcher in the sandbox" if launcher is None else "the launcher named no pid"
    host = census.host_pid(launcher, pid)
    if host is None:
        return f"the grader found no process of pid {pid} among the launcher's children"
    try:
        return census.tcp_connections(host)
    except OSError as exc:
        return f"the grader could not see its connections ({exc.strerror or exc})"


def _connected(run: ClusterRun, held: list[Connection]) -> str | None:
    port = run.coordinator.rpartition(":")[2]
    return census.connected(held, int(port)) if port.isdigit() else "the run had no coordinator"


def _tell_launcher(hold_w: int, word: str) -> None:
    """"census I" (process I may go on) or "go" (every process may leave): grader.cluster.launcher."""
    try:
        os.write(hold_w, f"{word}\n".encode())
    except OSError:   # the launcher is gone
        pass


def run_cluster(driver: Driver, module_path: Path, *, processes: int = 2, devices_per_process: int = 4,
                isolation: confinement.Isolation | None = None, quiet_seconds: float = QUIET_SECONDS,
                limit_seconds: float = LIMIT_SECONDS, scratch: Path | None = None,
                launcher: str = "local", limits: confinement.WorkerLimits | None = None) -> ClusterRun:
    """Run the student's module in `processes` processes, each running `driver` (a course's driver, never a
    submission's), and collect what each reports. isolation None: a plain process tree of its own (a
    student's `shardlab check`). launcher "srun": one srun step's tasks (grader.cluster.srun), never
    with isolation. limits: each process's, as a worker's (--memory-limit); the worker's default if None."""
    from grader.cluster import srun

    if launcher not in ("local", "srun"):
        raise ValueError(f"launcher must be 'local' or 'srun', not {launcher!r}")
    if launcher == "srun" and isolation is not None:
        raise srun.LauncherRefused(srun.NOT_WITH_ISOLATION)
    module_path = Path(module_path).resolve()
    if not module_path.is_file():
        raise NotAttempted(f"{module_path.name} is missing from {module_path.parent}")
    level = isolation or confinement.Isolation.PROCESS
    # Unseeded: no process can know another's inputs in advance.
    inputs = driver.draw(np.random.default_rng(), processes, devices_per_process)
    run = ClusterRun(processes, devices_per_process, driver.steps, inputs, level.value, proof_step=driver.proof_step)
    workdir = Path(tempfile.mkdtemp(prefix="cluster-", dir=scratch))
    run.workdir = str(workdir)
    if launcher == "srun":
        run.launcher, run.observed_joins, run.separated = "srun", False, False
        return srun.run_srun(run, driver, module_path, quiet_seconds=quiet_seconds,
                                     limit_seconds=limit_seconds)
    output_path = workdir.parent / f"{workdir.name}.out"
    report_r, report_w = os.pipe()
    tasks_r, tasks_w = os.pipe()
    hold_r, hold_w = os.pipe()   # the harness's word: a census taken, or the processes may leave (cluster_launch)
    env = confinement.sandbox_environment(workdir, JAX_PLATFORMS="cpu")
    argv = [sys.executable, "-I", "-B", "-m", "grader.cluster.launcher", str(report_w), str(tasks_r),
            str(hold_r), str(module_path)]
    begun = time.monotonic()
    with open(output_path, "ab") as output:
        process = confinement.spawn_confined(argv, level=level, workdir=workdir, readable=[module_path.parent],
                                             env=env, pass_fds=(report_w, tasks_r, hold_r), stdout=output,
                                             network=True, limits=limits or confinement.WorkerLimits())
    for fd in (report_w, tasks_r, hold_r):
        os.close(fd)
    messages: queue.Queue = queue.Queue()
    proved: set[int] = set()   # processes the harness has looked at after the proof step
    told: set[int] = set()     # of those, the ones told to go on
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
                _tell_launcher(hold_w, "go")
                continue
            censused = _record(run, raw, time.monotonic() - begun, process)
            if censused == run.join_step:
                _tell_launcher(hold_w, f"census {raw['process']}")
            elif censused is not None:
                proved.add(raw["process"])
            # After the proof step every process waits until the harness has looked at all of them: the
            # gloo connections between two processes are then seen while both hold them.
            if proved - told and all(p in proved or p in run.exits or (p, run.proof_step) in run.reports
                                     for p in range(run.processes)):
                for p in sorted(proved - told):
                    _tell_launcher(hold_w, f"census {p}")
                told |= proved
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
