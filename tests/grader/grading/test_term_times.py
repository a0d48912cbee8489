"""Submission times per student and assignment, without grading anything: the times file's two forms and
its errors by line, each exercise judged from its own assignment's time, a partial regrade keeping the time
(and so the lateness) of what it did not grade, an older report's one time still read, the missing-time
state in every output, the Slurm manifest's round trip, the regrade's before -> after, and the submission
digest that tells a resubmission."""

from __future__ import annotations

import csv
import dataclasses
import json
import zipfile
from datetime import datetime

import pytest

from grader.commands import slurm
from grader.core.options import GradingOptions
from grader.core.results import Category, TestResult
from grader.course import roster, term
from grader.grading import batch, lateness, regrade
from grader.grading.results import NO_TIME, GradingResults, score_exercise
from grader.grading.submission_digest import digest
from grader.reports import lms_export

ON_TIME_HW1 = "2026-10-05T20:00:00+02:00"
# 8 days after HW1's due date, before HW2's
HW2_TIME = "2026-10-13T20:00:00+02:00"


@pytest.fixture
def course(tmp_path, two_assignment_course):
    path = tmp_path / "course.toml"
    path.write_text(two_assignment_course)
    return term.load(path)


def passing(course, *names: str, category: str = Category.PASSED) -> GradingResults:
    """A grading of `names`, every test of `category`."""
    exercises = {}
    for name in names:
        exercise = course.exercise(name)
        test = TestResult(
            f"tests/exercises/{exercise.id}/test_hidden.py::t", exercise.id, True, 10.0, category
        )
        exercises[exercise.id] = score_exercise(exercise, [test])
    return GradingResults("alice", exercises)


def graded(course, results, times: lateness.Times, earlier=None) -> GradingResults:
    """As `shardlab grade` does: each exercise stamped with its time, then judged."""
    return lateness.with_term(lateness.stamped(results, course, times, earlier), course, "alice")


def one(text: str, source: str = "--submitted-at") -> lateness.SubmissionTime:
    return lateness.SubmissionTime(datetime.fromisoformat(text), source)


# -- the times file ----------------------------------------------------------------------------------


def test_a_two_column_times_file_gives_each_student_one_time_for_what_is_graded(tmp_path, course):
    path = tmp_path / "times.csv"
    path.write_text(f"student,submitted_at\nalice,{ON_TIME_HW1}\nbob,{HW2_TIME}\n")
    read = lateness.read_times(path, course)
    assert read.students["alice"].every.at == datetime.fromisoformat(ON_TIME_HW1)
    assert read.students["alice"].assignments == {}
    assert read.students["alice"].of(course, "ex05").at == datetime.fromisoformat(ON_TIME_HW1)


def test_a_three_column_times_file_gives_a_time_per_assignment_by_name_or_slug(tmp_path, course):
    path = tmp_path / "times.csv"
    path.write_text(
        f"student,assignment,submitted_at\nalice,Homework 1,{ON_TIME_HW1}\nalice,HW2,{HW2_TIME}\n"
        f"bob,HW2,{HW2_TIME}\n"
    )
    read = lateness.read_times(path, course)
    alice = read.students["alice"]
    assert alice.every is None and set(alice.assignments) == {"Homework 1", "Homework 2"}
    assert alice.of(course, "ex01").at == datetime.fromisoformat(ON_TIME_HW1)
    assert alice.of(course, "ex05").at == datetime.fromisoformat(HW2_TIME)
    # bob's HW2 time says nothing of his HW1
    assert read.students["bob"].of(course, "ex01") is None


def test_each_problem_of_a_times_file_names_its_line(tmp_path, course):
    path = tmp_path / "times.csv"
    path.write_text(
        "student,assignment,submitted_at\n"
        f"alice,Homework 1,{ON_TIME_HW1}\n"
        f"alice,HW1,{HW2_TIME}\n"  # the same assignment by its slug
        f"bob,Homework 3,{HW2_TIME}\n"
        "carol,HW2,next tuesday\n"
    )
    with pytest.raises(lateness.SubmissionTimeError) as caught:
        lateness.read_times(path, course)
    said = str(caught.value)
    assert "line 3: alice has a time for Homework 1 already" in said
    assert "line 4:" in said and "Homework 3" in said and "Homework 1" in said  # names the term's
    assert "line 5: 'next tuesday' is not an ISO 8601" in said
    path.write_text(f"student,submitted_at\nalice,{ON_TIME_HW1}\nalice,{HW2_TIME}\n")
    with pytest.raises(lateness.SubmissionTimeError, match="line 3: alice has a time already"):
        lateness.read_times(path, course)
    path.write_text(f"name,when\nalice,{ON_TIME_HW1}\n")
    with pytest.raises(lateness.SubmissionTimeError, match="line 1: the header must name"):
        lateness.read_times(path, course)


def test_a_times_file_naming_a_student_not_in_the_class_names_the_line(tmp_path, course):
    """With the file's other problems, at once (it was said only once they were fixed)."""
    path = tmp_path / "times.csv"
    path.write_text(
        f"student,submitted_at\nalice,{ON_TIME_HW1}\nbobby,{HW2_TIME}\ncarol,next tuesday\n"
    )
    known = lateness.Known({"alice", "bob", "carol"}, "in the class folder")
    with pytest.raises(lateness.SubmissionTimeError) as caught:
        lateness.read_times(path, course, known)
    assert str(caught.value).splitlines()[1:] == [
        "  line 3: 'bobby' is not in the class folder",
        "  line 4: 'next tuesday' is not an ISO 8601 date and time (write 2026-10-05T23:59:00+02:00)",
    ]
    path.write_text(f"student,submitted_at\nalice,{ON_TIME_HW1}\nbobby,{HW2_TIME}\n")
    assert set(
        lateness.read_times(path, course, known._replace(students={"alice", "bobby"})).students
    ) == {
        "alice",
        "bobby",
    }


def test_grades_flag_takes_one_time_or_a_time_per_assignment(course):
    times = lateness.Times.parse([ON_TIME_HW1, f"HW2={HW2_TIME}"], course, "--submitted-at")
    assert times.of(course, "ex01").at == datetime.fromisoformat(ON_TIME_HW1)
    assert times.of(course, "ex05").at == datetime.fromisoformat(HW2_TIME)
    assert lateness.Times.parse(times.arguments(), course, "--submitted-at") == times
    with pytest.raises(lateness.SubmissionTimeError, match="Homework 3"):
        lateness.Times.parse([f"Homework 3={HW2_TIME}"], course, "--submitted-at")
    with pytest.raises(lateness.SubmissionTimeError, match="has a time already"):
        lateness.Times.parse([f"HW2={HW2_TIME}", f"Homework 2={HW2_TIME}"], course, "x")


# -- judging: each exercise from its own time --------------------------------------------------------


def test_an_assignments_time_judges_its_exercises_only(course):
    times = lateness.Times(assignments={"Homework 2": one(HW2_TIME)})
    results = graded(course, passing(course, "ex01", "ex05"), times)
    ex01, ex05 = (results.exercises[course.exercise(n).id] for n in ("ex01", "ex05"))
    # HW2's time, 8 days after HW1's due date, is not HW1's: HW1 has no time and says so
    assert ex01.late is None and ex01.untimed and ex01.final == ex01.score > 0
    assert ex05.late.percent == 0 and not ex05.untimed and ex05.final == ex05.score > 0


def test_grading_hw2_into_hw1s_report_never_rejudges_hw1(course):
    hw1 = graded(course, passing(course, "ex01"), lateness.Times(one(ON_TIME_HW1)))
    ex01 = course.exercise("ex01").id
    full = hw1.exercises[ex01].score
    assert full > 0 and hw1.exercises[ex01].final == full
    # the issue's run: HW2's time given as the one time of a grading of ex05 alone
    hw2 = graded(course, passing(course, "ex05"), lateness.Times(one(HW2_TIME)), hw1)
    merged = regrade.merge(hw1, hw2, partial=True)
    assert merged.exercises[ex01].final == full and merged.exercises[ex01].late.percent == 0
    # the path of every republish, override and export: judged again from report.json
    back = GradingResults.from_dict(json.loads(json.dumps(merged.to_dict())))
    rejudged = batch.ClassTerm(course).judged(back, "alice")
    assert rejudged.exercises[ex01].final == full
    assert batch.ClassTerm(course).standing_of(back, "alice").final == pytest.approx(merged.score)
    # what the fix replaced: one recorded time, the latest, judging every exercise
    assert course.lateness(ex01, "alice", datetime.fromisoformat(HW2_TIME)).percent == 50


def test_a_regrade_without_a_time_keeps_each_exercises_own(course):
    first = graded(
        course,
        passing(course, "ex01", "ex05"),
        lateness.Times(one(ON_TIME_HW1), {"Homework 2": one(HW2_TIME)}),
    )
    again = graded(course, passing(course, "ex01", "ex05"), lateness.Times(), first)
    assert {k: v.submitted for k, v in again.exercises.items()} == {
        k: v.submitted for k, v in first.exercises.items()
    }


def test_the_submissions_own_clock_never_replaces_a_time_the_instructor_gave(course):
    # graded with the instructor's times; later forced again without them, the clone's commit (which the
    # student dates as they like) on time: the instructor's time stays
    first = graded(course, passing(course, "ex01", "ex05"), lateness.Times(one(HW2_TIME)))
    forged = lateness.SubmissionTime(datetime.fromisoformat(ON_TIME_HW1), lateness.FROM_GIT)
    again = graded(
        course, passing(course, "ex01", "ex05"), lateness.Times(student_clock=forged), first
    )
    assert {ex.submitted.at for ex in again.exercises.values()} == {HW2_TIME}
    assert again.penalty == first.penalty > 0
    # a time the student's clock gave earlier gives way to the one it gives now (a new commit)
    by_git = graded(course, passing(course, "ex01"), lateness.Times(student_clock=forged))
    later = lateness.SubmissionTime(datetime.fromisoformat(HW2_TIME), lateness.FROM_GIT)
    newer = graded(course, passing(course, "ex01"), lateness.Times(student_clock=later), by_git)
    assert {ex.submitted.at for ex in newer.exercises.values()} == {HW2_TIME}


def test_an_older_reports_one_time_is_each_exercises(course):
    old = graded(course, passing(course, "ex01", "ex05"), lateness.Times(one(HW2_TIME)))
    data = old.to_dict()
    for exercise in data["exercises"].values():
        del exercise["submitted"], exercise["untimed"]
    back = GradingResults.from_dict(data)
    assert {ex.submitted.at for ex in back.exercises.values()} == {HW2_TIME}
    # HW2's time judged HW1 too (50% off): an older report reads as it was graded
    assert old.penalty > 0 and batch.ClassTerm(course).judged(back, "alice").final == old.final


def test_a_missing_time_is_said_in_grades_csv_and_the_long_csv(tmp_path, course):
    results = graded(course, passing(course, "ex01", "ex05"), lateness.Times())
    mine = batch.ClassTerm(course).standing_of(results, "alice")
    assert mine.untimed == NO_TIME and mine.final == results.score and mine.penalty == 0
    assert batch._row(mine, None)["status"] == f"graded; {NO_TIME}"
    path = lms_export.long_csv({"alice": mine}, course, roster.Roster(), tmp_path / "long.csv")
    with path.open(newline="") as handle:
        assert {row["late_reason"] for row in csv.DictReader(handle)} == {NO_TIME}
    # a course with no due date has nothing to warn about
    undated = dataclasses.replace(
        course, assignments=tuple(dataclasses.replace(a, due=None) for a in course.assignments)
    )
    plain = batch.ClassTerm(undated).standing_of(results, "alice")
    assert plain.untimed == "" and batch._row(plain, None)["status"] == "graded"


# -- the Slurm route, the regrade's words, the digest ---------------------------------------------------


def test_the_slurm_manifest_carries_each_students_times_per_assignment(tmp_path, course):
    klass = tmp_path / "class"
    (klass / "alice").mkdir(parents=True)
    times = {"alice": lateness.Times(one(ON_TIME_HW1), {"Homework 2": one(HW2_TIME)})}
    options = GradingOptions(test_timeout=30.0, course=course.source.path)
    made = slurm.plan(klass, tmp_path / "out", options, slurm.SlurmRequest(), times=times)
    path = made.batch.save()
    back = slurm.SlurmBatch.load(path).class_term().times["alice"]
    assert back.of(course, "ex01").at == datetime.fromisoformat(ON_TIME_HW1)
    assert back.of(course, "ex05").at == datetime.fromisoformat(HW2_TIME)


def test_a_regrade_says_each_exercises_score_before_and_after(course):
    earlier = graded(course, passing(course, "ex01", "ex05"), lateness.Times(one(HW2_TIME)))
    failing = passing(course, "ex05", category=Category.FAILED)
    ex05 = course.exercise("ex05").id
    now = regrade.merge(earlier, graded(course, failing, lateness.Times(), earlier), partial=True)
    before = round(earlier.exercises[ex05].score, 2)
    assert regrade.regraded(earlier, now) == [f"{ex05}: {before:g} -> 0"]
    assert regrade.regraded(None, now) == []


def test_a_submissions_digest_changes_with_what_grading_reads_only(tmp_path):
    folder = tmp_path / "bob"
    folder.mkdir()
    module = folder / "ex01_meshes.py"
    module.write_text("x = 1\n")
    first = digest(folder)
    (folder / "notes.txt").write_text("not read by grading")
    (folder / ".hidden.py").write_text("ignored")
    assert digest(folder) == first
    module.write_text("x = 2\n")
    assert digest(folder) != first
    archive = tmp_path / "bob.zip"
    with zipfile.ZipFile(archive, "w") as handle:
        handle.writestr("ex01_meshes.py", "x = 1\n")
    zipped = digest(archive)
    assert zipped == digest(archive) and len(zipped) == 64
    with zipfile.ZipFile(archive, "a") as handle:
        handle.writestr("ex05_collectives.py", "y = 1\n")
    assert digest(archive) != zipped
    assert digest(tmp_path / "nobody") == ""
