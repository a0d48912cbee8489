"""The Gradescope autograder zip: what it holds and must not hold, and its run_autograder run for real on a
folder laid out as Gradescope lays out /autograder (`<root>/source` the unpacked zip, `<root>/submission`,
`<root>/results`), with bash, as Gradescope runs it.

The slow tests grade with the grader installed from the unpacked zip: `pip install -e` of `<root>/source`
into a fresh venv (as setup.sh does), whose only other path is a .pth naming this environment's
site-packages, for the pinned dependencies without downloading them. A .pth names a folder without
running the .pth files in it, so this checkout's own editable install of shardlab is invisible there,
and every grading child (`python -I`) imports grader from the zip.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import json
import os
import shutil
import stat
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest
from markdown_it import MarkdownIt

from grader.course import catalog, paths, stubs
from grader.platforms import gradescope, no_secrets

# its module-scoped fixture does the heavy work once
pytestmark = pytest.mark.xdist_group("test_gradescope")

EX01 = catalog.get("ex01_meshes")


def _documented_format_check():
    """gradescope_problems(data) from test_reports.py: Gradescope's documented results.json format."""
    spec = importlib.util.spec_from_file_location(
        "shardlab_test_reports", Path(__file__).parents[1] / "reports" / "test_reports.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.gradescope_problems


gradescope_problems = _documented_format_check()


@pytest.fixture(scope="module")
def built_zip(tmp_path_factory) -> Path:
    return gradescope.build_gradescope_zip(tmp_path_factory.mktemp("build") / "autograder.zip")


def entries(path: Path) -> dict[str, zipfile.ZipInfo]:
    with zipfile.ZipFile(path) as zf:
        return {info.filename: info for info in zf.infolist()}


# -- what the zip holds ------------------------------------------------------------------------------------


def test_gradescope_scripts_sit_at_the_root_and_are_executable(built_zip):
    found = entries(built_zip)
    with zipfile.ZipFile(built_zip) as zf:
        for name in gradescope.SCRIPTS:
            assert stat.S_IMODE(found[name].external_attr >> 16) == 0o755, name
            assert zf.read(name).startswith(b"#!/usr/bin/env bash\n"), name


def test_the_zip_holds_the_course_and_every_test(built_zip):
    names = set(entries(built_zip))
    assert {
        "pyproject.toml",
        "README.md",
        "conftest.py",
        "grader/__init__.py",
        "grader/cli.py",
        "grader/course/paths.py",
        "grader/platforms/gradescope.py",
    } <= names
    for exercise in catalog.EXERCISES:
        shipped = {
            p.relative_to(paths.REPO_ROOT).as_posix() for p in exercise.tests_dir().glob("*.py")
        }
        assert (
            {
                f"tests/exercises/{exercise.id}/test_hidden.py",
                f"tests/exercises/{exercise.id}/test_visible.py",
            }
            <= shipped
            <= names
        )


def test_the_zip_holds_no_solutions_stubs_or_compiled_files(built_zip):
    for name in entries(built_zip):
        assert not name.startswith(("solutions/", "exercises/", "examples/", "tests/grader/")), name
        assert "__pycache__" not in name and not name.endswith(".pyc"), name


def test_no_file_of_the_zip_holds_a_line_of_a_solution(built_zip):
    """Scanned here independently of the verifier: a solution line may appear only if it is short, only
    opens a call (the formatter's head of a statement, its content on the lines below), or if the
    course's own tests (they ship in the zip by design) or the stubs (students hold them) already
    contain it."""
    known = {
        line.strip()
        for path in [*paths.EXERCISE_TESTS_DIR.rglob("*.py"), *paths.EXERCISES_DIR.glob("*.py")]
        for line in path.read_text().splitlines()
    }
    answers = {
        line: path.name
        for path in paths.SOLUTIONS_DIR.glob("*.py")
        for _, line in stubs.solution_lines(path.read_text())
    }
    # the check has something to find
    assert len(no_secrets.course_secrets().lines(no_secrets.GRADESCOPE)) > 40
    with zipfile.ZipFile(built_zip) as zf:
        for name in zf.namelist():
            for number, line in enumerate(
                zf.read(name).decode(errors="replace").splitlines(), start=1
            ):
                line = line.strip()
                if line in answers:
                    common = len(line) < no_secrets.MIN_DISTINCTIVE
                    assert common or no_secrets.OPENING_ONLY.fullmatch(line) or line in known, (
                        f"{name}:{number} holds {line!r} from solutions/{answers[line]}"
                    )


def test_the_built_zip_passes_verification_and_builds_are_identical(built_zip, tmp_path):
    assert gradescope.verify_autograder_zip(built_zip) == []
    again = gradescope.build_gradescope_zip(tmp_path / "again.zip")
    assert again.read_bytes() == built_zip.read_bytes()


def test_the_scripts_parse_as_bash():
    for name in gradescope.SCRIPTS:
        checked = subprocess.run(
            ["bash", "-n", str(gradescope.TEMPLATES / name)], capture_output=True, text=True
        )
        assert checked.returncode == 0, checked.stderr


# -- verification catches what must not ship --------------------------------------------------------------


def rewrite(source: Path, target: Path, *changes) -> Path:
    """A copy of the zip after each change(files), files mapping each name to [bytes, mode]."""
    with zipfile.ZipFile(source) as zf:
        files = {
            info.filename: [zf.read(info), stat.S_IMODE(info.external_attr >> 16)]
            for info in zf.infolist()
        }
    for change in changes:
        change(files)
    with zipfile.ZipFile(target, "w") as zf:
        for name, (data, mode) in files.items():
            info = zipfile.ZipInfo(name)
            info.external_attr = (stat.S_IFREG | mode) << 16
            zf.writestr(info, data)
    return target


def a_secret_line() -> str:
    """A line of ex01's reference that the Gradescope zip must not hold."""
    secrets = no_secrets.course_secrets().lines(no_secrets.GRADESCOPE)
    return next(
        line
        for line, where in secrets.items()
        if where.startswith(f"solutions/{EX01.module_file}:")
    )


def add(name: str, text):
    return lambda files: files.__setitem__(name, [text() if callable(text) else text, 0o644])


def drop(name: str):
    return lambda files: files.pop(name)


def plant_a_secret_line(name: str):
    return lambda files: files[name].__setitem__(
        0, files[name][0] + f"\n    {a_secret_line()}\n".encode()
    )


def set_mode(name: str, mode: int):
    return lambda files: files[name].__setitem__(1, mode)


def with_crlf(name: str):
    return lambda files: files[name].__setitem__(0, files[name][0].replace(b"\n", b"\r\n"))


HIDDEN_EX03 = "tests/exercises/ex03_computation_follows_data/test_hidden.py"
CONFTEST_EX04 = "tests/exercises/ex04_sharded_layer/conftest.py"
PYC = "grader/__pycache__/catalog.cpython-311.pyc"
BROKEN = {  # (change, texts the problems must contain)
    "the references": (
        add("solutions/ex01_meshes.py", EX01.solution_path().read_bytes),
        ["solutions/: a solutions folder", "solutions/ex01_meshes.py:"],
    ),
    "one line in the grader": (
        plant_a_secret_line("grader/course/catalog.py"),
        ["grader/course/catalog.py:", ": a line of solutions/ex01_meshes.py:"],
    ),
    "one line in a hidden test": (plant_a_secret_line(HIDDEN_EX03), [f"{HIDDEN_EX03}:"]),
    "a stub that kept an answer": (
        add("exercises/ex01_meshes.py", lambda: f"def f():\n    {a_secret_line()}".encode()),
        ["exercises/ex01_meshes.py:2: a line of solutions/ex01_meshes.py:"],
    ),
    "hidden tests missing": (drop(HIDDEN_EX03), [f"missing {HIDDEN_EX03} (hidden tests)"]),
    "a conftest missing": (drop(CONFTEST_EX04), [f"missing {CONFTEST_EX04}"]),
    "run_autograder not executable": (
        set_mode("run_autograder", 0o644),
        ["run_autograder is not executable (mode 0o644)"],
    ),
    "setup.sh with CRLF": (with_crlf("setup.sh"), ["setup.sh has CR line endings"]),
    "setup.sh missing": (drop("setup.sh"), ["missing setup.sh"]),
    "a compiled file": (add(PYC, b"\0"), [f"{PYC}: a compiled file"]),
    "an unsafe path": (add("../outside.py", b""), ["../outside.py: unsafe path"]),
}


@pytest.mark.parametrize("case", list(BROKEN))
def test_verification_catches(built_zip, tmp_path, case):
    change, expected = BROKEN[case]
    problems = gradescope.verify_autograder_zip(rewrite(built_zip, tmp_path / "broken.zip", change))
    for text in expected:
        assert any(text in problem for problem in problems), (text, problems)


def test_verification_of_something_that_is_not_a_zip(tmp_path):
    (tmp_path / "x.zip").write_text("no zip")
    assert "cannot be read as a zip" in gradescope.verify_autograder_zip(tmp_path / "x.zip")[0]


def test_the_build_refuses_to_write_a_zip_that_leaks(tmp_path):
    """References whose answer is a line the grader contains: the build fails loudly and leaves nothing.
    (tests/grader/platforms/test_no_secrets.py makes such references; here the course's own secrets plus one line.)"""
    shipped = Path(gradescope.__file__).read_text().splitlines()
    number, leaked = next(
        (n, line.strip())
        for n, line in enumerate(shipped, start=1)
        if line.startswith("def build_gradescope_zip(")
    )
    course = no_secrets.course_secrets()
    secrets = dataclasses.replace(
        course, solution_lines=course.solution_lines | {leaked: "solutions/ex01_meshes.py:1"}
    )
    out = tmp_path / "out" / "autograder.zip"
    with pytest.raises(gradescope.GradescopeBuildError) as raised:
        gradescope.build_gradescope_zip(out, secrets=secrets)
    problems = raised.value.problems
    assert (
        f"grader/platforms/gradescope.py:{number}: a line of solutions/ex01_meshes.py:1: {leaked[:80]}"
        in problems
    )
    assert list(out.parent.iterdir()) == []


# -- run_autograder, on a folder laid out like Gradescope's ----------------------------------------------


def unpack(zip_path: Path, folder: Path) -> Path:
    """As Gradescope does: the zip's files with their modes (zipfile.extractall alone drops them)."""
    with zipfile.ZipFile(zip_path) as zf:
        zf.extractall(folder)
        for info in zf.infolist():
            os.chmod(folder / info.filename, stat.S_IMODE(info.external_attr >> 16))
    return folder


@pytest.fixture(scope="module")
def source(built_zip, tmp_path_factory) -> Path:
    return unpack(built_zip, tmp_path_factory.mktemp("unpacked") / "source")


def autograder_root(
    tmp_path: Path, source: Path, submission: dict[str, str], venv: Path | None = None
) -> Path:
    """/autograder as the harness leaves it before a run: source/, submission/, results/, the metadata file
    and run_autograder copied to the root."""
    root = tmp_path / "autograder"
    (root / "submission").mkdir(parents=True)
    (root / "results").mkdir()
    (root / "source").symlink_to(source)
    if venv is not None:
        (root / "venv").symlink_to(venv)  # where setup.sh puts it: run_autograder's default Python
    for name, text in submission.items():
        (root / "submission" / name).write_text(text)
    # Gradescope's real format (gradescope-autograders.readthedocs.io/en/latest/submission_metadata/).
    (root / "submission_metadata.json").write_text(
        json.dumps(
            {
                "id": 1,
                "created_at": "2026-10-01T12:00:00.000000+02:00",
                "assignment": {
                    "title": "shardlab",
                    "due_date": "2026-10-05T23:59:00.000000+02:00",
                    "late_due_date": None,
                },
                "users": [{"email": "student@example.com", "id": 1234, "name": "Student User"}],
            }
        )
    )
    shutil.copy2(source / "run_autograder", root / "run_autograder")
    return root


def run_autograder(root: Path, **env: str) -> dict:
    done = subprocess.run(
        [str(root / "run_autograder")],
        cwd=root,
        capture_output=True,
        text=True,
        timeout=600,
        env=os.environ | {"SHARDLAB_AUTOGRADER": str(root)} | env,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    results = json.loads((root / "results" / "results.json").read_text())
    assert gradescope_problems(results) == [], results
    assert not (root / "results" / ".results.json.part").exists()
    return results


def fake_python(tmp_path: Path, body: str) -> str:
    script = tmp_path / "python"
    script.write_text(f"#!/bin/sh\n{body}\n")
    script.chmod(0o755)
    return str(script)


FAILURES = {
    "the grader exits 1": (
        "echo 'Traceback: grading broke' >&2; exit 1",
        {},
        "the grader stopped with exit status 1",
    ),
    "no Python": (None, {}, "the grader's Python was not found"),
    "the grader hangs": (
        "exec sleep 60",
        {"SHARDLAB_HARD_LIMIT": "1"},
        "grading did not finish within 1 seconds",
    ),
}


@pytest.mark.parametrize("case", list(FAILURES))
def test_when_grading_fails_results_say_so_with_score_zero(source, tmp_path, case):
    body, env, reason = FAILURES[case]
    root = autograder_root(tmp_path, source, {EX01.module_file: EX01.solution_path().read_text()})
    python = fake_python(tmp_path, body) if body else str(tmp_path / "no-such-python")
    results = run_autograder(root, SHARDLAB_PYTHON=python, **env)
    assert results["score"] == 0 and results["tests"] == []
    assert results["output"].startswith("The autograder could not grade this submission: " + reason)
    assert results["visibility"] == "visible" and results["stdout_visibility"] == "hidden"


@pytest.fixture(scope="module")
def venv(source, tmp_path_factory) -> Path:
    """A venv with the grader installed from the unpacked zip, as setup.sh installs it."""
    venv = tmp_path_factory.mktemp("venv") / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    site_packages = Path(
        subprocess.run(
            [
                str(venv / "bin" / "python"),
                "-c",
                "import sysconfig; print(sysconfig.get_paths()['purelib'])",
            ],
            capture_output=True,
            text=True,
        ).stdout.strip()
    )
    (site_packages / "pinned-dependencies.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    installed = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "--python",
            str(venv / "bin" / "python"),
            "install",
            "--quiet",
            "--no-deps",
            "-e",
            str(source),
        ],
        capture_output=True,
        text=True,
    )
    assert installed.returncode == 0, installed.stdout + installed.stderr
    return venv


@pytest.mark.slow
def test_the_venv_grades_with_the_grader_from_the_zip(venv, source):
    shown = subprocess.run(
        [
            str(venv / "bin" / "python"),
            "-I",
            "-c",
            "import json, sys, grader.cli, grader.course.paths; print(json.dumps([grader.cli.__file__, "
            "str(grader.course.paths.REPO_ROOT), sys.path]))",
        ],
        capture_output=True,
        text=True,
    )
    module, repo_root, sys_path = json.loads(shown.stdout)
    assert Path(module) == source / "grader" / "cli.py" and Path(repo_root) == source
    # Nothing of this checkout but the venv the suite may run from (.ci/run's .venv, whose site-packages the
    # .pth names for the pinned dependencies).
    venv = str(paths.REPO_ROOT / ".venv")
    assert not any(
        entry.startswith(str(paths.REPO_ROOT)) and not entry.startswith(venv) for entry in sys_path
    ), sys_path
    assert not (source / "solutions").exists()


def results_of(results: dict, exercise_id: str) -> list[dict]:
    return [test for test in results["tests"] if exercise_id in test["tags"]]


def assert_the_markdown_renders(results: dict) -> None:
    """results.json's Markdown, from a real grading, read by a CommonMark renderer with GFM tables: the summary
    holds a table, and each test's output starts with its verdict, whole in one code block or a bare word."""
    renderer = MarkdownIt("commonmark", {"html": True}).enable("table")
    assert results["output_format"] == "md" and "<table>" in renderer.render(results["output"])
    for test in results["tests"]:
        html = renderer.render(test["output"])
        assert test["output_format"] == "md" and test["name_format"] == "text"
        assert html.startswith(("<pre><code>", f"<p>{test['extra_data']['category']}</p>")), html
        assert "<a" not in html and "<img" not in html and "<script" not in html


@pytest.mark.slow
def test_a_reference_module_gets_full_marks_for_its_exercise_only(venv, source, tmp_path):
    root = autograder_root(
        tmp_path, source, {EX01.module_file: EX01.solution_path().read_text()}, venv
    )
    results = run_autograder(root)  # the default Python: <root>/venv, where setup.sh puts it
    assert results["extra_data"]["submission"] == str(root / "submission")
    assert results["score"] == pytest.approx(EX01.points)
    ex01 = results_of(results, EX01.id)
    assert ex01 and all(t["status"] == "passed" and t["score"] == t["max_score"] for t in ex01)
    assert sum(t["score"] for t in ex01) == pytest.approx(EX01.points)
    for exercise in catalog.EXERCISES[1:]:
        tests = results_of(results, exercise.id)
        assert tests and all(t["score"] == 0 and t["status"] == "failed" for t in tests), (
            exercise.id
        )
    hidden = [t for t in results["tests"] if "hidden" in t["tags"]]
    assert hidden and {t["visibility"] for t in hidden} == {"after_due_date"}
    assert {t["visibility"] for t in results["tests"] if t not in hidden} == {"visible"}
    assert {t["extra_data"]["nodeid"].split("/")[-1].split("::")[0] for t in hidden} == {
        "test_hidden.py"
    }
    assert_the_markdown_renders(results)


BROKEN_SUBMISSIONS = {
    "empty": ({}, "not attempted"),
    "syntax error": ({EX01.module_file: "def make_mesh_2x4(:\n    pass\n"}, "error"),
}


@pytest.mark.slow
@pytest.mark.parametrize("case", list(BROKEN_SUBMISSIONS))
def test_a_broken_submission_scores_zero_with_every_test_listed(venv, source, tmp_path, case):
    submission, ex01_category = BROKEN_SUBMISSIONS[case]
    root = autograder_root(tmp_path, source, submission)
    results = run_autograder(root, SHARDLAB_PYTHON=str(venv / "bin" / "python"))
    assert results["score"] == 0 and all(t["score"] == 0 for t in results["tests"])
    for exercise in catalog.EXERCISES:
        assert results_of(results, exercise.id), exercise.id
    assert {t["extra_data"]["category"] for t in results_of(results, EX01.id)} == {ex01_category}
    assert_the_markdown_renders(results)
