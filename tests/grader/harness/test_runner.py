"""One runner for pytest on the exercise tests (grader.harness.runner): every route (a check's subprocess,
grading's supervised child, a notebook's kernel) builds its arguments there and reads each test's result
back the one way, so the same tests give the same typed results on every route."""

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

from grader.core.options import GradingOptions
from grader.core.results import Category, SpeedFigures, TestResult
from grader.course import catalog, paths
from grader.grading import child, process
from grader.harness import events, runner
from grader.platforms import notebooks

EX01 = catalog.get("ex01_meshes")


def test_the_arguments_carry_the_shared_flags_and_the_options_a_route_takes(tmp_path):
    options = GradingOptions(
        timing="skip", visible_only=True, isolation="process", test_timeout=30.0
    )
    plain = runner.pytest_arguments(
        ["a", Path("b")], impl="reference", results=tmp_path / "r.json", options=options
    )
    assert plain[:6] == ["a", "b", "-q", "--no-header", "-p", "no:cacheprovider"]
    assert f"--rootdir={paths.REPO_ROOT}" in plain and plain[plain.index("-c") + 1].endswith(
        "pyproject.toml"
    )
    assert {
        "--impl=reference",
        f"--shardlab-results={tmp_path / 'r.json'}",
        "--timing=skip",
        "--visible-only",
    } <= set(plain)
    # Without --isolate, the confined worker's options are not given (a check runs the module in-process).
    assert not [a for a in plain if a.startswith(("--isolat", "--test-timeout", "--worker-memory"))]
    isolated = runner.pytest_arguments(
        ["a"], impl="m", options=options, isolate=True, extra=["--tb=no"]
    )
    assert {"--isolate", "--isolation=process", "--test-timeout=30.0", "--timing=skip"} <= set(
        isolated
    )
    assert isolated[-1] == "--tb=no" and not [
        a for a in isolated if a.startswith("--shardlab-results")
    ]
    kernel = runner.pytest_arguments(
        ["f"],
        impl="r",
        rootdir=tmp_path,
        config=tmp_path / "pytest.ini",
        plugins=("grader.harness.pytest_plugin",),
    )
    # No plugin the environment has is loaded by itself: hypothesis's, and the ones a route names.
    assert "--disable-plugin-autoload" in kernel and "--timing=enforce" not in kernel
    loaded = [kernel[i + 1] for i, a in enumerate(kernel) if a == "-p"]
    assert loaded == [
        "no:cacheprovider",
        "no:unraisableexception",
        runner.HYPOTHESIS_PLUGIN,
        "grader.harness.pytest_plugin",
    ]
    # Every route leaves out the unraisable-exception plugin (its gc passes as a session ends).
    for route in (plain, isolated):
        assert route[route.index("no:unraisableexception") - 1] == "-p"
    assert f"--rootdir={tmp_path}" in kernel and kernel[kernel.index("-c") + 1] == str(
        tmp_path / "pytest.ini"
    )


def test_hypothesis_plugin_is_loaded_only_for_property_tests(tmp_path):
    """Its import is about 0.3 s of every run's start: a run loads it when a module it collects, or a
    conftest above one, imports hypothesis (or the grader's settings for it), and when it cannot tell."""

    def loads(*targets) -> bool:
        return runner.HYPOTHESIS_PLUGIN in runner.pytest_arguments(list(targets), impl="m")

    ex01, ex13 = (catalog.get(n).tests_dir() for n in ("ex01", "ex13"))
    assert not loads(ex01) and not loads(ex13 / "test_visible.py")
    assert loads(ex13) and loads(f"{ex13 / 'test_hidden.py'}::test_x") and loads(ex01, ex13)
    assert loads(paths.EXERCISE_TESTS_DIR)  # every exercise: ex02, ex11 and ex13 have them
    above = tmp_path / "course"
    (above / "ex99").mkdir(parents=True)
    (above / "ex99" / "test_plain.py").write_text("def test_one():\n    pass\n")
    assert not loads(above / "ex99")
    (above / "conftest.py").write_text("from grader.checks.properties import GRADING\n")
    assert loads(above / "ex99")
    assert loads(tmp_path / "missing")
    # the harness's entry point imports hypothesis ahead (for its bytecode) on the same sign
    assert child.HYPOTHESIS_PLUGIN == runner.HYPOTHESIS_PLUGIN


def test_a_result_reads_back_the_same_from_the_results_file_and_from_its_event(tmp_path):
    figures = SpeedFigures(
        "layer", 5.5, (5.0, 6.0), 0.011, 0.002, 5, 4.0, 8, 2, "cpu", policy="enforce"
    )
    result = TestResult(
        "tests/exercises/ex04/test_hidden.py::test_x[4dev]",
        "ex04_sharded_layer",
        True,
        0.25,
        Category.FAILED.value,
        "too slow",
        1.5,
        speedup=figures,
    )
    (tmp_path / "results.json").write_text(json.dumps({"tests": [result.to_dict()]}))
    assert runner.read_results(tmp_path / "results.json") == [result]
    read, write = os.pipe()
    events.EventStream(write).send(events.Finished(result.to_dict()))
    os.close(write)
    (event,) = events.parse(os.read(read, 1 << 16))
    os.close(read)
    assert runner.read_result_event(event) == result
    outcome = process.ChildOutcome()
    process._apply_event(event, outcome)
    assert outcome.results == {result.nodeid: result}


def verdicts(results: list[TestResult]) -> dict[str, tuple]:
    """What each route must agree on, by test name (the routes' nodeids differ in their folder)."""
    return {r.name: (r.exercise, r.hidden, r.weight, r.category, r.message) for r in results}


def test_the_three_routes_give_the_same_results_for_the_same_tests(tmp_path):
    visible = EX01.tests_dir() / "test_visible.py"
    checked = runner.run_tests("reference", tests=[visible])

    modules = tmp_path / "modules"
    modules.mkdir()
    shutil.copy(EX01.solution_path(), modules / EX01.module_file)
    graded = process.run_pytest_child(
        targets=[str(visible)],
        modules_dir=modules,
        workdir=tmp_path,
        deadline=time.monotonic() + 300,
    )

    reference = EX01.solution_path()
    namespace = {}
    exec(compile(reference.read_text(), str(reference), "exec"), namespace)
    files = {path.name: path.read_text() for path in EX01.support_files()} | {
        visible.name: visible.read_text()
    }
    cell = notebooks.run_tests(
        EX01.id, files, namespace, points=1.0, module_source=reference.read_text()
    )

    routes = {
        "check": checked.results,
        "grading": list(graded.results.values()),
        "notebook": cell.tests,
    }
    assert all(isinstance(r, TestResult) for results in routes.values() for r in results)
    expected = verdicts(checked.results)
    assert len(expected) >= 3 and {v[3] for v in expected.values()} == {"passed"}, checked.output[
        -2000:
    ]
    assert {v[0] for v in expected.values()} == {EX01.id}
    for route, results in routes.items():
        assert verdicts(results) == expected, route
    assert cell.earned == 1.0


def test_a_pytest_process_ends_as_pytest_says_with_its_exit_handlers_run(tmp_path):
    """grader.harness.pytest_main freezes what is left out of the collector's sight as the process ends:
    pytest's exit code, its output, its report file and the exit handlers are as with `python -m pytest`."""
    (tmp_path / "test_one.py").write_text(
        "import atexit, pathlib\n"
        f"atexit.register(pathlib.Path({str(tmp_path / 'ended')!r}).write_text, 'ran')\n"
        "def test_passes():\n    pass\n"
        "def test_fails():\n    assert 1 == 2\n"
    )
    report = tmp_path / "junit.xml"
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "grader.harness.pytest_main",
            str(tmp_path),
            "-q",
            "-p",
            "no:cacheprovider",
            f"--junitxml={report}",
        ],
        cwd=paths.REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 1, done.stdout + done.stderr
    assert "1 failed, 1 passed" in done.stdout
    assert 'tests="2"' in report.read_text() and 'failures="1"' in report.read_text()
    assert (tmp_path / "ended").read_text() == "ran"
