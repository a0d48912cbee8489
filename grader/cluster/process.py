"""One process of a multi-process run (ex12): it runs the exercise's driver, which calls the student's
functions in the exercise's order, and reports what each returned, as data, to the harness.

    python -I -B -m grader.cluster.process REPORT_FD RELEASE_FD CENSUS_FD MODULE_PATH   (its task on stdin)

Started by grader.cluster.launcher, with its host devices in XLA_FLAGS: it imports jax first, then
waits for its task (grader.cluster.messages.Task): who it is, the coordinator, what the harness drew for
this process alone, the exercise's driver (course code the harness read from the course's tests, which this
process cannot read; grader.cluster.driver) and the steps after which the harness looks at its connections.
No process is told another's inputs. Like the worker, this runs confined and decides nothing: the
student's code can rewrite it, and the driver, at run time, so the harness takes its reports as "data
that claims to be the answer" and checks them against what it sees itself (see grader.cluster.run).

Before each call the process reports {"step", "started"}, after it {"step", "ok" | "error", "seconds"}:
a run that hangs is killed by the harness, which then knows where each process stood. After a census
step has returned, the process waits for a byte on CENSUS_FD (the harness's word, through the launcher,
that it has looked, after the proof step at every process; at most CENSUS_SECONDS): what the harness sees
is then the processes as the step left them, not as a next call, or a death, has made them. At the end
it says {"finished"} and waits until RELEASE_FD closes, when every process has finished.

Under srun (grader.cluster.srun) the same run() runs each task, given a task whose "coordinator"
is None: the join step is then called with (None, None, None), so that jax reads Slurm's environment
itself, and the process reports its own devices once joined ({"devices": [global ids]}), there being no
coordinator of the grader's to see them.
"""

from __future__ import annotations

import os
import secrets
import select
import sys
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

from grader.cluster import messages
from grader.cluster.messages import Task

# the longest a process waits for the harness's census before it goes on regardless
CENSUS_SECONDS = 10.0


def _frames(exc: BaseException, module_path: Path) -> list[dict]:
    return [
        {
            "file": module_path.name,
            "line": f.lineno,
            "function": f.name,
            "code": (f.line or "").strip()[:200],
        }
        for f in traceback.extract_tb(exc.__traceback__)
        if Path(f.filename) == module_path
    ]


@dataclass
class Process:
    """What a driver's run(process) is given: who this process is, its inputs, the student's module, and
    step(), which calls one function and reports it."""

    index: int
    count: int
    devices: int
    coordinator: str | None  # None under srun: jax finds it in Slurm's environment
    inputs: object  # the harness's draw for this process (driver.draw(...).for_process(index))
    module: ModuleType  # the student's
    module_path: Path
    report: Callable[[dict], None]
    join_step: str = ""  # the driver's first step
    census_steps: tuple[str, ...] = ()  # after these, wait for the harness's look (census())
    census: Callable[[], object] = lambda: None

    @property
    def join_arguments(self) -> tuple[str | None, int | None, int | None]:
        """What the join step passes the student's initialize: the grader's coordinator, the process count
        and this process's index; under srun (None, None, None), jax.distributed.initialize's no-argument
        call, which reads them from Slurm's environment."""
        if self.coordinator is None:
            return None, None, None
        return self.coordinator, self.count, self.index

    def step(
        self,
        name: str,
        call: Callable[[], object],
        describe: Callable[[object], object] = lambda value: value,
    ) -> tuple[bool, object]:
        """Call `call` as step `name`: report its start, then what describe() makes of its value (or what
        it raised). Returns (whether it returned, its value)."""
        from grader.worker import error_reports, protocol_errors

        self.report({"step": name, "started": True})
        begun = time.monotonic()
        value = None
        try:
            value = call()
            seconds = time.monotonic() - begun
            answer = {"ok": describe(value)}
        except BaseException as exc:  # SystemExit included: an exit() is an error of this call
            seconds = time.monotonic() - begun
            answer = {"error": error_reports.encode_error(exc, _frames(exc, self.module_path))}
        try:
            self.report({"step": name, "seconds": seconds, **answer})
            if "ok" in answer and name in self.census_steps:
                self.census()
        except protocol_errors.UnsupportedValue as exc:
            self.report(
                {
                    "step": name,
                    "seconds": seconds,
                    "error": {
                        "type": "TypeError",
                        "base": "TypeError",
                        "frames": [],
                        "message": f"{name} returned {exc}, which cannot be sent to the grader",
                    },
                }
            )
        if "ok" in answer and name == self.join_step and self.coordinator is None:
            self._report_devices()
        return "ok" in answer, value

    def _report_devices(self) -> None:
        """Under srun: this process's own devices, as its jax sees them once joined (its backend starts
        here, as it would at the driver's next call)."""
        import jax

        self.report({"devices": [int(d.id) for d in jax.local_devices()]})


def run(
    task: Task,
    module_path: Path,
    report: Callable[[dict], None],
    census: Callable[[], object] = lambda: None,
) -> None:
    from grader.cluster.driver import module_from_source
    from grader.course.implementations import load_file
    from grader.worker import codec

    # Under a name drawn here and left out of sys.modules: the student's module cannot import it or find it
    # by name. (Code in the same process can still reach anything; nothing rests on the driver's honesty.)
    driver = module_from_source(
        task.driver.source, f"_driver_{secrets.token_hex(8)}", task.driver.name, keep=False
    )
    inputs = codec.decode(task.inputs)
    report({"ready": True})  # jax is imported: from here on, a silence is the student's code
    try:
        module = load_file(module_path)
    except BaseException as exc:  # reported once; the harness fails every step alike
        report({"import_error": str(exc)[:4000]})
        return
    driver.run(
        Process(
            task.process_id,
            task.processes,
            task.devices,
            task.coordinator,
            inputs,
            module,
            module_path,
            report,
            join_step=driver.STEPS[0],
            census_steps=task.census,
            census=census,
        )
    )


def run_and_report(
    task: Task,
    module_path: Path,
    fd: int,
    released: Callable[[], object],
    census: Callable[[], object] = lambda: None,
) -> None:
    """Run `task`, each report sent on `fd` (after a census step, wait until census() returns); say
    "finished"; wait until released() returns (every process has finished); then leave."""
    from grader.worker import codec, framing

    def report(message: dict) -> None:
        sys.stdout.flush()
        sys.stderr.flush()
        framing.send(fd, codec.encode(message))

    run(task, module_path, report, census)
    framing.send(fd, {"finished": True})
    sys.stdout.flush()
    sys.stderr.flush()
    released()
    # Leave without jax.distributed's shutdown handshake: every report is sent, and a process that
    # died must not keep this one waiting.
    os._exit(0)


def census_taken(fd: int) -> None:
    """Wait for the harness's word that it has looked at this process (or CENSUS_SECONDS)."""
    if select.select([fd], [], [], CENSUS_SECONDS)[0]:
        os.read(fd, 1)


def main(argv: list[str]) -> int:
    report_fd, release_fd, census_fd, module_path = (
        int(argv[0]),
        int(argv[1]),
        int(argv[2]),
        Path(argv[3]),
    )
    import jax  # noqa: F401  (imported while the coordinator starts: the task comes once it listens)

    task = messages.decode(sys.stdin.buffer.read(), Task)
    sys.stdin.close()
    run_and_report(
        task,
        module_path,
        report_fd,
        lambda: os.read(release_fd, 1),
        lambda: census_taken(census_fd),
    )


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
