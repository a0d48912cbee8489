"""Print the score of a `shardlab grade` run and publish it for GitHub Actions:

    python .github/grade_summary.py graded/report.json
    python .github/grade_summary.py --error "WHY"     # grading wrote no report: say so, with 0 points

- prints the score and a line per exercise; a run of the visible tests says how many of each exercise's
  points they check and whether they pass, never a score out of those points alone;
- appends a Markdown table to the job summary, when $GITHUB_STEP_SUMMARY names a file;
- writes `result` to the step's outputs, when $GITHUB_OUTPUT names a file: base64-encoded JSON in the
  format of GitHub Classroom's graders, which classroom-resources/autograding-grading-reporter reads
  (see classroom_result).
"""

from __future__ import annotations

import base64
import json
import math
import os
import sys
from pathlib import Path

# a skipped test earns its points when graded (the timing policy's choice)
EARNS = ("passed", "skipped")


def points(value: float) -> str:
    """As grader.reports.text.points (this file runs without the grader; a test holds the two the same):
    exact when five decimals hold it (0.125, 0.03125), else three significant digits, at least two decimals."""
    text = f"{value:.5f}"
    if abs(float(text) - value) > 1e-9:
        size = math.floor(math.log10(abs(value))) + 1
        text = f"{value:.{max(2, 3 - size)}f}"
    return text.rstrip("0").rstrip(".")


def passed(exercise: dict) -> int:
    return sum(test["category"] == "passed" for test in exercise["tests"])


def checked(exercise: dict) -> float:
    """The points the tests that ran carry: a test's points are its weight."""
    return math.fsum(test["max_score"] for test in exercise["tests"])


def earned(exercise: dict) -> float:
    return math.fsum(test["score"] for test in exercise["tests"])


def earned_all(exercise: dict) -> bool:
    return all(test["category"] in EARNS for test in exercise["tests"])


def reachable(report: dict) -> float:
    """What the score could reach: the points the tests that ran check (a visible-only run's are fewer than
    the course's), else the course's maximum."""
    if report.get("visible_only"):
        return math.fsum(checked(ex) for ex in report["exercises"].values())
    return report["max_score"]


def score_line(report: dict) -> str:
    if report.get("visible_only"):
        return (
            f"Visible tests: {points(report['score'])} of the {points(reachable(report))} points they check "
            f"pass (of {points(report['max_score'])} in all: the hidden tests check the rest when you are graded)"
        )
    return f"Score: {points(report['score'])} / {points(report['max_score'])} points (all tests)"


def exercise_points(report: dict, exercise: dict) -> str:
    """ "visible: 4 of 20 points checked, all pass" after a visible-only run, "15 / 20" after grading."""
    if not report.get("visible_only"):
        return f"{points(exercise['score'])} / {points(exercise['max_score'])}"
    share = (
        f"visible: {points(checked(exercise))} of {points(exercise['max_score'])} points checked"
    )
    return (
        f"{share}, all pass"
        if earned_all(exercise)
        else f"{share}, {points(exercise['score'])} pass"
    )


def exercise_lines(report: dict) -> list[str]:
    return [
        f"  {ex['id']}: {exercise_points(report, ex)} ({passed(ex)} of {len(ex['tests'])} tests pass)"
        for ex in report["exercises"].values()
    ]


def markdown(report: dict) -> str:
    rows = [
        f"| {ex['id']} | {ex['title'].replace('|', '/')} | {exercise_points(report, ex)} "
        f"| {passed(ex)} of {len(ex['tests'])} |"
        for ex in report["exercises"].values()
    ]
    return "\n".join(
        [
            f"## {score_line(report)}",
            "",
            "| exercise | title | points | tests passed |",
            "| --- | --- | ---: | ---: |",
            *rows,
            "",
            "`shardlab check` shows what each failing test expected. The full report is the "
            "`graded` artifact of this run.",
            "",
        ]
    )


# ----------------------------------------------------------------------------------- GitHub Classroom
# The reporter (classroom-resources/autograding-grading-reporter) decodes each runner's result, tells Classroom
# "Points <the tests' scores added up>/<max_score>" (src/notify-classroom.js: no rounding, and nothing at all
# when max_score is 0) and fails its step when the status is "fail" or "error" (src/main.js). The table in its
# log shows another figure, the share of tests that pass times max_score (src/helpers/test-helpers.js,
# getTestScore): with exercises of different points, only the notice is the score.


def hundredths(values: list[float]) -> list[int]:
    """Each value in hundredths, rounded so that they add up to the rounded total (largest remainder)."""
    exact = [value * 100 for value in values]
    units = [math.floor(x) for x in exact]
    by_remainder = sorted(range(len(units)), key=lambda i: exact[i] - units[i], reverse=True)
    for i in by_remainder[: max(round(math.fsum(values) * 100) - sum(units), 0)]:
        units[i] += 1
    return units


def reporter_sum(scores: list[float]) -> float:
    """The scores added one by one, as the reporter's JavaScript does (doubles: Python's floats)."""
    total = 0.0
    for score in scores:
        total += score
    return total


def classroom_scores(values: list[float]) -> list[float]:
    """`values` to hundredths whose reporter_sum is the rounded total itself: 0.1 + 0.2 adds up to
    0.30000000000000004, which the reporter would show. The last non-zero score absorbs that last bit."""
    units = hundredths(values)
    scores, total = [unit / 100 for unit in units], sum(units) / 100
    paid = [i for i, score in enumerate(scores) if score]
    if paid and reporter_sum(scores) != total:
        before = reporter_sum(scores[: paid[-1]])
        if before + (total - before) == total:
            scores[paid[-1]] = total - before
    return scores


def classroom_result(report: dict) -> dict:
    """One test per exercise: its score the points it earned, its status "pass" when every test that ran
    passes; the runner's max_score the points those tests check (in a visible-only run, the visible tests'
    points, not the exercises' full points) and its status "pass" only when every exercise passes."""
    exercises = list(report["exercises"].values())
    tests = []
    for ex, score in zip(
        exercises, classroom_scores([earned(ex) for ex in exercises]), strict=True
    ):
        failing = [t["name"] for t in ex["tests"] if t["category"] not in EARNS]
        ok = bool(ex["tests"]) and not failing
        # The reporter shows a test's name only (its message when it errors): the name says the points.
        tests.append(
            {
                "name": f"{ex['id']}: {exercise_points(report, ex)}",
                "status": "pass" if ok else "fail",
                "score": score,
                "message": (
                    f"{ex['title']}: {exercise_points(report, ex)}"
                    + (f"; not passed: {', '.join(failing)}" if failing else "")
                    + ("" if ex["tests"] else "; no test ran")
                ),
                "line_no": 0,
                "duration": round(1000 * math.fsum(t.get("duration", 0.0) for t in ex["tests"])),
            }
        )
    status = "pass" if tests and all(test["status"] == "pass" for test in tests) else "fail"
    return {
        "version": 1,
        "status": status,
        "max_score": round(reachable(report), 2),
        "tests": tests,
    }


def visible_points() -> float:
    """The points the visible tests check, as grading counts them, without grading: pytest's collection of
    the tests (it never imports exercises/), by the grader that `pip install -e .` installed. 0 when
    even that fails."""
    try:
        from grader.course import catalog
        from grader.grading.collection import collect_tests
        from grader.grading.results import score_exercise

        tests = collect_tests(visible_only=True)
        return round(
            math.fsum(
                score_exercise(
                    ex, [t.result("not attempted") for t in tests if t.exercise == ex.id]
                ).checked
                for ex in catalog.EXERCISES
            ),
            2,
        )
    except Exception:  # whatever stops collection: the result still says that grading could not run
        return 0.0


def error_result(message: str, max_score: float) -> dict:
    """Grading could not run: 0 of the points the visible tests check (with none, the reporter tells
    Classroom nothing), status "error"."""
    return {
        "version": 1,
        "status": "error",
        "max_score": max_score,
        "tests": [
            {
                "name": "grading",
                "status": "error",
                "score": 0,
                "message": message,
                "line_no": 0,
                "duration": 0,
            }
        ],
    }


def append_to(variable: str, text: str) -> None:
    """Append to the file an Actions variable names (nothing to do outside GitHub Actions)."""
    target = os.environ.get(variable)
    if target:
        with open(target, "a", encoding="utf-8") as file:
            file.write(text)


def publish(result: dict) -> None:
    # one line: no newline in base64
    encoded = base64.b64encode(json.dumps(result).encode()).decode()
    append_to("GITHUB_OUTPUT", f"result={encoded}\n")


def main(argv: list[str]) -> int:
    if argv[:1] == ["--error"]:
        message = f"Grading could not run: {argv[1] if len(argv) > 1 else 'no report was written'}"
        print(message)
        append_to(
            "GITHUB_STEP_SUMMARY", f"## {message}\n\nNo points: the log of this step says why.\n"
        )
        # (collecting takes seconds: only when there is somewhere to publish)
        if os.environ.get("GITHUB_OUTPUT"):
            publish(error_result(message, visible_points()))
        return 0
    report = json.loads(Path(argv[0] if argv else "graded/report.json").read_text())
    print("\n".join([score_line(report), *exercise_lines(report)]))
    append_to("GITHUB_STEP_SUMMARY", markdown(report))
    publish(classroom_result(report))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
