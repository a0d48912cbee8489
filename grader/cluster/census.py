"""What the harness sees itself of a multi-controller run's processes, from /proc: which processes they
are (by the pids the launcher gave them) and the TCP connections each holds.

The harness reads another process's /proc as root, or as the user that started the sandbox (its user
namespace's owner); where there is no procfs (macOS, at the plain process level) psutil's view of the
process. Nothing here runs in, or asks anything of, the student's processes. A student's
process can neither rename its ancestors nor become the launcher's child, so the launcher is found as
the sandbox's shallowest process running the module grader.cluster.launcher (not one whose
command starts it), and the processes among its children.
"""

from __future__ import annotations

import os
from collections import deque
from dataclasses import dataclass

import psutil

LAUNCHER = "grader.cluster.launcher"
ESTABLISHED = "01"  # /proc/net/tcp's st column
LOOPBACK = ("0100007F", "0000000000000000FFFF00000100007F")  # 127.0.0.1 in tcp and (v4-mapped) tcp6


@dataclass(frozen=True)
class Connection:
    local_port: int
    remote_port: int
    to_loopback: bool  # its remote address is 127.0.0.1
    established: bool


def _namespace_pid(pid: int) -> int | None:
    """The pid of `pid` in its own (innermost) pid namespace; without procfs (macOS) there is none."""
    if not os.path.isdir("/proc"):
        return pid
    try:
        with open(f"/proc/{pid}/status") as status:
            for line in status:
                if line.startswith("NSpid:"):
                    return int(line.split()[-1])
    except (OSError, ValueError):
        pass
    return None


def launcher_pid(root: int) -> int | None:
    """The launcher in the sandbox started as `root`: the shallowest process of its tree running it."""
    queue = deque([root])
    while queue:
        pid = queue.popleft()
        try:
            process = psutil.Process(pid)
        except psutil.NoSuchProcess:
            continue
        try:
            command = process.cmdline()
        except psutil.Error:  # unreadable for a moment: its children may still be the ones
            command = []
        # not one that starts it
        if "-m" in command and command[command.index("-m") + 1 :][:1] == [LAUNCHER]:
            return pid
        try:
            queue.extend(child.pid for child in process.children())
        except psutil.Error:
            continue
    return None


def host_pid(launcher: int, sandbox_pid: int) -> int | None:
    """The pid, as this process sees it, of the launcher's child that has `sandbox_pid` in the launcher's
    pid namespace (a child never leaves its parent's pid namespace)."""
    try:
        children = psutil.Process(launcher).children()
    except (psutil.NoSuchProcess, psutil.AccessDenied):
        return None
    return next((child.pid for child in children if _namespace_pid(child.pid) == sandbox_pid), None)


def tcp_connections(pid: int) -> list[Connection]:
    """The TCP sockets `pid` holds, read from its own network namespace's tables (raises OSError when
    the process is gone or out of reach)."""
    if not os.path.isdir("/proc"):  # macOS, say: no namespaces, psutil sees the process's sockets
        try:
            held = psutil.Process(pid).net_connections("tcp")
        except psutil.Error as exc:
            raise OSError(str(exc)) from None
        return [
            Connection(
                c.laddr.port if c.laddr else 0,
                c.raddr.port if c.raddr else 0,
                bool(c.raddr) and c.raddr.ip in ("127.0.0.1", "::ffff:127.0.0.1"),
                c.status == psutil.CONN_ESTABLISHED,
            )
            for c in held
        ]
    inodes = set()
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            link = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue
        if link.startswith("socket:["):
            inodes.add(link[len("socket:[") : -1])
    found = []
    for table in ("tcp", "tcp6"):  # psutil reads the reader's own namespace's: not the sandbox's
        with open(f"/proc/{pid}/net/{table}") as lines:
            next(lines)
            for line in lines:
                fields = line.split()
                if len(fields) > 9 and fields[9] in inodes:
                    local, remote = fields[1].rsplit(":", 1), fields[2].rsplit(":", 1)
                    found.append(
                        Connection(
                            int(local[1], 16),
                            int(remote[1], 16),
                            remote[0] in LOOPBACK,
                            fields[3] == ESTABLISHED,
                        )
                    )
    return found


def connected(held: list[Connection], port: int) -> str | None:
    """None when one of the sockets `held` is an established connection to port `port` of the loopback,
    else what they are."""
    if any(c.established and c.to_loopback and c.remote_port == port for c in held):
        return None
    return f"it held {len(held)} TCP socket(s), none connected to the coordinator's port {port}"
