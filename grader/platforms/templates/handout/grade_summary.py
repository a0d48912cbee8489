"""Print the score of a `shardlab grade` run and publish it for GitHub Actions:

    python .github/grade_summary.py graded/report.json

- prints the score and a line per exercise; a run of the visible tests says how many of each exercise's
  points they check and whether they pass, never a score out of those points alone;
- appends a Markdown table to the job summary, when $GITHUB_STEP_SUMMARY names a file;
- writes `result` (GitHub Classroom's autograding format, base64-encoded JSON, one test per
  exercise) to the step's outputs, when $GITHUB_OUTPUT names a file, for Classroom's reporter.
"""

from __future__ import annotations

import base64
import json
import os
import sys
from pathlib import Path


def points(value: float) -> str:
    """6.666666 -> "6.67", 20.0 -> "20"."""
    return f"{value:.2f}".rstrip("0").rstrip(".")


def passed(exercise: dict) -> int:
    return sum(test["category"] == "passed" for test in exercise["tests"])


def checked(exercise: dict) -> float:
    """The points the tests that ran carry: a test's points are its weight."""
    return sum(test["max_score"] for test in exercise["tests"])


def earned_all(exercise: dict) -> bool:
    return all(test["category"] in ("passed", "skipped") for test in exercise["tests"])


def score_line(report: dict) -> str:
    if report.get("visible_only"):
        everything = sum(checked(ex) for ex in report["exercises"].values())
        return (f"Visible tests: {points(report['score'])} of the {points(everything)} points they check pass "
                f"(of {points(report['max_score'])} in all: the hidden tests check the rest when you are graded)")
    return f"Score: {points(report['score'])} / {points(report['max_score'])} points (all tests)"


def exercise_points(report: dict, exercise: dict) -> str:
    """"visible: 4 of 20 points checked, all pass" after a visible-only run, "15 / 20" after grading."""
    if not report.get("visible_only"):
        return f"{points(exercise['score'])} / {points(exercise['max_score'])}"
    share = f"visible: {points(checked(exercise))} of {points(exercise['max_score'])} points checked"
    return f"{share}, all pass" if earned_all(exercise) else f"{share}, {points(exercise['score'])} pass"


def exercise_lines(report: dict) -> list[str]:
    return [f"  {ex['id']}: {exercise_points(report, ex)} ({passed(ex)} of {len(ex['tests'])} tests pass)"
            for ex in report["exercises"].values()]


def markdown(report: dict) -> str:
    rows = [f"| {ex['id']} | {ex['title'].replace('|', '/')} | {exercise_points(report, ex)} "
            f"| {passed(ex)} of {len(ex['tests'])} |" for ex in report["exercises"].values()]
    return "\n".join([f"## {score_line(report)}", "", "| exercise | title | points | tests passed |",
                      "| --- | --- | ---: | ---: |", *rows, "",
                      "`shardlab check` shows what each failing test expected. The full report is the "
                      "`graded` artifact of this run.", ""])


def classroom_result(report: dict) -> dict:
    """The JSON GitHub Classroom's autograding reporter reads: it adds up the tests' scores and
    max_score. The run's status is "pass" whatever the score: a low score is not a broken run."""
    tests = []
    for ex in report["exercises"].values():
        failing = [t["name"] for t in ex["tests"] if t["category"] != "passed"]
        tests.append({"name": f"{ex['id']} ({ex['title']})", "status": "fail" if failing else "pass",
                      "score": round(ex["score"], 2),
                      "message": ("not passed: " + ", ".join(failing)) if failing else ""})
    return {"version": 1, "status": "pass", "max_score": round(report["max_score"], 2), "tests": tests}


def append_to(variable: str, text: str) -> None:
    """Append to the file an Actions variable names (nothing to do outside GitHub Actions)."""
    target = os.environ.get(variable)
    if target:
        with open(target, "a", encoding="utf-8") as file:
            file.write(text)


def main(argv: list[str]) -> int:
    report = json.loads(Path(argv[0] if argv else "graded/report.json").read_text())
    print("\n".join([score_line(report), *exercise_lines(report)]))
    append_to("GITHUB_STEP_SUMMARY", markdown(report))
    encoded = base64.b64encode(json.dumps(classroom_result(report)).encode()).decode()
    append_to("GITHUB_OUTPUT", f"result={encoded}\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
