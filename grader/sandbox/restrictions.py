"""What confines a sandbox beyond its view of the files, on this machine: whose user it runs as, its
capabilities, its network, its process budget, its share of the processor and the sockets it may make.

Decided once per isolation level (grader.sandbox.confinement applies it at every sandbox's start):

- identity: as root, a uid of its own (grader.sandbox.users) wherever that uid can reach
  Python (always under bubblewrap, which shows it Python through its own mounts); otherwise (Python
  under root's home, say, under Landlock) root's uid inside a user namespace of its own, with every
  capability dropped. As any other user: the grader's uid, in a user namespace of its own where the
  kernel allows one (bubblewrap always makes one).
- process budget: RLIMIT_NPROC counts a user's tasks per user namespace, so with a uid or a user
  namespace of its own it counts this sandbox's tasks only (root in the first namespace is exempt from
  it, the reason Landlock as root needs the namespace); plus a pids cgroup per sandbox where the
  machine lets the grader make one (grader.sandbox.cgroups).
- network: a network namespace of its own (bubblewrap's, or unshared by the launcher): nothing but a
  loopback, down, or up for the processes of one run (ex12), reaching nothing outside.
- capabilities: none, in every set (bounding, effective, permitted, inheritable, ambient), no_new_privs.
- seccomp (grader.sandbox.seccomp): which sockets it may make and connect.
"""

from __future__ import annotations

import functools
import json
import os
import subprocess
import sys
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path

from grader.sandbox import cgroups

NOBODY = (65534, 65534)  # a user that owns nothing: what any other uid may reach, it may


class Isolation(StrEnum):
    """How a worker is confined: a sandbox (bubblewrap, landlock) or a plain process
    (grader.sandbox.confinement chooses it and applies it)."""

    BUBBLEWRAP = "bubblewrap"
    LANDLOCK = "landlock"
    PROCESS = "process"


class Identity(StrEnum):
    OWN_UID = "a uid of its own"
    USER_NAMESPACE = "its own user namespace"
    GRADER = "the grader's user"


@dataclass(frozen=True)
class Plan:
    """How a sandbox of one level is confined here."""

    identity: Identity
    network_namespace: bool  # bubblewrap makes its own; elsewhere the launcher does
    seccomp: bool
    nproc_per_sandbox: bool  # RLIMIT_NPROC counts this sandbox's tasks only
    cgroups: tuple[str, ...]  # the sandbox's own groups: "pids", "cpu"

    @property
    def process_budget(self) -> list[str]:
        return ["RLIMIT_NPROC"] * self.nproc_per_sandbox + ["pids.max"] * ("pids" in self.cgroups)


def is_root() -> bool:
    return os.geteuid() == 0


# Run by its path, without site (-S): a Python that skips site-packages' .pth files starts in a fifth of the
# time, and every sandbox's start runs it (twice under bubblewrap). -E -s: no PYTHON* variable, no user site.
LAUNCH = str(Path(__file__).resolve().with_name("launch.py"))


def launcher(config: dict, argv: list[str], *, as_module: bool = False) -> list[str]:
    """The command that applies `config` (grader.sandbox.launch) to a process, then executes argv.
    as_module: `python -I -B -m grader.sandbox.launch`, the slower form that bubblewrap's own command line
    shows (grader.cluster.census reads it: the first module run there is the launcher's)."""
    if as_module:
        return [
            sys.executable,
            "-I",
            "-B",
            "-m",
            "grader.sandbox.launch",
            json.dumps(config),
            "--",
            *argv,
        ]
    return [sys.executable, "-E", "-s", "-S", "-B", LAUNCH, json.dumps(config), "--", *argv]


# Before bubblewrap, which forks: join the sandbox's cgroups and become the out-of-memory killer's first
# pick, then execute bwrap. A shell, as a Python start (the launcher's) would add some 50 ms to every sandbox.
_JOIN = """adj=$1; shift
while [ "$1" != "--" ]; do echo $$ > "$1" || exit 126; shift; done; shift
echo "$adj" > /proc/self/oom_score_adj || exit 126
exec "$@"
"""


def joining(cgroup_files: list[str], oom_score_adj: int, argv: list[str]) -> list[str]:
    """The command that enters `cgroup_files` (cgroup.procs) and sets oom_score_adj, then executes argv."""
    return ["/bin/sh", "-c", _JOIN, "join", str(oom_score_adj), *cgroup_files, "--", *argv]


@functools.cache
def _launch_works(config_json: str, argv: tuple[str, ...] = ("/bin/true",)) -> bool:
    try:
        done = subprocess.run(
            launcher(json.loads(config_json), list(argv)),
            capture_output=True,
            env={"PATH": "/usr/bin:/bin"},
            timeout=120,
        )
    except (OSError, subprocess.TimeoutExpired):
        return False
    return done.returncode == 0


def launch_works(config: dict, argv: tuple[str, ...] = ("/bin/true",)) -> bool:
    """Whether the launcher applies `config` here (probed once per configuration, by a real launch)."""
    return _launch_works(json.dumps(config, sort_keys=True), argv)


def unprivileged_reaches_python() -> bool:
    """Outside bubblewrap's own view, another user must reach Python itself (a pyenv under /root does not)."""
    probe = (sys.executable, "-I", "-B", "-c", "import jax")
    return is_root() and launch_works({"user": list(NOBODY), "cwd": "/"}, probe)


def user_namespaces() -> bool:
    return launch_works({"namespaces": {"user": True, "loopback": True}, "drop_capabilities": True})


def network_namespaces() -> bool:
    """As root a network namespace needs no user namespace; as another user it does."""
    return launch_works(
        {"namespaces": {"user": not is_root(), "loopback": True}, "drop_capabilities": True}
    )


def seccomp_filters() -> bool:
    return launch_works({"drop_capabilities": True, "seccomp": {"profile": "worker"}})


@functools.cache
def plan(level: Isolation) -> Plan:
    """The plan for a level on this machine."""
    groups = tuple(c for c in ("pids", "cpu") if c in cgroups.hierarchies())
    # as root no user namespace (its uid is switched inside); else bwrap makes one
    if level == Isolation.BUBBLEWRAP:
        identity = Identity.OWN_UID if is_root() else Identity.USER_NAMESPACE
        return Plan(identity, True, seccomp_filters(), True, groups)
    if is_root() and unprivileged_reaches_python():
        identity = Identity.OWN_UID
    elif user_namespaces():
        identity = Identity.USER_NAMESPACE
    else:
        identity = Identity.GRADER
    netns = identity is Identity.USER_NAMESPACE or (is_root() and network_namespaces())
    return Plan(identity, netns, seccomp_filters(), identity is not Identity.GRADER, groups)
