"""A released handout handed back with the exercises done: intake lists what the student added, never the
handout's own files (its README, course file, grader package, tests and docs), edited or not."""

import shutil
import zipfile
from pathlib import Path

import pytest

from grader.cli import main
from grader.course import handout_layout
from grader.grading.submission import prepare_submission

PART_2 = ["ex14_pipeline", "ex15_expert_parallel", "ex16_context_parallel"]
PART_2 += ["ex17_zero1_accumulation", "ex18_transformer_block"]
# what a student adds beside the handout's files: a note, a helper module, a module no exercise has
ADDED = ["exercises/helper.py", "exercises/ex99_foo.py", "ex99_foo.py", "notes.txt"]


@pytest.fixture(scope="module")
def released(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("release") / "handout"
    assert main(["release", str(out), "--part", "2"]) == 0
    return out


@pytest.fixture
def handed_back(released, tmp_path) -> Path:
    """A clone of the handout with the student's additions, and the README edited (still the handout's)."""
    clone = Path(shutil.copytree(released, tmp_path / "alice"))
    for name in ADDED:
        (clone / name).write_text("# mine\n")
    (clone / "README.md").write_text("my notes on the course\n")
    return clone


def test_a_release_holds_only_files_the_layout_lists(released):
    written = {
        path.relative_to(released).as_posix() for path in released.rglob("*") if path.is_file()
    }
    assert written <= handout_layout.handout_paths()
    assert {"README.md", "course.toml", "conftest.py", "docs/students.md"} <= written


def test_intake_lists_what_the_student_added_and_nothing_of_the_handout(handed_back, tmp_path):
    prepared = prepare_submission(handed_back, tmp_path / "work")
    assert prepared.found == PART_2
    assert sorted(prepared.ignored) == sorted(ADDED)
    assert prepared.problems == []


def test_a_zipped_clone_in_its_folder_is_read_the_same(handed_back, tmp_path):
    archive = tmp_path / "alice.zip"
    with zipfile.ZipFile(archive, "w") as zf:
        for path in sorted(handed_back.rglob("*")):
            if path.is_file():
                zf.write(path, f"alice/{path.relative_to(handed_back).as_posix()}")
    prepared = prepare_submission(archive, tmp_path / "work")
    assert prepared.found == PART_2
    assert sorted(prepared.ignored) == sorted(f"alice/{name}" for name in ADDED)


def test_handout_files_away_from_a_handout_layout_are_still_listed(tmp_path):
    """Modules at the top level are no handout's layout: a conftest.py beside them is the student's."""
    (tmp_path / "bob").mkdir()
    (tmp_path / "bob" / "ex14_pipeline.py").write_text("# mine\n")
    (tmp_path / "bob" / "conftest.py").write_text("# mine\n")
    prepared = prepare_submission(tmp_path / "bob", tmp_path / "work")
    assert prepared.ignored == ["conftest.py"]
