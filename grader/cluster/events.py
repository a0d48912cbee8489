"""The one event loop of a multi-process run, whatever started its processes, and its one teardown.

A launcher (grader.cluster.local, grader.cluster.srun) starts the processes and puts what it hears on
`events`, from threads of its own: each process's reports (messages.Reported, recorded here alike for every
launcher) and its own events, which it handles itself. The loop stops the run when no event has come for
`quiet_seconds` (or STARTUP_SECONDS, until every process has imported jax) or after `limit_seconds` in all:
a run that hangs is then killed whole, and what each process was doing at the time says where it hung.
"""

from __future__ import annotations

import contextlib
import queue
import shutil
import time
from pathlib import Path
from typing import BinaryIO

import psutil

from grader.cluster.messages import Reported
from grader.cluster.recording import record_report
from grader.cluster.run import OUTPUT_CHARS, STARTUP_SECONDS, ClusterRun
from grader.core import wall_cap
from grader.core.results import TimeoutBy, TimeoutFigures
from grader.sandbox.processor_wait import Waits


class Launch:
    """How one launcher starts a run's processes, hears them, and stops them (start, handle and stop are
    each launcher's own; the other hooks do nothing unless it needs them)."""

    def __init__(self, run: ClusterRun):
        self.run = run
        self.events: queue.Queue = queue.Queue()

    def start(self, output: BinaryIO) -> None:
        """Start the processes, their output (and the launcher's) to `output`."""
        raise NotImplementedError

    def begin(self) -> None:
        """Once started, before the first event is awaited (whatever fails here still stops the run)."""

    def handle(self, event, answered: str | None) -> bool:
        """One event (`answered`: the step a report just recorded says returned). True: the run is over."""
        raise NotImplementedError

    def ended(self) -> bool:
        """The loop has stopped (the run is over, or hung). True: handle the events still queued."""
        return False

    def stop(self) -> None:
        """Kill whatever is left of the run."""
        raise NotImplementedError

    def concluded(self) -> None:
        """The run is torn down: what only its end tells."""

    def pids(self) -> list[int]:
        """The processes on this machine whose waiting for a processor the run's time rules forgive."""
        return []


def _left(seconds: float, wall: float, waits: Waits) -> float:
    """How long a rule of `seconds` leaves, `wall` seconds in, its waiting for a processor (read only once
    the wall clock has passed it) not counted."""
    if wall < seconds:
        return seconds - wall
    return seconds - wall_cap.counted(wall, waits.since(), seconds)


def _figures(launch: Launch, rule: tuple[float, float, Waits]) -> TimeoutFigures:
    """What the rule that stopped the run judged: its seconds, and its processes' processor time so far."""
    seconds, wall, waits = rule
    user = system = 0.0
    for pid in launch.pids():
        with contextlib.suppress(psutil.Error):
            times = psutil.Process(pid).cpu_times()
            user, system = user + times.user, system + times.system
    return TimeoutFigures(
        by=TimeoutBy.WALL_CLOCK_CAP,
        limit=seconds,
        cap=seconds,
        cpu=user,
        system=system,
        wall=wall,
        waited=waits.since(),
    )


def _dispatch(launch: Launch, event, begun: float) -> bool:
    answered = None
    if isinstance(event, Reported):
        answered = record_report(launch.run, event.process, event.report, time.monotonic() - begun)
    return launch.handle(event, answered)


def drive(launch: Launch, *, quiet_seconds: float, limit_seconds: float) -> ClusterRun:
    """Start `launch`'s run, record what it reports until it ends or hangs, then tear it down: its processes
    killed, its output kept (truncated) in the run, its folder removed. Both time rules (the silence and
    the whole run's limit) count wall-clock time less the time the run's processes waited for a processor
    (grader.core.wall_cap): a run starved by the machine's load is not taken for a hung one."""
    run = launch.run
    workdir = Path(run.workdir)
    output_path = workdir.parent / f"{workdir.name}.out"
    begun = time.monotonic()
    with open(output_path, "ab") as output:
        launch.start(output)
    try:
        launch.begin()
        whole, heard_at, since_heard = Waits(launch.pids), begun, Waits(launch.pids)
        while True:
            now = time.monotonic()
            silence = (
                quiet_seconds
                if len(run.ready) == run.processes
                else max(quiet_seconds, STARTUP_SECONDS)
            )
            rules = [(limit_seconds, now - begun, whole), (silence, now - heard_at, since_heard)]
            left, rule = min(((_left(*rule), rule) for rule in rules), key=lambda pair: pair[0])
            if left <= 0:
                run.stopped_after = time.monotonic() - begun
                run.stopped_by = _figures(launch, rule)
                break
            try:
                # a rule the wall clock has passed is judged again every quarter second at most
                event = launch.events.get(timeout=max(left, 0.25))
            except queue.Empty:
                continue  # the rules are judged again, the waiting read
            heard_at, since_heard = time.monotonic(), Waits(launch.pids)
            if _dispatch(launch, event, begun):
                break
        if launch.ended():  # the processes are gone: their last reports are read, then recorded
            while not launch.events.empty():
                _dispatch(launch, launch.events.get(), begun)
    finally:
        launch.stop()
        run.seconds = time.monotonic() - begun
        text = output_path.read_bytes().decode(errors="replace")
        run.output = text if len(text) <= OUTPUT_CHARS else text[-OUTPUT_CHARS:]
        output_path.unlink(missing_ok=True)
        shutil.rmtree(workdir, ignore_errors=True)
    launch.concluded()
    return run
