"""A three-assignment term graded for real, one assignment at a time into one output folder, as an instructor
runs it: HW1 (ex01) with `--assignment HW1` and HW1's times, HW2 (ex05) with `--assignment HW2` and HW2's
(no --force: the class was graded before, not on HW2), HW3 (ex15, part 2 of the course) with `--force --part 2`
and a time per assignment, then bob's resubmission of ex05, a plain re-run, and an export for the LMS.

Each assignment's scores and lateness stay as graded through every later step: `--part 2` once judged HW1
and HW2 with no due date (erin's HW2 12 -> 15), grading HW2 once skipped every student graded on HW1, and a
partial regrade once kept the old submission digest, so every later run said "submission changed"."""

from __future__ import annotations

import csv
import shutil
from pathlib import Path

import pytest

from grader.course import catalog

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("test_term_of_three")]

EX01, EX05, EX15 = catalog.get("ex01"), catalog.get("ex05"), catalog.get("ex15")

COURSE = """
name = "Three assignments"
timezone = "Europe/Paris"
roster = "roster.csv"

[points]
ex01 = 10
ex05 = 10

[late]
percent = 10
per = "day"
cap = 50

[[assignment]]
name = "Homework 1"
slug = "HW1"
due = 2026-10-05T23:59:00
exercises = ["ex01"]
lms_id = 101

[[assignment]]
name = "Homework 2"
slug = "HW2"
due = 2026-10-19T23:59:00
exercises = ["ex05"]
lms_id = 102

[[assignment]]
name = "Homework 3"
slug = "HW3"
due = 2026-11-02T23:59:00
exercises = ["ex15"]
lms_id = 103

# bob's HW3 comes 12 hours late, within his two days
[[extension]]
student = "bob"
assignments = ["Homework 3"]
days = 2
"""

ROSTER = """student,name,lms_id,sis_user_id,sis_login_id,section,email
alice,"Doe, Alice",4321,S001,adoe,A,
bob,"Roe, Bob",4322,S002,broe,A,
carol,"Poe, Carol",4323,S003,cpoe,B,
"""

HW1_TIMES = "student,submitted_at\nalice,2026-10-05T20:00:00+02:00\nbob,2026-10-05T21:00:00+02:00\n"
# alice's HW2 is 8 days after HW1's due date, on time for HW2; bob's is 1 day 10 h late: 20% off
HW2_TIMES = "student,submitted_at\nalice,2026-10-13T20:00:00+02:00\nbob,2026-10-21T10:00:00+02:00\n"
# one time per student and assignment; carol left out on purpose
HW3_TIMES = (
    "student,assignment,submitted_at\n"
    "alice,Homework 3,2026-11-01T12:00:00+01:00\n"
    "bob,HW3,2026-11-03T12:00:00+01:00\n"
)

# what each assignment is worth to each student once graded, late penalties taken: it never changes after
FINAL = {
    "alice": {EX01.id: 10.0, EX05.id: 10.0},
    "bob": {EX01.id: 10.0, EX05.id: 8.0},
    "carol": {EX01.id: 10.0, EX05.id: 0.0},
}
LATE = {"alice": {EX01.id: 0, EX05.id: 0}, "bob": {EX01.id: 0, EX05.id: 20}}


def reports(out: Path, commands) -> dict[str, dict]:
    return {s: commands.report(out, s) for s in ("alice", "bob", "carol")}


@pytest.fixture(scope="module")
def term(tmp_path_factory, class_commands):
    root = tmp_path_factory.mktemp("term")
    (root / "course.toml").write_text(COURSE)
    (root / "roster.csv").write_text(ROSTER)
    for name, text in (("hw1.csv", HW1_TIMES), ("hw2.csv", HW2_TIMES), ("hw3.csv", HW3_TIMES)):
        (root / name).write_text(text)
    klass, out = root / "class", root / "graded"
    for student in ("alice", "bob"):
        (klass / student).mkdir(parents=True)
        for exercise in (EX01, EX05, EX15):
            shutil.copy(exercise.solution_path(), klass / student / exercise.module_file)
    # carol hands in HW1 only, and no times file names her
    (klass / "carol").mkdir()
    shutil.copy(EX01.solution_path(), klass / "carol" / EX01.module_file)
    batch = ["grade-batch", str(klass), "--out", str(out), "--jobs", "2", "--test-timeout", "60"]
    steps, seen = {}, {}

    def step(name: str, *arguments: str) -> None:
        steps[name] = class_commands.run(*batch, *arguments, cwd=root)
        seen[name] = {
            "reports": reports(out, class_commands),
            "grades": class_commands.grades(out),
            "page": (out / "index.html").read_text(),
        }

    step("hw1", "--assignment", "HW1", "--submitted-at", str(root / "hw1.csv"))
    step("hw2", "--assignment", "HW2", "--submitted-at", str(root / "hw2.csv"))
    step("hw3", "--force", "--part", "2", "--submitted-at", str(root / "hw3.csv"))
    # bob resubmits ex05: a changed file; alice and carol change nothing
    module = klass / "bob" / EX05.module_file
    module.write_text(module.read_text() + "\n# resubmitted\n")
    step("resubmitted")
    step("again")
    steps["export"] = class_commands.run(
        "export",
        str(out),
        "--course",
        str(root / "course.toml"),
        "--canvas",
        str(root / "canvas.csv"),
        "--long",
        str(root / "long.csv"),
        cwd=root,
    )
    return {"root": root, "out": out, "steps": steps, "seen": seen}


def said(term, step: str) -> str:
    return term["steps"][step].stdout + term["steps"][step].stderr


def test_each_assignment_keeps_its_scores_and_lateness_through_every_later_step(term):
    graded_from = {"hw1": (EX01.id,), "hw2": (EX01.id, EX05.id)}
    for step, seen in term["seen"].items():
        for student, exercises in FINAL.items():
            held = seen["reports"][student]["exercises"]
            for ex_id in graded_from.get(step, (EX01.id, EX05.id)):
                assert held[ex_id]["final"] == pytest.approx(exercises[ex_id]), (
                    step,
                    student,
                    ex_id,
                )
                due = held[ex_id]["late"]["due"] if held[ex_id]["late"] else None
                if student in LATE:
                    assert due is not None, (step, student, ex_id)
                    assert held[ex_id]["late"]["percent"] == LATE[student][ex_id], (step, student)
            row = seen["grades"][student]
            for ex_id in graded_from.get(step, (EX01.id, EX05.id)):
                assert float(row[ex_id]) == pytest.approx(exercises[ex_id]), (step, student, row)


def test_grading_the_next_assignment_grades_the_class_on_it(term):
    hw2 = said(term, "hw2")
    assert "skipped already graded" not in hw2, hw2[-2000:]
    for student in ("alice", "bob", "carol"):
        assert f"{student}: graded ex05 (not graded before) (" in hw2, hw2[-2000:]
    # a line per student that counts, as a log reads it (the bar, without a terminal, showed only at 100%)
    assert "(3 of 3)" in hw2 and "━" not in hw2
    rows = term["seen"]["hw2"]["grades"]
    # every student's maximum is the two assignments graded
    assert {rows[s]["max_score"] for s in rows} == {"20.0"}, rows


def test_part_2_judges_its_own_lateness_with_the_extension_and_no_other(term):
    held = term["seen"]["hw3"]["reports"]
    assert held["alice"]["exercises"][EX15.id]["late"]["percent"] == 0
    bob = held["bob"]["exercises"][EX15.id]["late"]
    assert bob["percent"] == 0 and bob["due"] == "2026-11-04T23:59:00+01:00", bob
    assert held["bob"]["exercises"][EX15.id]["submitted"]["at"] == "2026-11-03T12:00:00+01:00"
    # carol is in no row of the times file: said, and her HW1 keeps what it was judged with
    assert "gives no time for carol" in said(term, "hw3")
    assert held["carol"]["exercises"][EX15.id]["note"]  # not attempted
    # the times file gave bob HW3's time only: HW1's and HW2's are those they were judged with
    assert held["bob"]["exercises"][EX05.id]["submitted"]["at"] == "2026-10-21T10:00:00+02:00"


def test_a_resubmission_regrades_what_changed_once_and_then_nothing(term):
    again = said(term, "resubmitted")
    assert "bob: regraded, submission changed since its grading at" in again, again[-2000:]
    assert f"{EX05.id}: 10 -> 10 (after the late penalty: 8 -> 8)" in again, again[-2000:]
    assert f"{EX01.id}: 10 -> 10" not in again and f"{EX15.id}:" not in again
    assert "alice: skipped already graded" in again and "carol: skipped already graded" in again
    before, after = term["seen"]["hw3"]["reports"], term["seen"]["resubmitted"]["reports"]
    assert after["alice"] == before["alice"] and after["carol"] == before["carol"]
    bob = after["bob"]["exercises"]
    assert bob[EX05.id]["graded_from"] != before["bob"]["exercises"][EX05.id]["graded_from"]
    assert bob[EX01.id]["graded_from"] == before["bob"]["exercises"][EX01.id]["graded_from"]
    # graded again with no times file: the exercise keeps the time it was judged with, and its penalty
    assert bob[EX05.id]["late"]["percent"] == 20
    # once regraded, nothing is left to grade: the next run changes no one
    quiet = said(term, "again")
    assert quiet.count("skipped already graded") == 3 and "regraded" not in quiet, quiet[-2000:]
    assert term["seen"]["again"]["reports"] == term["seen"]["resubmitted"]["reports"]
    assert term["seen"]["again"]["page"].count("submission changed") == 0


def test_the_export_gives_each_assignment_as_graded(term):
    with (term["root"] / "canvas.csv").open(newline="") as handle:
        rows = {row["Student"]: row for row in csv.DictReader(handle)}
    columns = {
        n: next(c for c in rows["Doe, Alice"] if c.startswith(n))
        for n in ("Homework 1", "Homework 2")
    }
    for student, name in (("alice", "Doe, Alice"), ("bob", "Roe, Bob"), ("carol", "Poe, Carol")):
        assert float(rows[name][columns["Homework 1"]]) == FINAL[student][EX01.id], rows[name]
        assert float(rows[name][columns["Homework 2"]]) == FINAL[student][EX05.id], rows[name]
    with (term["root"] / "long.csv").open(newline="") as handle:
        long = {(r["student"], r["exercise"]): r for r in csv.DictReader(handle)}
    assert float(long[("bob", EX05.id)]["final"]) == pytest.approx(8.0)


def test_a_student_without_a_time_is_graded_without_a_late_penalty_and_every_output_says_so(term):
    assert "hw1.csv gives no time for carol" in said(term, "hw1")
    carol = term["seen"]["hw1"]["grades"]["carol"]
    assert carol["status"] == "graded; no submission time: no late penalty applied"
    assert f"{EX01.id}: no submission time: no late penalty applied" in carol["late"]
    assert "no submission time: no late penalty applied" in term["seen"]["hw1"]["page"]
    assert "no submission time" not in term["seen"]["hw1"]["grades"]["alice"]["status"]
