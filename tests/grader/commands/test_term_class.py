"""A term, end to end, graded for real: a course file with a subset of the exercises, custom points, two due
dates, 10% per day late with a cap, one extension; a class of five (one late, one extended, one adjusted by
hand, one copy of another), then one exercise regraded for the class, then the exports. Every output shows the
raw, penalty, adjustment and final scores; the regraded students' other exercises stay as they were; the copy
is flagged; Canvas's CSV holds the totals under the roster's ids."""

from __future__ import annotations

import csv
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from grader.course import catalog, paths
from grader.grading import batch

# One worker builds the graded term once, for every test here.
pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("test_term_class")]

EX01, EX02, EX05 = (catalog.get(n) for n in ("ex01", "ex02", "ex05"))
ALT = paths.REPO_ROOT / "tests" / "grader" / "submissions" / "alt_correct"

COURSE = """
name = "Parallel JAX, autumn"
timezone = "Europe/Paris"
roster = "roster.csv"
adjustments = "adjustments.csv"

[points]
ex01 = 20
ex05 = 30

[late]
percent = 10
per = "day"
cap = 30

[[assignment]]
name = "week1"
due = 2026-10-05T23:59:00
exercises = ["ex01", "ex02"]
lms_id = 101

[[assignment]]
name = "week2"
due = 2026-10-12T23:59:00
exercises = ["ex05"]
lms_id = 102

[[extension]]
student = "carol"
days = 3
assignments = ["week1"]
"""

ROSTER = """student,name,lms_id,sis_user_id,sis_login_id,section,email
alice,Alice Liddell,9001,S1,alice,A,a@x
bob,Bob Ross,9002,S2,bob,A,b@x
carol,Carol Danvers,9003,S3,carol,B,c@x
dave,Dave Bowman,9004,S4,dave,B,d@x
erin,Erin Brockovich,9005,S5,erin,B,e@x
"""

TIMES = """student,submitted_at
alice,2026-10-05T20:00:00+02:00
bob,2026-10-07T12:00:00+02:00
carol,2026-10-07T12:00:00+02:00
dave,2026-10-05T21:00:00+02:00
erin,2026-10-05T22:00:00+02:00
"""


def disguised(source: str) -> str:
    """A copy as students make one: the functions in another order, the locals renamed, the docstrings and
    comments rewritten."""
    source = re.sub(r'""".*?"""', '"""My own work."""', source, flags=re.S)
    source = re.sub(r"#[^\n]*", "# mine", source)
    for old, new in (
        ("per_device", "on_each_device"),
        ("block", "piece"),
        ("shift", "hop"),
        ("total", "acc"),
    ):
        source = re.sub(rf"\b{old}\b", new, source)
    head, *functions = re.split(r"\n(?=def )", source)
    return "\n".join([head, *reversed(functions)]) + "\n"


def make_class(root: Path) -> Path:
    klass = root / "class"
    for student in ("alice", "bob", "carol", "dave", "erin"):
        (klass / student).mkdir(parents=True)
    for student in ("alice", "bob", "dave"):
        for exercise in (EX01, EX02):
            shutil.copy(exercise.solution_path(), klass / student / exercise.module_file)
    for exercise in (EX01, EX02):
        shutil.copy(ALT / exercise.module_file, klass / "carol" / exercise.module_file)
    # written apart from alice's
    shutil.copy(ALT / EX05.module_file, klass / "bob" / EX05.module_file)
    shutil.copy(EX05.solution_path(), klass / "alice" / EX05.module_file)
    (klass / "erin" / EX05.module_file).write_text(disguised(EX05.solution_path().read_text()))
    return klass


@pytest.fixture(scope="module")
def term(tmp_path_factory, class_commands):
    """The class graded, adjusted, regraded and exported; the outputs kept at each step."""
    shardlab, grades, report = class_commands.run, class_commands.grades, class_commands.report
    root = tmp_path_factory.mktemp("term")
    (root / "course.toml").write_text(COURSE)
    (root / "roster.csv").write_text(ROSTER)
    (root / "times.csv").write_text(TIMES)
    klass, out = make_class(root), root / "graded"
    # The course file is found in the folder the commands run in.
    batch = ["grade-batch", str(klass), "--out", str(out), "--jobs", "2", "--test-timeout", "60"]
    first = shardlab(*batch, "--submitted-at", str(root / "times.csv"), cwd=root)
    before = {s: report(out, s) for s in ("alice", "bob", "carol", "dave", "erin")}
    adjusted = shardlab(
        "override",
        str(out),
        "--student",
        "dave",
        "--exercise",
        "ex02",
        "--add",
        "-3",
        "--reason",
        "the same answer as the worked example, by hand",
        "--by",
        "Prof. Ann",
        cwd=root,
    )
    after_override = grades(out)
    # no times: each report's are kept
    regraded = shardlab(*batch, "--force", "--exercise", "ex02", cwd=root)
    after = {s: report(out, s) for s in before}
    shardlab(
        "export",
        str(out),
        "--canvas",
        str(root / "canvas.csv"),
        "--long",
        str(root / "long.csv"),
        cwd=root,
    )
    return {
        "root": root,
        "out": out,
        "grades": grades(out),
        "before": before,
        "after": after,
        "after_override": after_override,
        "logs": first.stdout + adjusted.stdout + regraded.stdout,
    }


def test_the_term_grades_only_its_exercises_with_its_points(term):
    alice = term["after"]["alice"]
    assert list(alice["exercises"]) == [EX01.id, EX02.id, EX05.id]
    assert [alice["exercises"][e]["max_score"] for e in alice["exercises"]] == [20, 10, 30]
    assert alice["score"] == alice["max_score"] == 60
    assert alice["term"]["course_digest"] and alice["term"]["course_file"].endswith("course.toml")


def test_a_late_student_loses_ten_percent_per_day_started_and_an_extended_one_nothing(term):
    rows = term["grades"]
    bob, carol = rows["bob"], rows["carol"]
    # bob: week1 two days started late (20% of 30), week2 on time; ex05 is alt_correct's, all passing.
    assert (
        float(bob["raw"]) == 60 and float(bob["late_penalty"]) == 6.0 and float(bob["total"]) == 54
    )
    assert "2 day(s) started x 10% = 20% off" in bob["late"]
    assert float(carol["late_penalty"]) == 0 and float(carol["total"]) == float(carol["raw"]) == 30
    bob_report = term["after"]["bob"]
    assert bob_report["exercises"][EX01.id]["late"]["percent"] == 20
    assert bob_report["exercises"][EX05.id]["late"]["percent"] == 0
    assert bob_report["penalty"] == 6.0 and bob_report["final"] == 54
    results = json.loads((term["out"] / "students" / "bob" / "results.json").read_text())
    assert results["score"] == 54 and "20% off" in results["output"]
    page = (term["out"] / "students" / "bob" / "feedback.html").read_text()
    assert "Your grade" in page and "20% off" in page and "54/60" in page


def test_an_adjustment_shows_with_its_reason_and_never_enters_the_raw_results(term):
    dave = term["after_override"]["dave"]
    assert float(dave["raw"]) == 30 and float(dave["adjusted"]) == -3 and float(dave["total"]) == 27
    assert "by Prof. Ann: the same answer as the worked example" in dave["adjustments"]
    assert float(term["grades"]["dave"]["total"]) == 27  # kept across the regrade
    raw = (term["out"] / "students" / "dave" / "report.json").read_text()
    assert "Prof. Ann" not in raw and term["after"]["dave"]["final"] == 30
    assert "Prof. Ann" in (term["out"] / "students" / "dave" / "feedback.html").read_text()
    assert "the same answer as the worked example" in (term["out"] / "index.html").read_text()


def test_a_regrade_of_one_exercise_keeps_every_other_exercise_as_it_was(term):
    for student, before in term["before"].items():
        after = term["after"][student]
        for exercise in (EX01.id, EX05.id):
            assert (
                after["exercises"][exercise]["tests"] == before["exercises"][exercise]["tests"]
            ), student
        [record] = after["regrades"]
        assert (
            record["exercise"] == EX02.id
            and record["before"] == before["exercises"][EX02.id]["score"]
        )
        # the time recorded is kept
        assert after["term"]["submitted_at"] == before["term"]["submitted_at"]
    assert float(term["grades"]["bob"]["late_penalty"]) == 6.0


def test_the_copy_is_flagged_on_the_class_page(term):
    page = (term["out"] / "index.html").read_text()
    section = page.split('id="similarity"', 1)[1].split("</section>", 1)[0]
    pairs = {
        (exercise, a, b)
        for exercise, a, b in re.findall(
            r'class="similar-pair" data-exercise="(\w+)" data-a="(\w+)" data-b="(\w+)"', section
        )
    }
    assert (EX05.id, "alice", "erin") in pairs  # the copy, renamed and reordered
    assert not any(pair[0] == EX05.id and "bob" in pair for pair in pairs)  # bob wrote his own
    # alice, bob and dave all handed in the reference's ex02: the same code, flagged; carol's own is not.
    assert {p for p in pairs if p[0] == EX02.id} == {
        (EX02.id, "alice", "bob"),
        (EX02.id, "alice", "dave"),
        (EX02.id, "bob", "dave"),
    }
    # what the comparison computed is kept for the next grade-batch, in the batch's own cache
    assert list((term["out"] / batch.CACHE / batch.SIMILARITY).rglob("*.json"))


def test_canvas_takes_the_totals_under_the_rosters_ids(term):
    with (term["root"] / "canvas.csv").open(newline="") as handle:
        rows = list(csv.reader(handle))
    assert rows[0] == [
        "Student",
        "ID",
        "SIS User ID",
        "SIS Login ID",
        "Section",
        "week1 (101)",
        "week2 (102)",
    ]
    by_id = {row[1]: row for row in rows[1:] if "Points Possible" not in row[0]}
    assert by_id["9002"][:5] == ["Bob Ross", "9002", "S2", "bob", "A"]
    assert [float(v) for v in by_id["9002"][5:]] == [24.0, 30.0]  # 30 less 20%, and week2 on time
    # adjusted by hand; ex05 not attempted
    assert [float(v) for v in by_id["9004"][5:]] == [27.0, 0.0]
    assert float(by_id["9003"][5]) == 30.0
    with (term["root"] / "long.csv").open(newline="") as handle:
        long = list(csv.DictReader(handle))
    assert len(long) == 15
    for row in long:
        assert float(row["raw"]) - float(row["penalty"]) + float(row["override"]) == pytest.approx(
            float(row["final"])
        )


def test_gradescopes_metadata_gives_the_submission_time_the_due_date_and_the_extended_student(
    tmp_path, class_commands
):
    """run_autograder's route: `shardlab grade --submission-metadata` on Gradescope's real format. The course
    file gives ex01 no due date, so Gradescope's applies; the second submitter's sid has an extension."""
    (tmp_path / "course.toml").write_text(
        '[late]\npercent = 10\ncap = 30\n[[assignment]]\nname = "week1"\nexercises = ["ex01"]\n'
        '[[extension]]\nstudent = "s-42"\ndays = 2\n'
    )
    submission = tmp_path / "submission"
    submission.mkdir()
    shutil.copy(EX01.solution_path(), submission / EX01.module_file)
    metadata = {
        "id": 7,
        "created_at": "2026-10-06T08:00:00.000000+02:00",
        "submission_method": "upload",
        "assignment": {
            "title": "week1",
            "due_date": "2026-10-05T23:59:00.000000+02:00",
            "late_due_date": "2026-10-09T23:59:00.000000+02:00",
        },
        "users": [{"email": "ada@example.com", "id": 1, "name": "Ada", "sid": "s-41"}],
    }
    for users, percent in (
        ([], 10),
        ([{"email": "bo@example.com", "id": 2, "name": "Bo", "sid": "s-42"}], 0),
    ):
        metadata["users"] = metadata["users"][:1] + users
        (tmp_path / "submission_metadata.json").write_text(json.dumps(metadata))
        out = tmp_path / f"out-{percent}"
        class_commands.run(
            "grade",
            str(submission),
            "--out",
            str(out),
            "--quiet",
            "--test-timeout",
            "60",
            "--submission-metadata",
            str(tmp_path / "submission_metadata.json"),
            cwd=tmp_path,
        )
        graded = json.loads((out / "report.json").read_text())
        late = graded["exercises"][EX01.id]["late"]
        assert graded["term"]["submitted_from"] == "Gradescope's submission_metadata.json"
        assert late["due"] == (
            "2026-10-05T23:59:00+02:00" if percent else "2026-10-07T23:59:00+02:00"
        )
        assert late["percent"] == percent and graded["final"] == pytest.approx(
            10 * (1 - percent / 100)
        )
        assert json.loads((out / "results.json").read_text())["score"] == pytest.approx(
            10 * (1 - percent / 100)
        )


def test_a_course_file_in_the_submission_is_never_the_courses(tmp_path):
    """A student who hands in a course.toml (all points to ex01, no late policy) and whose folder grading runs
    in gets the course's term, not theirs."""
    submission = tmp_path / "submission"
    submission.mkdir()
    shutil.copy(EX01.solution_path(), submission / EX01.module_file)
    (submission / "course.toml").write_text(
        '[points]\nex01 = 500\n[[assignment]]\nname = "a"\nexercises = ["ex01"]\n'
    )
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "grader.cli",
            "grade",
            ".",
            "--out",
            str(tmp_path / "out"),
            "--quiet",
            "--exercise",
            "ex01",
            "--test-timeout",
            "60",
        ],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=submission,
    )
    assert done.returncode == 0, done.stderr
    assert "is inside the submission: not the course file" in done.stderr
    graded = json.loads((tmp_path / "out" / "report.json").read_text())
    assert graded["max_score"] == 10 and graded["term"]["course_file"] is None
