"""A test's time limit counts the worker's processor time in user mode, not the wall clock: a call that
spins is ended when it has used the limit, one that waits for the processor (a loaded machine, simulated
by stopping the worker) is not, and one that sleeps, or spends its time in the kernel, is ended by the
wall-clock cap; each says which. The cap does not count time spent waiting for a processor: a call beside
more busy loops than cores runs past it and is not struck, one asleep beside them is. A timeout records
what it was judged on, names the student's function it happened in, and a function stopped after its
strikes is not called."""

import os
import textwrap
import threading
import time

import pytest

from grader.core import wall_cap
from grader.core.results import TimeoutBy
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

    def in_the_kernel(seconds):
        # system time: the kernel copying zeros into a buffer, as many seconds of it as asked
        import resource
        started = resource.getrusage(resource.RUSAGE_SELF).ru_stime
        buffer = bytearray(16 << 20)
        with open("/dev/zero", "rb", buffering=0) as zeros:
            while resource.getrusage(resource.RUSAGE_SELF).ru_stime - started < seconds:
                zeros.readinto(buffer)
        return "done"
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
    counted = worker._process.processor_time()
    assert counted is not None and counted.user >= 0.5


@pytest.mark.parametrize("counted_by", ["cgroup", "processes"])
def test_a_spinning_call_ends_at_its_limit_of_processor_time(worker, monkeypatch, counted_by):
    student = module(worker)
    assert student.work(0.1) == "done"  # started
    if counted_by == "processes":  # where there is no cgroup
        monkeypatch.setattr(type(worker._process), "processor_time", lambda self: None)
    worker.start_clock(1.0, time.monotonic() + 60)
    before = worker.processor_time()
    with pytest.raises(WorkerTimeout, match="limit of 1.0 s of processor time") as raised:
        student.spin()
    assert raised.value.function == "spin"
    assert 1.0 <= (worker.processor_time() - before).user
    judged = raised.value.figures
    assert judged.by is TimeoutBy.PROCESSOR_TIME and judged.limit == 1.0 and judged.cpu >= 1.0


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
    judged = raised.value.figures
    assert judged.by is TimeoutBy.WALL_CLOCK_CAP and judged.cap == pytest.approx(3.0, abs=0.01)
    assert judged.counted > judged.cap and judged.cpu < 0.5 and judged.asleep > 2.5


def test_the_limit_holds_the_students_own_instructions_and_the_cap_the_kernels_time(worker):
    """1.5 s of system time under a 1 s limit is not the limit's (on a virtual machine, page faults on
    memory the host took back cost that much for an honest call); in the kernel for ever, the wall-clock
    cap ends it, having counted that time as running."""
    student = module(worker)
    assert student.work(0.01) == "done"  # started
    worker.start_clock(1.0, time.monotonic() + 60)
    before = worker.processor_time()
    assert student.in_the_kernel(1.5) == "done"
    used = worker.processor_time() - before
    # the cgroup's count of the kernel's time and the process's own differ by a few milliseconds
    assert used.system >= 1.4 and used.user < 1.0
    worker.start_clock(1.0, time.monotonic() + 3.0)
    with pytest.raises(WorkerTimeout, match="wall-clock cap") as raised:
        student.in_the_kernel(600)
    judged = raised.value.figures
    assert judged.by is TimeoutBy.WALL_CLOCK_CAP and judged.cpu < judged.limit
    assert judged.system > judged.limit and judged.counted > judged.cap and judged.asleep < 1.0


@pytest.mark.slow  # busy loops on every core, which slow whatever runs beside them
def test_a_call_starved_by_busy_loops_runs_past_the_cap_and_is_not_struck(worker, busy_loops):
    """0.5 s of processor time beside 6 busy loops per core takes about 6 times that on the wall clock:
    past a 2 s cap, which forgives the time the call waited for a processor (up to 8 s of it)."""
    student = module(worker)
    assert student.work(0.1) == "done"  # started
    cap = 2.0
    with busy_loops(6 * (os.cpu_count() or 1)):
        worker.start_clock(5.0, time.monotonic() + cap)
        started = time.monotonic()
        assert student.work(0.5) == "done"
        wall, waited = time.monotonic() - started, worker._waits.since()
    assert wall > cap, "the busy loops did not hold the call up past its cap"
    assert not wall_cap.past(wall, waited, cap) and waited > wall - cap


@pytest.mark.slow  # busy loops on every core, which slow whatever runs beside them
def test_a_call_asleep_beside_busy_loops_is_still_struck(worker, busy_loops):
    student = module(worker)
    assert student.work(0.01) == "done"  # started
    with busy_loops(6 * (os.cpu_count() or 1)):
        worker.start_clock(1.0, time.monotonic() + 3.0)
        with pytest.raises(WorkerTimeout, match="wall-clock cap") as raised:
            student.sleep()
    judged = raised.value.figures
    assert judged.by is TimeoutBy.WALL_CLOCK_CAP and judged.counted > judged.cap
    # asleep, it waited for a processor only to wake for the harness's requests, not for the cap's length
    assert judged.waited < 1.0 and judged.wall < 3.0 + 1.0 + 0.5


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
