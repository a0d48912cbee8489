"""Resubmissions without grading anything: what the submission digest reads of a hostile folder (within
intake's bounds), what grade-batch leaves to grade of a student exercise by exercise, the digest each exercise
keeps, and the student `shardlab grade .` names."""

from __future__ import annotations

import argparse
import hashlib
import os

from grader.commands.grading import submission_time
from grader.core.results import Category, TestResult
from grader.course import catalog, term
from grader.grading import batch, regrade, submission
from grader.grading.results import GradingResults, score_exercise
from grader.grading.submission_digest import digest, exercise_digests

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
    # each exercise's digest, from one read of the folder: the module read once, not once per exercise
    read.clear()
    each = exercise_digests(folder, [EX01, EX02, EX03])
    assert read == [(EX01.module_file, submission.MAX_MODULE_BYTES + 1)]
    # only ex01's module is read: its digest is the folder's, the link's and the FIFO's that of nothing
    assert each[EX01.id] == digest(folder)
    assert each[EX02.id] == each[EX03.id] == hashlib.sha256().hexdigest()


def stamped(report: GradingResults, graded_from: str | None, at: str) -> GradingResults:
    for exercise in report.exercises.values():
        exercise.graded_from, exercise.graded_at = graded_from, at
    return report


def test_what_is_left_to_grade_is_decided_exercise_by_exercise(tmp_path):
    folder = tmp_path / "bob"
    folder.mkdir()
    (folder / EX01.module_file).write_text("x = 1\n")
    report = stamped(
        graded(EX01), exercise_digests(folder, [EX01])[EX01.id], "2026-10-06T08:00:00+00:00"
    )
    chosen = (EX01.id, EX02.id)
    assert batch.pending(None, folder, chosen) == batch.Pending(chosen)
    assert batch.pending(report, folder, (EX01.id,)).exercises == ()
    # the next assignment: only what the report does not hold, into it
    assert batch.pending(report, folder, chosen) == batch.Pending(
        (EX02.id,), "ex02 (not graded before)", whole=False
    )
    # another exercise's file handed in since: what ex01's grading read is unchanged
    (folder / EX02.module_file).write_text("y = 1\n")
    assert batch.pending(report, folder, (EX01.id,)).exercises == ()
    (folder / EX01.module_file).write_text("x = 2\n")
    assert batch.pending(report, folder, chosen) == batch.Pending(
        chosen,
        "submission changed since its grading at 2026-10-06T08:00:00+00:00; ex02 (not graded before)",
    )
    # a report older than digests cannot tell: kept as it is
    assert batch.pending(stamped(report, None, None), folder, (EX01.id,)).exercises == ()


def test_each_exercise_keeps_the_digest_it_was_graded_from():
    earlier = stamped(graded(EX01, EX02), "old", "2026-10-06T08:00:00+00:00")
    new = stamped(graded(EX02), "new", "2026-10-07T08:00:00+00:00")
    earlier.submission_digest, new.submission_digest = "old", "new"
    merged = regrade.merge(earlier, new, partial=True)
    assert merged.exercises[EX01.id].graded_from == "old"
    assert merged.exercises[EX02.id].graded_from == "new"
    assert merged.submission_digest == "new"  # the latest grading's
    # and so does report.json
    again = GradingResults.from_dict(merged.to_dict())
    assert again.exercises[EX01.id].graded_at == "2026-10-06T08:00:00+00:00"
    # an older report's exercises were all graded from its one digest
    older = merged.to_dict()
    for exercise in older["exercises"].values():
        del exercise["graded_from"], exercise["graded_at"]
    assert {e.graded_from for e in GradingResults.from_dict(older).exercises.values()} == {"new"}


def test_grade_dot_names_the_student_after_the_folder(tmp_path, monkeypatch):
    folder = tmp_path / "alice"
    folder.mkdir()
    monkeypatch.chdir(folder)
    args = argparse.Namespace(
        student=None, submission=".", submitted_at=None, submission_metadata=None
    )
    assert submission_time(args, term.default_course())[2] == "alice"
