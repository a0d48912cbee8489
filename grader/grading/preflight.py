"""Before the first student: proof that a confined worker works on this machine.

A grading whose workers cannot start (a site-packages the sandbox does not show, a Python the worker's
user cannot read, a memory limit too small for jax) would report every test of every student as
"crashed" and give the whole class 0 for the grader's environment. So each grading process starts, once,
a worker's Python exactly as the harness will (same confinement level, limits and environment), has it
import what a worker imports and run a sharded computation on the host devices, and stops grading with
the reason when that fails.
"""

from __future__ import annotations

import functools
import json
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from grader.core.bounds import last_lines
from grader.core.errors import ShardlabError
from grader.sandbox import confinement
from grader.sandbox.restrictions import Isolation

# jax's import and backend start take 1-3 s; a loaded machine, many times that
PROBE_SECONDS = 120.0

# What a worker and its zygote import (grader.worker.zygote), then work on every host device.
_PROBE = """
import json, resource
from grader.course.devices import force_host_devices
force_host_devices()
import jax, jax.numpy as jnp
import grader.course.implementations, grader.worker.request_loop, grader.worker.messages, grader.worker.zygote
mesh = jax.make_mesh((jax.device_count(),), ("d",))
x = jax.device_put(jnp.arange(8.0 * jax.device_count()), jax.NamedSharding(mesh, jax.P("d")))
total = float(jax.jit(lambda a: (2 * a).sum())(x))
print(json.dumps({"devices": jax.device_count(), "total": total,
                  "memory_bytes": resource.getrlimit(resource.RLIMIT_AS)[0], "grader": grader.__file__}))
"""


class PreflightError(ShardlabError, RuntimeError):
    """A confined worker cannot start here: no student can be graded."""


@dataclass(frozen=True)
class WorkerProof:
    """What the probe saw from inside the worker's confinement."""

    level: str
    memory_bytes: int | None  # the address-space limit in force in the worker; None: none
    devices: int
    seconds: float


@functools.cache
def prove_worker(level: Isolation, limits: confinement.WorkerLimits) -> WorkerProof:
    """Start a worker's Python at `level` with `limits`, as grader.worker.supervisor.Worker does, and have it
    import jax and the grader and compute on the host devices; raise PreflightError saying why it could
    not. Once per process for each level and limits (a failure is tried again)."""
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="shardlab-preflight-") as tmp:
        workdir, output_path = Path(tmp) / "work", Path(tmp) / "output.txt"
        workdir.mkdir()
        env = confinement.sandbox_environment(workdir)
        with open(output_path, "wb") as output:
            try:
                process = confinement.spawn_confined(
                    [sys.executable, "-I", "-B", "-c", _PROBE],
                    level=level,
                    workdir=workdir,
                    readable=[],
                    env=env,
                    limits=limits,
                    stdout=output,
                )
            except OSError as exc:
                raise PreflightError(
                    _explain(level, limits, f"it could not be started: {exc}")
                ) from None
        try:
            returncode = process.popen.wait(timeout=PROBE_SECONDS)
        except subprocess.TimeoutExpired:
            returncode = None
        finally:
            process.kill_tree()  # nothing of the probe is left running, whatever happened
        text = output_path.read_text(errors="replace")
    report = _last_json(text)
    if returncode != 0 or report is None:
        why = (
            f"it did not finish within {PROBE_SECONDS:.0f} s"
            if returncode is None
            else f"it exited with status {returncode}"
        )
        raise PreflightError(_explain(level, limits, why, text))
    memory = report["memory_bytes"]
    return WorkerProof(
        level.value, None if memory < 0 else memory, report["devices"], time.monotonic() - started
    )


def _last_json(text: str) -> dict | None:
    for line in reversed(text.strip().splitlines()):
        try:
            found = json.loads(line)
        except ValueError:
            continue
        return found if isinstance(found, dict) and "memory_bytes" in found else None
    return None


def _explain(level: Isolation, limits: confinement.WorkerLimits, why: str, output: str = "") -> str:
    memory = (
        f"{limits.memory_bytes / (1 << 30):g} GiB"
        if limits.memory_bytes and limits.memory_bytes > 0
        else "none"
    )
    return (
        f"a confined worker ({level.value}, memory limit {memory}) does not work here: asked to import jax and "
        f"the grader and compute on the host devices, {why}. No student is graded, since every test would "
        f"crash. The worker reads only these Python folders: {', '.join(confinement.python_paths())}"
        + last_lines(output, 12, "its output", skip="@")
    )  # not a native stack trace's frames ("@ 0x7f...")
