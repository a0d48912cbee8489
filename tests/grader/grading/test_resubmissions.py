"""Resubmissions without grading anything: what the submission digest reads of a hostile folder (within
intake's bounds), when grade-batch grades a student again, the digest a partial regrade keeps, and the
student `shardlab grade .` names."""

from __future__ import annotations

import argparse
import os

from grader.commands.grading import submission_time
from grader.core.results import Category, TestResult
from grader.course import catalog, term
from grader.grading import batch, regrade, submission
from grader.grading.results import GradingResults, score_exercise
from grader.grading.submission_digest import digest

EX01, EX02, EX03 = (catalog.get(n) for n in ("ex01", "ex02", "ex03"))


def graded(*exercises) -> GradingResults:
    return GradingResults(
        "bob",
        {
            e.id: score_exercise(
                e,
                [TestResult(f"tests/{e.id}::t", e.id, True, float(e.points), Category.PASSED)],
            )
            for e in exercises
        },
    )


def test_the_digest_of_a_hostile_folder_reads_within_intakes_bounds(tmp_path, monkeypatch):
    """A 20 GiB module (sparse), a module that is a link to /dev/zero and one that is a FIFO: the digest reads
    1 MiB + 1 byte of the first and neither of the others (a read of either would never end)."""
    folder = tmp_path / "mallory"
    folder.mkdir()
    with (folder / EX01.module_file).open("wb") as big:
        big.truncate(20 << 30)
    (folder / EX02.module_file).symlink_to("/dev/zero")
    os.mkfifo(folder / EX03.module_file)
    read = []

    def counted(path, limit):
        data = submission.head(path, limit)
        read.append((path.name, len(data)))
        return data

    monkeypatch.setattr("grader.grading.submission_digest.head", counted)
    assert len(digest(folder)) == 64
    assert read == [(EX01.module_file, submission.MAX_MODULE_BYTES + 1)]


def test_a_changed_submission_is_graded_again_and_an_unchanged_one_is_not(tmp_path):
    folder = tmp_path / "bob"
    folder.mkdir()
    (folder / EX01.module_file).write_text("x = 1\n")
    report = graded(EX01)
    report.submission_digest, report.graded_at = digest(folder), "2026-10-06T08:00:00+00:00"
    assert batch.resubmitted(report, folder) is None
    (folder / EX01.module_file).write_text("x = 2\n")
    assert batch.resubmitted(report, folder) == (
        "submission changed since its grading at 2026-10-06T08:00:00+00:00"
    )
    report.submission_digest = None  # a report older than digests cannot tell: skipped as before
    assert batch.resubmitted(report, folder) is None


def test_a_partial_regrade_keeps_the_digest_its_kept_exercises_were_graded_from():
    earlier, new = graded(EX01, EX02), graded(EX02)
    earlier.submission_digest, new.submission_digest = "old", "new"
    assert regrade.merge(earlier, new, partial=True).submission_digest == "old"
    assert regrade.merge(earlier, new, partial=False).submission_digest == "new"


def test_grade_dot_names_the_student_after_the_folder(tmp_path, monkeypatch):
    folder = tmp_path / "alice"
    folder.mkdir()
    monkeypatch.chdir(folder)
    args = argparse.Namespace(
        student=None, submission=".", submitted_at=None, submission_metadata=None
    )
    assert submission_time(args, term.default_course())[2] == "alice"
