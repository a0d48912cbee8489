"""The build commands as the README gives them, run through the command line: each writes what it says."""

import subprocess
import sys
import zipfile


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
