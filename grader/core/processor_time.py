"""What a test's time limit counts: the processor time of the student's code in user mode, its own
instructions. The time the kernel spends on its behalf (system time: page faults, system calls) is
recorded beside it but held only by the wall-clock cap, which counts it as running (grader.core.wall_cap).

Why not the sum: the kernel's share depends on the machine more than on the program. On a virtual machine
that gives idle memory back to its host (this project's CI machines), the first touch of 3 GiB that the
host took back cost 9.3-10.1 s of system time and 0.1 s of user time, against 0.3 s of system time when
touched again at once; calls slowed down by a loaded machine leave the host time to take the memory back
between them, so an honest call holding 3 GiB used up a 10 s limit only when the machine was busy
(docs/measurements.md). A call that spends its time in the kernel for ever is still ended: by the cap.
"""

from __future__ import annotations

from typing import NamedTuple


class ProcessorTime(NamedTuple):
    """Seconds of processor time, in user mode and in the kernel (summed over threads and processes)."""

    user: float = 0.0
    system: float = 0.0

    def __add__(self, other: ProcessorTime) -> ProcessorTime:  # type: ignore[override]
        return ProcessorTime(self.user + other.user, self.system + other.system)

    def __sub__(self, other: ProcessorTime) -> ProcessorTime:
        return ProcessorTime(self.user - other.user, self.system - other.system)
