"""Publishing a class's grades: every student's results.json and feedback page, grades.csv and the class page,
from the reports grading wrote, the course file's late policy (as it reads now: an extension granted after
grading counts) and the instructor's adjustments. grade-batch publishes at its end (on Slurm, its collect
job), and `shardlab override` after recording an adjustment, without grading anything again.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path

from grader.course import adjustments as adjustments_file
from grader.course.term import Course
from grader.grading import batch
from grader.grading.results import read_report
from grader.grading.standing import Standing, standing
from grader.reports import writers
from grader.reports.class_page import write_class_page
from grader.reports.html import Markup


def class_term(course: Course, times: dict | None = None) -> batch.ClassTerm:
    """The course with its adjustments file read (an AdjustmentsError names the line of a bad one)."""
    return batch.ClassTerm(
        course, tuple(adjustments_file.load(course.adjustments)), dict(times or {})
    )


@dataclass
class Publication:
    grades_csv: Path
    page: Path
    standings: dict[str, Standing] = field(default_factory=dict)
    # adjustments that could not apply, with their lines
    problems: list[str] = field(default_factory=list)


def publish_class(
    out: Path,
    outcomes: list[batch.StudentOutcome],
    term: batch.ClassTerm,
    *,
    hidden_visibility: str,
    similarity: Markup | None = None,
) -> Publication:
    """Each graded student's late penalties judged by `term`'s course (report.json updated when they changed),
    their adjustments applied, their results.json and feedback.html written again; then grades.csv and the
    class page. `outcomes`: every student of the class, graded or not, in any order."""
    out = Path(out)
    standings, failures, problems, published = {}, {}, [], []
    for outcome in outcomes:
        folder = batch.student_folder(out, outcome.student)
        # A grading that failed keeps the report an earlier one wrote (a regrade that failed changes nothing).
        results = read_report(folder / batch.REPORT) if outcome.status != batch.REFUSED else None
        if results is None:
            failures[outcome.student] = outcome.detail or "no report to read"
            published.append(outcome)
            continue
        if outcome.status == "failed":
            failures[outcome.student] = (
                f"the last grading failed, the earlier grades are kept: {outcome.detail}"
            )
            outcome = dataclasses.replace(outcome, status="skipped")
        judged = term.judged(results, outcome.student)
        if judged.to_dict() != results.to_dict():
            writers.write_report_json(judged, folder / batch.REPORT)
        graded = standing(judged, list(term.adjustments), outcome.student)
        problems += [f"{outcome.student}: {problem}" for problem in graded.problems]
        writers.publish(judged, folder, hidden_visibility=hidden_visibility, standing=graded)
        standings[outcome.student] = graded
        published.append(dataclasses.replace(outcome, standing=graded))
    students = sorted(o.student for o in outcomes)
    grades = batch.write_grades_csv(out, students, standings, failures, term.course)
    page = write_class_page(out, published, similarity, term.course.name)
    return Publication(grades, page, standings, problems)
