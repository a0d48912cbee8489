"""Loading an exercise module from an implementation folder, and what a broken one reports."""

import pytest

from grader.course import catalog, paths
from grader.course.implementations import (
    ImplementationImportError,
    NotAttempted,
    load_module,
    resolve_source,
)

EX01 = catalog.get("ex01")


def test_named_sources():
    assert resolve_source("reference") == paths.SOLUTIONS_DIR
    assert resolve_source("exercises") == paths.EXERCISES_DIR


def test_a_submission_may_keep_its_modules_under_exercises(tmp_path):
    (tmp_path / "exercises").mkdir()
    (tmp_path / "exercises" / "ex01_meshes.py").write_text("X = 1\n")
    assert resolve_source(tmp_path) == tmp_path / "exercises"
    assert load_module(EX01, resolve_source(tmp_path)).X == 1


def test_missing_folder_is_named(tmp_path):
    with pytest.raises(FileNotFoundError, match="does not exist"):
        resolve_source(tmp_path / "nope")


def test_missing_module_is_not_attempted(tmp_path):
    with pytest.raises(NotAttempted, match="ex01: ex01_meshes.py is missing"):
        load_module(EX01, tmp_path)


@pytest.mark.parametrize(
    "code, message",
    [
        ("def f(:\n", "has a syntax error at line 1"),
        ("import sys\nsys.exit(3)\n", r"called exit\(3\) while being imported"),
        (
            "x = 1\nraise ValueError('boom')\n",
            "raised ValueError while being imported: boom\n  at line 2",
        ),
        ("import no_such_module_anywhere\n", "raised ModuleNotFoundError"),
    ],
)
def test_import_failures_say_what_and_where(tmp_path, code, message):
    (tmp_path / "ex01_meshes.py").write_text(code)
    with pytest.raises(ImplementationImportError, match=message):
        load_module(EX01, tmp_path)


def test_two_trees_do_not_share_a_module(tmp_path):
    (tmp_path / "ex01_meshes.py").write_text("WHO = 'submission'\n")
    mine = load_module(EX01, tmp_path)
    reference = load_module(EX01, paths.SOLUTIONS_DIR)
    assert mine.WHO == "submission" and not hasattr(reference, "WHO")
