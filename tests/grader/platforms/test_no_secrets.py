"""The one check that nothing secret ships (grader.platforms.no_secrets): what it catches under each
builder's policy, on files written here, and that every builder runs it: given a copy of the course
whose reference (or hidden test) holds a line the builder ships, the handout, the Gradescope zip and
the nbgrader course are each refused, with nothing left behind, as their policies say."""

from __future__ import annotations

import ast
import dataclasses
import shutil
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

from grader.course import catalog, paths, stubs
from grader.grading.collection import collect_tests
from grader.platforms import gradescope, handout, nbgrader_course, no_secrets, notebooks
from grader.platforms.no_secrets import GRADESCOPE, HANDOUT, NBGRADER_RELEASE, Leak, find_leaks

pytestmark = pytest.mark.xdist_group("test_no_secrets")

EX01, EX04 = catalog.get("ex01_meshes"), catalog.get("ex04_sharded_layer")
POLICIES = {"handout": HANDOUT, "gradescope": GRADESCOPE, "nbgrader release": NBGRADER_RELEASE}
WITHOUT_HIDDEN_TESTS = ["handout", "nbgrader release"]
HIDDEN_EX04 = f"tests/exercises/{EX04.id}/test_hidden.py"


@pytest.fixture(scope="module")
def secrets() -> no_secrets.CourseSecrets:
    return no_secrets.course_secrets()


def a_solution_line(secrets, exercise) -> tuple[str, str]:
    """(line, where it is written) of a distinctive line of the exercise's reference."""
    return next(
        (line, where)
        for line, where in secrets.solution_lines.items()
        if where.startswith(f"solutions/{exercise.module_file}:")
    )


def a_hidden_test(exercise) -> tuple[str, str]:
    """(name, source) of the first test function of the exercise's hidden tests."""
    source = (exercise.tests_dir() / "test_hidden.py").read_text()
    node = next(
        n
        for n in ast.parse(source).body
        if isinstance(n, ast.FunctionDef) and n.name.startswith("test")
    )
    return node.name, ast.get_source_segment(source, node)


# ---- what the check catches --------------------------------------------------------------------------


@pytest.mark.parametrize("policy", list(POLICIES))
def test_a_solution_line_leaks_under_every_policy(secrets, policy):
    line, where = a_solution_line(secrets, EX04)
    files = {"grader/helpers.py": f"import jax\n\n\ndef helper(x):\n        {line}\n"}
    expected = Leak("grader/helpers.py:5", f"a line of {where}: {line[:80]}")
    assert find_leaks(files, POLICIES[policy], secrets) == [expected]


@pytest.mark.parametrize("policy", list(POLICIES))
def test_a_solutions_folder_and_compiled_files_leak_under_every_policy(secrets, policy):
    files = {
        "solutions/": b"",
        "notes/solutions/ex01_meshes.py": b"# nothing yet\n",
        "grader/__pycache__/cli.cpython-311.pyc": b"\0\1",
        "grader/cli.pyo": b"",
    }
    assert [str(leak) for leak in find_leaks(files, POLICIES[policy], secrets)] == [
        "notes/solutions/: a solutions folder",
        "solutions/: a solutions folder",
        "grader/__pycache__/cli.cpython-311.pyc: a compiled file, whose text the line check cannot read",
        "grader/cli.pyo: a compiled file, whose text the line check cannot read",
    ]


def hidden_test_files() -> dict[str, str]:
    """A hidden test file, a hidden test pasted into a visible one, and the hidden marker in a note."""
    name, source = a_hidden_test(EX04)
    visible = EX04.tests_dir() / "test_visible.py"
    return {
        HIDDEN_EX04: (EX04.tests_dir() / "test_hidden.py").read_text(),
        f"tests/exercises/{EX04.id}/test_visible.py": f"{visible.read_text()}\n\n{source}\n",
        "notes.py": "import pytest\n\nmark = pytest.mark.hidden\n",
    }


@pytest.mark.parametrize("policy", WITHOUT_HIDDEN_TESTS)
def test_hidden_tests_leak_where_the_policy_ships_none(secrets, policy):
    name, _ = a_hidden_test(EX04)
    visible = f"tests/exercises/{EX04.id}/test_visible.py"
    found = [str(leak) for leak in find_leaks(hidden_test_files(), POLICIES[policy], secrets)]
    assert f"{HIDDEN_EX04}: a hidden test file" in found
    assert "notes.py:3: marks a test as hidden" in found
    assert any(
        p.startswith(f"{visible}:") and p.endswith(f"defines the hidden test {name}") for p in found
    )
    assert any(p.startswith(f"{visible}:") and f": a line of {HIDDEN_EX04}:" in p for p in found)
    assert any(p.startswith(f"{HIDDEN_EX04}:") and "marks a test as hidden" in p for p in found)


def test_gradescope_ships_the_hidden_tests(secrets):
    assert find_leaks(hidden_test_files(), GRADESCOPE, secrets) == []


def test_a_solution_line_the_hidden_tests_share_ships_with_them_only(secrets):
    """A line both a reference and a hidden test hold (say, a reference computation): the Gradescope zip
    ships it in the hidden tests anyway; the handout must not. (The course's tests hold no such line today:
    one is made, by a test folder that holds a line of a reference.)"""
    line, _ = a_solution_line(secrets, EX04)
    secrets = dataclasses.replace(secrets, test_folder_lines=secrets.test_folder_lines | {line})
    files = {"grader/helpers.py": f"def helper():\n    {line}\n"}
    assert find_leaks(files, GRADESCOPE, secrets) == []
    assert [leak.where for leak in find_leaks(files, HANDOUT, secrets)] == ["grader/helpers.py:2"]


@pytest.mark.parametrize("policy", list(POLICIES))
def test_what_students_hold_anyway_is_no_leak(secrets, policy):
    """The stubs, the visible tests and their conftests, and lines too common to say where they come from:
    short solution lines, a solution line that only opens a call, and a hidden test's imports (the grader's
    public API)."""
    files = {
        path.relative_to(paths.REPO_ROOT).as_posix(): path.read_text()
        for path in no_secrets.public_files(paths.REPO_ROOT)
    }
    short = [
        line
        for _, line in stubs.solution_lines(EX04.solution_path().read_text())
        if len(line) < no_secrets.MIN_DISTINCTIVE
    ]
    imports = [
        line.strip()
        for line in (EX04.tests_dir() / "test_hidden.py").read_text().splitlines()
        if line.startswith(("import ", "from "))
    ]
    heads = [
        line
        for _, line in stubs.solution_lines(EX01.solution_path().read_text())
        if no_secrets.OPENING_ONLY.fullmatch(line) and len(line) >= no_secrets.MIN_DISTINCTIVE
    ]
    assert short and imports and heads
    files["grader/common.py"] = "\n".join(short + imports + heads) + "\n"
    assert find_leaks(files, POLICIES[policy], secrets) == []


@pytest.mark.parametrize("policy", list(POLICIES))
def test_the_grader_package_holds_no_secret(secrets, policy):
    files = {
        path.relative_to(paths.REPO_ROOT).as_posix(): path.read_bytes()
        for path in (paths.REPO_ROOT / "grader").rglob("*")
        if path.is_file() and "__pycache__" not in path.parts
    }
    assert find_leaks(files, POLICIES[policy], secrets) == []


def test_the_course_has_secrets_to_find(secrets):
    for exercise in catalog.EXERCISES:
        assert any(
            where.startswith(f"solutions/{exercise.module_file}:")
            for where in secrets.solution_lines.values()
        )
        assert any(
            where.startswith(f"tests/exercises/{exercise.id}/test_hidden.py:")
            for where in secrets.hidden_lines.values()
        )
    assert secrets.hidden_names


# ---- every builder runs it ---------------------------------------------------------------------------

# A line each builder ships: notebooks.py holds it (the handout and the zip ship the grader package) and
# so does every released notebook's setup cell.
SHIPPED = max(notebooks.SETUP_SOURCE.splitlines(), key=len).strip()
SHIPPED_IN = "grader/platforms/notebooks.py"


def shipped_at() -> int:
    """The line of notebooks.py that holds SHIPPED."""
    lines = (paths.REPO_ROOT / SHIPPED_IN).read_text().splitlines()
    return next(n for n, line in enumerate(lines, start=1) if line.strip() == SHIPPED)


@pytest.fixture
def course_copy(tmp_path) -> Path:
    """The course's references, stubs and tests, to plant a line in."""
    root = tmp_path / "course"
    for tree in ("solutions", "exercises", "tests/exercises"):
        shutil.copytree(
            paths.REPO_ROOT / tree, root / tree, ignore=shutil.ignore_patterns("__pycache__")
        )
    shutil.copyfile(paths.REPO_ROOT / "conftest.py", root / "conftest.py")
    return root


def with_solution_line(course: Path, line: str) -> no_secrets.CourseSecrets:
    """The secrets of `course` once ex01's reference answers with `line` too."""
    reference = EX01.solution_path(course / "solutions")
    reference.write_text(reference.read_text().replace(stubs.END, f"{line}\n    {stubs.END}", 1))
    return no_secrets.course_secrets(course)


def with_hidden_line(course: Path, line: str) -> no_secrets.CourseSecrets:
    """The secrets of `course` once ex01's hidden tests hold `line` too."""
    hidden = EX01.tests_dir(course / "tests" / "exercises") / "test_hidden.py"
    hidden.write_text(f"{hidden.read_text()}\n\n{line}\n")
    return no_secrets.course_secrets(course)


@pytest.fixture(scope="module")
def ex01_tests() -> list[dict]:
    return collect_tests([EX01])


def test_the_handout_build_runs_the_check(course_copy, tmp_path):
    secrets = with_solution_line(course_copy, SHIPPED)
    out = tmp_path / "handout"
    with pytest.raises(handout.HandoutError) as raised:
        handout.build_handout(out, secrets=secrets)
    assert f"\n  {SHIPPED_IN}:{shipped_at()}: a line of solutions/{EX01.module_file}:" in str(
        raised.value
    )
    assert not out.exists()


def test_the_gradescope_build_runs_the_check(course_copy, tmp_path):
    secrets = with_solution_line(course_copy, SHIPPED)
    out = tmp_path / "out" / "autograder.zip"
    with pytest.raises(gradescope.GradescopeBuildError) as raised:
        gradescope.build_gradescope_zip(out, secrets=secrets)
    assert any(
        p.startswith(f"{SHIPPED_IN}:{shipped_at()}: a line of solutions/{EX01.module_file}:")
        for p in raised.value.problems
    ), raised.value.problems
    assert list(out.parent.iterdir()) == []


def test_the_nbgrader_build_runs_the_check_on_the_released_notebooks(
    course_copy, tmp_path, ex01_tests
):
    secrets = with_solution_line(course_copy, SHIPPED)
    out = tmp_path / "nbgrader"
    with pytest.raises(no_secrets.LeaksFound) as raised:
        nbgrader_course.build_course(out, exercises=[EX01.id], tests=ex01_tests, secrets=secrets)
    setup_line = notebooks.SETUP_SOURCE.splitlines().index(SHIPPED) + 1
    cell = f"release/{EX01.id}/{EX01.id}.ipynb#{notebooks.grade_id(EX01, 'setup')}"
    assert [leak.where for leak in raised.value.leaks] == [f"{cell}:{setup_line}"]
    # what `shardlab nbgrader build` reports, exit status 2
    assert isinstance(raised.value, ValueError)
    assert not out.exists()


def test_a_hidden_line_stops_the_handout_and_the_release_but_not_the_gradescope_zip(
    course_copy, tmp_path, ex01_tests
):
    secrets = with_hidden_line(course_copy, SHIPPED)
    hidden = f"a line of tests/exercises/{EX01.id}/test_hidden.py:"
    with pytest.raises(handout.HandoutError, match=hidden):
        handout.build_handout(tmp_path / "handout", secrets=secrets)
    with pytest.raises(no_secrets.LeaksFound, match=hidden):
        nbgrader_course.build_course(
            tmp_path / "nbgrader", exercises=[EX01.id], tests=ex01_tests, secrets=secrets
        )
    built = gradescope.build_gradescope_zip(tmp_path / "autograder.zip", secrets=secrets)
    assert gradescope.verify_autograder_zip(built, secrets=secrets) == []


def test_every_builder_passes_the_course_as_it_is(tmp_path, ex01_tests):
    """Behaviour of a good build: each builder writes its output, and the nbgrader source notebooks
    (which hold the answers: nbgrader strips them on release) would fail the check were they released."""
    assert handout.verify_handout(handout.build_handout(tmp_path / "handout")) == []
    assert (
        gradescope.verify_autograder_zip(
            gradescope.build_gradescope_zip(tmp_path / "autograder.zip")
        )
        == []
    )
    written = nbgrader_course.build_course(
        tmp_path / "nbgrader", exercises=[EX01.id], tests=ex01_tests
    )
    source = nbformat.read(written[0], 4)
    cells = {f"{written[0].name}#{cell.id}": cell.source for cell in source.cells}
    assert find_leaks(cells, NBGRADER_RELEASE)  # the answers and the hidden tests are all there
    assert (
        find_leaks(nbgrader_course.released_files({written[0].name: source}), NBGRADER_RELEASE)
        == []
    )


@pytest.mark.slow
def test_the_release_the_check_reads_is_what_nbgrader_releases(tmp_path, ex01_tests):
    """The nbgrader builder checks its notebooks as released(): cell for cell what the real
    `nbgrader generate_assignment` writes into release/."""
    nbgrader_course.build_course(tmp_path, exercises=[EX01.id], tests=ex01_tests)
    done = subprocess.run(
        [sys.executable, "-m", "nbgrader", "generate_assignment", EX01.id, "--force"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    source = nbformat.read(tmp_path / "source" / EX01.id / f"{EX01.id}.ipynb", 4)
    release = nbformat.read(tmp_path / "release" / EX01.id / f"{EX01.id}.ipynb", 4)
    assert [cell.source for cell in nbgrader_course.released(source).cells] == [
        cell.source for cell in release.cells
    ]
