"""The build commands as the README gives them, run through the command line: each writes what it says."""

import subprocess
import sys
import zipfile

import pytest


def shardlab(*args: str, cwd) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "grader.cli", *args],
        capture_output=True,
        text=True,
        cwd=cwd,
        timeout=300,
    )


def test_release_writes_the_handout(tmp_path):
    done = shardlab("release", "handout/", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "no solution and no hidden test in it" in done.stdout
    assert (tmp_path / "handout" / "exercises" / "ex01_meshes.py").is_file()
    assert not list((tmp_path / "handout").rglob("test_hidden.py"))


def test_nbgrader_build_writes_the_course(tmp_path):
    done = shardlab("nbgrader", "build", "course/", "--exercise", "ex01", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    notebook = tmp_path / "course" / "source" / "ex01_meshes" / "ex01_meshes.ipynb"
    assert notebook.is_file() and f"wrote {notebook.relative_to(tmp_path)}" in done.stdout
    assert (tmp_path / "course" / "nbgrader_config.py").is_file()


def test_gradescope_build_writes_the_autograder(tmp_path):
    done = shardlab("gradescope", "build", "autograder.zip", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "Configure Autograder" in done.stdout
    names = zipfile.ZipFile(tmp_path / "autograder.zip").namelist()
    assert {"setup.sh", "run_autograder"} <= set(names)


TERM = """
name = "Three homeworks"
timezone = "UTC"

[[assignment]]
name = "HW1"
due = 2026-10-05T23:59:00
exercises = ["ex01", "ex02", "ex03", "ex04"]

[[assignment]]
name = "HW2"
due = 2026-10-19T23:59:00
exercises = ["ex05", "ex06", "ex07", "ex08"]

[[assignment]]
name = "HW3"
due = 2026-11-02T23:59:00
exercises = ["part 2"]
"""


@pytest.mark.slow  # three assignments, each built for every platform
def test_each_assignment_builds_for_every_platform_with_its_exercises_only(tmp_path):
    """nbgrader once refused part 2 (two of its tests named alike in the visible and the hidden file) and
    had no --assignment; Gradescope's zips of HW2 and HW3 once differed only in assignment.txt."""
    (tmp_path / "course.toml").write_text(TERM)
    expected = {
        "HW1": {"ex01", "ex02", "ex03", "ex04"},
        "HW2": {"ex05", "ex06", "ex07", "ex08"},
        "HW3": {"ex14", "ex15", "ex16", "ex17", "ex18"},
    }
    for assignment, numbers in expected.items():
        done = shardlab(
            "nbgrader", "build", f"nb-{assignment}/", "--assignment", assignment, cwd=tmp_path
        )
        assert done.returncode == 0, done.stderr
        built = {
            p.stem.split("_")[0]
            for p in (tmp_path / f"nb-{assignment}" / "source").rglob("*.ipynb")
        }
        folders = {p.name for p in (tmp_path / f"nb-{assignment}" / "source").iterdir()}
        assert built == numbers and folders == {assignment.lower()}, (
            assignment,
            built,
            folders,
        )  # slugs
        done = shardlab(
            "gradescope", "build", f"{assignment}.zip", "--assignment", assignment, cwd=tmp_path
        )
        assert done.returncode == 0, done.stderr
        names = zipfile.ZipFile(tmp_path / f"{assignment}.zip").namelist()
        tested = {n.split("/")[2].split("_")[0] for n in names if n.startswith("tests/exercises/")}
        assert tested == numbers, (assignment, tested)
        # the handout (a GitHub Classroom assignment's template): its stubs and visible tests only
        done = shardlab(
            "release", f"handout-{assignment}/", "--assignment", assignment, cwd=tmp_path
        )
        assert done.returncode == 0, done.stderr
        handout = tmp_path / f"handout-{assignment}"
        stubs = {p.stem.split("_")[0] for p in (handout / "exercises").glob("ex*.py")}
        tests = {p.name.split("_")[0] for p in (handout / "tests" / "exercises").iterdir()}
        assert stubs == tests == numbers, (assignment, stubs, tests)
    # the whole term, every assignment in one course folder
    done = shardlab("nbgrader", "build", "nb-term/", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert {p.name for p in (tmp_path / "nb-term" / "source").iterdir()} == {"hw1", "hw2", "hw3"}
    done = shardlab("nbgrader", "build", "nb-x/", "--assignment", "HW9", cwd=tmp_path)
    assert done.returncode == 2 and "no assignment named 'HW9'" in done.stderr
