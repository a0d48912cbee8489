"""`shardlab grade-batch --slurm`: the job scripts (no cluster needed), then a class graded on a real Slurm
(Debian's slurm-wlm, started by the `local_slurm` fixture): the same scores as `shardlab grade` gives each
student alone, an attacker among them, a cancelled task resumed by running the command again."""

from __future__ import annotations

import csv
import json
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from grader.cli import build_parser
from grader.commands import slurm
from grader.core.options import GRADE_BATCH, GradingOptions
from grader.course import catalog
from grader.grading import batch
from grader.grading.batch import student_folder
from grader.grading.results import GradingResults
from grader.harness import time_limits
from grader.harness.time_limits import TimeLimits

pytestmark = pytest.mark.xdist_group("test_slurm")  # one local Slurm for the file

EX01 = catalog.get("ex01")
# Reference code that also tries what a student who read the grader might: write into every folder above it,
# leave a daemon behind, and look for classmates' reports.
ATTACK = """
import glob, os, subprocess
for depth in range(1, 8):
    try:
        with open(os.path.join(*[".."] * depth, "report.json"), "w") as f:
            f.write("{}")
    except OSError:
        pass
for found in glob.glob("/tmp/**/report.json", recursive=True)[:50]:
    try:
        open(found, "w").write("{}")
    except OSError:
        pass
subprocess.Popen(["sleep", "600"], start_new_session=True)
"""


def grade_batch_args(*args: str):
    return build_parser().parse_args(["grade-batch", *args])


def make_class(root: Path) -> Path:
    """alice: ex01's reference; bob: ex01 with a wrong sharding; mallory: the reference and an attack; carol: a
    broken zip; dave: nothing."""
    klass = root / "class"
    for student in ("alice", "bob", "mallory", "dave"):
        (klass / student).mkdir(parents=True)
    reference = EX01.solution_path().read_text()
    (klass / "alice" / EX01.module_file).write_text(reference)
    (klass / "bob" / EX01.module_file).write_text(
        reference.replace(
            "return jax.device_put(x, NamedSharding(mesh, spec))",
            "return jax.device_put(x, NamedSharding(mesh, jax.P()))",
        )
    )
    (klass / "mallory" / EX01.module_file).write_text(reference + ATTACK)
    (klass / "carol.zip").write_bytes(b"not a zip at all")
    return klass


# -- the scripts, without a cluster ----------------------------------------------------------------------------


def test_the_scripts_carry_what_a_cluster_needs(tmp_path):
    klass = make_class(tmp_path)
    args = grade_batch_args(
        str(klass),
        "--out",
        str(tmp_path / "out"),
        "--slurm",
        "--slurm-partition",
        "gpu-free",
        "--slurm-account",
        "course42",
        "--slurm-time",
        "0:30:00",
        "--slurm-cpus-per-task",
        "4",
        "--slurm-mem",
        "12G",
        "--slurm-array-limit",
        "3",
        "--sbatch=--qos=short",
        "--sbatch=--constraint=avx2",
        "--exercise",
        "ex01",
        "--test-timeout",
        "50",
    )
    options = GradingOptions.from_args(args, GRADE_BATCH)
    made = slurm.plan(klass, args.out, options, slurm.SlurmRequest.from_args(args))
    assert list(made.scripts) == ["grade", "collect"]  # --test-timeout: no calibration needed
    grade = made.scripts["grade"]
    for line in (
        "#SBATCH --partition=gpu-free",
        "#SBATCH --account=course42",
        "#SBATCH --time=0:30:00",
        "#SBATCH --cpus-per-task=4",
        "#SBATCH --mem=12G",
        "#SBATCH --qos=short",
        "#SBATCH --constraint=avx2",
        "#SBATCH --array=0-4%3",
    ):
        assert line in grade.splitlines()
    assert made.batch.todo == ["alice", "bob", "carol", "dave", "mallory"]
    # Each task grades as `shardlab grade` would, with the batch's options and its cores as harnesses.
    assert (
        "--exercise=ex01" in made.batch.grade_arguments
        and "--parallel=4" in made.batch.grade_arguments
    )
    assert "--test-timeout=50.0" in made.batch.grade_arguments
    collect = made.scripts["collect"].splitlines()
    assert "#SBATCH --cpus-per-task=1" in collect and "#SBATCH --partition=gpu-free" in collect
    assert not (tmp_path / "out").exists()  # planning writes nothing


def test_a_dry_run_prints_the_scripts_and_a_calibration_first(tmp_path):
    klass = make_class(tmp_path)
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "grader.cli",
            "grade-batch",
            str(klass),
            "--out",
            str(tmp_path / "out"),
            "--slurm-dry-run",
            "--cache",
            str(tmp_path / "empty-cache"),
        ],
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stderr
    heads = [line for line in done.stdout.splitlines() if line.startswith("# --- ")]
    assert heads == [
        "# --- calibrate.sbatch ---",
        "# --- grade.sbatch ---",
        "# --- collect.sbatch ---",
    ]
    # the grading's 1800 s time limit and 10 minutes
    assert "#SBATCH --time=00:40:00" in done.stdout
    assert not (tmp_path / "out").exists()


def test_the_calibration_job_times_the_terms_exercises_when_one_was_never_timed(tmp_path):
    """A cache calibrated for ex01 serves a term of ex01; a term with ex02, never timed there, gets a calibrate
    job, given the course file so that it times the term's exercises only."""
    klass = make_class(tmp_path)
    cache = tmp_path / "cache"
    cache.mkdir()
    timed = {f"tests/exercises/{EX01.id}/test_hidden.py::test_{i}": 0.5 for i in range(3)}
    TimeLimits(reference=timed).save(cache / time_limits.FILE_NAME)
    plans = {}
    for name, exercises in (("ex01", '["ex01"]'), ("ex01-ex02", '["ex01", "ex02"]')):
        course = tmp_path / f"{name}.toml"
        course.write_text(
            f'name = "{name}"\n\n[[assignment]]\nname = "HW"\nexercises = {exercises}\n'
        )
        options = GradingOptions(course=course, cache=cache)
        plans[name] = slurm.plan(klass, tmp_path / name, options, slurm.SlurmRequest())
    assert "calibrate" not in plans["ex01"].scripts
    calibrate = plans["ex01-ex02"].scripts["calibrate"]
    assert f"--course={tmp_path / 'ex01-ex02.toml'}" in calibrate


def graded_on(klass: Path, out: Path, student: str, *exercises) -> None:
    """A report of `student` holding `exercises` (default: every one), each graded from their files as now."""
    from grader.grading.results import score_exercise
    from grader.grading.submission_digest import exercise_digests

    held = {}
    for exercise in exercises or catalog.EXERCISES:
        held[exercise.id] = score_exercise(exercise, [])
        held[exercise.id].graded_from = exercise_digests(klass / student, [exercise])[exercise.id]
        held[exercise.id].graded_at = "2026-10-06T08:00:00+00:00"
    folder = student_folder(out, student)
    folder.mkdir(parents=True)
    (folder / "report.json").write_text(json.dumps(GradingResults(student, held).to_dict()))


def test_students_already_graded_are_not_submitted_again(tmp_path):
    klass = make_class(tmp_path)
    out = tmp_path / "out"
    graded_on(klass, out, "alice")
    made = slurm.plan(klass, out, GradingOptions(test_timeout=30.0), slurm.SlurmRequest())
    assert made.skipped == ["alice"] and "alice" not in made.batch.todo
    forced = slurm.plan(
        klass, out, GradingOptions(test_timeout=30.0), slurm.SlurmRequest(), force=True
    )
    assert "alice" in forced.batch.todo


def test_a_student_whose_submission_changed_since_their_grading_is_submitted_again(tmp_path):
    klass = make_class(tmp_path)
    out = tmp_path / "out"
    for student in ("alice", "bob"):
        graded_on(klass, out, student)
    changed = next(path for path in (klass / "bob").iterdir() if path.suffix == ".py")
    changed.write_text(changed.read_text() + "\n# resubmitted\n")
    made = slurm.plan(klass, out, GradingOptions(test_timeout=30.0), slurm.SlurmRequest())
    assert "alice" in made.skipped and "alice" not in made.batch.todo
    assert "bob" in made.batch.todo and made.changed == {
        "bob": "submission changed since its grading at 2026-10-06T08:00:00+00:00"
    }
    # only what changed is graded again, into the report
    assert made.batch.only == {"bob": [EX01.id]}


def test_a_student_graded_on_one_assignment_is_submitted_for_the_next(tmp_path):
    """Already graded is a fact about a student's exercise: grading HW2 once skipped the class graded on HW1."""
    klass = make_class(tmp_path)
    out = tmp_path / "out"
    graded_on(klass, out, "alice", EX01)
    hw2 = GradingOptions(test_timeout=30.0, exercises=("ex01", "ex02"))
    made = slurm.plan(klass, out, hw2, slurm.SlurmRequest())
    assert "alice" in made.batch.todo and made.batch.only["alice"] == [catalog.get("ex02").id]
    assert made.changed["alice"] == "ex02 (not graded before)"
    assert slurm.plan(
        klass, out, GradingOptions(test_timeout=30.0, exercises=("ex01",)), slurm.SlurmRequest()
    ).skipped == ["alice"]


def test_a_task_on_a_node_with_another_course_grades_nobody(tmp_path):
    made = slurm.plan(
        make_class(tmp_path),
        tmp_path / "out",
        GradingOptions(test_timeout=30.0),
        slurm.SlurmRequest(),
    )
    made.batch.course = "a-course-changed-since"
    outcome = slurm.run_task(made.batch.save(), 0)
    assert (
        outcome.status == "failed"
        and "differs from the one the batch was submitted with" in outcome.detail
    )
    assert not (student_folder(tmp_path / "out", "alice") / "report.json").exists()
    # the collect job's row says so
    assert slurm.read_outcome(tmp_path / "out", "alice").detail == outcome.detail
    # no task ran for bob
    assert "did not finish" in slurm.read_outcome(tmp_path / "out", "bob").detail


def test_wait_without_slurm_is_a_usage_error(tmp_path):
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "grader.cli",
            "grade-batch",
            str(tmp_path),
            "--out",
            str(tmp_path / "out"),
            "--wait",
        ],
        capture_output=True,
        text=True,
    )
    assert done.returncode == 2 and "--wait follows a Slurm batch" in done.stderr


def test_no_slurm_on_the_path_is_said_plainly(tmp_path):
    made = slurm.plan(
        make_class(tmp_path),
        tmp_path / "out",
        GradingOptions(test_timeout=30.0),
        slurm.SlurmRequest(),
    )
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("PATH", str(tmp_path / "nowhere"))
        with pytest.raises(slurm.SlurmError, match="sbatch is not on this machine's PATH"):
            slurm.submit(made)


# -- on a real Slurm ----------------------------------------------------------------------------------------------


def shardlab(cluster, *args: str, timeout: float = 900) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "grader.cli", *args],
        env=cluster.env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def scores(out: Path) -> dict[str, str]:
    return {
        row["student"]: row["total"] or row["status"]
        for row in csv.DictReader(open(out / "grades.csv"))
    }


@pytest.mark.slow
def test_a_class_graded_on_slurm_scores_as_each_student_alone(local_slurm, tmp_path):
    klass = make_class(tmp_path)
    out = tmp_path / "graded"
    done = shardlab(
        local_slurm,
        "grade-batch",
        str(klass),
        "--out",
        str(out),
        "--slurm",
        "--wait",
        "--exercise",
        "ex01",
        "--test-timeout",
        "60",
        "--slurm-cpus-per-task",
        "1",
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "the collect job ended COMPLETED" in done.stdout
    assert "mallory: graded" in done.stdout and "carol: failed" in done.stdout
    on_slurm = scores(out)
    assert (
        on_slurm["carol"].startswith("not graded") and "not a valid zip file" in on_slurm["carol"]
    )
    for student in ("alice", "bob", "mallory", "dave"):
        alone = tmp_path / "alone" / student
        graded = shardlab(
            local_slurm,
            "grade",
            str(klass / student),
            "--out",
            str(alone),
            "--exercise",
            "ex01",
            "--test-timeout",
            "60",
            "--parallel",
            "1",
            "--quiet",
        )
        assert graded.returncode == 0, graded.stderr
        assert float(on_slurm[student]) == pytest.approx(
            json.loads((alone / "report.json").read_text())["score"]
        )
    assert float(on_slurm["alice"]) == EX01.points and float(on_slurm["bob"]) < EX01.points
    assert float(on_slurm["mallory"]) == EX01.points  # its attack changed nobody's report
    index = (out / "index.html").read_text()
    assert 'href="students/alice/feedback.html"' in index and "not a valid zip file" in index
    # Each task ran bound to the one core it asked for (its grading saw one core and ran one harness), said
    # where, and took that node's timing lock.
    outcome = json.loads((student_folder(out, "alice") / slurm.OUTCOME).read_text())
    assert outcome["node"] == "localhost" and outcome["job"].split("_")[1].isdigit()
    environment = json.loads((student_folder(out, "alice") / "report.json").read_text())[
        "environment"
    ]
    assert environment["cores"] == 1 and environment["parallel"] == 1
    assert (out / ".timing-lock" / "localhost").is_dir()


@pytest.mark.slow
def test_a_cancelled_task_is_resumed_by_running_the_command_again(
    local_slurm, tmp_path, monkeypatch
):
    monkeypatch.setenv("SLURM_CONF", local_slurm.env["SLURM_CONF"])  # for slurm.job_states, here
    klass = make_class(tmp_path)
    out = tmp_path / "graded"
    common = [
        "--exercise",
        "ex01",
        "--test-timeout",
        "60",
        "--slurm-cpus-per-task",
        str(local_slurm.cpus),
    ]
    done = shardlab(
        local_slurm,
        "grade-batch",
        str(klass),
        "--out",
        str(out),
        "--slurm",
        "--slurm-array-limit",
        "1",
        *common,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    made = slurm.SlurmBatch.load(next((out / slurm.FOLDER).glob("*/manifest.json")))
    array, last = made.jobs["grade"], len(made.todo) - 1
    local_slurm.run("scancel", f"{array}_{last}")  # one at a time: the last task is still pending
    again = shardlab(local_slurm, "grade-batch", str(klass), "--out", str(out), "--slurm", *common)
    # nothing is graded twice
    assert again.returncode == 2 and "still queued or running" in again.stderr
    deadline = time.monotonic() + 600
    while slurm.job_states(list(made.jobs.values())) and time.monotonic() < deadline:
        time.sleep(2)
    cancelled = made.todo[last]
    assert scores(out)[cancelled].startswith("not graded: its task did not finish")
    # Once Slurm has forgotten a batch's jobs (MinJobAge after they end), they are simply not active.
    assert slurm.job_states(["987654"]) == {} and slurm.final_state("987654") == "GONE"
    resumed = shardlab(
        local_slurm, "grade-batch", str(klass), "--out", str(out), "--slurm", "--wait", *common
    )
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    # carol and the cancelled
    assert f"{len(made.todo) - 2} already graded; submitting 2 students" in resumed.stdout
    final = scores(out)
    assert not final[cancelled].startswith("not graded") and final["carol"].startswith("not graded")
    shutil.rmtree(out)


@pytest.mark.slow
def test_on_slurm_grading_the_second_assignment_leaves_the_firsts_lateness(local_slurm, tmp_path):
    """A term of two assignments graded on Slurm as an instructor does: HW1 with its times, then HW2 alone
    (--force --exercise) with HW2's times, eight days after HW1's due date: alice's HW1 keeps its score, her
    HW2 is judged late against HW2's due date only."""
    ex02 = catalog.get("ex02")
    course = tmp_path / "course.toml"
    course.write_text(
        'name = "Two on Slurm"\n[late]\npercent = 10\nper = "day"\ncap = 50\n'
        '[[assignment]]\nname = "Homework 1"\nslug = "hw1"\ndue = 2026-10-05T23:59:00Z\n'
        'exercises = ["ex01"]\n'
        '[[assignment]]\nname = "Homework 2"\ndue = 2026-10-12T23:59:00Z\nexercises = ["ex02"]\n'
    )
    alice = tmp_path / "class" / "alice"
    alice.mkdir(parents=True)
    for exercise in (EX01, ex02):
        shutil.copy(exercise.solution_path(), alice / exercise.module_file)
    hw1 = tmp_path / "hw1.csv"
    hw1.write_text("student,assignment,submitted_at\nalice,hw1,2026-10-05T20:00:00Z\n")
    hw2 = tmp_path / "hw2.csv"  # a day and a bit late for HW2: 20% off ex02
    hw2.write_text("student,assignment,submitted_at\nalice,Homework 2,2026-10-14T01:00:00Z\n")
    out = tmp_path / "graded"
    common = ["--course", str(course), "--test-timeout", "60", "--slurm-cpus-per-task", "1"]
    first = shardlab(
        local_slurm, "grade-batch", str(alice.parent), "--out", str(out), "--slurm", "--wait",
        "--exercise", "ex01", "--submitted-at", str(hw1), *common,
    )  # fmt: skip
    assert first.returncode == 0, first.stdout + first.stderr
    assert float(scores(out)["alice"]) == EX01.points
    second = shardlab(
        local_slurm, "grade-batch", str(alice.parent), "--out", str(out), "--slurm", "--wait",
        "--force", "--exercise", "ex02", "--submitted-at", str(hw2), *common,
    )  # fmt: skip
    assert second.returncode == 0, second.stdout + second.stderr
    row = next(csv.DictReader(open(out / "grades.csv")))
    assert float(row[EX01.id]) == EX01.points  # before the fix: half, judged 8 days late
    assert float(row[ex02.id]) == pytest.approx(ex02.points * 0.8)
    assert "ex01" not in row["late"] and "20% off" in row["late"]


def test_a_batch_of_one_part_grades_calibrates_and_publishes_that_part(two_parts, tmp_path):
    klass = make_class(tmp_path)
    args = grade_batch_args(str(klass), "--out", str(tmp_path / "out"), "--slurm", "--part", "2")
    options = GradingOptions.from_args(args, GRADE_BATCH)
    made = slurm.plan(klass, args.out, options, slurm.SlurmRequest.from_args(args))
    assert "--part=2" in made.batch.grade_arguments
    # a fresh cache: the part's reference is timed first, that part only
    assert "--part=2" in made.scripts["calibrate"]
    # the whole term is judged and published (no other part's lateness judged again); the part is graded
    assert len(made.batch.class_term().course.exercises) > 1
    assert batch.chosen_ids(made.batch.grade_options(), made.batch.class_term().course) == (
        two_parts.id,
    )
