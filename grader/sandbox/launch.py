"""Applied inside a sandbox's first process before the worker itself starts, then replaced by it (execv).

    python -E -s -S -B .../grader/sandbox/launch.py CONFIG_JSON -- ARGV...   (grader.sandbox.restrictions.launcher)

CONFIG_JSON (every key optional but cwd):
    {"cgroups": [cgroup.procs files to join], "oom_score_adj": n, "rlimits": {"AS": n, ...},
     "namespaces": {"user": bool, "loopback": bool} (a network, IPC and UTS namespace of its own; with
       "user", in a user namespace of its own that maps this process's uid and gid to themselves),
     "user": [uid, gid] (as root: become that user), "drop_capabilities": bool, "die_with_parent": bool,
     "landlock": {"read": [...], "write": [...], "network": bool}, "seccomp": {"profile": "worker" | "run" | "process"},
     "cwd": path}

In this order: join the control groups (before anything here can fork), make the worker the first the
out-of-memory killer picks, set the limits, enter the namespaces, drop the capabilities' bounding set
and lock root's special treatment off (while root may still), change user, clear every capability set
left, set no_new_privs, ask for SIGKILL when the parent dies, then Landlock and the seccomp filter: the
exec'd worker and all it starts inherit them and cannot undo any. A step asked for that fails stops
the launch (exit status 126 with the reason on stderr): never a worker less confined than described.
Standard library only: this runs in every sandbox's start.
"""

from __future__ import annotations

import ctypes
import json
import os
import resource
import signal
import struct
import sys

try:  # imported now: once the user has changed, Python's own files may be out of its reach
    from grader.sandbox import seccomp
# run by its path without site (grader.sandbox.restrictions.launcher): its folder is sys.path[0]
except ImportError:
    import seccomp

# Landlock (linux/landlock.h); the syscall numbers are the same on x86_64 and aarch64.
SYS_CREATE_RULESET, SYS_ADD_RULE, SYS_RESTRICT_SELF = 444, 445, 446
CREATE_RULESET_VERSION = 1
RULE_PATH_BENEATH = 1
PR_SET_PDEATHSIG = 1
PR_CAPBSET_DROP = 24
PR_SET_SECUREBITS = 28
PR_SET_NO_NEW_PRIVS = 38
PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL = 47, 4
# Root gets no capabilities from exec, keep_caps stays off, no ambient capability can be raised; locked.
SECURE_BITS = (1 << 0) | (1 << 1) | (1 << 5) | (1 << 6) | (1 << 7)
CAPABILITY_VERSION_3 = 0x20080522
CLONE_NEWUTS, CLONE_NEWIPC, CLONE_NEWUSER, CLONE_NEWNET = (
    0x04000000,
    0x08000000,
    0x10000000,
    0x40000000,
)
SIOCGIFFLAGS, SIOCSIFFLAGS, IFF_UP = 0x8913, 0x8914, 0x1
FS_EXECUTE, FS_WRITE_FILE, FS_READ_FILE, FS_READ_DIR = 1 << 0, 1 << 1, 1 << 2, 1 << 3
FS_TRUNCATE, FS_IOCTL_DEV = 1 << 14, 1 << 15
# the rights a file rule may hold
FILE_RIGHTS = FS_EXECUTE | FS_WRITE_FILE | FS_READ_FILE | FS_TRUNCATE | FS_IOCTL_DEV
NET_BIND_TCP, NET_CONNECT_TCP = 1 << 0, 1 << 1
SCOPE_ABSTRACT_UNIX_SOCKET, SCOPE_SIGNAL = 1 << 0, 1 << 1
READ_RIGHTS = FS_EXECUTE | FS_READ_FILE | FS_READ_DIR
REFUSED_EXIT = 126


# not a ShardlabError: this file runs as a script, importing nothing of grader
class LaunchRefused(OSError):
    """A confinement step that was asked for could not be applied."""


class RulesetAttr(ctypes.Structure):
    _fields_ = [
        ("handled_access_fs", ctypes.c_uint64),
        ("handled_access_net", ctypes.c_uint64),
        ("scoped", ctypes.c_uint64),
    ]


class PathBeneathAttr(ctypes.Structure):
    _pack_ = 1
    _fields_ = [("allowed_access", ctypes.c_uint64), ("parent_fd", ctypes.c_int32)]


class CapHeader(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]


class CapData(ctypes.Structure):
    _fields_ = [
        ("effective", ctypes.c_uint32),
        ("permitted", ctypes.c_uint32),
        ("inheritable", ctypes.c_uint32),
    ]


def load_libc():
    return ctypes.CDLL(None, use_errno=True)


def _check(result: int, what: str) -> None:
    if result != 0:
        code = ctypes.get_errno()
        raise LaunchRefused(code, f"{what} failed: {os.strerror(code)}")


def landlock_abi() -> int:
    """The kernel's Landlock ABI version, 0 where there is none (or a seccomp filter hides it)."""
    try:
        version = load_libc().syscall(
            SYS_CREATE_RULESET, None, ctypes.c_size_t(0), ctypes.c_uint32(CREATE_RULESET_VERSION)
        )
    except (OSError, AttributeError):
        return 0
    return max(version, 0)


def handled_fs_rights(abi: int) -> int:
    rights = (1 << 13) - 1  # ABI 1: execute .. make_sym
    if abi >= 2:
        rights |= 1 << 13  # refer
    if abi >= 3:
        rights |= FS_TRUNCATE
    if abi >= 5:
        rights |= FS_IOCTL_DEV
    return rights


def apply_landlock(read: list[str], write: list[str], network: bool = False) -> None:
    libc, abi = load_libc(), landlock_abi()
    if abi < 1:
        raise OSError("Landlock is not available")
    handled = handled_fs_rights(abi)
    attr = RulesetAttr(
        handled,
        NET_BIND_TCP | NET_CONNECT_TCP if abi >= 4 and not network else 0,
        SCOPE_ABSTRACT_UNIX_SOCKET | SCOPE_SIGNAL if abi >= 6 else 0,
    )
    size = 8 if abi < 4 else 16 if abi < 6 else 24  # the struct grew with the ABI
    ruleset = libc.syscall(
        SYS_CREATE_RULESET, ctypes.byref(attr), ctypes.c_size_t(size), ctypes.c_uint32(0)
    )
    if ruleset < 0:
        raise OSError(ctypes.get_errno(), "landlock_create_ruleset failed")
    for paths, rights in ((read, READ_RIGHTS & handled), (write, handled)):
        for path in paths:
            try:
                fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
            except OSError:
                continue  # a path this machine does not have
            allowed = rights & FILE_RIGHTS if not os.path.isdir(path) else rights
            rule = PathBeneathAttr(allowed, fd)
            done = libc.syscall(
                SYS_ADD_RULE,
                ruleset,
                ctypes.c_uint32(RULE_PATH_BENEATH),
                ctypes.byref(rule),
                ctypes.c_uint32(0),
            )
            os.close(fd)
            if done < 0:
                raise OSError(ctypes.get_errno(), f"landlock_add_rule failed for {path}")
    if libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_NO_NEW_PRIVS) failed")
    if libc.syscall(SYS_RESTRICT_SELF, ruleset, ctypes.c_uint32(0)) != 0:
        raise OSError(ctypes.get_errno(), "landlock_restrict_self failed")
    os.close(ruleset)


def join_cgroups(files: list[str]) -> None:
    for path in files:
        with open(path, "w") as procs:
            procs.write(str(os.getpid()))


def enter_namespaces(user: bool, loopback: bool) -> None:
    """A network, IPC and UTS namespace of its own; with `user`, a user namespace of its own too, in
    which this process keeps its uid and gid (mapped to themselves): its tasks then count against
    RLIMIT_NPROC in this namespace only, and it has no capability anywhere outside it."""
    uid, gid = os.geteuid(), os.getegid()
    _check(
        load_libc().unshare(
            CLONE_NEWNET | CLONE_NEWIPC | CLONE_NEWUTS | (CLONE_NEWUSER if user else 0)
        ),
        "unshare",
    )
    if user:
        for name, text in (
            ("setgroups", "deny"),
            ("gid_map", f"{gid} {gid} 1"),
            ("uid_map", f"{uid} {uid} 1"),
        ):
            with open(f"/proc/self/{name}", "w") as mapping:
                mapping.write(text)
    if loopback:  # the processes of a run reach each other over it; nothing else is on this network
        import fcntl  # here: before any change of user (see the seccomp import)
        import socket

        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
            request = struct.pack("16sH14x", b"lo", 0)
            flags = struct.unpack("16sH14x", fcntl.ioctl(sock, SIOCGIFFLAGS, request))[1]
            fcntl.ioctl(sock, SIOCSIFFLAGS, struct.pack("16sH14x", b"lo", flags | IFF_UP))


def _has_capability(number: int) -> bool:
    with open("/proc/self/status") as status:
        effective = next(int(line.split()[1], 16) for line in status if line.startswith("CapEff:"))
    return bool(effective >> number & 1)


def drop_bounding_set() -> None:
    """Empty the bounding set and lock root's privileges off, while this process may (CAP_SETPCAP):
    nothing it executes can gain a capability again, not even as root."""
    CAP_SETPCAP = 8
    if not _has_capability(CAP_SETPCAP):
        return  # nothing to drop: a process without it has no capability to give (checked below)
    libc = load_libc()
    with open("/proc/sys/kernel/cap_last_cap") as last:
        for number in range(int(last.read()) + 1):
            _check(libc.prctl(PR_CAPBSET_DROP, number, 0, 0, 0), f"dropping capability {number}")
    _check(libc.prctl(PR_SET_SECUREBITS, SECURE_BITS, 0, 0, 0), "setting the secure bits")


def clear_capabilities() -> None:
    """Empty the effective, permitted, inheritable and ambient sets; then no capability may remain."""
    libc = load_libc()
    _check(
        libc.prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0),
        "clearing the ambient capabilities",
    )
    header, data = CapHeader(CAPABILITY_VERSION_3, 0), (CapData * 2)()
    _check(libc.capset(ctypes.byref(header), data), "capset")
    with open("/proc/self/status") as status:
        sets = {
            k: int(v, 16) for k, v in (line.split(":") for line in status if line.startswith("Cap"))
        }
    if any(sets[k] for k in ("CapInh", "CapPrm", "CapEff", "CapAmb")):
        raise LaunchRefused(f"capabilities remain: {sets}")


def become(uid: int, gid: int) -> None:
    os.setgroups([])
    os.setresgid(gid, gid, gid)
    os.setresuid(uid, uid, uid)


def apply(config: dict) -> None:
    """Every step of `config`, in order, on this process."""
    join_cgroups(config.get("cgroups", []))
    if "oom_score_adj" in config:
        with open("/proc/self/oom_score_adj", "w") as adj:
            adj.write(str(config["oom_score_adj"]))
    for name, value in config.get("rlimits", {}).items():
        resource.setrlimit(getattr(resource, f"RLIMIT_{name}"), (value, value))
    if config.get("namespaces"):
        enter_namespaces(
            config["namespaces"].get("user", False), config["namespaces"].get("loopback", False)
        )
    if config.get("drop_capabilities"):
        drop_bounding_set()
    if config.get("user"):
        become(*config["user"])
    if config.get("drop_capabilities"):
        clear_capabilities()
        _check(load_libc().prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), "prctl(PR_SET_NO_NEW_PRIVS)")
    if config.get("die_with_parent"):  # after the change of user, which clears it
        _check(
            load_libc().prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0), "prctl(PR_SET_PDEATHSIG)"
        )
        if os.getppid() == 1:
            raise LaunchRefused("the parent ended before the launch")
    if config.get("landlock"):
        rules = config["landlock"]
        apply_landlock(rules["read"], rules["write"], rules.get("network", False))
    if config.get("seccomp") is not None:
        seccomp.install(config["seccomp"]["profile"])


def main(argv: list[str]) -> None:
    config, separator, *command = argv
    assert separator == "--", "usage: python .../grader/sandbox/launch.py CONFIG_JSON -- ARGV..."
    config = json.loads(config)
    try:
        apply(config)
        if "cwd" in config:
            os.chdir(config["cwd"])
    except OSError as exc:
        sys.stderr.write(f"shardlab launch refused: {exc}\n")
        sys.stderr.flush()
        os._exit(REFUSED_EXIT)
    os.execv(command[0], command)


if __name__ == "__main__":
    main(sys.argv[1:])
