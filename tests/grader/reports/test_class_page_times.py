"""The class page says which students were graded without a submission time where a due date applied ("no
submission time: no late penalty applied"), beside the late penalties and adjustments; a course without
due dates has nothing to say."""

from __future__ import annotations

import dataclasses
from datetime import datetime

from grader.core.results import Category, TestResult
from grader.course import term
from grader.grading import batch, lateness
from grader.grading.batch import StudentOutcome, student_folder
from grader.grading.results import NO_TIME, GradingResults, score_exercise
from grader.reports.class_page import class_page
from grader.reports.writers import write_report_json

COURSE = """
name = "Two assignments"
timezone = "Europe/Paris"

[late]
percent = 10
per = "day"

[[assignment]]
name = "Homework 1"
due = 2026-10-05T23:59:00
exercises = ["ex01"]
"""


def graded(course, student: str, times: lateness.Times) -> GradingResults:
    exercise = course.exercise("ex01")
    test = TestResult(
        f"tests/exercises/{exercise.id}/test_hidden.py::t", exercise.id, True, 1.0, Category.PASSED
    )
    results = GradingResults(student, {exercise.id: score_exercise(exercise, [test])})
    return lateness.with_term(lateness.stamped(results, course, times), course, student)


def page(tmp_path, course) -> str:
    on_time = lateness.SubmissionTime(
        datetime.fromisoformat("2026-10-05T20:00:00+02:00"), "times.csv"
    )
    klass = batch.ClassTerm(course)
    outcomes = []
    for student, times in (("alice", lateness.Times(on_time)), ("bob", lateness.Times())):
        results = graded(course, student, times)
        folder = student_folder(tmp_path, student)
        folder.mkdir(parents=True, exist_ok=True)
        write_report_json(results, folder / "report.json")
        outcomes.append(
            StudentOutcome(student, "graded", standing=klass.standing_of(results, student))
        )
    return class_page(tmp_path, outcomes)


def test_a_student_without_a_time_is_named_on_the_class_page(tmp_path):
    (tmp_path / "course.toml").write_text(COURSE)
    course = term.load(tmp_path / "course.toml")
    html = page(tmp_path / "out", course)
    bob = html.split('data-student="bob"', 1)[1].split("</tr>", 1)[0]
    alice = html.split('data-student="alice"', 1)[1].split("</tr>", 1)[0]
    assert NO_TIME in bob and NO_TIME not in alice


def test_without_due_dates_there_is_no_missing_time_to_say(tmp_path):
    (tmp_path / "course.toml").write_text(COURSE.replace("due = 2026-10-05T23:59:00\n", ""))
    course = term.load(tmp_path / "course.toml")
    assert all(a.due is None for a in course.assignments)
    assert NO_TIME not in page(tmp_path / "out", dataclasses.replace(course))
