"""A sandbox's writable folder on a size-limited tmpfs, so a worker cannot fill the host's disk.

RLIMIT_FSIZE bounds one file only: four files written at import held 1 GiB of the host's disk, and a
thread writing until the disk was full would have stopped every grading on the machine. As root the
grader mounts a tmpfs of `size` bytes on the folder before the sandbox starts (every level: bubblewrap
binds it, Landlock allows it, a plain process works in it) and unmounts it when the sandbox ends. A write
past the size fails with ENOSPC; the pages are charged to the memory cgroup of the process that wrote
them (the submission's, grader.sandbox.cgroups), and never reach the disk. Without root nothing can be
mounted: the folder stays on the host's disk, bounded per file only (report.json's isolation says so).

Mounts are named after the process that owns them (`shardlab-disk-<pid>.<start time>`): `sweep()`
unmounts those of an owner that has ended (a grading killed with SIGKILL), like the cgroups' sweep.
"""

from __future__ import annotations

import ctypes
import os
from pathlib import Path

import psutil

SOURCE_PREFIX = "shardlab-disk-"
MS_NOSUID, MS_NODEV = 0x2, 0x4
MNT_DETACH = 2
# A folder with less than this left is full: a tmpfs counts in pages, and what fills it writes until
# a write fails, leaving at most a page or a partly written block unused.
FULL_MARGIN_BYTES = 1 << 20


def can_bound() -> bool:
    """Whether this process may mount a tmpfs (root; CAP_SYS_ADMIN in the initial namespace)."""
    return os.geteuid() == 0


def _owner() -> str:
    me = psutil.Process()
    return f"{SOURCE_PREFIX}{me.pid}.{int(me.create_time() * 100)}"


def bound(folder: Path, size: int, uid: int, gid: int) -> None:
    """Mount an empty tmpfs of `size` bytes on `folder` (0700, owned by uid:gid); OSError if refused."""
    libc = ctypes.CDLL(None, use_errno=True)
    options = f"size={size},mode=0700,uid={uid},gid={gid}".encode()
    if libc.mount(_owner().encode(), os.fsencode(folder), b"tmpfs", MS_NOSUID | MS_NODEV, options):
        code = ctypes.get_errno()
        raise OSError(code, f"mounting a tmpfs on {folder}: {os.strerror(code)}")


def release(folder: Path) -> None:
    """Unmount the tmpfs on `folder` (detached: a process still holding a file in it cannot keep it)."""
    ctypes.CDLL(None, use_errno=True).umount2(os.fsencode(folder), MNT_DETACH)


def is_bounded(folder: Path | str) -> bool:
    """Whether `folder` is the root of one of our tmpfs mounts."""
    return any(point == os.path.realpath(folder) for point, _ in _our_mounts())


def full(folder: Path | str) -> bool:
    """Whether the filesystem holding `folder` (a bounded folder's tmpfs) has next to nothing left."""
    try:
        seen = os.statvfs(folder)
    except OSError:
        return False
    return seen.f_bavail * seen.f_frsize < FULL_MARGIN_BYTES


def used(folder: Path | str) -> int:
    """Bytes in use on the filesystem holding `folder` (a bounded folder's tmpfs: what the sandbox wrote)."""
    seen = os.statvfs(folder)
    return (seen.f_blocks - seen.f_bfree) * seen.f_frsize


def _our_mounts() -> list[tuple[str, str]]:
    """(mount point, source) of every tmpfs of ours in this mount namespace."""
    found = []
    try:
        lines = Path("/proc/self/mountinfo").read_text().splitlines()
    except OSError:
        return []
    for line in lines:
        fields = line.split()
        after = fields[fields.index("-") + 1 :]
        if after[0] == "tmpfs" and after[1].startswith(SOURCE_PREFIX):
            # mountinfo escapes spaces and such as octal
            point = fields[4].encode().decode("unicode_escape")
            found.append((point, after[1]))
    return found


def release_within(folder: Path) -> list[str]:
    """Unmount our tmpfs mounts inside `folder`, whoever owned them: a harness the grading process killed
    (a compiled program of the student's looped in it) cannot unmount its sandboxes' own, and a mount left
    there would keep the grading's folder from being removed (EBUSY). Returns their mount points."""
    inside = os.path.join(os.path.realpath(folder), "")
    points = [point for point, _ in _our_mounts() if point.startswith(inside)]
    for point in points:
        release(Path(point))
    return points


def sweep() -> list[str]:
    """Unmount our tmpfs mounts whose owner has ended. Returns their mount points."""
    swept = []
    for point, source in _our_mounts():
        pid, _, started = source[len(SOURCE_PREFIX) :].partition(".")
        try:
            owner = psutil.Process(int(pid))
            alive = int(owner.create_time() * 100) == int(started)
        except (psutil.Error, ValueError):
            alive = False
        if not alive:
            release(Path(point))
            swept.append(point)
    return swept
