"""How a worker fails the harness, as exceptions the harness grades: a crash, a hang, a broken protocol,
a traced program it refuses (the student's own exception is rebuilt by grader.worker.error_reports).

Kept apart from the Worker (grader.worker.supervisor) so that what only words or grades a failure (the
outcomes, the grading engine, runs of several processes) needs none of the machinery that supervises one.
"""

from __future__ import annotations

from grader.core.errors import ShardlabError
from grader.core.results import TimeoutFigures


class WorkerFailure(ShardlabError, RuntimeError):
    """The worker failed a request; `importing`: while it imported the module (it would again);
    `function`: the student's function the request called (None: not known), which a strike is counted
    against (grader.harness.strikes)."""

    def __init__(self, message: str, importing: bool = False, function: str | None = None):
        super().__init__(message)
        self.importing = importing
        self.function = function


class WorkerCrashed(WorkerFailure):
    """The worker process died (exit, signal, out of memory) while serving a call."""


class WorkerFilledDisk(WorkerCrashed):
    """The worker filled a writable place of its sandbox (grader.sandbox.disk): it was stopped."""


class WorkerTimeout(WorkerFailure):
    """The worker did not answer before the test's time ran out (its processor time, or the wall cap);
    `figures`: what that was judged on (None: a call not made, or a run stopped by its own rules)."""

    def __init__(
        self,
        message: str,
        importing: bool = False,
        function: str | None = None,
        figures: TimeoutFigures | None = None,
    ):
        super().__init__(message, importing, function)
        self.figures = figures


class FunctionStopped(WorkerTimeout):
    """A call not made: its function had timed out in earlier tests (not a strike of its own)."""


class WorkerBrokeProtocol(WorkerFailure):
    """The worker sent something that is not the protocol (graded as an error)."""


class UntrustedProgram(ShardlabError, RuntimeError):
    """A traced program the harness refuses to compile (see grader.worker.programs; wrong platform)."""


def describe_death(returncode: int | None) -> str:
    """How a process ended, in a crash's message."""
    if returncode is None:
        return "the process did not report how it ended"
    if returncode < 0:
        name = {
            9: "SIGKILL (out of memory, or killed)",
            11: "SIGSEGV (segmentation fault)",
            6: "SIGABRT (aborted)",
        }.get(-returncode, f"signal {-returncode}")
        return f"the process was killed by {name}"
    return f"the process exited with status {returncode} (does the code call exit()?)"
