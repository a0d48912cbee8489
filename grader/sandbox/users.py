"""A user id of its own for each sandbox, when grading as root.

Every worker running as one shared user (nobody) shares that user's process budget (RLIMIT_NPROC
counts a user's tasks machine-wide), its signals and its /proc entries: one student's fork bomb would
stop a classmate's worker from starting. So each sandbox runs as a uid no other sandbox holds while it
lives: taken from a range no account uses (none in the user database), and held by an exclusive lock
on a file of that uid (flock: the kernel drops it when the holder ends, however it ends, so a crashed
or killed grader leaves no stale claim). A uid whose lock is free but which still has processes (left
by a grading killed with SIGKILL, until grader.sandbox.cgroups.sweep kills them) is passed over.

The locks live in a folder only root can enter, the same for every grader on the machine:
/run/shardlab/sandbox-uids (or /tmp/shardlab-sandbox-uids where /run is not writable).
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import pwd
import stat
from dataclasses import dataclass
from pathlib import Path

from grader.core.errors import ShardlabError

FIRST_UID = 1_990_000_000  # below 2**31 (some tools misread larger ids), far above accounts and subuid ranges
UID_COUNT = 100_000
LOCK_FOLDERS = (Path("/run/shardlab/sandbox-uids"), Path("/tmp/shardlab-sandbox-uids"))


class NoSandboxUser(ShardlabError, OSError):
    """No uid of the range is free (or the lock folder cannot be made safely)."""


@dataclass(eq=False)
class SandboxUser:
    uid: int
    gid: int  # a group of its own, with the same number
    lock_fd: int  # held while the sandbox lives

    def release(self) -> None:
        """Give the uid back (after every process of the sandbox has ended)."""
        if self.lock_fd >= 0:
            os.close(self.lock_fd)  # closing drops the flock
            self.lock_fd = -1


def lock_folder() -> Path:
    """The folder of the locks, made 0700 and checked to be root's own (never a planted symlink)."""
    for folder in LOCK_FOLDERS:
        try:
            folder.parent.mkdir(mode=0o755, exist_ok=True)
            folder.mkdir(mode=0o700, exist_ok=True)
            info = os.lstat(folder)
        except OSError:
            continue
        if stat.S_ISDIR(info.st_mode) and info.st_uid == os.geteuid() and not info.st_mode & 0o077:
            return folder
    raise NoSandboxUser(
        "no safe folder for the sandbox uid locks (tried " + ", ".join(map(str, LOCK_FOLDERS)) + ")"
    )


def _in_use(uid: int) -> bool:
    """A process of that uid runs (left over), or an account has it."""
    with contextlib.suppress(KeyError):
        pwd.getpwuid(uid)
        return True
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            with contextlib.suppress(OSError):
                if entry.stat(follow_symlinks=False).st_uid == uid:
                    return True
    return False


def allocate() -> SandboxUser:
    """A uid no other live sandbox holds, locked until release()."""
    folder = lock_folder()
    # the lowest free: as many lock files as sandboxes at once
    for uid in range(FIRST_UID, FIRST_UID + UID_COUNT):
        fd = os.open(
            folder / str(uid), os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW, 0o600
        )
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            continue
        if _in_use(uid):
            os.close(fd)
            continue
        return SandboxUser(uid, uid, fd)
    raise NoSandboxUser(f"every uid from {FIRST_UID} to {FIRST_UID + UID_COUNT - 1} is in use")
