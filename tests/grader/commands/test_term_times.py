"""A two-assignment term graded for real, one assignment at a time, as an instructor runs it: HW1 (ex01)
graded with HW1's times, then HW2 (ex05) with HW2's (`--force --exercise ex05`), then a plain re-run after
one student changed a file. Grading HW2 never re-judges HW1's lateness (it once took alice's HW1 from 10 to
5); a changed submission is graded again and said so, an unchanged one is skipped."""

from __future__ import annotations

import csv
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from grader.course import catalog

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("test_term_times")]

EX01, EX05 = catalog.get("ex01"), catalog.get("ex05")

# The term is two_assignment_course's: HW2 is due two weeks after HW1, and alice hands it in 8 days after
# HW1's due date, on time for HW2.
HW1_TIMES = "student,submitted_at\nalice,2026-10-05T20:00:00+02:00\nbob,2026-10-05T21:00:00+02:00\n"
# today's two-column form, as the issue ran it: alice's HW2 time
HW2_TIMES = "student,submitted_at\nalice,2026-10-13T20:00:00+02:00\nbob,2026-10-21T10:00:00+02:00\n"
# one time per student and assignment; bob left out on purpose
BOTH_TIMES = (
    "student,assignment,submitted_at\n"
    "alice,Homework 1,2026-10-05T20:00:00+02:00\n"
    "alice,HW2,2026-10-13T20:00:00+02:00\n"
)


def shardlab(*arguments: str, cwd: Path) -> subprocess.CompletedProcess:
    done = subprocess.run(
        [sys.executable, "-m", "grader.cli", *arguments],
        capture_output=True,
        text=True,
        timeout=1800,
        cwd=cwd,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return done


def grades(out: Path) -> dict[str, dict[str, str]]:
    with (out / "grades.csv").open(newline="") as handle:
        return {row["student"]: row for row in csv.DictReader(handle)}


def report(out: Path, student: str) -> dict:
    return json.loads((out / "students" / student / "report.json").read_text())


def final(out: Path, student: str, exercise) -> float:
    return report(out, student)["exercises"][exercise.id]["final"]


@pytest.fixture(scope="module")
def term(tmp_path_factory, two_assignment_course):
    root = tmp_path_factory.mktemp("times")
    (root / "course.toml").write_text(two_assignment_course)
    for name, text in (("hw1.csv", HW1_TIMES), ("hw2.csv", HW2_TIMES), ("both.csv", BOTH_TIMES)):
        (root / name).write_text(text)
    klass, out = root / "class", root / "graded"
    for student in ("alice", "bob"):
        (klass / student).mkdir(parents=True)
        for exercise in (EX01, EX05):
            shutil.copy(exercise.solution_path(), klass / student / exercise.module_file)
    # carol hands in HW1 only, and no times file names her
    (klass / "carol").mkdir()
    shutil.copy(EX01.solution_path(), klass / "carol" / EX01.module_file)
    batch = ["grade-batch", str(klass), "--out", str(out), "--jobs", "2", "--test-timeout", "60"]
    steps = {}
    steps["hw1"] = shardlab(
        *batch, "--submitted-at", str(root / "hw1.csv"), "--exercise", "ex01", cwd=root
    )
    hw1 = {s: final(out, s, EX01) for s in ("alice", "bob")}
    grades_hw1, page_hw1 = grades(out), (out / "index.html").read_text()
    steps["hw2"] = shardlab(
        *batch,
        "--submitted-at",
        str(root / "hw2.csv"),
        "--force",
        "--exercise",
        "ex05",
        cwd=root,
    )
    after_hw2 = {s: report(out, s) for s in ("alice", "bob")}
    grades_hw2 = grades(out)
    # bob resubmits ex05: a changed file; alice changes nothing
    module = klass / "bob" / EX05.module_file
    module.write_text(module.read_text() + "\n# resubmitted\n")
    steps["rerun"] = shardlab(*batch, cwd=root)
    after_rerun = {s: report(out, s) for s in ("alice", "bob")}
    steps["both"] = shardlab(*batch, "--force", "--submitted-at", str(root / "both.csv"), cwd=root)
    return {
        "root": root,
        "out": out,
        "hw1": hw1,
        "grades_hw1": grades_hw1,
        "page_hw1": page_hw1,
        "after_hw2": after_hw2,
        "grades_hw2": grades_hw2,
        "after_rerun": after_rerun,
        "after_both": {s: report(out, s) for s in ("alice", "bob")},
        "grades_both": grades(out),
        "steps": steps,
    }


def test_grading_hw2_with_hw2s_times_leaves_hw1s_lateness_as_it_was(term):
    assert term["hw1"] == {"alice": 10.0, "bob": 10.0}
    alice, bob = term["after_hw2"]["alice"]["exercises"], term["after_hw2"]["bob"]["exercises"]
    # alice's HW2 time is 8 days after HW1's due date: HW1 keeps the time it was judged with
    assert alice[EX01.id]["final"] == 10.0 and alice[EX01.id]["late"]["percent"] == 0
    assert alice[EX01.id]["submitted"]["at"] == "2026-10-05T20:00:00+02:00"
    assert alice[EX05.id]["final"] == 10.0 and alice[EX05.id]["late"]["percent"] == 0
    # bob's HW2 came 1 day 10 h after its due date: 2 days started, 20% off HW2 only
    assert bob[EX01.id]["final"] == 10.0 and bob[EX05.id]["late"]["percent"] == 20
    assert bob[EX05.id]["final"] == pytest.approx(8.0)
    rows = term["grades_hw2"]
    assert float(rows["alice"]["total"]) == 20.0 and float(rows["bob"]["total"]) == 18.0


def test_a_changed_submission_is_regraded_by_a_plain_rerun_and_an_unchanged_one_skipped(term):
    said = term["steps"]["rerun"].stdout + term["steps"]["rerun"].stderr
    assert "alice: skipped already graded" in said, said[-2000:]
    assert "bob: regraded, submission changed since its grading at" in said, said[-2000:]
    # a regrade says each exercise's score before -> after
    assert f"{EX01.id}: 10 -> 10; {EX05.id}: 10 -> 10 (after the late penalty: 8 -> 8)" in said, (
        said
    )
    alice_before, alice_after = term["after_hw2"]["alice"], term["after_rerun"]["alice"]
    assert alice_after == alice_before
    bob_before, bob_after = term["after_hw2"]["bob"], term["after_rerun"]["bob"]
    assert bob_after["submission_digest"] != bob_before["submission_digest"]
    # graded again with no times file: each exercise keeps the time it was judged with
    assert bob_after["exercises"][EX01.id]["late"]["percent"] == 0
    assert bob_after["exercises"][EX05.id]["late"]["percent"] == 20


def test_a_time_per_assignment_applies_to_that_assignments_exercises_only(term):
    alice = term["after_both"]["alice"]["exercises"]
    assert alice[EX01.id]["submitted"]["at"] == "2026-10-05T20:00:00+02:00"
    assert alice[EX05.id]["submitted"]["at"] == "2026-10-13T20:00:00+02:00"
    assert alice[EX01.id]["final"] == alice[EX05.id]["final"] == 10.0
    # bob is not in the file: said on stderr, kept at the times his report recorded
    assert "gives no time for bob" in term["steps"]["both"].stderr
    assert term["after_both"]["bob"]["exercises"][EX05.id]["late"]["percent"] == 20


def test_a_student_without_a_time_is_graded_without_a_late_penalty_and_every_output_says_so(term):
    assert "hw1.csv gives no time for carol" in term["steps"]["hw1"].stderr
    carol = term["grades_hw1"]["carol"]
    assert carol["status"] == "graded; no submission time: no late penalty applied"
    assert f"{EX01.id}: no submission time: no late penalty applied" in carol["late"]
    assert "no submission time: no late penalty applied" in term["page_hw1"]
    assert "no submission time" not in term["grades_hw1"]["alice"]["status"]
