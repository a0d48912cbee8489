"""The one event loop of a multi-process run, whatever started its processes, and its one teardown.

A launcher (grader.cluster.local, grader.cluster.srun) starts the processes and puts what it hears on
`events`, from threads of its own: each process's reports (messages.Reported, recorded here alike for every
launcher) and its own events, which it handles itself. The loop stops the run when no event has come for
`quiet_seconds` (or STARTUP_SECONDS, until every process has imported jax) or after `limit_seconds` in all:
a run that hangs is then killed whole, and what each process was doing at the time says where it hung.
"""

from __future__ import annotations

import queue
import shutil
import time
from pathlib import Path
from typing import BinaryIO

from grader.cluster.messages import Reported
from grader.cluster.recording import record_report
from grader.cluster.run import OUTPUT_CHARS, STARTUP_SECONDS, ClusterRun


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


def _dispatch(launch: Launch, event, begun: float) -> bool:
    answered = None
    if isinstance(event, Reported):
        answered = record_report(launch.run, event.process, event.report, time.monotonic() - begun)
    return launch.handle(event, answered)


def drive(launch: Launch, *, quiet_seconds: float, limit_seconds: float) -> ClusterRun:
    """Start `launch`'s run, record what it reports until it ends or hangs, then tear it down: its processes
    killed, its output kept (truncated) in the run, its folder removed."""
    run = launch.run
    workdir = Path(run.workdir)
    output_path = workdir.parent / f"{workdir.name}.out"
    begun = time.monotonic()
    with open(output_path, "ab") as output:
        launch.start(output)
    try:
        launch.begin()
        while True:
            left = limit_seconds - (time.monotonic() - begun)
            silence = (
                quiet_seconds
                if len(run.ready) == run.processes
                else max(quiet_seconds, STARTUP_SECONDS)
            )
            try:
                event = launch.events.get(timeout=max(0.0, min(silence, left)))
            except queue.Empty:
                run.stopped_after = time.monotonic() - begun
                break
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
