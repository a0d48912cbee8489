"""Before the first student: proof that a confined worker works on this machine.

A grading whose workers cannot start (a site-packages the sandbox does not show, a Python the worker's
user cannot read, a memory limit too small for jax) would report every test of every student as
"crashed" and give the whole class 0 for the grader's environment. So each grading process starts, once,
a worker's Python exactly as the harness will (same confinement level, limits and environment), has it
import what a worker imports and run a sharded computation on the host devices, and stops grading with
the reason when that fails.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from grader.core.bounds import last_lines
from grader.core.errors import ShardlabError
from grader.course.devices import HOST_DEVICES
from grader.sandbox import confinement
from grader.sandbox.restrictions import Isolation

# jax's import and backend start take 1-3 s; a loaded machine, many times that
PROBE_SECONDS = 120.0

# What a worker and its zygote import (grader.worker.zygote), then work on every host device.
_PROBE = """
import json, os, resource
from grader.course.devices import force_host_devices
force_host_devices()
import jax, jax.numpy as jnp
import grader.course.implementations, grader.worker.request_loop, grader.worker.messages, grader.worker.zygote
mesh = jax.make_mesh((jax.device_count(),), ("d",))
x = jax.device_put(jnp.arange(8.0 * jax.device_count()), jax.NamedSharding(mesh, jax.P("d")))
total = float(jax.jit(lambda a: (2 * a).sum())(x))
here = os.getcwd()  # its folder: a tmpfs of its own where the grader could bound it (grader.sandbox.disk)
tmpfs = any(f[4] == here and l.split(" - ")[1].split()[0] == "tmpfs"
            for l in open("/proc/self/mountinfo") for f in [l.split()])
seen = os.statvfs(here)
print(json.dumps({"devices": jax.device_count(), "total": total,
                  "memory_bytes": resource.getrlimit(resource.RLIMIT_AS)[0], "grader": grader.__file__,
                  "disk_bytes": seen.f_blocks * seen.f_frsize if tmpfs else None}))
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
    disk_bytes: int | None = (
        None  # the size of the tmpfs it found as its folder; None: the host's disk
    )
    reused: bool = False  # kept from an earlier grading in this environment (prove_worker)


def prove_worker(
    level: Isolation, limits: confinement.WorkerLimits, folder: Path | None = None
) -> WorkerProof:
    """Start a worker's Python at `level` with `limits`, as grader.worker.supervisor.Worker does, and have it
    import jax and the grader and compute on the host devices; raise PreflightError saying why it could
    not. Once per process for each level and limits (a failure is tried again); and with `folder` (the
    course's cache folder, which no worker sees), once per environment: a proof is kept there under a key
    of everything it depends on (environment_key), so a batch's gradings, each a process of its own, and
    every later grading on this machine reuse it until any of that changes."""
    if folder is None:
        return _proved(level, limits)
    kept = Path(folder) / "preflight" / f"{environment_key(level, limits)}.json"
    try:
        return WorkerProof(**{**json.loads(kept.read_text()), "reused": True})
    except (OSError, ValueError, TypeError):
        pass  # none yet, or unreadable: proved again
    proof = _proved(level, limits)
    kept.parent.mkdir(parents=True, exist_ok=True)
    partial = kept.with_suffix(f".{os.getpid()}.tmp")
    partial.write_text(json.dumps(dataclasses.asdict(proof)))
    os.replace(partial, kept)
    return proof


def environment_key(level: Isolation, limits: confinement.WorkerLimits) -> str:
    """A digest of what a worker's start depends on: the machine as booted, the level and limits, the host
    devices, this Python, every folder a worker reads of Python (a package installed or removed changes its
    folder) and the grader's own files."""
    import grader

    package = Path(grader.__file__).resolve().parent
    try:
        boot = Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        boot = ""
    facts = {
        "host": socket.gethostname(),
        "boot": boot,
        "uid": os.geteuid(),
        "level": level.value,
        "limits": dataclasses.asdict(limits),
        "devices": HOST_DEVICES,
        "python": [os.path.realpath(sys.executable), sys.version],
        "paths": [(p, _stamp(p)) for p in confinement.python_paths()],
        "grader": sorted(
            (str(p.relative_to(package)), _stamp(p))
            for p in package.rglob("*")
            if p.is_file() and "__pycache__" not in p.parts
        ),
    }
    return hashlib.sha256(json.dumps(facts, sort_keys=True, default=str).encode()).hexdigest()[:32]


def _stamp(path) -> tuple[int, int]:
    try:
        found = os.stat(path)
    except OSError:
        return (0, 0)
    return (found.st_size, found.st_mtime_ns)


@functools.cache
def _proved(level: Isolation, limits: confinement.WorkerLimits) -> WorkerProof:
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
        level.value,
        None if memory < 0 else memory,
        report["devices"],
        time.monotonic() - started,
        report.get("disk_bytes"),
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
