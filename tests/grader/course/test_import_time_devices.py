"""A module that asks for JAX's device count at import gets one verdict and one message on every route:
the count the course gives is a no-op, any other count is refused, saying which line to remove and why
(grader.course.devices.import_time_requests_checked, around every student import in load_file)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import jax
import pytest
from rich.console import Console

from grader.commands import student
from grader.course import catalog, devices, paths
from grader.grading.engine import grade_submission

EX01 = catalog.get("ex01")
REQUEST = 'import jax\njax.config.update("jax_num_cpu_devices", {count})\n'


def submission(folder, count):
    """ex01's reference with the README's experiment line pasted in after its docstring."""
    source = EX01.solution_path().read_text()
    at = source.index("\nimport ") + 1
    folder.mkdir()
    (folder / EX01.module_file).write_text(source[:at] + REQUEST.format(count=count) + source[at:])
    return folder


def check_messages(folder):
    out = Console(record=True, width=400)
    code = student.check_command("1", impl=folder, console=out)
    return code, out.export_text()


def graded_messages(folder, **options):
    results = grade_submission(folder, exercises=[EX01.id], timing="skip", **options)
    return results.exercises[EX01.id].tests


# The handout's CI runs `shardlab grade exercises --visible-only` (isolated, as "grade" is here); nbgrader's
# autograding and the CLI call the same grade_submission, whose workers import through load_file.
ROUTES = {
    "grade --visible-only, in process": {"visible_only": True, "isolation": "process"},
    "grade, isolated": {},
}


@pytest.mark.parametrize("route", ROUTES)
def test_asking_for_the_courses_count_is_accepted_on_every_route(tmp_path, route):
    folder = submission(tmp_path / "eight", devices.HOST_DEVICES)
    code, text = check_messages(folder)
    assert code == 0 and "all pass" in text, text
    tests = graded_messages(folder, **ROUTES[route])
    assert tests and {t.category for t in tests} == {"passed"}, [t.message for t in tests]


@pytest.mark.parametrize("route", ROUTES)
def test_asking_for_another_count_is_refused_with_one_message_on_every_route(tmp_path, route):
    folder = submission(tmp_path / "four", 4)
    message = devices.import_time_request(4, EX01.module_file)
    assert message.startswith(
        'remove the jax.config.update("jax_num_cpu_devices", 4) line from ex01'
    )
    code, text = check_messages(folder)
    assert code == 1 and text.count(message) == 4 and "all pass" not in text, text
    tests = graded_messages(folder, **ROUTES[route])
    assert tests and {t.message for t in tests} == {message}
    assert "passed" not in {t.category for t in tests}


@pytest.mark.parametrize("value", [4, 1, True, "8", 8.0])
def test_only_the_courses_count_itself_is_a_no_op(value):
    with pytest.raises(devices.DeviceCountError, match="remove the jax.config.update"):
        with devices.import_time_requests_checked("exNN.py"):
            jax.config.update("jax_num_cpu_devices", value)
    with devices.import_time_requests_checked("exNN.py"):
        jax.config.update("jax_num_cpu_devices", devices.HOST_DEVICES)
        jax.config.update("jax_enable_x64", False)  # other options pass through
    assert jax.device_count() == devices.HOST_DEVICES


def test_the_guard_is_gone_after_the_import():
    original = type(jax.config).update
    with pytest.raises(RuntimeError):
        with devices.import_time_requests_checked("exNN.py"):
            raise RuntimeError("the module failed")
    assert type(jax.config).update is original


def test_the_handouts_ci_refuses_another_count_with_the_same_message(tmp_path):
    """What the handout's workflow runs, .github/grade.sh (`shardlab grade exercises --visible-only`), on a
    handout-shaped folder whose ex01 asks for 4 devices."""
    handout = tmp_path / "handout"
    (handout / ".github").mkdir(parents=True)
    for name in ("grade.sh", "grade_summary.py"):
        shutil.copy(
            paths.REPO_ROOT / "grader/platforms/templates/handout" / name, handout / ".github"
        )
    submission(handout / "exercises", 4)
    env = os.environ | {"PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    done = subprocess.run(
        ["bash", ".github/grade.sh", "graded"], cwd=handout, env=env, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    report = json.loads((handout / "graded/report.json").read_text())
    tests = report["exercises"][EX01.id]["tests"]
    assert tests and {t["message"] for t in tests} == {
        devices.import_time_request(4, EX01.module_file)
    }
    assert {t["category"] for t in tests} == {"error"}


def test_a_notebooks_kernel_gets_the_same_rule():
    """nbgrader runs the student's cells in the kernel the setup cell gave 8 devices (its backend started):
    the extension that cell loads makes 8 a no-op and refuses another count, as the other routes do."""
    from grader.platforms import notebooks

    class Kernel:
        def register_magic_function(self, *args):
            pass

    original = type(jax.config).update
    try:
        notebooks.load_ipython_extension(Kernel())
        jax.config.update("jax_num_cpu_devices", devices.HOST_DEVICES)
        with pytest.raises(devices.DeviceCountError) as refused:
            jax.config.update("jax_num_cpu_devices", 4)
    finally:
        type(jax.config).update = original
    assert str(refused.value) == devices.import_time_request(4, notebooks.NOTEBOOK)
    assert jax.device_count() == devices.HOST_DEVICES


def test_a_swallowed_refusal_leaves_the_workers_devices_alone(tmp_path):
    """Hostile: a module that catches the refusal still gets the course's 8 devices in the worker (where
    JAX may not have started yet): the request never reaches jax's configuration."""
    folder = tmp_path / "swallowed"
    folder.mkdir()
    source = EX01.solution_path().read_text()
    at = source.index("\nimport ") + 1
    request = (
        "import jax\ntry:\n"
        '    jax.config.update("jax_num_cpu_devices", 4)\n'
        "except Exception:\n    pass\n"
        "assert jax.device_count() == 8, 'the worker has 8 devices'\n"
    )
    (folder / EX01.module_file).write_text(source[:at] + request + source[at:])
    tests = graded_messages(folder, visible_only=True, isolation="process")
    assert tests and {t.category for t in tests} == {"passed"}, [t.message for t in tests]
