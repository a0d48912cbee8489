"""Busy loops beside a grading, as other gradings or a busy CI would be: each a shell spinning at the
caller's priority in a session of its own, as each grading is, so that the kernel weighs each like another
grading's harness (the loops of one session would share one autogroup, and starve a grading far less).

    with spinning(16):
        ...

Loaded by file path (tests/grader/conftest.py's `busy_loops` fixture; bench/busy_machine.py).
"""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def spinning(count: int) -> Iterator[None]:
    loops = [
        subprocess.Popen(["sh", "-c", "while :; do :; done"], start_new_session=True)
        for _ in range(count)
    ]
    try:
        yield
    finally:
        for loop in loops:
            loop.kill()
            loop.wait()
