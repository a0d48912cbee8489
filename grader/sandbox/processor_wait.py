"""How long a test's processes waited for a processor, as Linux records it per thread: the run delay,
the second figure of /proc/<pid>/task/<tid>/schedstat (nanoseconds spent ready to run but not running).
grader.core.wall_cap says what a cap does with it.

A snapshot is taken when a test's clock starts and read again only when its wall-clock cap would strike:
the most any one thread's run delay grew since (a thread born since counts all of its own). A thread that
has ended is not read, so the figure can only be too small (a cap that strikes sooner), never too large.
Without procfs (macOS) nothing is read and nothing is forgiven.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable

import psutil


def _delays(pids: Iterable[int]) -> dict[int, int]:
    """Every live thread of `pids`: its run delay so far, in nanoseconds."""
    found: dict[int, int] = {}
    for pid in pids:
        try:
            threads = os.listdir(f"/proc/{pid}/task")
        except OSError:  # gone, or no procfs
            continue
        for tid in threads:
            try:
                with open(f"/proc/{pid}/task/{tid}/schedstat", "rb") as stat:
                    found[int(tid)] = int(stat.read().split()[1])
            except (OSError, ValueError, IndexError):
                continue
    return found


def tree(pid: int | None) -> list[int]:
    """`pid` and its descendants (none if it is None or gone)."""
    if pid is None:
        return []
    try:
        return [pid, *(child.pid for child in psutil.Process(pid).children(recursive=True))]
    except psutil.Error:
        return []


class Waits:
    """The waiting of the processes `pids()` names (called at the start and at each reading: processes
    come and go), since this object was made."""

    def __init__(self, pids: Callable[[], Iterable[int]]):
        self._pids = pids
        self._start = _delays(pids())

    def since(self) -> float:
        """Seconds: the most any one thread waited for a processor since the start."""
        now = _delays(self._pids())
        grown = (delay - self._start.get(tid, 0) for tid, delay in now.items())
        return max(grown, default=0) / 1e9


class NoWaits(Waits):
    """Before any clock started: nothing waited."""

    def __init__(self):
        super().__init__(list)
