"""A class's names are data: student folder names come from the LMS export, so from students, and none of them may
take the place of one of the batch's own files, become a formula in grades.csv, or markup on the terminal.

The batch's files are at OUT's top and every student's in OUT/students/<student>/ (grader.grading.batch); a .zip
beside a folder of its stem is graded under its whole name; names that differ only in case are refused with a row;
text cells of every CSV are neutralized (grader.grading.spreadsheet). A hostile class is graded for real, on this
machine and (slow) on the local Slurm, then graded again (resumed)."""

from __future__ import annotations

import csv
import io
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

import grader
from grader.commands import slurm
from grader.core import cells
from grader.course import catalog
from grader.grading import batch, spreadsheet
from grader.grading.batch import find_submissions, student_folder
from grader.reports import class_page

EX01 = catalog.get("ex01")
MARKUP = "[link=https:evil.example]alice"
FORMULAS = ('=HYPERLINK("evil.example","x")', "@SUM(1+9)*cmd|x", "+1+2", "-2+3", "\tTAB=1")
# Names of the batch's own files: each a student here, each graded with the reference so that its row shows its
# report is its own.
OWN_NAMES = ("grades.tmp", "grades.csv", "index.html", "students")
REFERENCE_HOLDERS = (*OWN_NAMES, "bob", "zz_honest")
# What OUT's top may hold: the batch's own files, each declared once where it is named.
TOP_LEVEL = {
    batch.STUDENTS,
    batch.GRADES,
    batch.CACHE,
    batch.TIMING_LOCK,
    class_page.FILE_NAME,
    slurm.FOLDER,
}


def make_hostile_class(root: Path) -> Path:
    """Folders named as the batch's files, formulas and markup; bob/ (the reference) beside bob.zip (the stub);
    Carol/ and carol/ (refused); an honest student; and what is not a submission (.cache/, __MACOSX/, notes.txt)."""
    klass = root / "class"
    reference = EX01.solution_path().read_text()
    for name in (*REFERENCE_HOLDERS, *FORMULAS, MARKUP, "Carol", "carol", ".cache", "__MACOSX"):
        (klass / name).mkdir(parents=True)
        if name in REFERENCE_HOLDERS:
            (klass / name / EX01.module_file).write_text(reference)
    with zipfile.ZipFile(klass / "bob.zip", "w") as archive:
        archive.writestr(EX01.module_file, EX01.stub_path().read_text())
    (klass / "notes.txt").write_text("not a submission")
    return klass


def expected_students() -> set[str]:
    return {*REFERENCE_HOLDERS, *FORMULAS, MARKUP, "Carol", "carol", "bob.zip"}


def read_grades(out: Path) -> dict[str, dict[str, str]]:
    """grades.csv by student, the single quote that keeps a formula as text taken off the name."""
    with open(out / batch.GRADES, newline="", encoding="utf-8") as handle:
        rows = list(csv.DictReader(handle))
    for row in rows:
        for value in row.values():
            assert not value.startswith(cells.FORMULA_STARTS), f"a formula cell: {value!r} in {row}"
    return {
        row["student"][1:]
        if row["student"][1:].startswith(cells.FORMULA_STARTS)
        else row["student"]: row
        for row in rows
    }


def assert_graded_apart(
    out: Path, *, also_top: set[str] = frozenset()
) -> dict[str, dict[str, str]]:
    """Every student has a row, the right one; both files are written; OUT's top holds only the batch's files and
    OUT/students/ only the students' folders."""
    grades = read_grades(out)
    assert set(grades) == expected_students()
    for name in REFERENCE_HOLDERS:
        assert float(grades[name]["total"]) == EX01.points, (name, grades[name])
    assert float(grades["bob.zip"]["total"]) == 0 and grades["bob.zip"]["status"] == "graded"
    for name in ("Carol", "carol"):
        assert grades[name]["status"].startswith(
            "not graded: Carol and carol differ only in case"
        ), grades[name]
        assert grades[name]["total"] == ""
    index = (out / class_page.FILE_NAME).read_text(encoding="utf-8")
    assert (
        index.startswith("<!DOCTYPE html>") and 'href="students/grades.tmp/feedback.html"' in index
    )
    assert 'href="students/bob.zip/feedback.html"' in index and "differ only in case" in index
    top = {entry.name for entry in out.iterdir()}
    assert (
        top <= TOP_LEVEL | also_top
        and (out / batch.GRADES).is_file()
        and (out / class_page.FILE_NAME).is_file()
    )
    graded = expected_students() - {"Carol", "carol"}
    assert {entry.name for entry in (out / batch.STUDENTS).iterdir()} == graded
    for name in graded:
        assert (student_folder(out, name) / batch.REPORT).is_file(), name
    return grades


# -- the rules, without grading ------------------------------------------------------------------------------


def test_every_entry_is_a_student_under_a_name_of_its_own(tmp_path):
    klass = make_hostile_class(tmp_path)
    (klass / "dave.zip.zip").write_bytes(b"")  # its stem, dave.zip, is nobody's: it is dave.zip
    (klass / "Zed.zip").write_bytes(b"")  # zed/ on a case-insensitive disk: graded as Zed.zip
    (klass / "zed").mkdir()
    found = find_submissions(klass)
    assert set(found.students) == expected_students() | {"dave.zip", "Zed.zip", "zed"}
    assert found.students["bob"] == klass / "bob" and found.students["bob.zip"] == klass / "bob.zip"
    assert (
        found.students["Zed.zip"] == klass / "Zed.zip"
        and found.students["dave.zip"] == klass / "dave.zip.zip"
    )
    assert set(found.refused) == {"Carol", "carol"} and "rename one" in found.refused["carol"]
    assert set(found.to_grade) == set(found.students) - {"Carol", "carol"}
    assert found.ignored == [".cache", "__MACOSX", "notes.txt"]


def test_text_cells_a_spreadsheet_would_run_are_text_and_numbers_stay_numbers(tmp_path):
    texts = [*FORMULAS, "\rCR", "=1+1", "plain", 'O\'Brien, "Bo"', ""]
    numbers = [10.0, 0.0, 2.25, -1.5, 3, 1e-3, -0.0, 7.5, 1.0, 0.5]
    rows = [{"student": text, "total": number} for text, number in zip(texts, numbers, strict=True)]
    path = spreadsheet.write_csv(tmp_path / "x.csv", ["student", "total"], rows)
    raw = path.read_bytes().decode("utf-8")
    read = list(csv.DictReader(io.StringIO(raw, newline="")))
    assert [row["student"] for row in read] == [
        ("'" + t if t.startswith(cells.FORMULA_STARTS) else t) for t in texts
    ]
    # Numbers are written as numbers, unquoted, a negative one too (data, never an expression); text is quoted.
    assert [float(row["total"]) for row in read] == numbers
    assert '"\'-2+3",-1.5\r\n' in raw and '"plain",7.5\r\n' in raw and '"",0.5\r\n' in raw
    assert not list(tmp_path.glob(".*.part"))


def test_every_csv_the_grader_writes_goes_through_one_writer():
    """A csv writer anywhere else in the grader would skip the neutralization."""
    root = Path(grader.__file__).parent
    writers = [
        path.relative_to(root).as_posix()
        for path in sorted(root.rglob("*.py"))
        if "csv.writer" in path.read_text() or "csv.DictWriter" in path.read_text()
    ]
    assert writers == ["grading/spreadsheet.py"]


# -- graded for real -------------------------------------------------------------------------------------------


def run_grade_batch(klass: Path, out: Path, *extra: str, env=None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "grader.cli",
            "grade-batch",
            str(klass),
            "--out",
            str(out),
            "--exercise",
            EX01.id,
            "--test-timeout",
            "60",
            *extra,
        ],
        capture_output=True,
        text=True,
        timeout=1800,
        env=env,
    )


@pytest.mark.slow
def test_a_hostile_class_is_graded_and_resumed_on_one_machine(tmp_path):
    klass = make_hostile_class(tmp_path)
    out = tmp_path / "graded"
    done = run_grade_batch(klass, out, "--jobs", "2")
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    # rich printed the name as text, not as a link to "alice"
    assert f"{MARKUP}: graded" in done.stdout
    assert "ignored: '.cache', '__MACOSX', 'notes.txt'" in done.stdout
    assert "carol: refused Carol and carol differ only in case" in done.stdout
    first = assert_graded_apart(out)
    again = run_grade_batch(klass, out, "--jobs", "2")
    assert again.returncode == 0, again.stdout[-3000:] + again.stderr[-3000:]
    assert f"{len(expected_students()) - 2} already graded" in again.stdout
    assert assert_graded_apart(out) == first


@pytest.mark.slow
@pytest.mark.xdist_group("test_slurm")  # the local Slurm of tests/grader/commands/test_slurm.py
def test_a_hostile_class_is_graded_and_resumed_on_slurm(local_slurm, tmp_path):
    klass = make_hostile_class(tmp_path)
    out = tmp_path / "graded"
    common = ("--slurm", "--wait", "--slurm-cpus-per-task", "1")
    done = run_grade_batch(klass, out, *common, env=local_slurm.env)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "the collect job ended COMPLETED" in done.stdout and f"{MARKUP}: graded" in done.stdout
    first = assert_graded_apart(out)
    again = run_grade_batch(klass, out, *common, env=local_slurm.env)
    assert again.returncode == 0, again.stdout[-3000:] + again.stderr[-3000:]
    assert f"{len(expected_students()) - 2} already graded; submitting 0 students" in again.stdout
    assert assert_graded_apart(out) == first
