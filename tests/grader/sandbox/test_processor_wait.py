"""How long a test's processes waited for a processor, read from Linux's per-thread run delay: a process
beside more busy loops than cores waits, one asleep does not, a process started after the snapshot counts
all of its own waiting, and a process gone is read as nothing."""

import os
import subprocess
import sys
import time

import pytest

from grader.sandbox import processor_wait

pytestmark = pytest.mark.skipif(
    not os.path.exists("/proc/self/task"), reason="no procfs: nothing is read"
)

SPIN = "import time\nt = time.monotonic()\nwhile time.monotonic() - t < {seconds}: pass\n"


def test_a_process_beside_more_busy_loops_than_cores_waits(busy_loops):
    with busy_loops(3 * (os.cpu_count() or 1)):
        spinner = subprocess.Popen([sys.executable, "-c", SPIN.format(seconds=3.0)])
        waits = processor_wait.Waits(lambda: processor_wait.tree(spinner.pid))
        time.sleep(2.0)
        waited = waits.since()
        spinner.kill()
        spinner.wait()
    # with 3 loops per core it runs at most a quarter of the time: it waited most of the 2 s
    assert waited > 1.0


def test_a_sleeping_process_waits_for_nothing(busy_loops):
    with busy_loops(3 * (os.cpu_count() or 1)):
        sleeper = subprocess.Popen(
            [sys.executable, "-c", "import time; print('asleep', flush=True); time.sleep(30)"],
            stdout=subprocess.PIPE,
        )
        assert sleeper.stdout.readline() == b"asleep\n"  # its start-up, which does wait, is done
        waits = processor_wait.Waits(lambda: processor_wait.tree(sleeper.pid))
        time.sleep(2.0)
        waited = waits.since()
        sleeper.kill()
        sleeper.wait()
    assert waited < 0.2


def test_a_child_started_after_the_snapshot_counts_all_its_waiting(busy_loops):
    parent = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import subprocess, sys, time\n"
            "time.sleep(0.5)\n"
            f"subprocess.run([sys.executable, '-c', {SPIN.format(seconds=2.5)!r}])\n",
        ]
    )
    waits = processor_wait.Waits(lambda: processor_wait.tree(parent.pid))
    with busy_loops(3 * (os.cpu_count() or 1)):
        time.sleep(2.5)
        waited = waits.since()
    parent.kill()
    parent.wait()
    assert waited > 0.8


def test_processes_gone_are_read_as_nothing():
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    assert processor_wait.tree(gone.pid) == [] and processor_wait.tree(None) == []
    waits = processor_wait.Waits(lambda: [gone.pid])
    assert waits.since() == 0.0 and processor_wait.NoWaits().since() == 0.0
