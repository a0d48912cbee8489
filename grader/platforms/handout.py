"""The student handout: what `shardlab release OUT` writes, and the check that nothing secret is in it.

    build_handout(Path("out/handout"))      # then give out/handout to the students (e.g. a template repo)

The handout holds the stubs (exercises/), the visible tests and their conftest.py files, the root
conftest.py, the grader package (checks, pytest plugin, the student commands), a pyproject.toml whose
dependencies are the course's pins, a README for students and a GitHub Actions workflow that grades
exercises/ with the visible tests (.github/grade.sh, runnable locally). It never holds solutions/ or a
hidden test: `verify_handout` scans every file with the check every builder uses (grader.platforms.no_secrets,
under its HANDOUT policy), and `build_handout` refuses to finish when it finds anything.
"""

from __future__ import annotations

import json
import re
import shutil
import stat
import tomllib
from pathlib import Path
from string import Template

from grader.core.errors import ShardlabError
from grader.course import catalog, paths, stubs
from grader.platforms import no_secrets

DEFAULT_COURSE_NAME = "shardlab"
TEMPLATES_DIR = Path(__file__).parent / "templates" / "handout"
# Template file -> where it goes in the handout. No leading dots (package-data globs skip those), and no
# pyproject.toml (ruff and pytest would take the template for the course's own configuration).
TEMPLATE_FILES = {
    "README.md": "README.md",
    "pyproject.toml.in": "pyproject.toml",
    "gitignore": ".gitignore",
    "grade.yml": ".github/workflows/grade.yml",
    "grade.sh": ".github/grade.sh",
    "grade_summary.py": ".github/grade_summary.py",
}
SUBSTITUTED = {"README.md", "pyproject.toml.in"}   # the others are shipped verbatim ($ is bash's there)
INSTRUCTOR_ONLY = {"nbgrader", "nbformat"}       # dependencies the students' commands never import
# Course trees a handout must never be written into (nor the course itself be inside the handout).
PROTECTED = ("grader", "solutions", "exercises", "tests", "examples")


class HandoutError(ShardlabError, RuntimeError):
    """The handout cannot be written, or what was written holds something students must not see."""


# ------------------------------------------------------------------------------------------- build


def build_handout(out: str | Path, *, course_name: str = DEFAULT_COURSE_NAME, force: bool = False,
                  secrets: no_secrets.CourseSecrets | None = None) -> Path:
    """Write the student handout into `out` (new or empty; with force its contents are replaced),
    verify it against `secrets` (the course's own by default), and return its path. A handout that
    fails verification is deleted, and HandoutError lists what was found."""
    out = Path(out).expanduser().resolve()
    check_destination(out)
    _check_stubs_current()
    _prepare(out, force)
    _copy_exercises(out)
    _copy_tests(out)
    _copy_grader(out)
    _write_templates(out, course_name)
    leaks = no_secrets.find_leaks(handout_files(out), no_secrets.HANDOUT, secrets)
    if leaks:
        shutil.rmtree(out)
        raise HandoutError(f"the handout would reveal what students must not see, so it was deleted:\n  "
                           f"{no_secrets.listing(leaks)}")
    return out


def check_destination(out: Path) -> None:
    """Refuse a destination that is, contains, or lies inside one of the course's own trees."""
    root = paths.REPO_ROOT
    if root.is_relative_to(out):
        raise HandoutError(f"{out} holds the course itself: choose a folder outside it (or under {root / 'out'})")
    for tree in PROTECTED:
        if out.is_relative_to(root / tree):
            raise HandoutError(f"{out} is inside the course's {tree}/: choose another folder")


def _prepare(out: Path, force: bool) -> None:
    if out.exists() and not out.is_dir():
        raise HandoutError(f"{out} exists and is not a folder")
    if out.is_dir() and any(out.iterdir()):
        if not force:
            raise HandoutError(f"{out} is not empty: choose an empty folder, or replace its contents with --force")
        for child in out.iterdir():
            if child.is_dir() and not child.is_symlink():
                shutil.rmtree(child)
            else:
                child.unlink()
    out.mkdir(parents=True, exist_ok=True)


def _check_stubs_current() -> None:
    """The stubs are shipped as committed; stale ones could hold what the reference has since hidden."""
    stale = [path.name for path, text in stubs.expected_stubs().items()
             if not path.is_file() or path.read_text() != text]
    if stale:
        raise HandoutError(f"exercises/ is out of date ({', '.join(stale)}): run `shardlab stubs` first")


def _copy(source: Path, target: Path) -> None:
    target.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(source, target)


def _copy_exercises(out: Path) -> None:
    for exercise in catalog.EXERCISES:
        _copy(exercise.stub_path(), exercise.stub_path(out / "exercises"))


def _copy_tests(out: Path) -> None:
    """The root conftest.py, and each exercise's visible tests with the files they run beside."""
    _copy(paths.REPO_ROOT / "conftest.py", out / "conftest.py")
    for exercise in catalog.EXERCISES:
        target = exercise.tests_dir(out / "tests" / "exercises")
        _copy(exercise.tests_dir() / "test_visible.py", target / "test_visible.py")
        for support in exercise.support_files():
            _copy(support, target / support.name)


def _copy_grader(out: Path) -> None:
    shutil.copytree(Path(__file__).parent.parent, out / "grader",
                    ignore=shutil.ignore_patterns("__pycache__", "*.pyc", "*.pyo"))


def _write_templates(out: Path, course_name: str) -> None:
    values = _readme_values(course_name) | _pyproject_values(course_name)
    for name, destination in TEMPLATE_FILES.items():
        text = (TEMPLATES_DIR / name).read_text()
        if name in SUBSTITUTED:
            text = Template(text).substitute(values)
        target = out / destination
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text)
    script = out / TEMPLATE_FILES["grade.sh"]
    script.chmod(script.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)


def _readme_values(course_name: str) -> dict[str, str]:
    rows = [f"| `{e.id}` | {e.title} | {e.points}{' bonus' if e.bonus else ''} |" for e in catalog.EXERCISES]
    table = "\n".join(["| exercise | title | points |", "| --- | --- | ---: |", *rows,
                       f"| | total (bonus points come on top) | {catalog.total_points()} |"])
    example = next(e for e in reversed(catalog.EXERCISES) if not e.bonus)
    return {"course_name": course_name, "exercise_table": table, "example": example.number,
            "example_id": example.id}


def _pyproject_values(course_name: str) -> dict[str, str]:
    """The course's own pins, less what only instructors use: one source of truth for the versions."""
    course = tomllib.loads((paths.REPO_ROOT / "pyproject.toml").read_text())
    dependencies = [d for d in course["project"]["dependencies"] if _distribution(d) not in INSTRUCTOR_ONLY]
    pytest_options = dict(course["tool"]["pytest"]["ini_options"])
    pytest_options["addopts"] = [*pytest_options.get("addopts", []), "--impl=exercises"]
    return {
        "course_name": course_name,
        "build_requires": _toml(course["build-system"]["requires"]),
        "version": course["project"]["version"],
        "requires_python": course["project"]["requires-python"],
        "dependencies": "[\n" + "".join(f"    {_toml(d)},\n" for d in dependencies) + "]",
        "pytest_options": "\n".join(f"{key} = {_toml(value)}" for key, value in pytest_options.items()),
    }


def _distribution(requirement: str) -> str:
    return re.split(r"[\s\[=<>!~;]", requirement, maxsplit=1)[0].lower()


def _toml(value) -> str:
    """Strings, booleans, numbers and lists of them: JSON writes these exactly as TOML does."""
    return json.dumps(value)


# ------------------------------------------------------------------------------------------ verify


def handout_files(root: Path) -> dict[str, bytes]:
    """Every file and folder ("name/") of the handout at `root`, by its path in it; .git is the
    instructor's own (a handout may become a repository)."""
    files: dict[str, bytes] = {}
    for path in sorted(p for p in root.rglob("*") if ".git" not in p.relative_to(root).parts):
        name = path.relative_to(root).as_posix()
        if path.is_dir():
            files[f"{name}/"] = b""
        else:
            files[name] = path.read_bytes()
    return files


def verify_handout(path: str | Path, *, secrets: no_secrets.CourseSecrets | None = None) -> list[str]:
    """Every problem found in the handout at `path` under the handout's policy (grader.platforms.no_secrets:
    no solution line, no hidden test, no solutions folder, no compiled file), each "file:line: what";
    an empty list means the handout is clean. `secrets`: the course's own by default."""
    return [str(leak) for leak in no_secrets.find_leaks(handout_files(Path(path)), no_secrets.HANDOUT, secrets)]
