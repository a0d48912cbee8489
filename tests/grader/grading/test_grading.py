"""`shardlab grade` and `shardlab grade-batch` end to end, with real processes: scores, outputs,
exit codes, resuming, and a batch that one broken submission does not stop."""

import csv
import json
import os
import shutil
import subprocess
import sys
import xml.etree.ElementTree as ET
import zipfile

import pytest

from grader.cli import main
from grader.course import catalog, paths
from grader.grading.batch import grade_batch, student_folder
from grader.grading.collection import collect_tests
from grader.grading.engine import grade_submission
from grader.harness import time_limits

# its module-scoped fixture does the heavy work once
pytestmark = pytest.mark.xdist_group("test_grading")

EX01 = catalog.get("ex01_meshes")


def shardlab(*args, cwd=None):
    return subprocess.run(
        [sys.executable, "-m", "grader.cli", *args], capture_output=True, text=True, cwd=cwd
    )


@pytest.fixture(scope="module")
def one_module(tmp_path_factory):
    """A submission holding only ex01's reference: cheap to grade, every other exercise not attempted."""
    folder = tmp_path_factory.mktemp("alice")
    shutil.copy(EX01.solution_path(), folder / EX01.module_file)
    return folder


@pytest.fixture(scope="module")
def graded_one(one_module):
    return grade_submission(one_module)


def test_missing_modules_are_not_attempted_with_a_note(graded_one):
    ex01 = graded_one.exercises[EX01.id]
    assert ex01.score == pytest.approx(EX01.points) and all(t.passed for t in ex01.tests)
    for exercise in catalog.EXERCISES[1:]:
        result = graded_one.exercises[exercise.id]
        assert result.score == 0 and result.tests
        assert {t.category for t in result.tests} == {"not attempted"}
        assert result.note == f"{exercise.module_file} is not in the submission: not attempted"
    assert graded_one.score == pytest.approx(EX01.points)
    assert graded_one.max_score == catalog.total_points()


def test_environment_is_recorded(graded_one):
    env = graded_one.environment
    assert env.devices == 8 and env.versions["jax"] == "0.10.2" and env.cores >= 1


def test_grade_command_writes_three_reports_and_exits_zero(one_module, tmp_path):
    zipped = tmp_path / "alice.zip"
    with zipfile.ZipFile(zipped, "w") as zf:
        zf.write(one_module / EX01.module_file, f"alice/exercises/{EX01.module_file}")
    done = shardlab("grade", str(zipped), "--out", str(tmp_path / "out"), "--exercise", "ex01")
    assert done.returncode == 0, done.stderr
    assert "10/10" in done.stdout
    report = json.loads((tmp_path / "out" / "report.json").read_text())
    gradescope = json.loads((tmp_path / "out" / "results.json").read_text())
    junit = ET.parse(tmp_path / "out" / "junit.xml").getroot()
    assert report["score"] == pytest.approx(10) == pytest.approx(gradescope["score"])
    assert list(report["exercises"]) == [EX01.id]
    assert sum(int(s.get("tests")) for s in junit.iter("testsuite")) == len(
        report["exercises"][EX01.id]["tests"]
    )


def test_fail_under_turns_a_low_score_into_a_failure(one_module, tmp_path):
    done = shardlab(
        "grade",
        str(one_module),
        "--out",
        str(tmp_path / "out"),
        "--exercise",
        "ex01",
        "--fail-under",
        "10.5",
        "--quiet",
    )
    assert done.returncode == 1 and "below --fail-under 10.5" in done.stderr
    assert (tmp_path / "out" / "report.json").exists()  # the grade is written all the same


@pytest.mark.parametrize(
    "argument, message",
    [
        ("nope.zip", "neither a folder nor a .zip"),
        ("bad.zip", "not a valid zip file"),
    ],
)
def test_grading_that_cannot_start_exits_two_with_the_reason(tmp_path, capsys, argument, message):
    (tmp_path / "bad.zip").write_bytes(b"PK\x03\x04 garbage")
    assert main(["grade", str(tmp_path / argument), "--out", str(tmp_path / "out")]) == 2
    assert message in capsys.readouterr().err


def test_an_unknown_exercise_is_refused(one_module, tmp_path, capsys):
    assert main(["grade", str(one_module), "--out", str(tmp_path / "o"), "--exercise", "ex99"]) == 2
    assert "no exercise 'ex99' in the catalog" in capsys.readouterr().err


@pytest.mark.slow
def test_a_batch_survives_broken_submissions_and_resumes(one_module, tmp_path):
    class_dir = tmp_path / "class"
    class_dir.mkdir()
    shutil.copytree(one_module, class_dir / "alice")
    (class_dir / "bob").mkdir()
    (class_dir / "bob" / EX01.module_file).write_text(
        EX01.solution_path().read_text() + "\nimport os\nos._exit(9)\n"
    )
    (class_dir / "carol.zip").write_bytes(b"not a zip at all")
    (class_dir / "dave").mkdir()  # handed in nothing
    out = tmp_path / "graded"
    summary = grade_batch(class_dir, out, jobs=2, exercises=["ex01"])
    statuses = {o.student: o.status for o in summary.outcomes}
    assert statuses == {"alice": "graded", "bob": "graded", "carol": "failed", "dave": "graded"}
    rows = {row["student"]: row for row in csv.DictReader(open(out / "grades.csv"))}
    assert (
        float(rows["alice"]["total"]) == pytest.approx(10) and float(rows["alice"][EX01.id]) == 10
    )
    assert float(rows["bob"]["total"]) == 0 and float(rows["dave"]["total"]) == 0
    assert (
        rows["carol"]["status"].startswith("not graded")
        and "not a valid zip file" in rows["carol"]["status"]
    )
    assert "not a valid zip file" in (student_folder(out, "carol") / "grading.log").read_text()

    again = grade_batch(class_dir, out, jobs=2, exercises=["ex01"])
    assert {o.student: o.status for o in again.outcomes} == {
        "alice": "skipped",
        "bob": "skipped",
        "carol": "failed",
        "dave": "skipped",
    }
    rows_again = {row["student"]: row for row in csv.DictReader(open(out / "grades.csv"))}
    assert rows_again["alice"] == rows["alice"]


def test_the_cli_lists_every_command():
    done = shardlab("--help")
    for command in ("grade", "grade-batch", "check", "list", "stubs", "dev-check"):
        assert command in done.stdout


def test_paths_point_at_this_checkout():
    assert paths.EXERCISE_TESTS_DIR.is_dir()


def test_a_spent_time_limit_still_lists_every_test_as_timed_out(one_module):
    results = grade_submission(one_module, exercises=["ex01"], time_limit=0.0)
    tests = results.exercises[EX01.id].tests
    assert len(tests) == 63 and {t.category for t in tests} == {"timeout"}
    assert "time limit was reached" in tests[0].message and results.score == 0


def test_the_batch_timing_lock_reaches_the_grading_children(one_module, tmp_path, monkeypatch):
    """grade-batch sets the lock folder in the grader's environment; the tests that take the lock run
    in children whose environment is built from scratch, so it must be passed on to them."""
    from grader.harness import timing_lock

    monkeypatch.setenv(timing_lock.LOCK_DIR, str(tmp_path / "locks"))
    grade_submission(one_module, exercises=["ex01"])
    assert sorted(p.name for p in (tmp_path / "locks").iterdir()) == ["cores", "turnstile"]


def test_the_isolation_in_force_is_recorded(graded_one):
    isolation = graded_one.environment.isolation
    assert isolation.level in ("bubblewrap", "landlock", "process")
    assert {"tool", "user", "network", "filesystem"} <= set(isolation.described)


def test_a_missing_sandbox_is_refused_with_exit_2(one_module, tmp_path):
    """--isolation names a level this machine lacks (no bwrap on PATH): nothing is graded."""
    import os

    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "grader.cli",
            "grade",
            str(one_module),
            "--out",
            str(tmp_path / "out"),
            "--isolation",
            "bubblewrap",
        ],
        capture_output=True,
        text=True,
        env=dict(os.environ, PATH="/nonexistent"),
    )
    assert done.returncode == 2, done.stderr
    assert (
        "bubblewrap is not installed" in done.stderr and "apt-get install bubblewrap" in done.stderr
    )
    assert not (tmp_path / "out" / "report.json").exists()


def test_without_a_calibration_the_shipped_timings_set_each_limit(tmp_path):
    shipped_at, shipped = time_limits.shipped_timings()
    assert len(shipped) > 400 and "cores" in shipped_at
    limits = time_limits.load(tmp_path / "never-calibrated")
    assert (
        "not calibrated on this machine" in limits.source
        and "shipped with the course" in limits.source
    )
    # the shipped timings' machine is another one: the words never call it this one too
    assert limits.source.count("on this machine") == 1, limits.source
    nodeid = next(n for n in _nodeids(EX01) if time_limits.shipped_key(n) in shipped)
    seconds = shipped[time_limits.shipped_key(nodeid)]
    assert limits.limit(nodeid) == min(
        time_limits.FALLBACK_SECONDS,
        max(time_limits.FLOOR_SECONDS, time_limits.SHIPPED_MULTIPLIER * seconds),
    )
    assert limits.limit(nodeid + "-new") == time_limits.FALLBACK_SECONDS  # a test they do not know
    assert (
        limits.describe()["shipped_tests"] == len(shipped) and limits.exercise_seconds(EX01.id) > 0
    )


def test_shipped_timings_name_their_machine_as_another(tmp_path):
    limits = time_limits.TimeLimits(
        reference={"tests/exercises/ex01_meshes/test_visible.py::test_a": 1.0},
        source=f"calibrated 2026-12-03 08:00 {time_limits.HERE}: the reference took 1 s",
    )
    time_limits.ship(limits, tmp_path / "shipped.json")
    measured = json.loads((tmp_path / "shipped.json").read_text())["measured"]
    assert time_limits.HERE not in measured and time_limits.SHIPPED_FROM in measured


def test_a_changed_test_file_loses_its_shipped_timing(tmp_path, monkeypatch):
    """Keyed by the test file's and conftest's contents: a test changed since it was timed gets the fallback."""
    nodeid = _nodeids(EX01)[0]
    copy = tmp_path / "course"
    shutil.copytree(EX01.tests_dir(), copy / EX01.tests_dir().relative_to(paths.REPO_ROOT))
    monkeypatch.setattr(time_limits.paths, "REPO_ROOT", copy)
    time_limits._files_digest.cache_clear()
    try:
        shipped = time_limits.TimeLimits(shipped={time_limits.shipped_key(nodeid): 3.0})
        assert shipped.limit(nodeid) == 3.0 * time_limits.SHIPPED_MULTIPLIER
        test_file = copy / nodeid.split("::")[0]
        test_file.write_text(test_file.read_text() + "\n# changed\n")
        time_limits._files_digest.cache_clear()
        assert shipped.limit(nodeid) == time_limits.FALLBACK_SECONDS
    finally:
        time_limits._files_digest.cache_clear()


def test_the_shipped_timings_know_every_test_of_the_course():
    """Run `shardlab calibrate --ship` after changing tests: a test it does not know costs 120 s per timeout."""
    _, shipped = time_limits.shipped_timings()
    unknown = [
        t.nodeid for t in collect_tests() if time_limits.shipped_key(t.nodeid) not in shipped
    ]
    assert not unknown, (
        f"{len(unknown)} tests have no shipped timing (run `shardlab calibrate --ship`): {unknown[:5]}"
    )


@pytest.mark.slow
def test_an_endless_loop_costs_seconds_without_a_calibration(tmp_path):
    """`shardlab grade` as a newcomer runs it (a fresh cache folder, never calibrated): an ex01 function that
    loops forever costs two timeouts at the shipped limits, not two of 120 s (the tests of ex01's
    other functions, which now run, are the submission's honest work, not the loop's cost)."""
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / EX01.module_file).write_text(
        EX01.solution_path().read_text()
        + "\n\ndef make_data_mesh(n, name='data'):\n    while True:\n        pass\n"
    )
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "grader.cli",
            "grade",
            str(tmp_path / "sub"),
            "--out",
            str(tmp_path / "out"),
            "--exercise",
            "ex01",
            "--quiet",
        ],
        capture_output=True,
        text=True,
        env=dict(os.environ, SHARDLAB_CACHE=str(tmp_path / "fresh-cache")),
    )
    assert done.returncode == 0, done.stderr
    report = json.loads((tmp_path / "out" / "report.json").read_text())
    tests = report["exercises"][EX01.id]["tests"]
    timed_out = [
        t for t in tests if t["category"] == "timeout" and not t["message"].startswith("not run")
    ]
    assert len(timed_out) == 2, [(t["nodeid"], t["category"]) for t in tests]
    # what the loop costs: its strikes' limits of processor time (the shipped ones), whatever the load
    shipped = time_limits.load(None)
    assert sum(shipped.limit(t["nodeid"]) for t in timed_out) <= 30
    assert all("s of processor time" in t["message"] for t in timed_out)
    assert [t for t in tests if t["category"] == "passed"], "ex01's other functions are graded"
    assert "shipped with the course" in report["environment"]["time_limits"]["source"]


def _nodeids(exercise) -> list[str]:
    return [t.nodeid for t in collect_tests([exercise])]
