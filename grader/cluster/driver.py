"""A multi-process exercise's driver: the exercise's own part of a run of several processes.

The route (grader.cluster.run) is the same for every multi-process exercise: P confined processes, the
grader's coordinator, each process's reports relayed, bounded and timed, the census of who joined. What
differs lives in a driver, a Python file beside the exercise's tests (tests/exercises/<id>/driver.py),
which defines:

    STEPS           every step a process reports, in the order it takes them. The first is the join: when
                    it returns, the harness looks for the process's connection to the grader's coordinator.
    PROOF_STEP      (optional) the step, soon after the join, in which every process takes part in a
                    collective of the grader's over every device of every process: when it returns, the
                    harness looks for the process's connections to the others' gloo, and nothing a process
                    reports counts unless jax's collectives met there (grader.cluster.run).
    draw(rng, processes, devices_per_process)
                    in the harness: what each process is given this run, drawn from `rng` (unseeded, per
                    run). Returns an object whose for_process(i) is process i's inputs (plain values the
                    protocol carries); the exercise's checks read the rest of it (the harness's secret).
    run(process)    in each process: calls the student's functions through process.step(name, call,
                    describe), in STEPS's order (grader.cluster.process.Process).

A driver is trusted course code: the harness reads it from the course's tests (never from a submission)
and hands its source to every process, which cannot read tests/. It holds no hidden test, and ships to
students with the visible tests. Its top level runs in the harness too: it imports jax only inside run.
"""

from __future__ import annotations

import hashlib
import sys
import types
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from grader.core.errors import ShardlabError


class DrawnInputs(Protocol):
    def for_process(self, process: int) -> dict:
        """Process `process`'s inputs, as plain values."""


class DriverError(ShardlabError, TypeError):
    """A driver that does not define what a driver must (the course author's mistake)."""


@dataclass(frozen=True)
class Driver:
    path: Path
    source: str
    module: types.ModuleType  # the harness's own copy: draw() runs here

    @property
    def steps(self) -> tuple[str, ...]:
        return self.module.STEPS

    @property
    def join_step(self) -> str:
        return self.steps[0]

    @property
    def proof_step(self) -> str | None:
        return getattr(self.module, "PROOF_STEP", None)

    @property
    def digest(self) -> str:
        return hashlib.sha256(self.source.encode()).hexdigest()

    def draw(self, rng, processes: int, devices_per_process: int) -> DrawnInputs:
        return self.module.draw(rng, processes, devices_per_process)


def module_from_source(
    source: str, name: str, filename: str, *, keep: bool = True
) -> types.ModuleType:
    """The driver's source run as a module named `name` (registered while it runs: dataclasses look modules up
    by name; kept in sys.modules only if `keep`)."""
    module = types.ModuleType(name)
    module.__file__ = filename
    sys.modules[name] = module
    try:
        exec(compile(source, filename, "exec"), module.__dict__)
    finally:
        if not keep:
            del sys.modules[name]
    return module


def load_driver(path: Path) -> Driver:
    """The driver at `path`, checked for what every driver defines."""
    path = Path(path).resolve()
    source = path.read_text()
    name = f"_shardlab_driver_{hashlib.sha256(source.encode()).hexdigest()[:16]}"
    module = sys.modules.get(name) or module_from_source(source, name, str(path))
    steps = getattr(module, "STEPS", None)
    if not (
        isinstance(steps, tuple)
        and steps
        and all(isinstance(s, str) and s for s in steps)
        and len(set(steps)) == len(steps)
    ):
        raise DriverError(f"{path}: STEPS must be a tuple of distinct step names, the join first")
    for function in ("draw", "run"):
        if not callable(getattr(module, function, None)):
            raise DriverError(f"{path} defines no function {function}()")
    proof = getattr(module, "PROOF_STEP", None)
    if proof is not None and proof not in steps[1:]:
        raise DriverError(f"{path}: PROOF_STEP must be one of STEPS after the join")
    return Driver(path, source, module)
