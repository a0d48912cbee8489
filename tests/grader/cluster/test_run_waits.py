"""A multi-process run's time rules (its silence and its whole limit) count the wall clock less the time its
processes waited for a processor: a run starved beside busy loops is not taken for a hung one, and a run
whose processes sleep is stopped as before. The event loop is driven with a launch of its own here: one
process that spins (or sleeps) stands for the run's processes, and the run ends when it is told to."""

import os
import subprocess
import sys
import threading

import pytest

from grader.cluster import events
from grader.cluster.run import ClusterRun

pytestmark = pytest.mark.skipif(
    not os.path.exists("/proc/self/task"), reason="no procfs: no waiting is read"
)

QUIET = 1.0
ENDS_AFTER = 4.0  # the launch's one event, after which the run is over


class OneProcess(events.Launch):
    def __init__(self, run: ClusterRun, code: str):
        super().__init__(run)
        self.code = code

    def start(self, output) -> None:
        self.process = subprocess.Popen([sys.executable, "-c", self.code], stdout=output)
        threading.Timer(ENDS_AFTER, lambda: self.events.put("over")).start()

    def handle(self, event, answered) -> bool:
        return event == "over"

    def stop(self) -> None:
        self.process.kill()
        self.process.wait()

    def pids(self) -> list[int]:
        return [self.process.pid]


def drive(tmp_path, code: str) -> ClusterRun:
    run = ClusterRun(1, 1, ("join",), None, "process")
    run.ready = {0}  # past its start-up: the silence rule is QUIET
    run.workdir = str(tmp_path / "run")
    os.mkdir(run.workdir)
    return events.drive(OneProcess(run, code), quiet_seconds=QUIET, limit_seconds=60)


SPIN = "import time\nt = time.monotonic()\nwhile time.monotonic() - t < 30: pass\n"


def test_a_run_starved_by_busy_loops_is_not_stopped_for_its_silence(tmp_path, busy_loops):
    with busy_loops(6 * (os.cpu_count() or 1)):
        run = drive(tmp_path, SPIN)
    # silent for 4 s against a 1 s rule, nearly all of it waiting for a processor
    assert run.stopped_after is None and run.seconds >= ENDS_AFTER


def test_a_run_asleep_beside_busy_loops_is_stopped_for_its_silence(tmp_path, busy_loops):
    with busy_loops(6 * (os.cpu_count() or 1)):
        run = drive(tmp_path, "import time; time.sleep(30)")
    assert run.stopped_after is not None and QUIET <= run.stopped_after < ENDS_AFTER


def test_a_rule_forgives_the_waiting_only_once_the_wall_clock_passed_it():
    class Waited:
        def __init__(self, seconds):
            self.seconds, self.read = seconds, 0

        def since(self):
            self.read += 1
            return self.seconds

    ahead = Waited(100.0)
    assert events._left(10.0, 4.0, ahead) == 6.0 and ahead.read == 0  # not read: the rule is ahead
    assert events._left(10.0, 12.0, Waited(5.0)) == pytest.approx(3.0)
    assert events._left(10.0, 12.0, Waited(0.0)) == pytest.approx(-2.0)
