"""A test's time limit counts the worker's processor time, not the wall clock: a call that spins is ended
when it has used the limit, one that waits for the processor (a loaded machine, simulated by stopping
the worker) is not, and one that sleeps is ended by the wall-clock cap; each says which. A timeout
names the student's function it happened in, and a function stopped after its strikes is not called."""

import textwrap
import threading
import time

import pytest

from grader.sandbox import cgroups, confinement
from grader.worker.failures import FunctionStopped, WorkerTimeout
from grader.worker.stand_in import RemoteModule
from grader.worker.supervisor import Worker

pytestmark = pytest.mark.xdist_group("test_worker_cpu_clock")

MODULE = textwrap.dedent(
    """
    import time

    def spin():
        while True:
            pass

    def sleep():
        time.sleep(600)

    def work(seconds):
        # the worker's own processor time, not the wall clock: as much work whatever the load
        started = time.process_time()
        while time.process_time() - started < seconds:
            pass
        return "done"

    def returns_a_spinner():
        return spin
    """
)
BEST = confinement.choose_isolation("auto")


@pytest.fixture
def worker(tmp_path):
    folder = tmp_path / "submission"
    folder.mkdir()
    (folder / "student.py").write_text(MODULE)
    confinement.become_subreaper()  # as the harness is
    worker = Worker(folder, isolation=BEST, scratch=tmp_path)
    worker.start_clock(float("inf"), time.monotonic() + 120)
    yield worker
    worker.stop()


def module(worker, stopped=lambda function: None) -> RemoteModule:
    return RemoteModule(worker.folder / "student.py", worker, stopped=stopped)


def test_the_sandbox_cgroup_counts_its_processor_time(worker):
    if "cpuacct" not in cgroups.hierarchies() and not any(
        h.version == 2 for h in cgroups.hierarchies().values()
    ):
        pytest.skip("no cgroup counts processor time here (the process fallback is tested below)")
    student = module(worker)
    assert student.work(0.5) == "done"
    counted = worker._process.cpu_seconds()
    assert counted is not None and counted >= 0.5


@pytest.mark.parametrize("counted_by", ["cgroup", "processes"])
def test_a_spinning_call_ends_at_its_limit_of_processor_time(worker, monkeypatch, counted_by):
    student = module(worker)
    assert student.work(0.1) == "done"  # started
    if counted_by == "processes":  # where there is no cgroup
        monkeypatch.setattr(type(worker._process), "cpu_seconds", lambda self: None)
    worker.start_clock(1.0, time.monotonic() + 60)
    before = worker.cpu_seconds()
    with pytest.raises(WorkerTimeout, match="limit of 1.0 s of processor time") as raised:
        student.spin()
    assert raised.value.function == "spin"
    assert 1.0 <= worker.cpu_seconds() - before


def test_a_call_that_waits_for_the_processor_is_not_cut_off(worker):
    """The worker stopped for 4 s of a call that needs 1 s of processor time, under a limit of 3 s:
    what a loaded machine does to it, at worst. A wall-clock limit of 3 s would have ended it."""
    student = module(worker)
    assert student.work(0.1) == "done"  # started
    worker.start_clock(3.0, time.monotonic() + 60)

    def stop_for_a_while():
        time.sleep(0.2)
        worker.suspend()
        time.sleep(4.0)
        worker.resume()

    thief = threading.Thread(target=stop_for_a_while)
    started = time.monotonic()
    thief.start()
    try:
        assert student.work(1.0) == "done"
    finally:
        thief.join()
    assert time.monotonic() - started > 3.0, "the call was not held up past its limit"


def test_a_sleeping_call_is_ended_by_the_wall_clock_cap(worker):
    student = module(worker)
    # started first: a worker still starting up (its imports take processor time, more on a busy
    # machine) could use up the 1 s limit before the sleep begins
    assert student.work(0.01) == "done"
    worker.start_clock(1.0, time.monotonic() + 3.0)
    with pytest.raises(WorkerTimeout, match="wall-clock cap") as raised:
        student.sleep()
    assert raised.value.function == "sleep"


def test_a_function_the_student_returned_counts_against_the_one_that_returned_it(worker):
    student = module(worker)
    spinner = student.returns_a_spinner()
    worker.start_clock(1.0, time.monotonic() + 60)
    with pytest.raises(WorkerTimeout) as raised:
        spinner()
    assert raised.value.function == "returns_a_spinner"


def test_a_stopped_function_is_not_called_and_the_others_are(worker):
    asked = []

    def stopped(function):
        asked.append(function)
        return "not run: your spin timed out in 2 earlier tests" if function == "spin" else None

    student = module(worker, stopped)
    started = time.monotonic()
    with pytest.raises(FunctionStopped, match="your spin timed out in 2 earlier tests") as raised:
        student.spin()
    assert raised.value.function == "spin" and isinstance(raised.value, WorkerTimeout)
    assert time.monotonic() - started < 1.0  # not called: nothing spun
    assert student.work(0.05) == "done"
    assert asked == ["spin", "work"]
