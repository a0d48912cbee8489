"""A seccomp filter for a sandbox's processes: the sockets a worker needs and nothing more.

Installed by the launcher (grader.sandbox.launch) just before it executes the worker; the worker and
everything it starts inherit it and cannot remove it. A few standard modules only (it is imported at
every sandbox's start): a classic BPF program assembled here and installed with prctl(PR_SET_SECCOMP).
Three profiles:

- "worker": may create AF_UNIX stream and seqpacket sockets (socket, socketpair) and nothing else, and
  may not connect(): it talks to the harness over pipes and inherited sockets, so a named socket
  elsewhere on the machine (a daemon's, owned by the grader's user) is out of reach, and a datagram
  socket that could send to one by address cannot be made.
- "run" (a run of several processes, ex12: its launcher and the grader's coordinator) may create AF_INET
  and AF_INET6 sockets and connect them (over the loopback of the sandbox's own network namespace), and
  AF_UNIX stream sockets: jax's coordination service listens on one in the coordinator's own folder,
  behind the grader's gate (grader.cluster.gate).
- "process" (each process of such a run, added on top of the run's filter by its own launch) may create
  AF_INET and AF_INET6 stream sockets and connect them (jax's gRPC and gloo), route netlink sockets (gloo
  lists the namespace's interfaces) and socketpairs, but no UNIX socket (so not the service's), no
  datagram socket, and no System V or POSIX message queue, semaphore or shared memory segment: what one
  process learns of another's rows can come only over TCP, through jax's collectives or sockets of its own.
- Everywhere: no io_uring (it creates sockets without socket()), no kernel keyrings, bpf(), perf
  events or userfaultfd, and no new user namespace (unshare or clone with CLONE_NEWUSER; clone3, whose
  flags a filter cannot read, answers ENOSYS so that the C library falls back to clone).
A syscall of another architecture (x32, 32-bit compat) kills the process.
"""

from __future__ import annotations

import ctypes
import errno
import os
import struct
from typing import NamedTuple

PR_SET_SECCOMP = 22
SECCOMP_MODE_FILTER = 2
RET_ALLOW = 0x7FFF0000
RET_KILL_PROCESS = 0x80000000
RET_ERRNO = 0x00050000
LD_W_ABS, JEQ_K, JGE_K, AND_K, RET_K = 0x20, 0x15, 0x35, 0x54, 0x06
# seccomp_data; args' low words
OFFSET_NR, OFFSET_ARCH, OFFSET_ARG0, OFFSET_ARG1, OFFSET_ARG2 = (0, 4, 16, 24, 32)
X32_SYSCALL_BIT = 0x40000000
AF_UNIX, AF_INET, AF_INET6, AF_NETLINK, NETLINK_ROUTE = 1, 2, 10, 16, 0
SOCK_STREAM, SOCK_SEQPACKET, SOCK_TYPE_MASK = 1, 5, 0xF
WORKER, RUN, PROCESS = "worker", "run", "process"
PROFILES = (WORKER, RUN, PROCESS)
CLONE_NEWUSER = 0x10000000


class Architecture(NamedTuple):
    audit: int
    numbers: dict[str, int]


ARCHITECTURES = {
    "x86_64": Architecture(
        0xC000003E,
        {
            "socket": 41,
            "connect": 42,
            "socketpair": 53,
            "clone": 56,
            "unshare": 272,
            "add_key": 248,
            "request_key": 249,
            "keyctl": 250,
            "perf_event_open": 298,
            "bpf": 321,
            "userfaultfd": 323,
            "io_uring_setup": 425,
            "io_uring_enter": 426,
            "io_uring_register": 427,
            "clone3": 435,
            "shmget": 29,
            "semget": 64,
            "msgget": 68,
            "mq_open": 240,
        },
    ),
    "aarch64": Architecture(
        0xC00000B7,
        {
            "socket": 198,
            "socketpair": 199,
            "connect": 203,
            "unshare": 97,
            "clone": 220,
            "add_key": 217,
            "request_key": 218,
            "keyctl": 219,
            "perf_event_open": 241,
            "bpf": 280,
            "userfaultfd": 282,
            "io_uring_setup": 425,
            "io_uring_enter": 426,
            "io_uring_register": 427,
            "clone3": 435,
            "shmget": 194,
            "semget": 190,
            "msgget": 186,
            "mq_open": 180,
        },
    ),
}
REFUSED = (
    "add_key",
    "request_key",
    "keyctl",
    "perf_event_open",
    "bpf",
    "userfaultfd",
    "io_uring_setup",
    "io_uring_enter",
    "io_uring_register",
)
SHARED_MEMORY = ("shmget", "semget", "msgget", "mq_open")  # refused to a run's processes


class SockFilter(ctypes.Structure):
    _fields_ = [
        ("code", ctypes.c_uint16),
        ("jt", ctypes.c_uint8),
        ("jf", ctypes.c_uint8),
        ("k", ctypes.c_uint32),
    ]


class SockFprog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.POINTER(SockFilter))]


def architecture() -> Architecture | None:
    return ARCHITECTURES.get(os.uname().machine)


def _errno(code: int) -> int:
    return RET_ERRNO | code


class _Program:
    """Classic BPF with forward jumps to labels, resolved when done."""

    def __init__(self):
        self.code: list[tuple[int, object, object, int]] = []
        self.labels: dict[str, int] = {}

    def load(self, offset: int) -> None:
        self.code.append((LD_W_ABS, 0, 0, offset))

    def jump_if(self, op: int, value: int, then: str | int = 0, otherwise: str | int = 0) -> None:
        self.code.append((op, then, otherwise, value))

    def mask(self, value: int) -> None:
        self.code.append((AND_K, 0, 0, value))

    def ret(self, value: int) -> None:
        self.code.append((RET_K, 0, 0, value))

    def label(self, name: str) -> None:
        self.labels[name] = len(self.code)

    def assemble(self) -> bytes:
        out = b""
        for at, (op, then, otherwise, value) in enumerate(self.code):
            offsets = [
                self.labels[t] - at - 1 if isinstance(t, str) else t for t in (then, otherwise)
            ]
            assert all(0 <= o < 256 for o in offsets), "a jump out of range"
            out += struct.pack("HBBI", op, offsets[0], offsets[1], value)
        return out


def program(profile: str, arch: Architecture) -> bytes:
    """The filter of a profile ("worker", "run" or "process"), as the bytes of its struct sock_filter array."""
    if profile not in PROFILES:
        raise ValueError(f"no seccomp profile {profile!r}: {', '.join(PROFILES)}")
    nr = arch.numbers
    p = _Program()
    p.load(OFFSET_ARCH)
    p.jump_if(JEQ_K, arch.audit, "native")
    p.ret(RET_KILL_PROCESS)
    p.label("native")
    p.load(OFFSET_NR)
    if arch is ARCHITECTURES["x86_64"]:
        p.jump_if(JGE_K, X32_SYSCALL_BIT, "kill")
    p.jump_if(JEQ_K, nr["socket"], "socket")
    p.jump_if(JEQ_K, nr["socketpair"], "socketpair")
    p.jump_if(JEQ_K, nr["connect"], "connect")
    p.jump_if(JEQ_K, nr["unshare"], "namespaces")
    p.jump_if(JEQ_K, nr["clone"], "namespaces")
    p.jump_if(JEQ_K, nr["clone3"], "nosys")
    for name in REFUSED + (SHARED_MEMORY if profile == PROCESS else ()):
        p.jump_if(JEQ_K, nr[name], "nosys")
    p.ret(RET_ALLOW)
    p.label("kill")
    p.ret(RET_KILL_PROCESS)
    p.label("nosys")
    p.ret(_errno(errno.ENOSYS))

    p.label("namespaces")  # unshare(flags) and clone(flags, ...): flags is the first argument
    p.load(OFFSET_ARG0)
    p.mask(CLONE_NEWUSER)
    p.jump_if(JEQ_K, 0, "allow", "eperm")

    p.label("connect")
    p.ret(_errno(errno.EACCES) if profile == WORKER else RET_ALLOW)

    p.label("socket")
    p.load(OFFSET_ARG0)
    if profile == WORKER:
        p.jump_if(JEQ_K, AF_UNIX, "stream", "no_family")
    else:
        p.jump_if(JEQ_K, AF_INET, "inet")
        p.jump_if(JEQ_K, AF_INET6, "inet")
        if profile == RUN:
            p.jump_if(JEQ_K, AF_UNIX, "stream")
        p.jump_if(JEQ_K, AF_NETLINK, "route", "no_family")
        p.label("route")  # gloo lists the interfaces (getifaddrs): the namespace's own loopback
        p.load(OFFSET_ARG2)
        p.jump_if(JEQ_K, NETLINK_ROUTE, "allow", "no_family")
        # a run's processes: TCP only (a datagram needs no connection the grader could see)
        p.label("inet")
        if profile == PROCESS:
            p.load(OFFSET_ARG1)
            p.mask(SOCK_TYPE_MASK)
            p.jump_if(JEQ_K, SOCK_STREAM, "allow", "eacces")
        else:
            p.ret(RET_ALLOW)

    p.label("socketpair")
    p.load(OFFSET_ARG0)
    p.jump_if(JEQ_K, AF_UNIX, "stream", "no_family")

    # an AF_UNIX socket: stream or seqpacket (a datagram one sends to any named socket)
    p.label("stream")
    p.load(OFFSET_ARG1)
    p.mask(SOCK_TYPE_MASK)
    p.jump_if(JEQ_K, SOCK_STREAM, "allow")
    p.jump_if(JEQ_K, SOCK_SEQPACKET, "allow", "eacces")

    p.label("no_family")
    p.ret(_errno(errno.EAFNOSUPPORT))
    p.label("eacces")
    p.ret(_errno(errno.EACCES))
    p.label("eperm")
    p.ret(_errno(errno.EPERM))
    p.label("allow")
    p.ret(RET_ALLOW)
    return p.assemble()


def install(profile: str) -> None:
    """Install a profile's filter on this process (no_new_privs must be set), on top of any it has already.
    OSError where it cannot be."""
    arch = architecture()
    if arch is None:
        raise OSError(errno.ENOSYS, f"no seccomp filter for {os.uname().machine}")
    code = program(profile, arch)
    count = len(code) // ctypes.sizeof(SockFilter)
    instructions = (SockFilter * count).from_buffer_copy(code)
    fprog = SockFprog(count, instructions)
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, ctypes.byref(fprog), 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_SECCOMP) failed")
