"""Recording shardlab's grades in an nbgrader gradebook, through nbgrader's own API, so that
`nbgrader export` and formgrader see a submission graded by the fast path (`shardlab grade` on the
student's notebooks) exactly as if `nbgrader autograde` had run.

A notebook's test cells are named `<exercise id>--test-<function>` (visible) and
`<exercise id>--hidden-<function>`; a cell's auto score is the sum of shardlab's scores for that
test function's cases, which is the share of points the builder gave the cell.
"""

from __future__ import annotations

from collections import defaultdict

from grader.grading.results import GradingResults


def cell_scores(results: GradingResults) -> dict[str, dict[str, float]]:
    """{exercise id (= notebook name): {grade_id: earned points}} for every test function of the
    exercises the submission holds."""
    scores: dict[str, dict[str, float]] = defaultdict(lambda: defaultdict(float))
    for exercise_id, exercise in results.exercises.items():
        if exercise.note:  # not in the submission: nbgrader records no submission either
            continue
        for test in exercise.tests:
            grade_id = f"{exercise_id}--{'hidden' if test.hidden else 'test'}-{test.function}"
            scores[exercise_id][grade_id] += test.score
    return {ex: dict(cells) for ex, cells in scores.items()}


def record_in_gradebook(results: GradingResults, *, db_url: str, student: str) -> list[str]:
    """Write the auto scores of `student`'s notebooks; returns what could not be recorded and why.

    Each exercise's notebook is looked up by name in the gradebook's assignments (they exist once
    `nbgrader generate_assignment` has run); exercises the gradebook does not know are reported."""
    from nbgrader.api import Gradebook, MissingEntry, Notebook

    problems = []
    with Gradebook(db_url) as gradebook:
        gradebook.update_or_create_student(student)
        for exercise_id, cells in cell_scores(results).items():
            notebook = gradebook.db.query(Notebook).filter(Notebook.name == exercise_id).first()
            if notebook is None:
                problems.append(
                    f"{exercise_id}: no such notebook in the gradebook (run nbgrader "
                    "generate_assignment first)"
                )
                continue
            assignment = notebook.assignment.name
            gradebook.update_or_create_submission(assignment, student)
            for grade_id, score in cells.items():
                try:
                    grade = gradebook.find_grade(grade_id, exercise_id, assignment, student)
                except MissingEntry:
                    problems.append(f"{exercise_id}: the gradebook has no cell {grade_id}")
                    continue
                grade.auto_score = round(score, 6)
        gradebook.db.commit()
    return problems
