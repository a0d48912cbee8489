"""Keeping speedup measurements apart from other work when several submissions are graded at once.

With SHARDLAB_TIMING_LOCK_DIR set (grade-batch sets it), every test holds a shared lock while it runs
and a speedup test holds it exclusively, so a measurement never shares the cores with another
grader's test. A turnstile lock taken first gives the waiting measurement priority over newly
starting tests (flock alone would let shared holders starve it).
"""

from __future__ import annotations

import contextlib
import fcntl
import os
from pathlib import Path

LOCK_DIR = "SHARDLAB_TIMING_LOCK_DIR"


@contextlib.contextmanager
def hold(*, exclusive: bool):
    folder = os.environ.get(LOCK_DIR)
    if not folder:
        yield
        return
    Path(folder).mkdir(parents=True, exist_ok=True)
    with (
        open(Path(folder) / "turnstile", "a") as turnstile,
        open(Path(folder) / "cores", "a") as cores,
    ):
        fcntl.flock(turnstile, fcntl.LOCK_EX)
        fcntl.flock(cores, fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH)
        if not exclusive:
            fcntl.flock(turnstile, fcntl.LOCK_UN)
        try:
            yield
        finally:
            fcntl.flock(cores, fcntl.LOCK_UN)
            fcntl.flock(turnstile, fcntl.LOCK_UN)
