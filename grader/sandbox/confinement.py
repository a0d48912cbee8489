"""Where a worker runs: the best confinement this machine offers, from a ladder.

- bubblewrap: a mount namespace holding read-only only Python, the system libraries, the grader
  package and the student's module folder, plus a private writable folder; no network; a pid
  namespace, so killing it kills everything it started.
- landlock: the kernel's Landlock LSM enforces the same read-only and writable paths on the worker
  and everything it starts; TCP bind and connect denied (ABI 4+); signals and abstract sockets scoped
  to the sandbox (ABI 6+). For machines without bubblewrap or user namespaces (CI runners, laptops).
- process: its own session, limits and private folder only. It protects against accidents, not
  attacks: `choose_isolation("strict")` refuses it.

At every level, and whoever runs the grader (grader.sandbox.restrictions says what this machine
allows): a user of its own per sandbox (as root a uid no other sandbox holds; else, or where that uid
cannot reach Python, a user namespace of its own), so its process budget is its own; no capability;
a network namespace of its own; a seccomp filter on sockets; a pids and a cpu cgroup of its own where
the machine has them (grader.sandbox.cgroups); as root, its folder a tmpfs of its own
(grader.sandbox.disk). `strict` also refuses a sandbox that lacks one of these.
The launcher (grader.sandbox.launch) applies from inside what must be applied before the worker starts.
"""

from __future__ import annotations

import ctypes
import functools
import json
import os
import resource
import shutil
import signal
import site
import subprocess
import sys
import sysconfig
from dataclasses import dataclass
from pathlib import Path

import psutil

from grader.core.errors import ShardlabError
from grader.core.options import DEFAULTS as GRADING_DEFAULTS, SANDBOX_DISK_BYTES
from grader.core.processor_time import ProcessorTime
from grader.sandbox import cgroups, disk, restrictions, users
from grader.sandbox.launch import landlock_abi
from grader.sandbox.restrictions import Identity, Isolation

PR_SET_CHILD_SUBREAPER = 36
OOM_SCORE_ADJ = 1000  # out of memory, the kernel kills a sandbox's processes before the grader's
# Read by every level: the system's libraries and configuration (nothing secret: nobody cannot read
# /etc/shadow), and the kernel's views a jax process reads.
SYSTEM_PATHS = ("/usr", "/lib", "/lib64", "/lib32", "/bin", "/sbin", "/etc", "/opt")
DEVICES = ("/dev/null", "/dev/zero", "/dev/urandom", "/dev/random", "/dev/full")


SANDBOXES = (Isolation.BUBBLEWRAP, Isolation.LANDLOCK)


class IsolationUnavailable(ShardlabError, RuntimeError):
    """The requested confinement does not work on this machine."""


@dataclass(frozen=True)
class WorkerLimits:
    # RLIMIT_AS (jax on 8 forced host devices runs in 4 GiB): --memory-limit's default, declared once there.
    memory_bytes: int | None = GRADING_DEFAULTS.worker_memory_bytes
    file_bytes: int = 256 << 20  # RLIMIT_FSIZE
    # Each writable place (its folder; under bubblewrap its /tmp too): a tmpfs of this size (grader.sandbox.disk).
    disk_bytes: int = SANDBOX_DISK_BYTES
    # Tasks (threads included) per sandbox: RLIMIT_NPROC where the sandbox has a user or a user namespace
    # of its own (it counts that user's tasks in that namespace: this sandbox's only), and its pids
    # cgroup's pids.max. A jax worker on 8 host devices runs about 40 threads, ex12's run of several
    # processes about 150; 512 stops a fork bomb, which then takes nothing from any other sandbox.
    processes: int = 512


def worker_limits(memory_bytes: int | None) -> WorkerLimits:
    """The worker's limits for an address space of `memory_bytes` (None or 0: none, which is said
    explicitly: a worker would otherwise inherit its harness's own limit)."""
    return WorkerLimits(memory_bytes=memory_bytes or resource.RLIM_INFINITY)


def sandbox_environment(workdir: Path, **extra: str) -> dict[str, str]:
    """A confined process's whole environment, built from nothing: no variable of the grader's (a secret, a
    path, a cache) reaches it, only what Python and jax need, with `extra` on top."""
    return {
        "PATH": "/usr/bin:/bin",
        "HOME": str(workdir),
        "TMPDIR": str(workdir),
        "LANG": "C.UTF-8",
        "JAX_PLATFORMS": os.environ.get("JAX_PLATFORMS", "cpu"),
        "PYTHONDONTWRITEBYTECODE": "1",
        **extra,
    }


def bwrap_path() -> str | None:
    return shutil.which("bwrap")


def _is_root() -> bool:
    return os.geteuid() == 0


# Run by the worker's own Python (sys.executable -I, as every worker starts): where it imports from. Its
# sys.path holds what .pth files add; setuptools' editable installs map packages from a finder's MAPPING.
_IMPORT_PATHS_SCRIPT = """
import importlib.util, json, sys
mapped = [p for m in list(sys.modules.values()) if m.__name__.startswith("__editable__")
          for p in [*getattr(m, "MAPPING", {}).values(), *sum(getattr(m, "NAMESPACES", {}).values(), [])]]
grader = importlib.util.find_spec("grader")
print(json.dumps({"path": sys.path, "mapped": mapped, "grader": list(grader.submodule_search_locations or [])
                  if grader else [], "prefixes": [sys.prefix, sys.base_prefix, sys.exec_prefix]}))
"""


def python_paths() -> list[str]:
    """What a worker may read of Python: the installation, every sys.path entry of the worker's Python
    (site-packages, folders named by .pth files, editable installs' packages) and the grader package.
    Never anything holding or inside the course's tests or solutions: a .pth naming the checkout's root
    (an editable install in compat mode) is left out, the grader package being mounted on its own."""
    import grader
    from grader.course import paths

    found = {
        sys.prefix,
        sys.base_prefix,
        sys.exec_prefix,
        os.path.dirname(os.path.realpath(sys.executable)),
        str(Path(grader.__file__).resolve().parent),
        *site.getsitepackages(),
        *_worker_import_paths(),
        *(p for p in (sysconfig.get_path("stdlib"), sysconfig.get_path("platstdlib")) if p),
    }
    hidden = [os.path.realpath(paths.REPO_ROOT / "tests"), os.path.realpath(paths.SOLUTIONS_DIR)]
    real = {os.path.realpath(p) for p in found if os.path.isabs(p) and os.path.exists(p)}
    real = {p for p in real if not any(_nested(p, h) or _nested(h, p) for h in hidden)}
    # Keep only the outermost of nested paths.
    return sorted(p for p in real if not any(p != q and _nested(p, q) for q in real))


@functools.cache
def _worker_import_paths() -> tuple[str, ...]:
    """Where the worker's Python imports from, asked of that Python itself (sys.executable -I, as workers
    start): this process may have more (its working folder, PYTHONPATH), which a worker never gets. Empty
    when it cannot say: the grading's preflight (grader.grading.preflight) then says what is missing."""
    try:
        done = subprocess.run(
            [sys.executable, "-I", "-B", "-c", _IMPORT_PATHS_SCRIPT],
            capture_output=True,
            text=True,
            env={"PATH": os.environ.get("PATH", "/usr/bin:/bin")},
            timeout=120,
        )
        seen = json.loads(done.stdout.strip().splitlines()[-1])
    except (OSError, subprocess.TimeoutExpired, ValueError, IndexError):
        return ()
    return tuple(
        p
        for key in ("path", "mapped", "grader", "prefixes")
        for p in seen.get(key, [])
        if isinstance(p, str) and p
    )


def _nested(path: str, folder: str) -> bool:
    """`path` is `folder` or lies inside it."""
    return path == folder or path.startswith(folder.rstrip(os.sep) + os.sep)


def _rlimits(limits: WorkerLimits, plan: restrictions.Plan) -> dict[str, int]:
    values = {"FSIZE": limits.file_bytes, "CORE": 0}
    if limits.memory_bytes:
        values["AS"] = limits.memory_bytes
    # else it would count the grader's user's other tasks too (and root is exempt)
    if plan.nproc_per_sandbox:
        values["NPROC"] = limits.processes
    return values


def _bwrap_command(
    argv: list[str], workdir: Path, readable: list[Path], disk_bytes: int, pid_1: bool = False
) -> list[str]:
    # As root, no user namespace: inside it the launcher's switch to the sandbox's uid would be refused,
    # and a uid mapped through one is root outside. As anyone else, a user namespace is what lets bwrap run.
    namespaces = [
        "--unshare-ipc",
        "--unshare-pid",
        "--unshare-net",
        "--unshare-uts",
        "--unshare-cgroup-try",
    ]
    command = [
        bwrap_path(),
        *(namespaces if _is_root() else ["--unshare-all"]),
        *(["--as-pid-1"] if pid_1 else []),
        "--die-with-parent",
        "--new-session",
        "--proc",
        "/proc",
        "--dev",
        "/dev",
        "--size",
        str(disk_bytes),
        "--tmpfs",
        "/tmp",
    ]
    for path in SYSTEM_PATHS:
        if os.path.islink(path):
            command += ["--symlink", os.readlink(path), path]
        elif os.path.exists(path):
            command += ["--ro-bind", path, path]
    made = set()
    for source, how in [
        *((p, "--ro-bind") for p in [*python_paths(), *map(str, readable)]),
        (str(workdir), "--bind"),
    ]:
        # bwrap makes missing parents 0700 as root, which the sandbox's uid could not pass through.
        for parent in reversed(Path(source).parents[:-1]):
            if str(parent) not in made and not any(str(parent) == s for s in SYSTEM_PATHS):
                command += ["--perms", "0755", "--dir", str(parent)]
                made.add(str(parent))
        command += [how, source, source]
    command += ["--chdir", str(workdir), "--"]
    return command + argv


# What a probe process sees of itself: its capabilities, no_new_privs, seccomp, namespaces, budget.
_PROBE = """
import json, os, resource
status = dict(line.split(":", 1) for line in open("/proc/self/status") if ":" in line)
print(json.dumps({"uid": os.getuid(), "status": {k: status[k].strip() for k in
                  ("CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb", "NoNewPrivs", "Seccomp")},
                  "net": os.readlink("/proc/self/ns/net"), "user_ns": os.readlink("/proc/self/ns/user"),
                  "nproc": resource.getrlimit(resource.RLIMIT_NPROC)[0]}))
"""


@dataclass(frozen=True)
class Observed:
    """What a process started at a level found of itself (grader.sandbox.launch applied it)."""

    uid: int
    capabilities: dict[str, int]  # CapInh, CapPrm, CapEff, CapBnd, CapAmb
    no_new_privs: bool
    seccomp: bool
    own_network: bool  # its network namespace is not the grader's
    own_user_namespace: bool
    nproc: int

    @property
    def no_capabilities(self) -> bool:
        return not any(self.capabilities.values()) and self.no_new_privs


@dataclass(frozen=True)
class Probe:
    problem: str | None  # None: the level works here
    observed: Observed | None = None


@functools.cache
def _probe(level: Isolation) -> Probe:
    """Start a confined Python at `level`, exactly as a worker is started, and read what it found."""
    if level is Isolation.BUBBLEWRAP and not bwrap_path():
        return Probe("bubblewrap is not installed (Debian/Ubuntu: apt-get install bubblewrap)")
    if level is Isolation.LANDLOCK and landlock_abi() < 1:
        return Probe("this kernel has no Landlock (Linux 5.13 or later, with the LSM enabled)")
    import tempfile

    workdir = Path(tempfile.mkdtemp(prefix="shardlab-probe-"))
    output = tempfile.TemporaryFile()
    try:
        process = spawn_confined(
            [sys.executable, "-I", "-B", "-c", _PROBE],
            level=level,
            workdir=workdir,
            readable=[],
            env={"PATH": "/usr/bin:/bin"},
            stdout=output,
        )
        try:
            returncode = process.popen.wait(timeout=60)
        finally:
            process.kill_tree()
        output.seek(0)
        lines = output.read().decode(errors="replace").strip().splitlines()
    except (OSError, subprocess.TimeoutExpired) as exc:
        return Probe(f"{level} could not start a process: {exc}")
    finally:
        output.close()
        shutil.rmtree(workdir, ignore_errors=True)
    if returncode != 0 or not lines:
        said = f": {lines[-1][:300]}" if lines else ""
        return Probe(f"{level} could not start a process here (exit status {returncode}){said}")
    seen = json.loads(lines[-1])
    status = seen["status"]
    return Probe(
        None,
        Observed(
            uid=seen["uid"],
            capabilities={k: int(v, 16) for k, v in status.items() if k.startswith("Cap")},
            no_new_privs=status["NoNewPrivs"] == "1",
            seccomp=status["Seccomp"] == "2",
            own_network=seen["net"] != os.readlink("/proc/self/ns/net"),
            own_user_namespace=seen["user_ns"] != os.readlink("/proc/self/ns/user"),
            nproc=seen["nproc"],
        ),
    )


def _works(level: Isolation) -> str | None:
    """None when `level` works here, else why not. Probed by really starting a confined Python."""
    return _probe(level).problem


def not_applied(level: Isolation) -> list[str]:
    """What `strict` requires of a sandbox and `level` cannot apply here (empty: all of it)."""
    plan, seen = restrictions.plan(level), _probe(level).observed
    missing = []
    if level is Isolation.PROCESS:
        missing.append("a filesystem sandbox (bubblewrap or Landlock)")
    if not disk.can_bound():
        missing.append("a bound on its disk (a tmpfs on its folder: the grader must run as root)")
    if seen is None or not seen.no_capabilities:
        missing.append("dropping every capability (and no_new_privs)")
    if not plan.process_budget:
        missing.append(
            "a process budget of its own (a uid, a user namespace or a pids cgroup of its own)"
        )
    if not plan.network_namespace or (seen is not None and not seen.own_network):
        missing.append("a network namespace of its own")
    if (
        plan.identity is Identity.USER_NAMESPACE
        and restrictions.is_root()
        and level is not Isolation.BUBBLEWRAP
    ):
        # root's uid, without capabilities: the filesystem is Landlock's to guard, signals and sockets not
        if not plan.seccomp or (seen is not None and not seen.seccomp):
            missing.append(
                "a seccomp filter on sockets (root's uid could connect to root's named sockets)"
            )
        if level is Isolation.LANDLOCK and landlock_abi() < 6:
            missing.append(
                "signals scoped to the sandbox (Landlock ABI 6; root's uid could signal the grader)"
            )
    return missing


def choose_isolation(request: str = "auto") -> Isolation:
    """auto: the best level that works here; strict: bubblewrap or landlock with everything not_applied()
    lists, or IsolationUnavailable; a level's name: that level, or IsolationUnavailable saying why not."""
    if request in ("auto", "strict"):
        ladder = SANDBOXES if request == "strict" else (*SANDBOXES, Isolation.PROCESS)
        reasons = []
        for level in ladder:
            problem = _works(level)
            if problem is None and request == "strict" and (missing := not_applied(level)):
                problem = f"{level} cannot contain the worker here: without " + "; without ".join(
                    missing
                )
            if problem is None:
                return level
            reasons.append(problem)
        raise IsolationUnavailable(
            "no sandbox for the student's code: "
            + "; ".join(reasons)
            + ". Install bubblewrap, or grade with --isolation auto to accept a plain process."
        )
    try:
        level = Isolation(request)
    except ValueError:
        raise IsolationUnavailable(
            f"unknown isolation {request!r}: auto, strict, "
            + ", ".join(level.value for level in Isolation)
        ) from None
    if (problem := _works(level)) is not None:
        raise IsolationUnavailable(problem)
    return level


def _user(plan: restrictions.Plan) -> str:
    root = restrictions.is_root()
    if plan.identity is Identity.OWN_UID:
        return (
            f"a uid of its own per sandbox ({users.FIRST_UID} to "
            f"{users.FIRST_UID + users.UID_COUNT - 1}, no account)"
        )
    if plan.identity is Identity.USER_NAMESPACE:
        return (
            "root's uid inside a user namespace of its own per sandbox (other users cannot reach Python here)"
            if root
            else "the grader's user, inside a user namespace of its own per sandbox"
        )
    return "root" if root else "the grader's own user"


def _capabilities(seen: Observed | None) -> str:
    if seen is None:
        return "unknown (the level does not start here)"
    if seen.no_capabilities:
        return "none (bounding, effective, permitted, inheritable and ambient sets empty; no_new_privs)"
    return (
        ", ".join(f"{k} {v:#x}" for k, v in seen.capabilities.items())
        + f"; no_new_privs {seen.no_new_privs}"
    )


def _disk(level: Isolation) -> str:
    size = f"{WorkerLimits().disk_bytes / (1 << 20):g} MiB"
    if not disk.can_bound():
        return (
            f"not bounded: its folder is on the host's disk, each file at most "
            f"{WorkerLimits().file_bytes >> 20} MiB (a tmpfs needs the grader to run as root)"
            + (f"; its /tmp a tmpfs of {size}" if level is Isolation.BUBBLEWRAP else "")
        )
    places = "its folder and its /tmp each" if level is Isolation.BUBBLEWRAP else "its folder"
    return (
        f"{places} a tmpfs of {size}, charged to the submission's memory; a worker that fills one "
        "is stopped and its test says so"
    )


def describe(level: Isolation) -> dict:
    """What the level in force applies to each sandbox here, for report.json (as a probe process found it)."""
    plan, seen = restrictions.plan(level), _probe(level).observed
    budget = WorkerLimits().processes
    mechanisms = {
        "RLIMIT_NPROC": "RLIMIT_NPROC counting its own "
        + ("user namespace's tasks" if plan.identity is Identity.USER_NAMESPACE else "uid's tasks"),
        "pids.max": "pids.max of a pids cgroup of its own",
    }
    entry = {
        "level": level.value,
        "user": _user(plan),
        "capabilities": _capabilities(seen),
        "filesystem": "read-only: Python, system libraries, the grader package, the student's own folder; "
        "writable: a private folder"
        if level in SANDBOXES
        else "not restricted beyond the user's permissions",
        "process_budget": f"{budget} tasks per sandbox ("
        + "; ".join(map(mechanisms.get, plan.process_budget))
        + ")"
        if plan.process_budget
        else "none of its own (shares the grader's user's)",
        "cpu": "a cpu cgroup per sandbox: one share however many processes it starts"
        if "cpu" in plan.cgroups
        else "not grouped (no cpu cgroup here)",
        "sockets": "seccomp: AF_UNIX stream and seqpacket only, no connect (ex12's runs: AF_INET, AF_INET6 and "
        "route netlink); no io_uring, bpf, keyrings, perf events, userfaultfd or new user namespace"
        if plan.seccomp
        else "not filtered (no seccomp here)",
        "disk": _disk(level),
        "not_applied": not_applied(level),
    }
    own_network = (
        "a network namespace of its own: no network (ex12's runs: a loopback of their own)"
    )
    if level is Isolation.BUBBLEWRAP:
        version = subprocess.run(
            [bwrap_path(), "--version"], capture_output=True, text=True
        ).stdout.strip()
        return {
            **entry,
            "tool": f"{version} ({bwrap_path()})",
            "network": own_network,
            "processes": "own pid namespace",
        }
    network = own_network if plan.network_namespace else "the grader's network"
    if level is Isolation.LANDLOCK:
        abi = landlock_abi()
        if not plan.network_namespace and abi >= 4:
            network += ", TCP denied by Landlock (ex12's runs: allowed)"
        return {
            **entry,
            "tool": f"Landlock ABI {abi}",
            "network": network,
            "processes": "signals scoped" if abi >= 6 else "own session",
        }
    return {**entry, "tool": None, "network": network, "processes": "own session"}


@dataclass(eq=False)  # hashed by identity: the live ones are kept in a set
class ConfinedProcess:
    popen: subprocess.Popen
    level: Isolation
    # the parent's other children when this one started: never ours to kill
    siblings: frozenset[int]
    user: users.SandboxUser | None = None  # its uid, as root: released once all its processes ended
    cgroup: cgroups.Cgroup | None = None  # its pids and cpu groups: removed with it
    # its folder, as root a tmpfs of its own (grader.sandbox.disk): unmounted with it
    disk: Path | None = None

    def processor_time(self) -> ProcessorTime | None:
        """The processor time its processes have used, as its cgroup counts it (those ended included);
        None without a cgroup that counts it."""
        return cgroups.processor_time(self.cgroup) if self.cgroup is not None else None

    @property
    def pid(self) -> int:
        return self.popen.pid

    def filled(self, inside: int | None = None) -> list[str]:
        """Its writable places that are full ("its folder", and under bubblewrap "/tmp", seen through a
        process `inside` its mount namespace, found in its tree when not given). Empty where its folder is
        not a tmpfs of its own (grader.sandbox.disk): a full host disk is not the sandbox's doing."""
        if self.disk is None:
            return []
        places = {"its folder": str(self.disk)}
        if self.level is Isolation.BUBBLEWRAP:
            inside = inside or self._inside()
            if inside is not None:
                places["/tmp"] = f"/proc/{inside}/root/tmp"
        return [name for name, place in places.items() if disk.full(place)]

    def _inside(self) -> int | None:
        """A process of its tree in a mount namespace other than ours (bwrap's own first process is not)."""
        ours = os.readlink("/proc/self/ns/mnt")
        try:
            tree = [psutil.Process(self.pid), *psutil.Process(self.pid).children(recursive=True)]
        except psutil.Error:
            return None
        for process in tree:
            try:
                if os.readlink(f"/proc/{process.pid}/ns/mnt") != ours:
                    return process.pid
            except OSError:
                continue
        return None

    def kill_tree(self) -> None:
        """Kill the worker and everything it started (a double-forked daemon that left the tree comes
        back to this process, a child subreaper, and is killed too; whatever is in its cgroup is killed
        there); wait for all of them; give back its uid and remove its cgroup."""
        try:
            doomed = [psutil.Process(self.pid), *psutil.Process(self.pid).children(recursive=True)]
        except psutil.NoSuchProcess:
            doomed = []
        try:
            os.killpg(self.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        for process in doomed:
            try:
                process.kill()
            except psutil.NoSuchProcess:
                pass
        self.popen.wait()
        if self.cgroup is not None:
            self.cgroup.kill()
        reap_orphans(set(self.siblings) | _live_workers())
        if self.cgroup is not None:
            self.cgroup.remove()
            self.cgroup = None
        if self.disk is not None:
            disk.release(self.disk)
            self.disk = None
        if self.user is not None:
            self.user.release()
            self.user = None
        _LIVE.discard(self)


_LIVE: set = set()


def _live_workers() -> set[int]:
    return {p.pid for p in _LIVE if p.popen.poll() is None}


def spawn_confined(
    argv: list[str],
    *,
    level: Isolation,
    workdir: Path,
    readable: list[Path],
    env: dict[str, str],
    pass_fds: tuple[int, ...] = (),
    limits: WorkerLimits = WorkerLimits(),
    stdout=None,
    network: bool = False,
    pid_1: bool = False,
) -> ConfinedProcess:
    """Start argv (a Python command) confined at `level`: it reads only Python, the system and
    `readable`, writes only `workdir` (its cwd, HOME and TMPDIR; as root a tmpfs of `limits.disk_bytes`
    mounted on it), and gets `env` and `pass_fds` only.
    kill_tree() ends it and gives back what it held (its uid, its cgroup).

    network: the processes it starts talk to each other over TCP (a multi-controller run). Their
    network namespace's loopback is up (bubblewrap brings its own up) and the seccomp filter lets them
    make and connect TCP sockets: they reach each other and nothing outside. Without a network
    namespace (as another user than root where the kernel refuses user namespaces), Landlock then
    allows TCP to any port: its rules name ports, and gloo's are chosen by the kernel.

    pid_1: under bubblewrap, argv is the pid namespace's init in place of bwrap's own: it reaps the
    sandbox's orphans, and no process in the sandbox can signal it but through a handler it installed
    (a worker's zygote, which its workers must not end). Other levels ignore it."""
    plan = restrictions.plan(level)
    user = group = bounded = None
    try:
        if plan.identity is Identity.OWN_UID:
            user = users.allocate()
            os.chown(workdir, user.uid, user.gid)
        if disk.can_bound():
            owner = (user.uid, user.gid) if user else (os.geteuid(), os.getegid())
            disk.bound(workdir, limits.disk_bytes, *owner)
            bounded = workdir
        group = cgroups.create(
            "sandbox", {"pids": {"pids.max": limits.processes}, "cpu": {}, "cpuacct": {}}
        )
        outer = {"cgroups": group.join if group else [], "oom_score_adj": OOM_SCORE_ADJ}
        inner = {
            "rlimits": _rlimits(limits, plan),
            "drop_capabilities": True,
            "cwd": str(workdir),
            **({"user": [user.uid, user.gid]} if user else {}),
            **({"seccomp": {"profile": "run" if network else "worker"}} if plan.seccomp else {}),
        }
        if level is Isolation.BUBBLEWRAP:
            inside = restrictions.launcher(inner, argv, as_module=True)
            command = restrictions.joining(
                outer["cgroups"],
                OOM_SCORE_ADJ,
                _bwrap_command(inside, workdir, readable, limits.disk_bytes, pid_1),
            )
        else:
            if plan.network_namespace:
                inner["namespaces"] = {
                    "user": plan.identity is Identity.USER_NAMESPACE,
                    "loopback": network,
                }
            if level is Isolation.LANDLOCK:
                inner["landlock"] = {
                    "read": [
                        *SYSTEM_PATHS,
                        *python_paths(),
                        *map(str, readable),
                        "/proc",
                        "/sys",
                        *DEVICES[2:],
                    ],
                    "write": [str(workdir), *DEVICES[:2]],
                    "network": network,
                }
            command = restrictions.launcher({**outer, **inner, "die_with_parent": True}, argv)
        siblings = frozenset(c.pid for c in psutil.Process().children())
        popen = subprocess.Popen(
            command,
            cwd=workdir,
            env=env,
            pass_fds=pass_fds,
            stdin=subprocess.DEVNULL,
            stdout=stdout or subprocess.DEVNULL,
            stderr=subprocess.STDOUT if stdout else subprocess.DEVNULL,
            start_new_session=True,
        )
    except BaseException:
        if group is not None:
            group.remove()
        if bounded is not None:
            disk.release(bounded)
        if user is not None:
            user.release()
        raise
    process = ConfinedProcess(popen, level, siblings, user, group, bounded)
    _LIVE.add(process)
    return process


def become_subreaper() -> None:
    """Orphans of our children (a worker's daemon) become our children, so they can be reaped."""
    if sys.platform.startswith("linux"):
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)


def reap_orphans(keep: set[int]) -> list[int]:
    """Kill and wait for every child of this process not in `keep` (their own children too)."""
    killed = []
    for _ in range(5):  # killing one may hand its children to us
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
