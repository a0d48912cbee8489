"""nbgrader's timestamp.txt as a submission's time: read in nbgrader's own form (UTC without an offset) or
ISO 8601 with one, ranked after the instructor's flag and before a git clone's commit; a hostile one (a link,
a pipe, a huge or garbled file) is never followed, never blocks, never read past 100 bytes, and is an error
naming the file. (`grade .` naming the student: tests/grader/grading/test_resubmissions.py.)"""

from __future__ import annotations

import argparse
import os
import subprocess
from datetime import datetime, timezone

import pytest

from grader.commands.grading import submission_time
from grader.course import term
from grader.grading import lateness

COURSE = """
name = "Two assignments"
timezone = "Europe/Paris"

[[assignment]]
name = "Homework 1"
due = 2026-10-05T23:59:00
exercises = ["ex01"]
"""


def test_nbgraders_own_form_is_utc(tmp_path):
    (tmp_path / "timestamp.txt").write_text("2026-10-05 18:00:00.000000 UTC\n")
    found = lateness.from_nbgrader(tmp_path)
    assert found.at == datetime(2026, 10, 5, 18, tzinfo=timezone.utc)
    assert "timestamp.txt" in found.source and "student's clock" in found.source
    (tmp_path / "timestamp.txt").write_text("2026-10-05T20:00:00+02:00")
    assert lateness.from_nbgrader(tmp_path).at == datetime(2026, 10, 5, 18, tzinfo=timezone.utc)


def test_no_timestamp_or_not_a_folder_is_no_time(tmp_path):
    assert lateness.from_nbgrader(tmp_path) is None
    (tmp_path / "alice.zip").write_bytes(b"PK")
    assert lateness.from_nbgrader(tmp_path / "alice.zip") is None


@pytest.mark.parametrize("kind", ["link", "pipe", "folder", "huge", "garbled"])
def test_a_hostile_timestamp_is_an_error_naming_the_file_and_never_followed(tmp_path, kind):
    path = tmp_path / "timestamp.txt"
    secret = tmp_path / "secret"
    secret.write_text("2026-10-05 18:00:00 UTC")
    if kind == "link":
        path.symlink_to(secret)
    elif kind == "pipe":
        os.mkfifo(path)  # an open for reading would wait for a writer forever
    elif kind == "folder":
        path.mkdir()
    elif kind == "huge":
        path.write_text("2026-10-05 18:00:00 UTC" + " " * 10_000_000)
    else:
        path.write_bytes(b"\xff\xfe yesterday")
    with pytest.raises(lateness.SubmissionTimeError) as caught:
        lateness.from_nbgrader(tmp_path)
    assert str(path) in str(caught.value)


def grade_args(submission, *flags: str) -> argparse.Namespace:
    return argparse.Namespace(
        submission=str(submission),
        student=None,
        submitted_at=list(flags) or None,
        submission_metadata=None,
    )


def test_the_flag_outranks_timestamp_txt_which_outranks_git(tmp_path):
    (tmp_path / "course.toml").write_text(COURSE)
    course = term.load(tmp_path / "course.toml")
    alice = tmp_path / "alice"
    alice.mkdir()
    env = {
        "GIT_AUTHOR_NAME": "a",
        "GIT_AUTHOR_EMAIL": "a@x",
        "GIT_COMMITTER_NAME": "a",
        "GIT_COMMITTER_EMAIL": "a@x",
        "GIT_COMMITTER_DATE": "2026-10-09T08:30:00+02:00",
        "GIT_AUTHOR_DATE": "2026-10-09T08:30:00+02:00",
        "PATH": os.environ["PATH"],
        "HOME": str(tmp_path),
    }
    for command in (["git", "init", "-q"], ["git", "commit", "-q", "--allow-empty", "-m", "x"]):
        subprocess.run(command, cwd=alice, env=env, check=True)
    times, _, student = submission_time(grade_args(alice), course)
    assert times.student_clock.source == lateness.FROM_GIT and student == "alice"
    assert times.every is None
    (alice / "timestamp.txt").write_text("2026-10-05 18:00:00.000000 UTC")
    times, _, _ = submission_time(grade_args(alice), course)
    assert times.student_clock.at == datetime(2026, 10, 5, 18, tzinfo=timezone.utc)
    assert course.lateness("ex01", "alice", times.student_clock.at).percent == 0
    times, _, _ = submission_time(grade_args(alice, "2026-10-07T00:00:00+02:00"), course)
    assert times.every.source == "--submitted-at" and times.student_clock is None
