"""Limits that mean what they say: the student's worker may hold what `--memory-limit` gives it (the
submission's memory cgroup is sized from it, and report.json records both as applied), and no test pays
for the worker's start (the harness has its worker ready before the first test's clock runs).

The other side, that a small limit still protects the machine and a classmate, is
tests/grader/hostile/test_resources.py (a hog graded with --memory-limit 2 beside an honest classmate).
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import textwrap

import psutil
import pytest

from grader.core.options import HARNESS_ALLOWANCE_BYTES, SANDBOX_DISK_PER_HARNESS_BYTES
from grader.course import catalog
from grader.grading import engine
from grader.harness.time_limits import WALL_MULTIPLIER
from grader.sandbox import cgroups, restrictions

EX01 = catalog.get("ex01")
GIB = 1 << 30
MEMORY_CGROUP = "memory" in cgroups.hierarchies()


def reference() -> str:
    return "".join(
        line
        for line in EX01.solution_path().read_text().splitlines(keepends=True)
        if "### " not in line
    )


def grade(submission, out, *options: str) -> dict:
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "grader.cli",
            "grade",
            str(submission),
            "--out",
            str(out),
            "--exercise",
            "ex01",
            "--quiet",
            *options,
        ],
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return json.loads((out / "report.json").read_text())


def results_of(report: dict) -> list[dict]:
    return report["exercises"][EX01.id]["tests"]


# --- memory ------------------------------------------------------------------------------------------------


def test_the_submissions_memory_is_each_harness_allowance_plus_its_workers_limit():
    own = (
        HARNESS_ALLOWANCE_BYTES + SANDBOX_DISK_PER_HARNESS_BYTES
    )  # the harness, its sandboxes' tmpfs
    assert engine.submission_memory_limit(6 * GIB, 2) == 2 * (own + 6 * GIB)
    assert engine.submission_memory_limit(16 * GIB, 1) == own + 16 * GIB
    # --memory-limit 0: no limit there either
    assert engine.submission_memory_limit(None, 2) is None


HOLD = (
    "import sys, time\nblock = bytearray(int(sys.argv[1]) << 20)\n"
    "block[::4096] = bytes(len(block) // 4096)\nprint('held', flush=True)\ntime.sleep(600)\n"
)


@pytest.mark.skipif(not MEMORY_CGROUP, reason="no memory cgroup here")
@pytest.mark.parametrize(
    "limit, said",
    [
        ((256 << 20) + 1, "0.2 GiB for the submission in all"),
        (1 << 40, "1024.0 GiB for the submission in all"),
        (None, "no limit for the submission in all"),
    ],
)
def test_the_group_holds_its_limit_as_applied_and_none_means_none(limit, said):
    """The limit the report records is the kernel's (rounded to its pages); without one (--memory-limit 0)
    the group is still made, with nothing written: its peak is measured and what it holds ends with it. A
    limit beyond the machine's memory says so (the machine, not the group, then bounds the submission)."""
    with cgroups.submission_memory(limit) as memory:
        group = memory.group
        assert group is not None and memory.applied == cgroups.memory_limit(group)
        if limit is None:
            assert memory.applied is None and group.limits == {}
        else:
            assert limit - 4096 < memory.applied <= limit and memory.applied % 4096 == 0
        holder = subprocess.Popen(
            restrictions.launcher(
                {"cgroups": memory.harness()}, [sys.executable, "-c", HOLD, "200"]
            ),
            stdout=subprocess.PIPE,
            text=True,
        )
        assert holder.stdout.readline().strip() == "held"  # 200 MiB: within both
    assert holder.wait(timeout=30) == -9, "what the group held outlived it"
    holder.stdout.close()
    assert not any(d.exists() for d in group.directories.values())
    assert memory.peak is not None and memory.peak >= 200 << 20
    described = memory.describe()
    assert described.startswith(said) and "peak" in described, described
    assert ("more than this machine's" in described) == (
        limit is not None and limit > psutil.virtual_memory().total
    )


# A correct ex01 that builds a 4 GiB table at its first call and keeps it: memory-hungry, but within the
# default 6 GiB worker. A fixed 4 GiB per harness killed it at every call (0/10).
HOLDS_4_GIB = textwrap.dedent("""

    _TABLE = []


    def _hungry(function):
        def hungry(*args, **kwargs):
            if not _TABLE:
                table = bytearray(4 << 30)
                table[::4096] = bytes(len(table) // 4096)   # really held: one byte written in each page
                _TABLE.append(table)
            return function(*args, **kwargs)
        return hungry


    for _name in ("make_mesh_2x4", "make_data_mesh", "place", "shard_table"):
        globals()[_name] = _hungry(globals()[_name])
""")


@pytest.mark.slow
def test_a_worker_may_hold_what_its_memory_limit_gives_it(tmp_path):
    """Graded with the default --memory-limit (6 GiB), a worker holding 4 GiB earns every point, and
    report.json records the worker's limit and the submission's as applied. --test-timeout: memory is
    under test here, not time (a first touch of 4 GiB takes seconds on a loaded machine)."""
    submission = tmp_path / "submission"
    submission.mkdir()
    (submission / EX01.module_file).write_text(reference() + HOLDS_4_GIB)
    report = grade(submission, tmp_path / "out", "--test-timeout", "60", "--parallel", "1")
    wrong = [
        f"{t['nodeid']}: {t['category']} {t['message'][:200]}"
        for t in results_of(report)
        if t["category"] != "passed"
    ]
    assert not wrong and report["score"] == pytest.approx(EX01.points), "\n".join(wrong[:5])
    limits, memory = report["environment"]["limits"], report["environment"]["isolation"]["memory"]
    assert limits["worker_memory_bytes"] == 6 * GIB
    if MEMORY_CGROUP:
        assert limits["submission_memory_bytes"] == engine.submission_memory_limit(6 * GIB, 1)
        assert memory.startswith(
            f"{limits['submission_memory_bytes'] / GIB:.1f} GiB for the submission"
        ), memory
        peak = float(re.search(r"peak ([0-9.]+) GiB", memory).group(1))
        # the table was held, in the group
        assert 4.0 <= peak <= limits["submission_memory_bytes"] / GIB, memory
    else:
        assert limits["submission_memory_bytes"] is None and memory.startswith("not bounded"), (
            memory
        )


# --- the worker's start -------------------------------------------------------------------------------------


@pytest.mark.slow
def test_the_first_test_of_a_grading_does_not_pay_for_the_workers_start(tmp_path):
    """The reference, each test given 3 s (the worker 1 s of it, grader.harness.session.TIMEOUT_MARGIN):
    its first test passes, far within that, since the worker and its fork server were ready before its
    clock. Measured before: the first test took 0.5 to 1.9 s here (the worker's start), the others 0.01 s."""
    submission = tmp_path / "submission"
    submission.mkdir()
    (submission / EX01.module_file).write_text(reference())
    report = grade(
        submission, tmp_path / "out", "--test-timeout", "3", "--parallel", "1", "--timing", "skip"
    )
    tests = results_of(report)
    wrong = [
        f"{t['nodeid']}: {t['category']} {t['message'][:200]}"
        for t in tests
        if t["category"] != "passed"
    ]
    assert not wrong, "\n".join(wrong[:5])
    assert tests[0]["duration"] < 1.0, tests[0]


@pytest.mark.slow
def test_a_student_cannot_hide_work_in_the_start_the_first_test_does_not_pay_for(tmp_path):
    """Hostile: what is left out of the first test's time is the grader's start only. The student's module
    is imported by the first call, within its test's time: one that works 30 s at import (to have it done
    before the clock, had its import been part of the start) times out there, and earns nothing."""
    submission = tmp_path / "submission"
    submission.mkdir()
    (submission / EX01.module_file).write_text(
        "import time\n\ntime.sleep(30)   # 'precomputing'\n\n" + reference()
    )
    report = grade(
        submission, tmp_path / "out", "--test-timeout", "3", "--parallel", "1", "--timing", "skip"
    )
    first, *rest = results_of(report)
    assert first["category"] == "timeout" and f"importing {EX01.module_file}" in first["message"], (
        first
    )
    # a sleep uses no processor time: stopped by its own test's wall-clock cap, not by the start's
    assert first["duration"] < WALL_MULTIPLIER * 3.0, first
    assert report["score"] == 0 and {t["category"] for t in rest} <= {"timeout"}, {
        t["category"] for t in rest
    }
