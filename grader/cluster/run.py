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
coordination service (grader.cluster.gate) and from /proc: that each process registered with the service
over a connection of its own (held by it when its join step returned), its topology was written there as
jax writes it and process 0's the cluster's, and, after the join, that it took part with every other
process in the grader's own collective (the driver's PROOF_STEP) as far as can be seen: gloo's
rendezvous, jax's CPU collectives', met at the service for devices of every process, and each process
held a connection to the others' gloo ports. The gate forwards only records of jax's shapes, every byte
jax's or canonical, so what the store can carry is what a writer chooses within those shapes
(docs/trust-model.md counts it: which collectives its gloo records name, how its pair numbers fall, its
port); the processes share no writable file, no UNIX or datagram socket and no System V memory, so the
rest of what one learned of another's inputs came over TCP, which the grader does not read: rows over
sockets of the processes' own, and a cluster made by hand that writes jax's records and connects at the
ports it wrote, still earn every point (tests/grader/hostile/test_cluster.py). The exercise's checks
judge the answers against the draw (ClusterRun.inputs).

launcher="srun" (`shardlab check --launcher srun`, never with isolation): the processes are one srun step's
tasks instead (grader.cluster.srun), each joining through jax's own reading of Slurm's environment.
There is no coordinator of the grader's there, so no join is observed (ClusterRun.observed_joins is False):
each process's devices are its own report, and the answers alone are judged (a process that never joined
reports a process_count of 1).

Here: the run's record (ClusterRun) and what a verdict raises. grader.cluster.run_cluster starts a run with
its launcher (grader.cluster.local, grader.cluster.srun), grader.cluster.events drives it and tears it down,
grader.cluster.recording records what it reports, grader.cluster.messages declares what crosses.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field

import psutil

from grader.cluster.census import Connection
from grader.cluster.driver import DrawnInputs
from grader.core.errors import ShardlabError
from grader.core.results import TimeoutFigures
from grader.course.implementations import ImplementationImportError
from grader.worker.error_reports import remote_exception
from grader.worker.failures import WorkerCrashed, WorkerTimeout, describe_death

# No report from any process for this long, once every process has started: the run hangs. An honest
# run's longest silence after that is the processes joining, about a second; 10 s keeps a hang in both
# of ex12's configurations within 30 s (grader.harness.time_limits).
QUIET_SECONDS = 10.0
# Until then the processes import jax, the grader's own start-up: 1 to 4 s here with two grading jobs on
# two cores, far more when several gradings share them.
STARTUP_SECONDS = 60.0
LIMIT_SECONDS = 120.0  # the whole run, whatever it reports
OUTPUT_CHARS = 8000
REPORT_BYTES = 4 << 20  # the largest message relayed from a run (a report holds a few small arrays)
RUN_VARIABLE = "SHARDLAB_CLUSTER_RUN"  # in every process of a srun run: its run's folder (ClusterRun.left_behind)


class ClusterTimeout(WorkerTimeout):
    """The run was stopped before this process finished this step."""


class ClusterCrashed(WorkerCrashed):
    """This process died before it finished this step."""


class ClusterFilledDisk(ClusterCrashed):
    """The run's processes filled a writable place of their sandbox (grader.sandbox.disk)."""


class NotJoined(ShardlabError, AssertionError):
    """The step returned, but the grader did not see this process join the others."""


@dataclass(frozen=True)
class GlooRecord:
    """gloo's rendezvous record that a process's jax wrote, as the gate read it."""

    process: int
    clique: tuple[int, ...]  # the collective's devices, in rank order
    rank: int
    port: int  # where that process's gloo listens


@dataclass
class GateSeen:
    """What the grader's gate reported (grader.cluster.gate): every registration, record and refusal."""

    # connection -> (process, client port)
    registered: dict[int, tuple[int, int]] = field(default_factory=dict)
    global_topology: list[list[int]] | None = None  # as process 0's jax wrote it
    gloo: list[GlooRecord] = field(default_factory=list)
    # (process, port, why)
    refused: list[tuple[int | None, int | None, str]] = field(default_factory=list)

    def refusal_of(self, process: int, ports: set[int]) -> str | None:
        """Why the gate cut off a connection of `process` (registered as it, or held by it), if it did."""
        return next(
            (why for who, port, why in self.refused if who == process or port in ports), None
        )

    def gloo_ports(self, process: int) -> set[int]:
        return {r.port for r in self.gloo if r.process == process}

    def collectives_with_all(self, owners: dict[int, int], processes: int) -> list[tuple[int, ...]]:
        """The collectives whose rendezvous is whole (every rank's record, each written by the process
        owning that device) and whose devices belong to every process."""
        ranks: dict[tuple[int, ...], set[int]] = {}
        for r in self.gloo:
            if owners.get(r.clique[r.rank]) == r.process:
                ranks.setdefault(r.clique, set()).add(r.rank)
        return [
            clique
            for clique, seen in ranks.items()
            if len(seen) == len(clique) and {owners.get(d) for d in clique} == set(range(processes))
        ]


@dataclass
class ClusterRun:
    processes: int
    devices_per_process: int
    steps: tuple[str, ...]  # the driver's, the join first
    inputs: DrawnInputs  # the driver's draw for this run: each process got only its own part
    isolation: str
    # (process, step) -> its answer
    reports: dict[tuple[int, str], dict] = field(default_factory=dict)
    started: dict[int, str] = field(default_factory=dict)  # the last step each process began
    exits: dict[int, int] = field(default_factory=dict)
    # processes that imported jax (before the student's module)
    ready: set[int] = field(default_factory=set)
    import_error: str | None = None
    stopped_after: float | None = None  # seconds, when the run was killed for hanging
    stopped_by: TimeoutFigures | None = None  # then: what the rule that stopped it judged
    # its sandbox's writable places found full as it ended (grader.sandbox.disk), with their bound
    filled_disk: tuple[list[str], int] | None = None
    seconds: float = 0.0
    output: str = ""  # what the processes printed, truncated
    coordinator: str = ""  # "127.0.0.1:port", as the launcher chose it
    workdir: str = ""  # the run's folder: each process works in a folder of its own in it
    # (process, step, "started" or "done") -> when the harness received it, in seconds from the start
    seen: dict[tuple[int, str, str], float] = field(default_factory=dict)
    # What the grader saw itself, rather than a process's word:
    separated: bool = False  # each process had a Landlock ruleset of its own (no common file)
    # process -> its pid in the sandbox (the launcher's)
    sandbox_pids: dict[int, int] = field(default_factory=dict)
    registered: bool = False  # the grader's coordinator saw every process register
    # process -> the global ids of the devices its jax published to the grader's coordinator
    published: dict[int, list[int]] = field(default_factory=dict)
    # process -> None when the harness saw it hold a connection to the coordinator as its join step
    # returned
    connection: dict[int, str | None] = field(default_factory=dict)
    # (process, step) -> the TCP sockets the harness saw it hold as that step (the join, the proof) ended
    sockets: dict[tuple[int, str], list[Connection]] = field(default_factory=dict)
    gate: GateSeen = field(default_factory=GateSeen)
    # the driver's collective of the grader's (none: nothing to prove)
    proof_step: str | None = None
    # the grader's coordinator failed (the grader's fault, not the student's)
    service_error: str | None = None
    launcher: str = "local"  # or "srun" (grader.cluster.srun)
    # False under srun: no coordinator of the grader's, published is each process's own report and
    # not_joined() sees nothing
    observed_joins: bool = True
    # srun started no process: it failed, or waited too long (what it said)
    launch_error: str | None = None

    @property
    def join_step(self) -> str:
        return self.steps[0]

    def own_ports(self, process: int) -> set[int]:
        """The local ports of every TCP socket the harness saw `process` hold."""
        return {c.local_port for (p, _), held in self.sockets.items() if p == process for c in held}

    def not_joined(self, process: int) -> str | None:
        """None when the grader saw `process` join the others through jax's coordination service and take
        part in the grader's own collective with every other process, as far as the gate and /proc show
        (records of jax's shapes and connections at their ports, which a cluster made by hand can also
        make: docs/trust-model.md); else why not (always None when the run had no coordinator of the
        grader's to watch: observed_joins is False)."""
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
        if not any(
            task == process and port in ports for task, port in self.gate.registered.values()
        ):
            return (
                f"process {process} did not register with {where} over a connection of its own (what "
                f"registered as process {process} was not a connection it held)"
            )
        devices = self.published.get(process)
        if devices is None:
            return f"process {process}'s jax never published its devices to {where}"
        if len(devices) != self.devices_per_process:
            return (
                f"process {process}'s jax published {len(devices)} devices to {where}, "
                f"not {self.devices_per_process}"
            )
        return None if self.proof_step is None else self._not_together(process)

    def _not_together(self, process: int) -> str | None:
        """Why the grader did not see `process`'s jax take part in its collective with every other process."""
        step = self.proof_step
        everyone = [self.published.get(p, []) for p in range(self.processes)]
        if self.gate.global_topology != everyone:
            return (
                "process 0's jax never wrote the cluster's topology (every process's devices, in order) to "
                "the coordinator: the processes never formed one jax cluster"
            )
        if (process, step) not in self.sockets:
            return (
                f"process {process}'s jax never finished the grader's own collective over every device of "
                f"every process, run right after {self.join_step}"
            )
        owners = {d: p for p in range(self.processes) for d in everyone[p]}
        if not self.gate.collectives_with_all(owners, self.processes):
            return (
                f"the grader's own collective over every device of every process, run right after "
                f"{self.join_step}, never went through jax's collectives: gloo, jax's CPU collectives, never "
                f"met at the coordinator for devices of every process"
            )
        for other in range(self.processes):
            if other != process and not self._gloo_met(process, other):
                return (
                    f"process {process}'s jax held no connection with process {other}'s gloo (listening at "
                    f"{sorted(self.gate.gloo_ports(other)) or 'no port'}) after the grader's own collective: no "
                    f"data went between them through jax"
                )
        return None

    def _gloo_met(self, process: int, other: int) -> bool:
        """Whether the census after the proof step (taken while every process waits) saw the two processes'
        gloo connected: an established socket of one with, at one end, a gloo port (its own, having accepted,
        or the other's, having connected) and, at the other end, a port the other held."""
        step = self.proof_step
        for one, two in ((process, other), (other, process)):
            ours, theirs = self.gate.gloo_ports(one), self.gate.gloo_ports(two)
            held = {c.local_port for c in self.sockets.get((two, step), ())}
            if any(
                c.established
                and (c.remote_port in theirs or (c.local_port in ours and c.remote_port in held))
                for c in self.sockets.get((one, step), ())
            ):
                return True
        return False

    def result(self, process: int, step: str):
        """What `step` returned in `process`; raises what it raised, or why it never finished, or
        NotJoined when the grader did not see the process join the others (nothing it returns counts then)."""
        if step not in self.steps:
            raise ValueError(
                f"{step!r} is not a step of this run's driver: {', '.join(self.steps)}"
            )
        if self.import_error is not None:
            raise ImplementationImportError(self.import_error)
        if self.filled_disk is not None:
            places, size = self.filled_disk
            raise ClusterFilledDisk(
                f"crashed: your code wrote more than {size >> 20} MiB to disk ({' and '.join(places)} of "
                f"the run of {self.processes} processes, the most they may hold there): nothing the run "
                "reported counts"
            )
        report = self.reports.get((process, step))
        if report is not None and "error" in report:
            raise remote_exception(report["error"])
        reason = self.not_joined(process) if report is not None else None
        if self.service_error is not None and (report is None or reason is not None):
            raise ClusterCrashed(
                f"the grader's coordinator failed, so the run could not be observed: "
                f"{self.service_error}"
            )
        if report is None and self.launch_error is not None:
            if self.stopped_after is None:
                raise ClusterCrashed(self.launch_error)
            raise ClusterTimeout(self.launch_error, figures=self.stopped_by)
        if report is None:
            raise self._unfinished(process, step)
        if reason is not None:
            raise NotJoined(
                f"{reason}: the grader did not see process {process} join the others, so nothing it "
                f"reports counts ({self.join_step} must join them with jax.distributed.initialize)"
            )
        return report["ok"]

    def left_behind(self) -> tuple[list[psutil.Process], list]:
        """What of the finished run is still there: its processes (each worked in the run's folder) and
        the sockets open on its coordinator's port. Both empty once run_cluster has returned."""
        inside = self.workdir + os.sep

        # under srun, the tasks are told their run (they work elsewhere)
        def of_run(info: dict) -> bool:
            if self.launcher == "srun":
                return (info["environ"] or {}).get(RUN_VARIABLE) == self.workdir
            return info["cwd"] == self.workdir or (info["cwd"] or "").startswith(inside)

        attributes = ["cmdline", "environ" if self.launcher == "srun" else "cwd"]
        processes = [
            p
            for p in psutil.process_iter(attributes)
            if of_run(p.info) and any("grader.cluster." in part for part in p.info["cmdline"] or ())
        ]
        port = int(self.coordinator.rsplit(":", 1)[1]) if self.coordinator else None
        sockets = [
            c
            for c in psutil.net_connections("tcp")
            if c.laddr
            and c.laddr.port == port
            and c.status in (psutil.CONN_LISTEN, psutil.CONN_ESTABLISHED)
        ]
        return processes, sockets

    def seconds_in(self, process: int, step: str) -> float:
        return float(self.reports[(process, step)]["seconds"])

    def _unfinished(self, process: int, step: str) -> BaseException:
        join = self.reports.get((process, self.join_step))
        if step != self.join_step and join is not None and "error" in join:
            # a stub's NotImplementedError stays "not attempted"
            failure = remote_exception(join["error"])
            failure.args = (
                f"process {process} never got to {step}: {self.join_step} raised "
                f"{type(failure).__name__}: {failure}",
            )
            return failure
        where = self.started.get(process)
        code = self.exits.get(process)
        if code not in (None, 0):
            return ClusterCrashed(
                f"process {process} ended during {where or 'start-up'}(), before {step}() "
                f"finished: {describe_death(code)}"
            )
        if self.stopped_after is not None:
            return ClusterTimeout(
                f"the run of {self.processes} processes was stopped after {self.stopped_after:.0f} s: process "
                f"{process} "
                + (f"was still in {where}()" if where else "had not started yet")
                + f" and never finished {step}() (a collective that not every process calls waits forever)",
                figures=self.stopped_by,
            )
        return ClusterCrashed(f"process {process} ended without reporting {step}()")
