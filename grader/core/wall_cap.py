"""The wall-clock cap's arithmetic, one rule for every process that holds a test to it (the worker's
supervisor, the grading process, a multi-process run): the cap counts the time the test's processes ran
or slept, never the time they were ready to run and waiting for a processor that other work held.

A grading beside other gradings (a class on one server, a busy CI) makes every call wait for a core; a
cap that counted that wait would strike an honest program for the machine's load. What it waited is read
from Linux's per-thread run delay (grader.sandbox.processor_wait): the most any one thread of the test's
processes waited, which is the most the test's progress can have been held back by waiting (threads wait
side by side). A program cannot buy itself wait without running: a thread only waits while it is ready to
run, and the threads that run meanwhile spend the test's processor-time limit. Still, a thread can be made
to wait without end at the lowest priority on a busy machine, so the credit stops at WAIT_CREDIT x the
cap: a call that never ends is struck after at most (1 + WAIT_CREDIT) x the cap whatever the load.
"""

from __future__ import annotations

# The most waiting forgiven, as a multiple of the cap: at a load of 5 per core a call that runs or sleeps
# for the whole cap takes 5 times as long, and still keeps its time.
WAIT_CREDIT = 4.0


def credited(waited: float, cap: float) -> float:
    """How much of `waited` (seconds a thread waited for a processor) the cap forgives."""
    return min(max(waited, 0.0), WAIT_CREDIT * cap)


def counted(wall: float, waited: float, cap: float) -> float:
    """The seconds of `wall` that the cap counts: less the waiting it forgives."""
    return wall - credited(waited, cap)


def past(wall: float, waited: float, cap: float) -> bool:
    """A test that has taken `wall` seconds, `waited` of them waiting for a processor, is past `cap`."""
    return counted(wall, waited, cap) > cap
