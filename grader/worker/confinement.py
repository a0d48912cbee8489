"""Where a worker runs: the best confinement this machine offers, from a ladder.

- bubblewrap: a mount namespace holding read-only only Python, the system libraries, the grader
  package and the student's module folder, plus a private writable folder; no network; a pid
  namespace, so killing it kills everything it started; the user nobody when grading as root.
- landlock: the kernel's Landlock LSM enforces the same read-only and writable paths on the worker
  and everything it starts; TCP bind and connect denied (ABI 4+); signals and abstract sockets scoped
  to the sandbox (ABI 6+). For machines without bubblewrap or user namespaces (CI runners, laptops).
- process: its own session, limits and private folder only. It protects against accidents, not
  attacks: `choose_isolation("strict")` refuses it.

Every level sets the resource limits and starts a new session; the launcher (grader.worker.launch)
applies what must be applied from inside before the worker starts.
"""

from __future__ import annotations

import ctypes
import functools
import json
import os
import shutil
import signal
import site
import subprocess
import sys
import sysconfig
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path

import psutil

from grader.worker.launch import landlock_abi

NOBODY = (65534, 65534)
PR_SET_CHILD_SUBREAPER = 36
# Read by every level: the system's libraries and configuration (nothing secret: nobody cannot read
# /etc/shadow), and the kernel's views a jax process reads.
SYSTEM_PATHS = ("/usr", "/lib", "/lib64", "/lib32", "/bin", "/sbin", "/etc", "/opt")
DEVICES = ("/dev/null", "/dev/zero", "/dev/urandom", "/dev/random", "/dev/full")


class Isolation(StrEnum):
    BUBBLEWRAP = "bubblewrap"
    LANDLOCK = "landlock"
    PROCESS = "process"


SANDBOXES = (Isolation.BUBBLEWRAP, Isolation.LANDLOCK)


class IsolationUnavailable(RuntimeError):
    """The requested confinement does not work on this machine."""


@dataclass(frozen=True)
class WorkerLimits:
    memory_bytes: int | None = 6 << 30   # RLIMIT_AS: jax on 8 forced host devices runs in 4 GiB
    file_bytes: int = 256 << 20          # RLIMIT_FSIZE
    # RLIMIT_NPROC counts threads, per user, across every worker running as nobody at once: a jax
    # worker on 8 host devices runs about 40 threads; 512 leaves room for parallel grading jobs and
    # stops a fork bomb. Applied only when the worker runs as nobody (it would count a laptop user's
    # own desktop otherwise).
    processes: int = 512


def bwrap_path() -> str | None:
    return shutil.which("bwrap")


def _is_root() -> bool:
    return os.geteuid() == 0


def python_paths() -> list[str]:
    """The Python installation, its site-packages, and where the grader package and jax really live."""
    import grader

    found = {sys.prefix, sys.base_prefix, sys.exec_prefix, os.path.dirname(os.path.realpath(sys.executable)),
             str(Path(grader.__file__).resolve().parent)}
    found.update(site.getsitepackages())
    found.update(p for p in (sysconfig.get_path("stdlib"), sysconfig.get_path("platstdlib")) if p)
    real = {os.path.realpath(p) for p in found if os.path.exists(p)}
    # Keep only the outermost of nested paths.
    return sorted(p for p in real if not any(p != q and p.startswith(q + os.sep) for q in real))


def _launcher(config: dict, argv: list[str]) -> list[str]:
    return [sys.executable, "-I", "-B", "-m", "grader.worker.launch", json.dumps(config), "--", *argv]


def _rlimits(limits: WorkerLimits, as_nobody: bool) -> dict[str, int]:
    values = {"FSIZE": limits.file_bytes, "CORE": 0}
    if limits.memory_bytes:
        values["AS"] = limits.memory_bytes
    if as_nobody:
        values["NPROC"] = limits.processes
    return values


def _bwrap_command(argv: list[str], workdir: Path, readable: list[Path], pid_1: bool = False) -> list[str]:
    # As root, no user namespace: inside it the launcher's switch to nobody would be refused, and nobody
    # mapped through one is root outside. As anyone else, a user namespace is what lets bwrap run.
    namespaces = ["--unshare-ipc", "--unshare-pid", "--unshare-net", "--unshare-uts", "--unshare-cgroup-try"]
    command = [bwrap_path(), *(namespaces if _is_root() else ["--unshare-all"]), *(["--as-pid-1"] if pid_1 else []),
               "--die-with-parent", "--new-session", "--proc", "/proc", "--dev", "/dev", "--tmpfs", "/tmp"]
    for path in SYSTEM_PATHS:
        if os.path.islink(path):
            command += ["--symlink", os.readlink(path), path]
        elif os.path.exists(path):
            command += ["--ro-bind", path, path]
    made = set()
    for source, how in [*((p, "--ro-bind") for p in [*python_paths(), *map(str, readable)]), (str(workdir), "--bind")]:
        # bwrap makes missing parents 0700 as root, which nobody could not pass through.
        for parent in reversed(Path(source).parents[:-1]):
            if str(parent) not in made and not any(str(parent) == s for s in SYSTEM_PATHS):
                command += ["--perms", "0755", "--dir", str(parent)]
                made.add(str(parent))
        command += [how, source, source]
    command += ["--chdir", str(workdir), "--"]
    return command + argv


@functools.cache
def _works(level: Isolation) -> str | None:
    """None when `level` works here, else why not. Probed by really starting a confined Python."""
    if level is Isolation.BUBBLEWRAP and not bwrap_path():
        return "bubblewrap is not installed (Debian/Ubuntu: apt-get install bubblewrap)"
    if level is Isolation.LANDLOCK and landlock_abi() < 1:
        return "this kernel has no Landlock (Linux 5.13 or later, with the LSM enabled)"
    import tempfile

    with tempfile.TemporaryDirectory(prefix="shardlab-probe-") as tmp:
        try:
            process = spawn_confined([sys.executable, "-I", "-B", "-c", "pass"], level=level, workdir=Path(tmp),
                                     readable=[], env={"PATH": "/usr/bin:/bin"}, probing=True)
            returncode = process.popen.wait(timeout=60)
        except (OSError, subprocess.TimeoutExpired) as exc:
            return f"{level} could not start a process: {exc}"
    return None if returncode == 0 else f"{level} could not start a process here (exit status {returncode})"


@functools.cache
def _can_drop_to_nobody() -> bool:
    """Outside bubblewrap's own view, nobody must reach Python itself (a pyenv under /root does not)."""
    if not _is_root():
        return False
    probe = [sys.executable, "-I", "-B", "-c", "import jax"]
    done = subprocess.run(_launcher({"user": list(NOBODY), "cwd": "/"}, probe), capture_output=True,
                          env={"PATH": "/usr/bin:/bin"})
    return done.returncode == 0


def choose_isolation(request: str = "auto") -> Isolation:
    """auto: the best level that works here; strict: bubblewrap or landlock, or IsolationUnavailable;
    a level's name: that level, or IsolationUnavailable saying why not."""
    if request in ("auto", "strict"):
        ladder = SANDBOXES if request == "strict" else (*SANDBOXES, Isolation.PROCESS)
        reasons = []
        for level in ladder:
            problem = _works(level)
            if problem is None:
                return level
            reasons.append(problem)
        raise IsolationUnavailable("no sandbox for the student's code: " + "; ".join(reasons)
                                   + ". Install bubblewrap, or grade with --isolation auto to accept a plain process.")
    try:
        level = Isolation(request)
    except ValueError:
        raise IsolationUnavailable(f"unknown isolation {request!r}: auto, strict, "
                                   + ", ".join(level.value for level in Isolation)) from None
    if (problem := _works(level)) is not None:
        raise IsolationUnavailable(problem)
    return level


def _runs_as_nobody(level: Isolation) -> bool:
    return _is_root() and (level is Isolation.BUBBLEWRAP or _can_drop_to_nobody())


def describe(level: Isolation) -> dict:
    """What the level in force means, for report.json."""
    user = "nobody" if _runs_as_nobody(level) else ("root" if _is_root() else "the grader's own user")
    if level is Isolation.BUBBLEWRAP:
        version = subprocess.run([bwrap_path(), "--version"], capture_output=True, text=True).stdout.strip()
        return {"level": level.value, "tool": f"{version} ({bwrap_path()})", "user": user, "network": "none",
                "filesystem": "read-only: Python, system libraries, the grader package, the student's own folder; "
                              "writable: a private folder", "processes": "own pid namespace"}
    if level is Isolation.LANDLOCK:
        abi = landlock_abi()
        return {"level": level.value, "tool": f"Landlock ABI {abi}", "user": user,
                "network": "TCP denied" if abi >= 4 else "allowed",
                "filesystem": "read-only: Python, system libraries, the grader package, the student's own folder; "
                              "writable: a private folder",
                "processes": "signals scoped" if abi >= 6 else "own session"}
    return {"level": level.value, "tool": None, "user": user, "network": "allowed",
            "filesystem": "not restricted beyond the user's permissions", "processes": "own session"}


@dataclass(eq=False)   # hashed by identity: the live ones are kept in a set
class ConfinedProcess:
    popen: subprocess.Popen
    level: Isolation
    siblings: frozenset[int]   # the parent's other children when this one started: never ours to kill

    @property
    def pid(self) -> int:
        return self.popen.pid

    def kill_tree(self) -> None:
        """Kill the worker and everything it started (a double-forked daemon that left the tree comes
        back to this process, a child subreaper, and is killed too); wait for all of them."""
        try:
            doomed = [psutil.Process(self.pid), *psutil.Process(self.pid).children(recursive=True)]
        except psutil.NoSuchProcess:
            doomed = []
        for kill in (lambda: os.killpg(self.pid, signal.SIGKILL),):
            try:
                kill()
            except (ProcessLookupError, PermissionError):
                pass
        for process in doomed:
            try:
                process.kill()
            except psutil.NoSuchProcess:
                pass
        self.popen.wait()
        reap_orphans(set(self.siblings) | _live_workers())
        _LIVE.discard(self)


_LIVE: set = set()


def _live_workers() -> set[int]:
    return {p.pid for p in _LIVE if p.popen.poll() is None}


def spawn_confined(argv: list[str], *, level: Isolation, workdir: Path, readable: list[Path], env: dict[str, str],
                   pass_fds: tuple[int, ...] = (), limits: WorkerLimits = WorkerLimits(), stdout=None,
                   probing: bool = False, network: bool = False, pid_1: bool = False) -> ConfinedProcess:
    """Start argv (a Python command) confined at `level`: it reads only Python, the system and
    `readable`, writes only `workdir` (its cwd, HOME and TMPDIR), and gets `env` and `pass_fds` only.

    network: the processes it starts talk to each other over TCP (a multi-controller run). Under
    bubblewrap that changes nothing: they share the sandbox's own loopback, which reaches nothing
    outside. Under Landlock TCP is then allowed, to any port: Landlock rules name ports, and gloo's
    are chosen by the kernel (the level in force is reported; `strict` grading prefers bubblewrap).

    pid_1: under bubblewrap, argv is the pid namespace's init in place of bwrap's own: it reaps the
    sandbox's orphans, and no process in the sandbox can signal it but through a handler it installed
    (a worker's zygote, which its workers must not end). Other levels ignore it."""
    as_nobody = _is_root() and (level is Isolation.BUBBLEWRAP or (not probing and _can_drop_to_nobody()))
    if as_nobody:
        os.chown(workdir, *NOBODY)
    config = {"rlimits": _rlimits(limits, as_nobody), "user": list(NOBODY) if as_nobody else None,
              "cwd": str(workdir), "landlock": None}
    if level is Isolation.LANDLOCK:
        config["landlock"] = {"read": [*SYSTEM_PATHS, *python_paths(), *map(str, readable), "/proc", "/sys",
                                       *DEVICES[2:]],
                              "write": [str(workdir), *DEVICES[:2]], "network": network}
    command = _launcher(config, argv)
    if level is Isolation.BUBBLEWRAP:
        command = _bwrap_command(command, workdir, readable, pid_1)
    siblings = frozenset(c.pid for c in psutil.Process().children())
    popen = subprocess.Popen(command, cwd=workdir, env=env, pass_fds=pass_fds, stdin=subprocess.DEVNULL,
                             stdout=stdout or subprocess.DEVNULL,
                             stderr=subprocess.STDOUT if stdout else subprocess.DEVNULL,
                             start_new_session=True)
    process = ConfinedProcess(popen, level, siblings)
    _LIVE.add(process)
    return process


def become_subreaper() -> None:
    """Orphans of our children (a worker's daemon) become our children, so they can be reaped."""
    if sys.platform.startswith("linux"):
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)


def reap_orphans(keep: set[int]) -> list[int]:
    """Kill and wait for every child of this process not in `keep` (their own children too)."""
    killed = []
    for _ in range(5):   # killing one may hand its children to us
        strays = [c for c in psutil.Process().children() if c.pid not in keep]
        if not strays:
            break
        for child in strays:
            try:
                for process in [*child.children(recursive=True), child]:
                    process.kill()
            except psutil.NoSuchProcess:
                pass
        for child in strays:
            try:
                child.wait(timeout=10)
            except (psutil.NoSuchProcess, psutil.TimeoutExpired, ChildProcessError):
                pass
            killed.append(child.pid)
    return killed
