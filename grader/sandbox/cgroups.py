"""Control groups around a grading and around each sandbox, where the machine lets the grader make them.

- A sandbox (grader.sandbox.confinement.spawn_confined) gets a group of its own in the `pids` and `cpu`
  hierarchies: at most `pids.max` tasks whatever user they run as or whichever session they start, and
  one share of the processor however many processes it starts (a fork bomb of spinning processes
  weighs what one session weighs). Its processor time, counted by the kernel for every process it
  ever held (`processor_time`: v1's `cpuacct` hierarchy, v2's cpu.stat), is what a test's time limit
  measures (grader.harness.time_limits, grader.core.processor_time).
- A grading (grader.grading.engine.grade_submission) gets a group in the `memory` hierarchy that its
  harnesses join, each in a leaf of its own, and their workers with them: harness and workers together
  never hold more than the submission's memory (the engine sizes it), and the kernel's out-of-memory
  killer, run inside that group, picks the workers first (they start with oom_score_adj 1000). A
  submission without a memory limit still gets its group, with no limit written: its peak is measured
  and whatever it leaves is ended with it.

cgroup v1 (a hierarchy per controller, as on this project's CI machines) and v2 (one hierarchy: used
where the grader's own cgroup delegates the controllers to groups below it). Groups are made below
the grader's own cgroup, never elsewhere, named after the process that owns them
(`shardlab-<kind>-<pid>.<start time>-<random>`): `sweep()` kills whatever is left in the groups of an
owner that has ended (a grading killed with SIGKILL, say) and removes them. Without a writable
hierarchy nothing is made, and the callers say so (report.json's environment.isolation).
"""

from __future__ import annotations

import contextlib
import errno
import functools
import os
import secrets
import signal
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import psutil

from grader.core.processor_time import ProcessorTime

PREFIX = "shardlab-"
CONTROLLERS = ("pids", "cpu", "cpuacct", "memory")  # cpuacct: v1 only (v2 counts in cpu.stat)
# cgroup v1 says "no limit" with the largest page-aligned 64-bit number (~2**63)
UNLIMITED_V1 = 1 << 62


@dataclass(frozen=True)
class Hierarchy:
    controller: str
    version: int  # 1 or 2
    own: Path  # this process's cgroup in it (as found at first use)


def cgroups_of(pid: int | str = "self") -> dict[str, tuple[int, Path]]:
    """controller -> (version, the directory of the process's cgroup), for the controllers mounted here."""
    mounts: dict[str, tuple[int, Path, str]] = {}
    try:
        lines = Path("/proc/self/mountinfo").read_text().splitlines()
        memberships = Path(f"/proc/{pid}/cgroup").read_text().splitlines()
    except OSError:
        return {}
    for line in lines:
        fields = line.split()
        separator = fields.index("-")
        fstype, options = fields[separator + 1], fields[separator + 3].split(",")
        root, mount_point = fields[3], Path(fields[4])
        if fstype == "cgroup":
            for controller in CONTROLLERS:
                if controller in options:
                    mounts.setdefault(controller, (1, mount_point, root))
        elif fstype == "cgroup2":
            mounts.setdefault("", (2, mount_point, root))
    found = {}
    for line in memberships:
        number, names, path = line.split(":", 2)
        for controller in names.split(",") if names else [""]:
            if controller in mounts:
                version, mount_point, root = mounts[controller]
                relative = (
                    os.path.relpath(path, root) if path.startswith(root) else path.lstrip("/")
                )
                found[controller] = (version, (mount_point / relative).resolve())
    if "" in found:  # v2: the controllers its root offers and v1 does not hold
        version, own = found.pop("")
        try:
            offered = (own / "cgroup.controllers").read_text().split()
        except OSError:
            offered = []
        for controller in CONTROLLERS:
            if controller not in found and controller in offered:
                found[controller] = (2, own)
    return found


def _usable(version: int, own: Path, controller: str) -> bool:
    """Can groups with this controller be made below `own`? (v2: it must be delegated to children.)"""
    if not os.access(own, os.W_OK):
        return False
    if version == 2:
        control = own / "cgroup.subtree_control"
        try:
            if controller not in control.read_text().split():
                # refused (EBUSY) where `own` itself holds processes
                control.write_text(f"+{controller}")
        except OSError:
            return False
    probe = own / f"{PREFIX}probe-{os.getpid()}-{secrets.token_hex(3)}"
    try:
        probe.mkdir()
        probe.rmdir()
    except OSError:
        return False
    return True


@functools.cache
def hierarchies() -> dict[str, Hierarchy]:
    """The controllers this process can make groups with: {"pids": Hierarchy(...), ...}."""
    found = {}
    for controller, (version, own) in cgroups_of().items():
        if _usable(version, own, controller):
            found[controller] = Hierarchy(controller, version, own)
    return found


def describe_available() -> str:
    found = hierarchies()
    if not found:
        return "none writable here"
    return ", ".join(f"{h.controller} (v{h.version})" for h in found.values())


def _start_time(pid: int) -> str | None:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return stat[stat.rindex(")") + 2 :].split()[19]


def _owner_tag() -> str:
    return f"{os.getpid()}.{_start_time(os.getpid())}"


def _owner_alive(name: str) -> bool:
    """Whether the process named in a group's name (shardlab-<kind>-<pid>.<start>-<random>) still runs."""
    try:
        pid, start = name.split("-")[2].split(".")
        return _start_time(int(pid)) == start
    except (IndexError, ValueError):
        return True  # not a name of ours: never touched


@dataclass(eq=False)
class Cgroup:
    """One group of ours: its directory in each controller's hierarchy (v2: the same one for all)."""

    directories: dict[str, Path]  # controller -> directory
    limits: dict[str, int] = field(default_factory=dict)  # what was written: {"pids.max": 512, ...}

    @property
    def join(self) -> list[str]:
        """The files a process writes its pid into to enter the group (grader.sandbox.launch does)."""
        return [str(d / "cgroup.procs") for d in dict.fromkeys(self.directories.values())]

    def processes(self) -> set[int]:
        found: set[int] = set()
        for directory in dict.fromkeys(self.directories.values()):
            for folder, _, _ in os.walk(directory):
                with contextlib.suppress(OSError, ValueError):
                    found.update(int(p) for p in Path(folder, "cgroup.procs").read_text().split())
        return found

    def kill(self, seconds: float = 10.0) -> None:
        """SIGKILL every process in the group (and below) until none is left: none can leave it, and a
        process killed forks no more, so a fork bomb is emptied in a few rounds."""
        ended = time.monotonic() + seconds
        while (members := self.processes()) and time.monotonic() < ended:
            for pid in members:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(pid, signal.SIGKILL)
            time.sleep(0.01)

    def remove(self) -> bool:
        """Kill what is left and remove the directories (children first). False if one remains."""
        self.kill()
        return all([_remove_tree(d) for d in dict.fromkeys(self.directories.values())])

    def read(self, controller: str, name: str) -> str | None:
        with contextlib.suppress(OSError, KeyError):
            return (self.directories[controller] / name).read_text().strip()
        return None


def _remove_tree(directory: Path) -> bool:
    for _ in range(250):  # a killed process leaves its group a moment after it is reaped
        try:
            for child in [p for p in directory.iterdir() if p.is_dir()]:
                _remove_tree(child)
            directory.rmdir()
            return True
        except FileNotFoundError:
            return True
        except OSError as exc:
            if exc.errno not in (errno.EBUSY, errno.ENOTEMPTY):
                return False
            time.sleep(0.02)
    return False


def _parent(hierarchy: Hierarchy) -> Path:
    """Where a new group goes: below this process's cgroup, or beside it when that is a harness's leaf
    of ours (cgroup v2 holds processes in leaves only; a sandbox then stays in its grading's group)."""
    own = cgroups_of().get(hierarchy.controller, (0, hierarchy.own))[1]
    return own.parent if own.name.startswith(f"{PREFIX}harness-") else own


def create(
    kind: str,
    settings: dict[str, dict[str, int]],
    *,
    inside: Cgroup | None = None,
    delegate: bool = False,
) -> Cgroup | None:
    """A group of ours for `kind` ("sandbox", "grading", "harness") in each controller of `settings`
    this machine offers ({"pids": {"pids.max": 512}, "cpu": {}}): below this process's cgroup, or below
    `inside` (in its controllers). delegate: groups will be made below it (cgroup v2 must enable the
    controllers for them, and the group then holds no process itself). None where nothing is available."""
    available = hierarchies()
    wanted = [c for c in settings if c in (inside.directories if inside else available)]
    if not wanted:
        return None
    name = f"{PREFIX}{kind}-{_owner_tag()}-{secrets.token_hex(4)}"
    group = Cgroup(
        {c: (inside.directories[c] if inside else _parent(available[c])) / name for c in wanted}
    )
    try:
        for directory in dict.fromkeys(group.directories.values()):
            directory.mkdir()
        for controller in wanted:
            for key, value in settings[controller].items():
                if _write_limit(group.directories[controller], key, value):
                    group.limits[key] = value
        if delegate:
            for controller in wanted:
                if available[controller].version == 2:
                    (group.directories[controller] / "cgroup.subtree_control").write_text(
                        f"+{controller}"
                    )
    except OSError:
        group.remove()
        raise
    return group


def _write_limit(directory: Path, key: str, value) -> bool:
    """Write one limit; the swap limits are best effort (present only with swap accounting)."""
    try:
        (directory / key).write_text(str(value))
    except OSError:
        if "memsw" in key or "swap" in key:
            return False
        raise
    return True


def memory_settings(limit: int | None) -> dict[str, dict[str, int]]:
    """A memory limit in the hierarchy's own words, swap included where it is accounted (None: a group
    with no limit written)."""
    hierarchy = hierarchies().get("memory")
    if hierarchy is None:
        return {}
    if limit is None:
        return {"memory": {}}
    if hierarchy.version == 1:
        return {"memory": {"memory.limit_in_bytes": limit, "memory.memsw.limit_in_bytes": limit}}
    return {"memory": {"memory.max": limit, "memory.swap.max": 0}}


def memory_limit(group: Cgroup) -> int | None:
    """The group's memory limit as the kernel holds it (bytes, rounded to its pages); None: no limit."""
    hierarchy = hierarchies().get("memory")
    if hierarchy is None:
        return None
    value = group.read(
        "memory", "memory.limit_in_bytes" if hierarchy.version == 1 else "memory.max"
    )
    if not value or not value.isdigit() or int(value) >= UNLIMITED_V1:
        return None  # "max" (v2), or v1's largest page-aligned number
    return int(value)


def peak_memory(group: Cgroup) -> int | None:
    """The most memory the group held at once (bytes), where the kernel says."""
    hierarchy = hierarchies().get("memory")
    if hierarchy is None:
        return None
    value = group.read(
        "memory", "memory.max_usage_in_bytes" if hierarchy.version == 1 else "memory.peak"
    )
    return int(value) if value and value.isdigit() else None


def processor_time(group: Cgroup) -> ProcessorTime | None:
    """The processor time every process of the group has used, those ended included, in user mode and in
    the kernel (None: not counted here: no cpuacct group in v1)."""
    if "cpuacct" in group.directories:  # v1: nanoseconds
        user = group.read("cpuacct", "cpuacct.usage_user")
        system = group.read("cpuacct", "cpuacct.usage_sys")
        if user and system and user.isdigit() and system.isdigit():
            return ProcessorTime(int(user) / 1e9, int(system) / 1e9)
        return None
    for controller in group.directories:
        if (
            hierarchies()[controller].version == 2
        ):  # every v2 group has cpu.stat's user and system usec
            found = {}
            for line in (group.read(controller, "cpu.stat") or "").splitlines():
                key, _, value = line.partition(" ")
                if key in ("user_usec", "system_usec") and value.isdigit():
                    found[key] = int(value) / 1e6
            if len(found) == 2:
                return ProcessorTime(found["user_usec"], found["system_usec"])
            return None
    return None


def sweep() -> list[str]:
    """Remove the groups of ours whose owner has ended, killing what is still in them. Returns their names."""
    removed: list[str] = []
    # a group's processes may own others' groups (a harness, its sandboxes): again once ended
    for _ in range(3):
        before = len(removed)
        for hierarchy in hierarchies().values():
            for directory in _ours(hierarchy.own):
                if directory.exists() and not _owner_alive(directory.name):
                    Cgroup({hierarchy.controller: directory}).remove()
                    removed.append(directory.name)
        if len(removed) == before:
            break
    return removed


def _ours(folder: Path) -> list[Path]:
    """Our groups below `folder`, at any depth below other groups of ours (deepest first)."""
    found = []
    try:
        entries = [p for p in folder.iterdir() if p.is_dir() and p.name.startswith(PREFIX)]
    except OSError:
        return []
    for entry in entries:
        found += _ours(entry)
        found.append(entry)
    return found


@dataclass
class SubmissionMemory:
    """One grading's memory group: every harness of the submission in a leaf of its own, and every
    worker its harness starts, together under `limit` bytes (None: no limit). `group` None: no memory
    cgroup here."""

    limit: int | None
    group: Cgroup | None
    applied: int | None = None  # the limit as the kernel holds it (None: none, or no group)
    peak: int | None = None  # bytes, once the grading has ended

    def harness(self) -> list[str]:
        """A new leaf for one harness: the files its process joins before it starts (none without a group)."""
        if self.group is None:
            return []
        leaf = create("harness", {"memory": {}}, inside=self.group)
        return leaf.join if leaf else []

    def describe(self) -> str:
        if self.group is None:
            return (
                f"not bounded in total: no memory cgroup here ({describe_available()}); each process has its "
                "own address-space limit"
            )
        version = hierarchies()["memory"].version
        peak = f"; peak {self.peak / 2**30:.2f} GiB" if self.peak is not None else ""
        if self.limit is None:
            return (
                f"no limit for the submission in all, its harnesses and workers together (--memory-limit 0; "
                f"memory cgroup v{version}, for its peak and its end; out of memory, the kernel kills "
                f"workers first){peak}"
            )
        size, machine = self.applied or self.limit, psutil.virtual_memory().total
        beyond = f", more than this machine's {machine / 2**30:.1f} GiB" if size > machine else ""
        return (
            f"{size / 2**30:.1f} GiB for the submission in all, its harnesses and workers together "
            f"(memory cgroup v{version}{beyond}; out of memory, its workers are killed first){peak}"
        )


@contextlib.contextmanager
def submission_memory(limit: int | None) -> Iterator[SubmissionMemory]:
    """A memory group for one grading (limit None: a group with no limit), removed (with whatever is left
    in it) when the grading ends. Groups that earlier gradings, killed, left behind are swept first."""
    sweep()
    group = (
        create("grading", memory_settings(limit), delegate=True)
        if "memory" in hierarchies()
        else None
    )
    memory = SubmissionMemory(
        limit, group, applied=memory_limit(group) if group is not None else None
    )
    try:
        yield memory
    finally:
        if group is not None:
            memory.peak = peak_memory(group)
            group.remove()
