"""What a student handout holds, file by file: the one account that `shardlab release` writes from
(grader.platforms.handout) and that grading's intake reads, so that a handout's own files handed back with the
exercises are never taken for what the student added.

    copied_files(exercises)    # its path in the handout -> the course file copied there
    handout_paths()            # every path any handout may hold (every exercise's files)
"""

from __future__ import annotations

from functools import cache
from pathlib import Path

from grader.course import catalog, paths, term

GRADER_DIR = Path(__file__).resolve().parent.parent
DOCS_DIR = paths.REPO_ROOT / "docs"
ROOT_CONFTEST = "conftest.py"
VISIBLE_TESTS = "test_visible.py"
# Template file -> where it goes in the handout. No leading dots (package-data globs skip those), and no
# pyproject.toml (the course's own tools would take the template for the course's own configuration).
TEMPLATE_FILES = {
    "README.md": "README.md",
    "pyproject.toml.in": "pyproject.toml",
    "gitignore": ".gitignore",
    "grade.yml": ".github/workflows/grade.yml",
    "grade.sh": ".github/grade.sh",
    "grade_summary.py": ".github/grade_summary.py",
}
# The docs a handout ships: the students' guide and what it links to, and every doc the shipped grader's
# own comments name. architecture.md and authoring.md stay with the course: they show how a hidden test is
# written and marked. A link to a doc left out keeps its text in the handout, without the link.
HANDOUT_DOCS = (
    "students.md",
    "grading.md",
    "slurm.md",
    "design.md",
    "measurements.md",
    "platforms.md",
    "rules.md",
    "trust-model.md",
)
# Never part of the grader's copy: compiled files, which are rebuilt from the source anyway.
COMPILED = ("__pycache__", ".pyc", ".pyo")


def grader_files() -> dict[str, Path]:
    """The grader package as a handout holds it: every file but the compiled ones, by its path there."""
    return {
        f"grader/{path.relative_to(GRADER_DIR).as_posix()}": path
        for path in sorted(GRADER_DIR.rglob("*"))
        if path.is_file() and not _compiled(path.relative_to(GRADER_DIR))
    }


def _compiled(relative: Path) -> bool:
    return COMPILED[0] in relative.parts or relative.suffix in COMPILED[1:]


def exercise_files(exercise: catalog.Exercise) -> dict[str, Path]:
    """An exercise's stub, its visible tests and the files they run beside, by their paths in a handout."""
    tests = f"tests/exercises/{exercise.id}"
    files = {
        f"exercises/{exercise.module_file}": exercise.stub_path(),
        f"{tests}/{VISIBLE_TESTS}": exercise.tests_dir() / VISIBLE_TESTS,
    }
    return files | {f"{tests}/{support.name}": support for support in exercise.support_files()}


def doc_files() -> dict[str, Path]:
    return {f"docs/{name}": DOCS_DIR / name for name in HANDOUT_DOCS}


def copied_files(
    exercises: tuple[catalog.Exercise, ...] = catalog.EXERCISES,
) -> dict[str, Path]:
    """Every file a handout of `exercises` copies from the course, by its path in the handout: the root
    conftest.py, each exercise's files, the grader package and the docs (whose links to what does not ship
    the release turns into plain text)."""
    files = {ROOT_CONFTEST: paths.REPO_ROOT / ROOT_CONFTEST}
    for exercise in exercises:
        files |= exercise_files(exercise)
    return files | grader_files() | doc_files()


def written_files() -> tuple[str, ...]:
    """What the release writes itself rather than copies: the templates' files and a term's course file."""
    return (*TEMPLATE_FILES.values(), term.FILE_NAME)


@cache
def handout_paths() -> frozenset[str]:
    """Every path a handout may hold, whichever of the catalog's exercises it ships."""
    return frozenset(copied_files()) | frozenset(written_files())
