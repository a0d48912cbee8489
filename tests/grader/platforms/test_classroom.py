"""The handout's GitHub Classroom reporting, read the way GitHub Actions and Classroom's reporter read it: the
workflow's names and wiring, and the `result` .github/grade_summary.py writes, decoded and added up as
classroom-resources/autograding-grading-reporter does. Results are built from the grader's own types: no
grading runs here."""

from __future__ import annotations

import base64
import json
import math
import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml  # PyYAML: nbgrader, a pinned course dependency, requires it

from grader.core.results import TestResult
from grader.course import catalog
from grader.grading.collection import collect_tests
from grader.grading.results import ExerciseResult, GradingResults, score_exercise
from grader.platforms.handout import build_handout
from grader.reports.writers import write_report_json

REPORTER = "classroom-resources/autograding-grading-reporter@v1"
GRADE_RUN = "bash .github/grade.sh graded"


@pytest.fixture(scope="module")
def handout(tmp_path_factory) -> Path:
    return build_handout(tmp_path_factory.mktemp("classroom") / "handout")


def workflow(handout: Path) -> dict:
    return yaml.safe_load((handout / ".github/workflows/grade.yml").read_text())


def steps(handout: Path) -> tuple[dict, dict]:
    """(the grade step, the reporter step) of the workflow's one job."""
    (job_steps,) = [job["steps"] for job in workflow(handout)["jobs"].values()]
    (grade,) = [step for step in job_steps if step.get("run") == GRADE_RUN]
    (reporter,) = [step for step in job_steps if step.get("uses") == REPORTER]
    assert job_steps.index(grade) < job_steps.index(reporter)
    return grade, reporter


# ------------------------------------------------------------------------ GitHub Actions, the reporter


def github_outputs(path: Path) -> dict[str, str]:
    """A step's outputs from its $GITHUB_OUTPUT file, as the Actions runner reads it (actions/runner,
    src/Runner.Worker/FileCommandManager.cs, EnvFileKeyValuePairs): `name=value` lines, the value after the
    first "=", and `name<<DELIMITER` blocks whose value is the lines up to the DELIMITER line; a later one wins."""
    outputs: dict[str, str] = {}
    lines = iter(path.read_text().splitlines())
    for line in lines:
        if not line:
            continue
        equals, heredoc = line.find("="), line.find("<<")
        if equals >= 0 and (heredoc < 0 or equals < heredoc):
            outputs[line[:equals]] = line[equals + 1 :]
        else:
            assert heredoc > 0, f"neither name=value nor name<<DELIMITER: {line!r}"
            name, delimiter = line[:heredoc], line[heredoc + 2 :]
            block = []
            for value_line in lines:
                if value_line == delimiter:
                    break
                block.append(value_line)
            else:
                raise AssertionError(f"{name}: no closing {delimiter!r}")
            outputs[name] = "\n".join(block)
    return outputs


def step_env(step: dict, outputs: dict[str, dict[str, str]]) -> dict[str, str]:
    """The step's `env:`, each `${{ steps.ID.outputs.NAME }}` replaced by that step's output ("" when unset,
    as Actions does)."""
    env = {}
    for name, value in step["env"].items():
        found = re.fullmatch(r"\$\{\{\s*steps\.([\w-]+)\.outputs\.([\w-]+)\s*\}\}", str(value))
        assert found, f"{name}: {value!r} is not a step's output"
        env[name] = outputs[found[1]].get(found[2], "")
    return env


def js_number(value: float) -> str:
    """A JavaScript Number as a template string shows it: the shortest digits that read back the same double,
    as Python's repr, without repr's ".0" (exponents differ only outside points' range)."""
    assert value == 0 or 1e-6 <= abs(value) < 1e21
    return str(int(value)) if float(value).is_integer() else repr(float(value))


@dataclass
class Reported:
    results: dict[str, dict]  # by runner
    notice: str | None  # the "Autograding complete" notice Classroom takes the points from
    total: float
    most: float
    failed: str | None  # the message the reporter fails its step with


def reporter(env: dict[str, str], runners: str) -> Reported:
    """What autograding-grading-reporter v1 does with them, re-done (classroom-resources/autograding-grading-reporter,
    43c2d9f, the v1 line):
    - src/main.js: the `runners` input (trimmed, as core.getInput does) split at ","; each runner's result is the
      env var `${runner.trim().toUpperCase()}_RESULTS`, read with Buffer.from(value, "base64") as UTF-8 and
      JSON.parse'd; the step fails with "Some tests failed." when a result's status is "fail", else with "Some
      tests errored." when one is "error".
    - src/notify-classroom.js, NotifyClassroom: a result whose max_score is missing or 0 is left out; the others'
      max_scores add up to maxPoints and every one of their tests' `score`s, in order, to totalPoints (numbers:
      doubles, no rounding); nothing is sent when maxPoints is 0, else the notice
      `Points ${totalPoints}/${maxPoints}`."""
    results = {}
    for runner in runners.strip().split(","):
        encoded = env[f"{runner.strip().upper()}_RESULTS"]
        results[runner] = json.loads(base64.b64decode(encoded, validate=True).decode("utf-8"))
    total, most = 0.0, 0.0
    for result in results.values():
        if not result.get("max_score"):
            continue
        most += result["max_score"]
        for test in result["tests"]:
            # JavaScript would add undefined: NaN
            assert isinstance(test["score"], int | float), test
            total += test["score"]
    notice = f"Points {js_number(total)}/{js_number(most)}" if most else None
    statuses = [result["status"] for result in results.values()]
    failed = (
        "Some tests failed."
        if "fail" in statuses
        else "Some tests errored."
        if "error" in statuses
        else None
    )
    return Reported(results, notice, total, most, failed)


def report_through_the_workflow(handout: Path, tmp_path: Path, *command: str) -> Reported:
    """Run `command` (the grade step's work) with $GITHUB_OUTPUT, then the reporter step on the grade step's outputs."""
    grade, reporter_step = steps(handout)
    outputs = tmp_path / "github_output"
    outputs.write_text("")
    env = {
        "GITHUB_OUTPUT": str(outputs),
        "GITHUB_STEP_SUMMARY": str(tmp_path / "summary.md"),
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",
    }  # shardlab: this venv's
    done = subprocess.run(
        command, cwd=handout, capture_output=True, text=True, timeout=300, env=os.environ | env
    )
    assert "result" in github_outputs(outputs), done.stdout[-2000:] + done.stderr[-2000:]
    reporter_env = step_env(reporter_step, {grade["id"]: github_outputs(outputs)})
    return reporter(reporter_env, reporter_step["with"]["runners"])


# ------------------------------------------------------------------------------------------- reports

# Visible weights as parametrized cases share them (1/3, 2/7), and scores whose hundredths, added up as they come,
# are not the hundredths of the total (24.799999999999997, not 24.8): the reporter would show that.
AWKWARD = {
    "ex01_meshes": [0.1],
    "ex03_computation_follows_data": [1.0, 0.5],
    "ex05_collectives": [1.0] + [2 / 7] * 14,
    "ex07_collective_matmul": [0.2],
}


def visible_results(*, failing: str | None = None) -> GradingResults:
    """A visible-only grading, scored by grading's own rule: every test passed (ex03's second skipped, which
    earns its points), but the test `failing` (a nodeid)."""
    exercises: dict[str, ExerciseResult] = {}
    for exercise in catalog.EXERCISES:
        weights = AWKWARD.get(exercise.id, [1.0, 1 / 3, 1 / 3, 1 / 3])
        tests = []
        for i, weight in enumerate(weights):
            nodeid = f"tests/exercises/{exercise.id}/test_visible.py::test_{i}"
            category = (
                "failed"
                if nodeid == failing
                else "skipped"
                if (exercise.id, i) == ("ex03_computation_follows_data", 1)
                else "passed"
            )
            tests.append(TestResult(nodeid, exercise.id, False, weight, category, duration=0.25))
        exercises[exercise.id] = score_exercise(exercise, tests)
    return GradingResults("exercises", exercises, visible_only=True)


def hundredths_text(value: float) -> str:
    return js_number(round(value, 2))


@pytest.mark.parametrize(
    "failing", [None, "tests/exercises/ex05_collectives/test_visible.py::test_3"]
)
def test_the_reporter_gets_the_visible_points(handout, tmp_path, failing):
    results = visible_results(failing=failing)
    report = write_report_json(results, tmp_path / "graded" / "report.json")
    reported = report_through_the_workflow(
        handout, tmp_path, sys.executable, ".github/grade_summary.py", str(report)
    )

    # The points: what the visible tests earned, of what they check (not the exercises' full points).
    assert results.checked < results.max_score
    assert results.score == pytest.approx(results.checked - (2 / 7 if failing else 0))
    assert reported.total == round(results.score, 2) and reported.most == round(results.checked, 2)
    # Classroom reads the notice: hundredths, not what adding the scores as they come would show.
    assert (
        reported.notice
        == f"Points {hundredths_text(results.score)}/{hundredths_text(results.checked)}"
    )
    # Adding the exercises' rounded scores as they come would differ from this in the last digits for some
    # point totals (it did for the course's first 16 exercises); the notice above is built from the score
    # itself, whatever the totals are.

    (result,) = reported.results.values()
    tests = {test["name"].split(":")[0]: test for test in result["tests"]}
    assert list(tests) == [exercise.id for exercise in catalog.EXERCISES]
    ex05 = tests["ex05_collectives"]
    if failing is None:
        assert result["status"] == "pass" and reported.failed is None
        assert {test["status"] for test in tests.values()} == {"pass"}
        assert ex05["name"] == "ex05_collectives: visible: 5 of 15 points checked, all pass"
    else:
        assert result["status"] == "fail" and reported.failed == "Some tests failed."
        assert [name for name, test in tests.items() if test["status"] != "pass"] == [
            "ex05_collectives"
        ]
        assert ex05["name"] == "ex05_collectives: visible: 5 of 15 points checked, 4.71 pass"
        assert ex05["message"].endswith("not passed: test_3")
    for exercise in results.exercises.values():
        assert tests[exercise.id]["score"] == pytest.approx(exercise.score, abs=0.005)
        assert tests[exercise.id]["line_no"] == 0  # else the reporter prints "- line undefined"


def test_a_grading_that_could_not_run_reports_zero_points(handout, tmp_path):
    """grade.sh with no exercises/ to grade: `shardlab grade` exits 2 and writes no report; the step still
    publishes a result, 0 of the visible tests' points, which fails the reporter."""
    copy = Path(shutil.copytree(handout, tmp_path / "handout"))
    shutil.rmtree(copy / "exercises")
    reported = report_through_the_workflow(copy, tmp_path, "bash", ".github/grade.sh", "graded")
    visible = math.fsum(test.weight for test in collect_tests(visible_only=True))
    assert visible > 0
    assert reported.total == 0 and reported.most == round(visible, 2)
    assert reported.notice == f"Points 0/{hundredths_text(visible)}"
    assert reported.failed == "Some tests errored."
    (result,) = reported.results.values()
    (test,) = result["tests"]
    assert result["status"] == test["status"] == "error"
    assert "`shardlab grade` exited 2 without a report" in test["message"]


# ------------------------------------------------------------------------------------------ workflow


def test_the_workflow_is_wired_as_classroom_reads_it(handout):
    text = (handout / ".github/workflows/grade.yml").read_text()
    flow = workflow(handout)
    # Classroom's generated workflow's names and permissions.
    assert flow["name"] == "Autograding Tests"
    assert list(flow["jobs"]) == ["run-autograding-tests"]
    # the check run is named by the job id
    assert "name" not in flow["jobs"]["run-autograding-tests"]
    assert flow["permissions"] == {"checks": "write", "actions": "read", "contents": "read"}
    assert "push" in flow["on"] and "repository_dispatch" in flow["on"]
    grade, reporter_step = steps(handout)
    runners = [runner.strip() for runner in reporter_step["with"]["runners"].split(",")]
    assert runners == [grade["id"]]  # the reporter's runners are step ids
    # Letters and digits: on any error, the reporter blames a runners input of other characters (src/main.js).
    assert re.fullmatch(r"[A-Za-z0-9]+", grade["id"])
    assert reporter_step["env"] == {
        f"{grade['id'].upper()}_RESULTS": f"${{{{ steps.{grade['id']}.outputs.result }}}}"
    }
    assert reporter_step["if"].startswith("always()")  # also after a grading that could not run
    assert f"{grade['id'].upper()}_RESULTS: ${{{{ steps.{grade['id']}.outputs.result }}}}" in text


def test_reporter_emulation_can_fail():
    """The re-done reporter rejects what the real one would not take as this runner's points."""
    result = {
        "version": 1,
        "status": "pass",
        "max_score": 2,
        "tests": [{"name": "a", "status": "pass", "score": 2}],
    }
    encoded = base64.b64encode(json.dumps(result).encode()).decode()
    assert reporter({"SHARDLAB_RESULTS": encoded}, "shardlab").notice == "Points 2/2"
    with pytest.raises(KeyError):  # the env var is named by the upper-cased runner
        reporter({"shardlab_RESULTS": encoded}, "shardlab")
    assert reporter({"SHARDLAB_RESULTS": encoded}, "shardlab").failed is None
    unscored = base64.b64encode(json.dumps(result | {"max_score": 0}).encode()).decode()
    # nothing for Classroom
    assert reporter({"SHARDLAB_RESULTS": unscored}, "shardlab").notice is None
