"""`shardlab release`: the student handout's layout, the check that nothing secret ships (and that it
does catch a planted secret), and, slow, the handout installed alone in a fresh virtual environment:
its tests, `shardlab check` and `list`, and the CI grading script run the way the workflow runs it."""

import ast
import base64
import html
import json
import os
import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from grader.commands.student import COMPILE_CACHE
from grader.core.results import TestResult
from grader.course import catalog, handout_layout, paths, stubs
from grader.grading.results import GradingResults, score_exercise
from grader.platforms import no_secrets
from grader.platforms.handout import (
    INSTRUCTOR_ONLY,
    MARKDOWN_LINK,
    HandoutError,
    build_handout,
    check_destination,
    links_within,
    verify_handout,
)

# its module-scoped fixture does the heavy work once
pytestmark = pytest.mark.xdist_group("test_handout")

EX04 = catalog.get("ex04_sharded_layer")
ALL = [exercise.id for exercise in catalog.EXERCISES]
TOTAL = catalog.total_points()


@pytest.fixture(scope="module")
def handout(tmp_path_factory):
    return build_handout(
        tmp_path_factory.mktemp("release") / "handout", course_name="JAX parallelism 101"
    )


@pytest.fixture
def handout_copy(handout, tmp_path):
    """A copy to plant things in, so the shared handout stays clean."""
    return Path(shutil.copytree(handout, tmp_path / "handout"))


def files_outside_grader(root: Path) -> set[str]:
    return {
        p.relative_to(root).as_posix()
        for p in root.rglob("*")
        if p.is_file() and p.relative_to(root).parts[0] != "grader"
    }


# ------------------------------------------------------------------------------------------ layout


def test_layout(handout):
    expected = {
        "README.md",
        "pyproject.toml",
        ".gitignore",
        "conftest.py",
        ".github/workflows/grade.yml",
        ".github/grade.sh",
        ".github/grade_summary.py",
    }
    for exercise in catalog.EXERCISES:
        expected.add(f"exercises/{exercise.module_file}")
        expected.add(f"tests/exercises/{exercise.id}/test_visible.py")
        expected |= {
            f"tests/exercises/{exercise.id}/{support.name}" for support in exercise.support_files()
        }
    expected |= {f"docs/{name}" for name in handout_layout.HANDOUT_DOCS}
    assert files_outside_grader(handout) == expected
    for module in (
        "cli.py",
        "harness/pytest_plugin.py",
        "commands/student.py",
        "checks/__init__.py",
        "course/devices.py",
    ):
        assert (handout / "grader" / module).is_file()
    assert not list(handout.rglob("__pycache__"))


def test_stubs_and_tests_are_copied_as_committed(handout):
    assert (handout / "conftest.py").read_bytes() == (paths.REPO_ROOT / "conftest.py").read_bytes()
    for exercise in catalog.EXERCISES:
        assert (
            exercise.stub_path(handout / "exercises").read_bytes()
            == exercise.stub_path().read_bytes()
        )
        copied = exercise.tests_dir(handout / "tests" / "exercises")
        for path in copied.iterdir():
            assert path.read_bytes() == (exercise.tests_dir() / path.name).read_bytes()


def test_nothing_hidden_ships(handout):
    """(The grader package alone, under every builder's policy: tests/grader/platforms/test_no_secrets.py.)"""
    assert not list(handout.rglob("test_hidden.py"))
    assert not list(handout.rglob("solutions"))
    assert verify_handout(handout) == []


# -------------------------------------------------------------------------------- verify can fail


# ------------------------------------------------------------------------------------------- docs

# a course doc named in a shipped file's text ("docs/students.md")
DOC_NAMED = re.compile(r"\bdocs/[\w.-]+\.md\b")


def text_files(root: Path) -> dict[Path, str]:
    texts = {}
    for path in root.rglob("*"):
        if path.is_file():
            try:
                texts[path] = path.read_text()
            except UnicodeDecodeError:
                continue
    return texts


def relative_links(text: str) -> list[str]:
    """Each link's target that is a file's path: no web address, no anchor in the same page."""
    return [
        target.split("#", 1)[0]
        for _, target in MARKDOWN_LINK.findall(text)
        if not target.startswith("#") and "://" not in target and not target.startswith("mailto:")
    ]


def test_the_students_guide_and_every_doc_pointed_to_ship(handout):
    """docs/students.md ships, and every doc a shipped file names (the grader's comments, the capstone's
    docstring, the README) is in the handout."""
    assert (handout / "docs" / "students.md").is_file()
    named = {
        (path.relative_to(handout).as_posix(), doc)
        for path, text in text_files(handout).items()
        for doc in DOC_NAMED.findall(text)
    }
    assert ("grader/commands/capstone.py", "docs/students.md") in named
    assert [(where, doc) for where, doc in named if not (handout / doc).is_file()] == []


def test_every_link_of_the_readme_and_the_docs_leads_to_a_file_in_the_handout(handout):
    pages = [handout / "README.md", *sorted((handout / "docs").glob("*.md"))]
    broken = [
        f"{page.relative_to(handout)}: {target}"
        for page in pages
        for target in relative_links(page.read_text())
        if not (page.parent / target).resolve().is_relative_to(handout.resolve())
        or not (page.parent / target).exists()
    ]
    assert broken == []
    # a link within the handout is kept, whichever doc is written first
    assert "grading.md" in relative_links((handout / "docs" / "students.md").read_text())
    assert "students.md" in relative_links((handout / "docs" / "platforms.md").read_text())


def test_a_link_to_what_the_handout_leaves_out_keeps_its_text(tmp_path):
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "here.md").write_text("")
    text = "See [here.md](here.md#a), [bench/](../bench/), [the web](https://example.org) and [top](#top)."
    assert links_within(text, tmp_path / "docs", tmp_path) == (
        "See [here.md](here.md#a), bench/, [the web](https://example.org) and [top](#top)."
    )


def test_verify_flags_a_planted_solution_line(handout_copy):
    secrets = no_secrets.course_secrets()
    line = next(
        line
        for _, line in stubs.solution_lines(EX04.solution_path().read_text())
        if line in secrets.solution_lines
    )
    stub = EX04.stub_path(handout_copy / "exercises")
    stub.write_text(stub.read_text() + f"\n\ndef helper():\n    {line}\n")
    where = len(stub.read_text().splitlines())
    origin = secrets.solution_lines[line]
    # where it is written first ("...:77")
    assert origin.startswith(f"solutions/{EX04.module_file}:")
    assert verify_handout(handout_copy) == [
        f"exercises/{EX04.module_file}:{where}: a line of {origin}: {line[:80]}"
    ]


def hidden_test_source(exercise) -> tuple[str, str]:
    """(name, source) of the first test function of the exercise's hidden tests."""
    source = (exercise.tests_dir() / "test_hidden.py").read_text()
    node = next(
        n
        for n in ast.parse(source).body
        if isinstance(n, ast.FunctionDef) and n.name.startswith("test")
    )
    return node.name, ast.get_source_segment(source, node)


def test_verify_flags_a_planted_hidden_test(handout_copy):
    name, source = hidden_test_source(EX04)
    visible = EX04.tests_dir(handout_copy / "tests" / "exercises") / "test_visible.py"
    visible.write_text(visible.read_text() + "\n\n" + source + "\n")
    problems = verify_handout(handout_copy)
    where = f"tests/exercises/{EX04.id}/test_visible.py"
    assert any(
        p.startswith(where) and p.endswith(f"defines the hidden test {name}") for p in problems
    )
    assert any(
        p.startswith(where) and f"a line of tests/exercises/{EX04.id}/test_hidden.py" in p
        for p in problems
    )


def test_verify_flags_hidden_files_the_marker_and_solutions(handout_copy):
    tests = EX04.tests_dir(handout_copy / "tests" / "exercises")
    shutil.copy(EX04.tests_dir() / "test_hidden.py", tests / "test_hidden.py")
    (handout_copy / "solutions").mkdir()
    (handout_copy / "notes.py").write_text("import pytest\n\nmark = pytest.mark.hidden\n")
    problems = verify_handout(handout_copy)
    assert f"tests/exercises/{EX04.id}/test_hidden.py: a hidden test file" in problems
    assert "solutions/: a solutions folder" in problems
    assert "notes.py:3: marks a test as hidden" in problems


# ---------------------------------------------------------------------------------- destination


def test_build_refuses_a_non_empty_folder_unless_forced(tmp_path):
    out = tmp_path / "handout"
    out.mkdir()
    (out / "stray.txt").write_text("left over")
    with pytest.raises(HandoutError, match="not empty"):
        build_handout(out)
    assert (out / "stray.txt").exists()
    build_handout(out, force=True)
    assert not (out / "stray.txt").exists()
    assert verify_handout(out) == []


@pytest.mark.parametrize(
    "where", [".", "..", "grader", "tests/handout", "solutions/x", "exercises"]
)
def test_never_writes_into_the_course(where):
    with pytest.raises(HandoutError):
        check_destination((paths.REPO_ROOT / where).resolve())


def test_may_write_beside_or_under_out(tmp_path):
    check_destination(tmp_path / "handout")
    check_destination(paths.REPO_ROOT / "out" / "handout")


# ------------------------------------------------------------------------ pyproject, README, CI


def test_pyproject_pins_the_course_dependencies(handout):
    course = tomllib.loads((paths.REPO_ROOT / "pyproject.toml").read_text())
    ours = tomllib.loads((handout / "pyproject.toml").read_text())
    assert ours["project"]["name"] == "shardlab-handout"
    assert ours["project"]["scripts"] == {"shardlab": "grader.cli:main"}
    assert ours["project"]["requires-python"] == course["project"]["requires-python"]
    kept = [
        d for d in course["project"]["dependencies"] if not d.startswith(tuple(INSTRUCTOR_ONLY))
    ]
    assert ours["project"]["dependencies"] == kept
    assert not any(d.startswith("nbgrader") for d in ours["project"]["dependencies"])
    options, course_options = (
        ours["tool"]["pytest"]["ini_options"],
        course["tool"]["pytest"]["ini_options"],
    )
    assert options["addopts"] == [*course_options["addopts"], "--impl=exercises"]
    assert {k: v for k, v in options.items() if k != "addopts"} == {
        k: v for k, v in course_options.items() if k != "addopts"
    }


def test_readme_gives_the_students_commands(handout):
    text = (handout / "README.md").read_text()
    assert text.startswith("# JAX parallelism 101\n")
    for command in (
        "pip install -e .",
        "shardlab check",
        "shardlab list",
        "python -m pytest tests/exercises/",
        "bash .github/grade.sh",
    ):
        assert command in text
    for exercise in catalog.EXERCISES:
        bonus = " bonus" if exercise.bonus else ""
        assert f"| `{exercise.id}` | {exercise.title} | {exercise.points}{bonus} |" in text
    # Every placeholder filled; the only dollars left are the Slurm script's shell.
    assert not re.search(r"\$(?!\(scontrol|SLURM_)", text)
    assert "srun python" in text


def workflow_steps(yaml, text: str) -> list[dict]:
    """The grading job's steps."""
    workflow = yaml.safe_load(text)
    assert "push" in workflow["on"]
    (job,) = workflow["jobs"].values()
    assert job["runs-on"] == "ubuntu-latest"
    return job["steps"]


def test_workflow_installs_and_runs_the_grade_script(handout):
    text = (handout / ".github/workflows/grade.yml").read_text()
    # Structural text checks hold without PyYAML too.
    for fragment in (
        "- push",
        "actions/checkout@",
        "actions/setup-python@",
        'python-version: "3.11"',
        "run: pip install -e .",
        "run: bash .github/grade.sh graded",
        "actions/upload-artifact@",
        "path: graded/",
        "steps.shardlab.outputs.result",
    ):
        assert fragment in text
    try:
        import yaml
    except ImportError:  # PyYAML is not a dependency: the text checks above stand alone
        return
    steps = workflow_steps(yaml, text)
    runs = [step.get("run") for step in steps]
    assert runs.index("pip install -e .") < runs.index("bash .github/grade.sh graded")
    grade = next(step for step in steps if step.get("run") == "bash .github/grade.sh graded")
    # the Classroom reporter's runner (tests/grader/platforms/test_classroom.py)
    assert grade["id"] == "shardlab"
    setup = next(step for step in steps if step.get("uses", "").startswith("actions/setup-python@"))
    assert setup["with"]["python-version"] == "3.11"
    upload = next(
        step for step in steps if step.get("uses", "").startswith("actions/upload-artifact@")
    )
    assert upload["with"]["path"] == "graded/" and upload["if"] == "always()"


def test_grade_script_is_valid_bash_and_grades_the_visible_tests(handout):
    script = handout / ".github/grade.sh"
    assert os.access(script, os.X_OK)
    assert subprocess.run(["bash", "-n", str(script)], capture_output=True).returncode == 0
    text = script.read_text()
    assert 'shardlab grade exercises --out "$out" --visible-only' in text
    assert 'python .github/grade_summary.py "$out/report.json"' in text


def a_report(tmp_path) -> Path:
    """Four visible tests of 1 point each per exercise: ex01's all passed, one of ex04's, nothing else: 5 points."""
    exercises = {}
    for exercise in catalog.EXERCISES:
        passing = {"ex01_meshes": 4, "ex04_sharded_layer": 1}.get(exercise.id, 0)
        tests = [
            TestResult(
                f"test_visible.py::test_{i}",
                exercise.id,
                False,
                1.0,
                "passed" if i < passing else "not attempted",
            )
            for i in range(4)
        ]
        exercises[exercise.id] = score_exercise(exercise, tests)
    results = GradingResults("exercises", exercises, visible_only=True)
    path = tmp_path / "report.json"
    path.write_text(json.dumps(results.to_dict()))
    return path


def test_grade_summary_publishes_the_score(handout, tmp_path):
    summary, outputs = tmp_path / "summary.md", tmp_path / "outputs"
    done = subprocess.run(
        [sys.executable, str(handout / ".github/grade_summary.py"), str(a_report(tmp_path))],
        capture_output=True,
        text=True,
        check=True,
        env=os.environ | {"GITHUB_STEP_SUMMARY": str(summary), "GITHUB_OUTPUT": str(outputs)},
    )
    checked = 4 * len(catalog.EXERCISES)
    score_line = (
        f"Visible tests: 5 of the {checked} points they check pass (of {TOTAL} in all: the hidden tests "
        "check the rest when you are graded)"
    )
    assert done.stdout.splitlines()[0] == score_line
    assert (
        "  ex04_sharded_layer: visible: 4 of 20 points checked, 1 pass (1 of 4 tests pass)"
        in done.stdout
    )
    assert (
        "  ex01_meshes: visible: 4 of 10 points checked, all pass (4 of 4 tests pass)"
        in done.stdout
    )
    assert summary.read_text().startswith(f"## {score_line}\n")
    assert (
        "| ex01_meshes | Devices and meshes | visible: 4 of 10 points checked, all pass | 4 of 4 |"
        in summary.read_text()
    )
    # the points the visible tests check, not the course's; not all pass
    classroom = classroom_result(outputs)
    assert classroom["status"] == "fail" and classroom["max_score"] == checked
    assert sum(test["score"] for test in classroom["tests"]) == 5
    assert [test["status"] for test in classroom["tests"]] == ["pass"] + ["fail"] * (
        len(catalog.EXERCISES) - 1
    )


def classroom_result(outputs: Path) -> dict:
    (line,) = [line for line in outputs.read_text().splitlines() if line.startswith("result=")]
    return json.loads(base64.b64decode(line.removeprefix("result=")))


# ------------------------------------------------------------- slow: the handout installed alone


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    """(handout, venv): a handout installed with `pip install -e .` in a fresh virtual environment."""
    root = tmp_path_factory.mktemp("installed")
    handout = build_handout(root / "handout")
    venv = root / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    done = subprocess.run(
        [str(venv / "bin" / "python"), "-m", "pip", "install", "--quiet", "-e", str(handout)],
        capture_output=True,
        text=True,
        timeout=1200,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return handout, venv


def in_venv(installed, *command, cwd=None, **env):
    handout, venv = installed
    environment = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}
    environment |= {
        "PATH": f"{venv / 'bin'}{os.pathsep}{os.environ['PATH']}",
        "VIRTUAL_ENV": str(venv),
    } | env
    return subprocess.run(
        list(command),
        cwd=cwd or handout,
        env=environment,
        capture_output=True,
        text=True,
        timeout=600,
    )


def use_modules(handout: Path, solved=()) -> None:
    """The handout's exercises/: the references of `solved` (exercise ids), the stubs of the others."""
    for exercise in catalog.EXERCISES:
        source = exercise.solution_path() if exercise.id in solved else exercise.stub_path()
        shutil.copyfile(source, exercise.stub_path(handout / "exercises"))
    shutil.rmtree(handout / ".shardlab", ignore_errors=True)


def run_handout_tests(installed, tmp_path, **env) -> tuple[int, list[dict]]:
    """The handout's own pytest with the handout's own settings (no --impl: exercises/ by default)."""
    results = tmp_path / "results.json"
    done = in_venv(installed, "python", "-m", "pytest", f"--shardlab-results={results}", **env)
    assert results.exists(), done.stdout[-3000:] + done.stderr[-3000:]
    return done.returncode, json.loads(results.read_text())["tests"]


@pytest.mark.slow
def test_the_venv_imports_the_handouts_grader(installed):
    handout, _ = installed
    done = in_venv(installed, "python", "-c", "import grader; print(grader.__file__)", cwd="/")
    assert Path(done.stdout.strip()) == handout / "grader" / "__init__.py"


@pytest.mark.slow
def test_stubs_fail_every_test_as_not_attempted(installed, tmp_path):
    use_modules(installed[0])
    code, tests = run_handout_tests(installed, tmp_path)
    assert code == 1
    assert {t["exercise"] for t in tests} == set(ALL)
    assert {t["category"] for t in tests} == {"not attempted"}
    assert not any(t["hidden"] for t in tests)


@pytest.fixture(scope="module")
def solved(installed, tmp_path_factory):
    """The references in, run once each way a student runs them: the handout's own pytest, then `shardlab
    check --all` and `list`. The pytest run compiles into the check's compile cache (.shardlab/), so the
    course's visible tests, run in-process twice, are compiled once (21 CPU seconds fewer, one paired run)."""
    handout = installed[0]
    use_modules(handout, solved=ALL)
    cache = handout / COMPILE_CACHE / "xla"  # grader.grading.compile_cache.CompileCache.xla_folder
    pytest_run = run_handout_tests(
        installed, tmp_path_factory.mktemp("solved"), JAX_COMPILATION_CACHE_DIR=str(cache)
    )
    checked = in_venv(installed, "shardlab", "check", "--all")
    listed = in_venv(installed, "shardlab", "list")
    return pytest_run, checked, listed


@pytest.mark.slow
def test_references_pass_every_visible_test(solved):
    code, tests = solved[0]
    assert {t["category"] for t in tests} == {"passed"}, [
        t for t in tests if t["category"] != "passed"
    ]
    assert code == 0 and {t["exercise"] for t in tests} == set(ALL)


@pytest.mark.slow
def test_check_and_list_on_the_stubs(installed):
    use_modules(installed[0])
    listed = in_venv(installed, "shardlab", "list")
    assert listed.returncode == 0, listed.stderr
    assert listed.stdout.count("not started") == len(ALL)
    checked = in_venv(installed, "shardlab", "check")
    assert checked.returncode == 1, checked.stderr
    assert f"Next: {ALL[0]}" in checked.stdout and "Hint:" in checked.stdout


@pytest.mark.slow
def test_check_and_list_when_solved(solved):
    # --all: one test run for the whole course (the default walks the exercises one run at a time,
    # which tests/grader/commands/test_student.py covers).
    _, checked, listed = solved
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert f"{len(ALL)} of {len(ALL)} exercises pass their visible tests." in checked.stdout
    assert f"{len(ALL)} of {len(ALL)} done" in listed.stdout


@pytest.mark.slow
def test_ci_grade_script_runs_locally(installed, tmp_path):
    """The workflow's steps after the install, from another folder, with GitHub's files pointed here."""
    handout = installed[0]
    use_modules(handout, solved=["ex01_meshes", "ex02_sharding_properties"])
    summary, outputs = tmp_path / "summary.md", tmp_path / "outputs"
    done = in_venv(
        installed,
        "bash",
        str(handout / ".github/grade.sh"),
        "graded",
        cwd=tmp_path,
        GITHUB_STEP_SUMMARY=str(summary),
        GITHUB_OUTPUT=str(outputs),
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    report = json.loads((handout / "graded" / "report.json").read_text())
    assert report["visible_only"] and report["max_score"] == catalog.total_points()
    assert not any(t["hidden"] for ex in report["exercises"].values() for t in ex["tests"])
    assert_visible_points_are_weights(handout / "graded", report)
    exercises = report["exercises"]
    solved = [
        sum(t["weight"] for t in exercises[ex]["tests"])
        for ex in ("ex01_meshes", "ex02_sharding_properties")
    ]
    assert report["score"] == pytest.approx(sum(solved)) and 0 < report["score"] < TOTAL
    checked = sum(t["weight"] for ex in exercises.values() for t in ex["tests"])
    score_line = f"Visible tests: {points(report['score'])} of the {points(checked)} points they check pass (of {TOTAL}"
    assert score_line in done.stdout and summary.read_text().startswith(f"## {score_line}")
    assert (
        f"  ex01_meshes: visible: {points(solved[0])} of 10 points checked, all pass" in done.stdout
    )
    assert sum(test["score"] for test in classroom_result(outputs)["tests"]) == pytest.approx(
        report["score"]
    )


def points(value: float) -> str:
    return f"{value:.2f}".rstrip("0").rstrip(".")


def assert_visible_points_are_weights(graded: Path, report: dict) -> None:
    """A visible-only run's outputs: each test's points are its weight (report.json, results.json, the page),
    and no exercise nor the total shows a score above what it may reach."""
    tests = [t for ex in report["exercises"].values() for t in ex["tests"]]
    assert tests and all(t["max_score"] == pytest.approx(t["weight"]) for t in tests)
    for exercise in report["exercises"].values():
        assert (
            exercise["score"]
            <= sum(t["max_score"] for t in exercise["tests"]) + 1e-9
            <= exercise["max_score"]
        )
    gradescope = json.loads((graded / "results.json").read_text())
    assert [t["max_score"] for t in gradescope["tests"]] == [
        pytest.approx(t["weight"], abs=1e-4) for t in tests
    ]
    assert (
        gradescope["score"] == pytest.approx(report["score"], abs=1e-3)
        and gradescope["score"] <= TOTAL
    )
    page = (graded / "feedback.html").read_text()
    shown = dict(
        re.findall(
            r'data-nodeid="([^"]+)"[^>]*>.*?<span class="pts">[0-9.]+/([0-9.]+) points</span>',
            page,
            re.S,
        )
    )
    assert {html.unescape(nodeid): float(most) for nodeid, most in shown.items()} == {
        t["nodeid"]: pytest.approx(t["weight"], abs=0.01) for t in tests
    }


@pytest.mark.slow
def test_the_example_submission_graded_by_the_handouts_ci_shows_visible_points_honestly(
    installed, tmp_path
):
    """The issue's case: a visible-only run of the example submission (some exercises right, some wrong, some
    not started) never shows a total above the maximum, and each test carries its weight, on every output."""
    handout = installed[0]
    for exercise in catalog.EXERCISES:
        shutil.copyfile(
            exercise.stub_path(paths.REPO_ROOT / "examples" / "submission"),
            exercise.stub_path(handout / "exercises"),
        )
    summary = tmp_path / "summary.md"
    done = in_venv(
        installed,
        "bash",
        str(handout / ".github/grade.sh"),
        "graded",
        cwd=tmp_path,
        GITHUB_STEP_SUMMARY=str(summary),
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    report = json.loads((handout / "graded" / "report.json").read_text())
    assert_visible_points_are_weights(handout / "graded", report)
    checked = sum(t["weight"] for ex in report["exercises"].values() for t in ex["tests"])
    assert 0 < report["score"] < checked < TOTAL
    score_line = f"Visible tests: {points(report['score'])} of the {points(checked)} points they check pass (of {TOTAL}"
    assert score_line in done.stdout and summary.read_text().startswith(f"## {score_line}")
    for exercise in report["exercises"].values():
        assert f"  {exercise['id']}: visible: " in done.stdout


@pytest.mark.slow
def test_ci_grade_script_can_fail_under_a_score(installed, tmp_path):
    handout = installed[0]
    use_modules(handout, solved=["ex01_meshes"])
    summary = tmp_path / "summary.md"
    done = in_venv(
        installed,
        "bash",
        ".github/grade.sh",
        str(tmp_path / "graded"),
        SHARDLAB_FAIL_UNDER="30",
        GITHUB_STEP_SUMMARY=str(summary),
    )
    assert done.returncode == 1, done.stdout[-3000:] + done.stderr[-3000:]
    assert "below --fail-under 30" in done.stderr
    assert summary.read_text().startswith("## Visible tests: ")  # published all the same
