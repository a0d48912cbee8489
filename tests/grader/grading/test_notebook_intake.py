"""A student's module rebuilt from the course's notebook, as nbgrader collects it."""

import json

import pytest

from grader.course import catalog
from grader.grading.notebook_intake import NotebookError, module_from_notebook
from grader.grading.submission import prepare_submission

EX01 = catalog.get("ex01_meshes")


def cell(grade_id, source, cell_type="code"):
    return {
        "cell_type": cell_type,
        "metadata": {"nbgrader": {"grade_id": grade_id, "schema_version": 3}},
        "source": source,
        **({"outputs": [], "execution_count": None} if cell_type == "code" else {}),
    }


def notebook(*cells):
    return json.dumps(
        {"cells": list(cells), "metadata": {}, "nbformat": 4, "nbformat_minor": 5}
    ).encode()


STUDENT = notebook(
    cell(
        "ex01_meshes--setup",
        "from grader.course.devices import force_host_devices\nforce_host_devices()\n",
    ),
    cell("ex01_meshes--text", "# Devices and meshes", "markdown"),
    cell("ex01_meshes--given-1", ["import jax\n", "X = 1\n"]),
    cell("ex01_meshes--solution-make_mesh_2x4", "def make_mesh_2x4():\n    return X + 1\n"),
    cell("ex01_meshes--test-test_make_mesh_2x4", "assert False, 'the grader runs its own tests'\n"),
    cell("ex01_meshes--hidden-test_place_layouts", "raise SystemExit\n"),
)


def test_given_and_solution_cells_make_the_module():
    source = module_from_notebook(STUDENT, EX01, "ex01_meshes.ipynb")
    assert source == "import jax\nX = 1\n\ndef make_mesh_2x4():\n    return X + 1\n"
    namespace = {}
    exec(source, namespace)
    assert namespace["make_mesh_2x4"]() == 2


@pytest.mark.parametrize(
    "data, message",
    [
        (b"{not json", "is not a readable notebook"),
        (b"\xff\xfe", "is not a readable notebook"),
        (json.dumps({"no": "cells"}).encode(), "is not a readable notebook"),
        (
            notebook(cell("ex04_sharded_layer--solution-layer_auto", "def layer_auto(): ...\n")),
            "has no solution cell",
        ),
        (
            notebook({"cell_type": "code", "metadata": {}, "source": "x = 1", "outputs": []}),
            "has no solution cell",
        ),
    ],
)
def test_malformed_notebooks_are_named(data, message):
    with pytest.raises(NotebookError, match=message):
        module_from_notebook(data, EX01, "ex01_meshes.ipynb")


def test_an_nbgrader_submission_folder_is_taken_in(tmp_path):
    student = tmp_path / "alice"
    (student / "ex01_meshes").mkdir(parents=True)
    (student / "ex01_meshes" / "ex01_meshes.ipynb").write_bytes(STUDENT)
    (student / "ex01_meshes" / ".ipynb_checkpoints").mkdir()
    (student / "ex01_meshes" / ".ipynb_checkpoints" / "ex01_meshes-checkpoint.ipynb").write_bytes(
        b"{}"
    )
    (student / "week2").mkdir()
    (student / "week2" / "ex02_sharding_properties.ipynb").write_bytes(b"{broken")
    prepared = prepare_submission(student, tmp_path / "work")
    assert prepared.found == ["ex01_meshes"]
    assert "def make_mesh_2x4" in (prepared.modules_dir / "ex01_meshes.py").read_text()
    assert any(
        "week2/ex02_sharding_properties.ipynb is not a readable notebook" in p
        for p in prepared.problems
    )
    # refused, not only a problem of the student's page: the class page and grades.csv name it
    assert len(prepared.refused) == 1 and prepared.refused[0] in prepared.problems
    assert "week2/ex02_sharding_properties.ipynb is not a readable notebook" in prepared.refused[0]


def test_a_module_wins_over_a_notebook_of_the_same_exercise(tmp_path):
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "ex01_meshes.py").write_text("WHO = 'module'\n")
    (tmp_path / "sub" / "ex01_meshes.ipynb").write_bytes(STUDENT)
    prepared = prepare_submission(tmp_path / "sub", tmp_path / "work")
    assert (prepared.modules_dir / "ex01_meshes.py").read_text() == "WHO = 'module'\n"
    assert "ex01_meshes.ipynb" in prepared.ignored


def test_a_refused_notebook_reaches_grades_csvs_status_through_report_json(tmp_path):
    """Intake's refusal kept in report.json, read back into the student's standing, and written into
    grades.csv's status beside "graded"."""
    import csv

    from grader.grading.batch import write_grades_csv
    from grader.grading.results import GradingResults, score_exercise
    from grader.grading.standing import standing

    (tmp_path / "bob").mkdir()
    (tmp_path / "bob" / "ex01_meshes.py").write_text("X = 1\n")
    (tmp_path / "bob" / "ex02_sharding_properties.ipynb").write_bytes(b"{broken")
    prepared = prepare_submission(tmp_path / "bob", tmp_path / "work")
    graded = GradingResults(
        "bob",
        {"ex01_meshes": score_exercise(EX01, [])},
        problems=prepared.problems,
        refused=prepared.refused,
    )
    again = GradingResults.from_dict(json.loads(json.dumps(graded.to_dict())))
    assert again.refused == prepared.refused
    path = write_grades_csv(tmp_path, ["bob"], {"bob": standing(again, student="bob")}, {})
    with path.open(newline="") as handle:
        status = next(csv.DictReader(handle))["status"]
    assert status.startswith("graded; refused ex02_sharding_properties.ipynb is not a readable")


def test_refused_files_are_bounded_in_number(tmp_path):
    """A hand-in of hundreds of symbolic links cannot make the class page or grades.csv grow with it."""
    from grader.core.bounds import PROBLEMS
    from grader.grading.results import GradingResults

    (tmp_path / "eve").mkdir()
    for i in range(300):
        (tmp_path / "eve" / f"link{i}.py").symlink_to("/etc/hostname")
    prepared = prepare_submission(tmp_path / "eve", tmp_path / "work")
    assert len(prepared.refused) == 300
    graded = GradingResults("eve", {}, problems=prepared.problems, refused=prepared.refused)
    assert len(graded.refused) == PROBLEMS and graded.refused[-1].startswith("... and 251 more")
