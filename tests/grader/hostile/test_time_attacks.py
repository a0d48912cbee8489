"""Time limits against a student who has read the grader's source (real gradings, grade_submission):

- one endless function costs its own tests, not its neighbours': an ex05 whose ring_all_reduce loops
  forever (every other function the reference's) earns what the same file with that function left as
  the stub earns, and its loop costs about two limits;
- every function of an exercise loops: the exercise's cap of strikes bounds what it costs;
- a function that sleeps forever (no processor time to count) is ended by the wall-clock cap, and its
  message says so;
- a correct ex01 that holds 3 GiB, every page touched, in each call keeps full marks (graded beside busy
  loops by bench/busy_machine.py: docs/measurements.md).
"""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

from grader.core.results import TimeoutBy
from grader.course import catalog
from grader.grading.engine import grade_submission
from grader.harness import time_limits
from grader.harness.strikes import (
    MAX_STRIKES_PER_EXERCISE,
    MAX_STRIKES_PER_FUNCTION,
    STOPPED,
    function_stopped_message,
)
from grader.harness.time_limits import WALL_MULTIPLIER, TimeLimits

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("test_time_attacks")]

EX01, EX05 = catalog.get("ex01"), catalog.get("ex05")
LOOP_BUDGET = 30.0  # what one endless function may cost, in seconds of processor time


def module(folder, exercise, tail: str):
    """The reference of `exercise` followed by `tail` (which redefines its functions)."""
    folder.mkdir(parents=True, exist_ok=True)
    text = "".join(
        line
        for line in exercise.solution_path().read_text().splitlines(keepends=True)
        if "### " not in line
    )
    (folder / exercise.module_file).write_text(text + "\n\n" + textwrap.dedent(tail))
    return folder


def test_an_endless_function_costs_its_own_tests_not_its_neighbours(tmp_path):
    looping = module(
        tmp_path / "loop",
        EX05,
        """
        def ring_all_reduce(x, mesh):
            while True:
                pass
        """,
    )
    stub = module(
        tmp_path / "stub",
        EX05,
        """
        def ring_all_reduce(x, mesh):
            raise NotImplementedError("ex05: ring_all_reduce")
        """,
    )
    graded = grade_submission(looping, exercises=[EX05.id])
    left_out = grade_submission(stub, exercises=[EX05.id])
    tests = graded.exercises[EX05.id].tests
    assert left_out.exercises[EX05.id].score < EX05.points  # the stub's tests earn nothing
    assert graded.exercises[EX05.id].score == pytest.approx(left_out.exercises[EX05.id].score)
    struck = [t for t in tests if t.strike]
    assert len(struck) == MAX_STRIKES_PER_FUNCTION, [(t.nodeid, t.message) for t in tests]
    assert all(
        t.strike_function == "ring_all_reduce" and "processor time" in t.message for t in struck
    )
    not_run = [t for t in tests if t.message.startswith("not run")]
    assert not_run and {t.message for t in not_run} == {
        function_stopped_message("ring_all_reduce", MAX_STRIKES_PER_FUNCTION)
    }
    # only ring_all_reduce's tests were lost: every other test passed
    lost = {t.nodeid for t in struck + not_run}
    assert all(t.category == "passed" for t in tests if t.nodeid not in lost)
    assert all("ring_all_reduce" in t.nodeid for t in struck + not_run)
    # What the loop may cost: its strikes' limits of processor time (as wall-clock time on a quiet
    # machine: measured by hand, docs/trust-model.md; a loaded one stretches it, by design).
    limits = time_limits.load(None)
    assert sum(limits.limit(t.nodeid) for t in struck) <= LOOP_BUDGET
    assert all(
        f"limit of {limits.limit(t.nodeid):.1f} s of processor time" in t.message for t in struck
    )


def test_every_function_looping_is_bounded_by_the_exercises_cap(tmp_path):
    """Each of ex01's functions loops: no function reaches its two strikes before the exercise's cap
    of four ends the exercise, so the submission cannot buy two limits per function."""
    looping = module(
        tmp_path / "all-loop",
        EX01,
        """
        def _forever(*args, **kwargs):
            while True:
                pass

        make_mesh_2x4 = make_data_mesh = place = shard_table = _forever
        """,
    )
    graded = grade_submission(looping, exercises=[EX01.id], timing="skip")
    tests = graded.exercises[EX01.id].tests
    struck = [t for t in tests if t.strike]
    assert len(struck) == MAX_STRIKES_PER_EXERCISE, [(t.nodeid, t.message[:80]) for t in tests]
    assert graded.exercises[EX01.id].score == 0
    assert {t.message for t in tests if not t.strike} <= {STOPPED} | {
        function_stopped_message(f, MAX_STRIKES_PER_FUNCTION)
        for f in ("make_mesh_2x4", "make_data_mesh", "place", "shard_table")
    }
    assert [t for t in tests if t.message == STOPPED]


def test_a_function_that_sleeps_forever_is_ended_by_the_wall_clock_cap(tmp_path):
    sleeping = module(
        tmp_path / "sleep",
        EX01,
        """
        def make_data_mesh(n, name="data"):
            import time
            time.sleep(3600)
        """,
    )
    limit = 2.0
    graded = grade_submission(
        sleeping, exercises=[EX01.id], time_limits=TimeLimits(override=limit), timing="skip"
    )
    tests = graded.exercises[EX01.id].tests
    struck = [t for t in tests if t.strike]
    assert len(struck) == MAX_STRIKES_PER_FUNCTION, [(t.nodeid, t.message[:80]) for t in tests]
    assert all("wall-clock cap" in t.message and "processor time" not in t.message for t in struck)
    assert all(t.strike_function == "make_data_mesh" for t in struck)
    # ended by the cap, not before: it used no processor time
    assert all(t.duration >= WALL_MULTIPLIER * limit - 2.5 for t in struck)
    # what each strike was judged on is recorded: asleep past its cap, having waited for no processor
    for judged in (t.timeout for t in struck):
        assert judged is not None and judged.by is TimeoutBy.WALL_CLOCK_CAP, struck
        assert (
            judged.limit == limit and judged.counted > judged.cap >= WALL_MULTIPLIER * limit - 2.5
        )
        assert judged.cpu < limit and judged.asleep > judged.cap / 2


def touch_memory(gib: int) -> None:
    """Write `gib` GiB of fresh memory in a process of its own, and give it back. On a virtual machine that
    returns idle memory to its host (this project's CI and development machines: a Firecracker guest with
    DAMON reclaim), the first touch of memory the guest gave back costs the process several seconds of
    processor time in page faults: 3 GiB took 7.0 s of it the first time and 1.25 s the next (two processes
    one after the other), so a first graded call holding 3 GiB came near its 10 s limit on the machine's
    account, not the student's; a clean-clone run timed it out once. On a machine that is not such a guest
    this costs about a second."""
    subprocess.run(
        [sys.executable, "-c", f"import numpy; numpy.ones({gib} << 30, dtype=numpy.uint8)"],
        check=True,
    )


# ex01's reference, each function holding 3 GiB (every page written) while it runs (also graded beside busy
# loops by bench/busy_machine.py)
HOLDING_3_GIB = """
def _holding_3_gib(function):
    def held(*args, **kwargs):
        import numpy as np

        block = np.ones(3 << 30, dtype=np.uint8)  # every page written
        try:
            return function(*args, **kwargs)
        finally:
            del block

    return held

make_mesh_2x4 = _holding_3_gib(make_mesh_2x4)
make_data_mesh = _holding_3_gib(make_data_mesh)
place = _holding_3_gib(place)
shard_table = _holding_3_gib(shard_table)
"""


def test_a_correct_ex01_holding_3_gib_per_call_keeps_full_marks(tmp_path):
    holding = module(tmp_path / "big", EX01, HOLDING_3_GIB)
    touch_memory(4)
    graded = grade_submission(holding, exercises=[EX01.id], memory_limit=16.0)
    tests = graded.exercises[EX01.id].tests
    assert graded.exercises[EX01.id].score == pytest.approx(EX01.points), [
        (t.nodeid, t.category, t.message[:80]) for t in tests if t.category != "passed"
    ]
