"""Keeping speedup measurements apart from other work when several submissions are graded at once.

With SHARDLAB_TIMING_LOCK_DIR set (grade-batch sets it), every test holds a shared lock while it runs
and a speed measurement holds it exclusively (`alone`), so a measurement never shares the cores with
another grader's test. Only the measurement itself is alone: what a speedup test compiles and checks
before it runs beside other tests. A turnstile lock taken first gives the waiting measurement priority
over newly starting tests (flock alone would let shared holders starve it).
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import threading
from pathlib import Path

LOCK_DIR = "SHARDLAB_TIMING_LOCK_DIR"

# The lock files of the hold this thread is in, if any: a measurement inside it upgrades that hold.
_state = threading.local()


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
        outer = getattr(_state, "held", None)
        _state.held = (turnstile, cores, exclusive)
        try:
            yield
        finally:
            _state.held = outer
            fcntl.flock(cores, fcntl.LOCK_UN)
            fcntl.flock(turnstile, fcntl.LOCK_UN)


@contextlib.contextmanager
def alone(on_acquired=lambda: None):
    """The cores to this process alone while the block runs: inside a shared hold, that hold is upgraded
    for the block (its place is given up meanwhile, then taken again); outside any, an exclusive hold.
    on_acquired: called once the lock is held, before the block (the test's clock starts again there:
    waiting for other tests to end is never charged)."""
    held = getattr(_state, "held", None)
    if not os.environ.get(LOCK_DIR) or (held is not None and held[2]):  # no lock, or alone already
        lock = contextlib.nullcontext()
    elif held is None:
        lock = hold(exclusive=True)
    else:
        lock = _upgraded(held)
    with lock:
        on_acquired()
        yield


@contextlib.contextmanager
def _upgraded(held):
    turnstile, cores, _ = held
    fcntl.flock(cores, fcntl.LOCK_UN)
    fcntl.flock(turnstile, fcntl.LOCK_EX)
    fcntl.flock(cores, fcntl.LOCK_EX)
    _state.held = (turnstile, cores, True)
    try:
        yield
    finally:
        _state.held = held
        # Shared again, through the turnstile like any test that starts.
        fcntl.flock(cores, fcntl.LOCK_SH)
        fcntl.flock(turnstile, fcntl.LOCK_UN)
