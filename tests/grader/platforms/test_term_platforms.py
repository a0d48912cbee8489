"""A term of two assignments on the platforms, end to end in their real formats: HW1 (ex01) and HW2 (ex05), each
with its due date, under one late policy; alice hands HW1 in on time and HW2 late.

- Gradescope: a zip per assignment (`build_each_assignment`), each run_autograder run on a folder laid out as
  Gradescope lays out /autograder, with a submission_metadata.json of that assignment (slow). HW2's
  results.json holds HW2's points only and HW2's lateness only, with the late policy's exact arithmetic; HW1's
  is on time and whole. A submission that brings its own course.toml and assignment.txt changes nothing.
- nbgrader: the late policy in nbgrader_config.py is nbgrader's late-submission plugin, whose penalty is
  grader.course.term.LatePolicy's to the second (fast: nbgrader's own AssignLatePenalties preprocessor with
  the built config), and real `nbgrader generate_assignment` and `autograde` with timestamp.txt files record
  that penalty in the gradebook (slow).
"""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import sys
import sysconfig
import zipfile
from datetime import datetime, timedelta, timezone
from pathlib import Path

import nbformat
import pytest
from nbgrader.api import Gradebook
from nbgrader.preprocessors import AssignLatePenalties
from traitlets.config.loader import PyFileConfigLoader

from grader.course import catalog, term
from grader.grading.collection import collect_tests
from grader.platforms import gradescope
from grader.platforms.nbgrader_course import build_course, write_due_dates
from grader.platforms.nbgrader_late import TermLatePenalty
from grader.reports import markdown

pytestmark = pytest.mark.xdist_group("test_term_platforms")  # module-scoped builds, done once

COURSE = """
name = "Two assignments"
timezone = "UTC"

[late]
percent = 10
per = "day"
cap = 50
grace = "15m"
zero_after = 2026-10-20T00:00:00+00:00

[[assignment]]
name = "Homework 1: meshes"
slug = "hw1"
due = 2026-10-05T23:59:00+00:00
exercises = ["ex01"]

[[assignment]]
name = "Homework 2"
due = 2026-10-12T23:59:00+00:00
exercises = ["ex05"]
"""
HW1, HW2 = "hw1", "homework-2"  # the slugs: HW2's made from its name
UTC = timezone.utc
# alice: HW1 four hours early, HW2 1 d 2 h 1 min late: two days started, 20% off
ALICE = {
    HW1: datetime(2026, 10, 5, 20, 0, tzinfo=UTC),
    HW2: datetime(2026, 10, 14, 2, 0, tzinfo=UTC),
}


@pytest.fixture(scope="module")
def course(tmp_path_factory) -> term.Course:
    folder = tmp_path_factory.mktemp("instructor")
    (folder / "course.toml").write_text(COURSE)
    return term.load(folder / "course.toml")


@pytest.fixture(scope="module")
def collected(course):
    return collect_tests(list(course.exercises))


def test_the_term_is_what_this_module_means(course):
    assert [(a.slug, a.exercises) for a in course.assignments] == [
        (HW1, ("ex01_meshes",)),
        (HW2, ("ex05_collectives",)),
    ]
    assert course.lateness("ex05", "alice", ALICE[HW2]).percent == 20
    assert course.lateness("ex01", "alice", ALICE[HW1]).percent == 0


# -- nbgrader: the late policy as nbgrader's plugin --------------------------------------------------------


def nbgrader_config(root: Path):
    return PyFileConfigLoader("nbgrader_config.py", str(root)).load_config()


# submission times against HW2's due date: on time, within grace, a day started, three, the cap, after
# zero_after
LATE_BY = [
    timedelta(0),
    timedelta(minutes=14),
    timedelta(minutes=16),
    timedelta(days=2, seconds=1),
    timedelta(days=6, hours=23),
    timedelta(days=8),
]


def test_nbgraders_late_plugin_takes_off_what_grading_takes_off(course, collected, tmp_path):
    """Before: nbgrader_config.py said nothing of the late policy: nbgrader's default took nothing off."""
    root = tmp_path / "course"
    build_course(root, course=course, course_id="term", tests=collected)
    config = nbgrader_config(root)
    assert (
        config.AssignLatePenalties.plugin_class == "grader.platforms.nbgrader_late.TermLatePenalty"
    )
    due = course.assignment(HW2).due
    write_due_dates(root, {HW2: due}, course_id="term")
    with Gradebook(f"sqlite:///{root / 'gradebook.db'}", "term") as gradebook:
        preprocessor = AssignLatePenalties(config=config)
        preprocessor.gradebook, preprocessor.assignment_id = gradebook, HW2
        preprocessor.init_plugin()
        plugin = preprocessor.plugin_inst
        assert isinstance(plugin, TermLatePenalty) and plugin.policy() == course.late
        percents = []
        for i, late in enumerate(LATE_BY):
            student = f"s{i}"
            gradebook.update_or_create_student(student)
            # nbgrader keeps times in UTC without a zone, as autograde writes timestamp.txt's
            stamp = (due + late).astimezone(UTC).replace(tzinfo=None)
            gradebook.update_or_create_submission(HW2, student, timestamp=stamp)
            penalty = plugin.late_submission_penalty(student, 8.0, late.total_seconds())
            expected = course.late.judge(due + late, due).percent
            assert penalty == pytest.approx(8.0 * expected / 100), late
            percents.append(expected)
    assert percents == [0, 0, 10, 30, 50, 100]  # each rule of the policy met once


def test_a_term_without_late_penalty_leaves_nbgraders_default(collected, tmp_path):
    (tmp_path / "course.toml").write_text(
        '[[assignment]]\nname = "hw1"\ndue = 2026-10-05T23:59:00+00:00\nexercises = ["ex01"]\n'
    )
    lenient = term.load(tmp_path / "course.toml")
    assert lenient.late == term.LatePolicy()
    build_course(tmp_path / "course", course=lenient, course_id="term", tests=collected)
    assert "AssignLatePenalties" not in (tmp_path / "course" / "nbgrader_config.py").read_text()


# -- nbgrader for real: autograde with timestamp.txt ----------------------------------------------------

OWN_TOOLS = os.path.dirname(sys.executable)


def nbgrader(course_dir: Path, *args: str) -> str:
    path = [e for e in os.environ.get("PATH", os.defpath).split(os.pathsep) if e != OWN_TOOLS]
    done = subprocess.run(
        [sys.executable, "-m", "nbgrader", *args],
        cwd=course_dir,
        capture_output=True,
        text=True,
        timeout=900,
        env=os.environ | {"PATH": os.pathsep.join(path)},
    )
    assert done.returncode == 0, (
        f"nbgrader {' '.join(args)}:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    )
    return done.stdout + done.stderr


def submissions(root: Path) -> dict[str, tuple[float, float, float]]:
    """Each of alice's assignments in the gradebook: (score, max_score, late penalty)."""
    with Gradebook(f"sqlite:///{root / 'gradebook.db'}", "term") as gradebook:
        return {
            s.assignment.name: (s.score, s.max_score, s.late_submission_penalty)
            for s in gradebook.student_submissions("alice")
        }


@pytest.mark.slow
def test_nbgrader_autograde_applies_the_terms_lateness_from_timestamp_txt(
    course, collected, tmp_path
):
    root = tmp_path / "course"
    build_course(root, course=course, course_id="term", tests=collect_tests(list(course.exercises)))
    for slug in (HW1, HW2):
        nbgrader(root, "generate_assignment", slug, "--force")
    for slug, exercise in ((HW1, "ex01_meshes"), (HW2, "ex05_collectives")):
        folder = root / "submitted" / "alice" / slug
        folder.mkdir(parents=True)
        shutil.copy(
            root / "source" / slug / f"{exercise}.ipynb", folder
        )  # the reference: full marks
        # as `nbgrader collect` writes it
        (folder / "timestamp.txt").write_text(ALICE[slug].strftime("%Y-%m-%d %H:%M:%S.%f UTC"))
    nbgrader(root, "autograde", HW1, "--student", "alice", "--force")
    hw1_before = submissions(root)[HW1]
    nbgrader(root, "autograde", HW2, "--student", "alice", "--force")
    graded = submissions(root)
    ex01, ex05 = course.exercise("ex01"), course.exercise("ex05")
    assert graded[HW1] == hw1_before == (pytest.approx(ex01.points), ex01.points, 0)
    score, max_score, penalty = graded[HW2]
    assert (score, max_score) == (pytest.approx(ex05.points), ex05.points)
    assert penalty == pytest.approx(ex05.points * 20 / 100)  # 1 d 2 h 1 min late: 2 days x 10%
    assert nbformat.read(root / "autograded" / "alice" / HW2 / "ex05_collectives.ipynb", 4)


# -- Gradescope for real: a zip per assignment ------------------------------------------------------------


@pytest.fixture(scope="module")
def zips(course, tmp_path_factory) -> dict[str, Path]:
    built = gradescope.build_each_assignment(tmp_path_factory.mktemp("zips"), course=course)
    return {path.stem: path for path in built}


def unpack(zip_path: Path, folder: Path) -> Path:
    with zipfile.ZipFile(zip_path) as zf:
        zf.extractall(folder)
        for info in zf.infolist():
            os.chmod(folder / info.filename, stat.S_IMODE(info.external_attr >> 16))
    return folder


@pytest.fixture(scope="module")
def pythons(zips, tmp_path_factory) -> dict[str, str]:
    """A venv per zip with the grader installed from that zip, unpacked, as its setup.sh installs it (the
    pinned dependencies through a .pth naming this environment's, as test_gradescope's venv does): each zip
    holds its own assignment's tests only, as each Gradescope assignment's container does."""
    found = {}
    for name, zip_path in zips.items():
        source = unpack(zip_path, tmp_path_factory.mktemp(f"venv-source-{name}") / "source")
        venv = tmp_path_factory.mktemp(f"venv-{name}") / "venv"
        subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
        purelib = subprocess.run(
            [
                str(venv / "bin" / "python"),
                "-c",
                "import sysconfig; print(sysconfig.get_paths()['purelib'])",
            ],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
        (Path(purelib) / "pinned.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
        subprocess.run(
            [
                sys.executable,
                "-m",
                "pip",
                "--python",
                str(venv / "bin" / "python"),
                "install",
                "--quiet",
                "--no-deps",
                "-e",
                str(source),
            ],
            check=True,
        )
        found[name] = str(venv / "bin" / "python")
    return found


def run_autograder(
    tmp_path: Path,
    zip_path: Path,
    python: str,
    submitted_at: datetime,
    files: dict[str, str],
    title: str,
) -> dict:
    root = tmp_path / zip_path.stem
    source = unpack(zip_path, root / "source")
    (root / "submission").mkdir()
    (root / "results").mkdir()
    for name, text in files.items():
        (root / "submission" / name).write_text(text)
    # Gradescope's format (gradescope-autograders.readthedocs.io/en/latest/submission_metadata/); its due
    # date is not the course file's, which wins
    (root / "submission_metadata.json").write_text(
        json.dumps(
            {
                "id": 1,
                "created_at": submitted_at.isoformat(),
                "assignment": {
                    "title": title,
                    "due_date": "2030-01-01T00:00:00+00:00",
                    "late_due_date": None,
                },
                "users": [{"email": "alice@example.com", "id": 7, "name": "Alice", "sid": "alice"}],
            }
        )
    )
    shutil.copy2(source / "run_autograder", root / "run_autograder")
    done = subprocess.run(
        [str(root / "run_autograder")],
        cwd=root,
        capture_output=True,
        text=True,
        timeout=900,
        env=os.environ
        | {"SHARDLAB_AUTOGRADER": str(root), "SHARDLAB_PYTHON": python, "SHARDLAB_TIMING": "skip"},
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return json.loads((root / "results" / "results.json").read_text())


def reference(exercise_id: str) -> dict[str, str]:
    exercise = catalog.get(exercise_id)
    return {exercise.module_file: exercise.solution_path().read_text()}


@pytest.mark.slow
def test_each_assignments_zip_scores_and_dates_that_assignment_only(
    course, zips, pythons, tmp_path
):
    """Before: "Total 20/80" in every assignment, HW1's late penalty applied again inside HW2."""
    ex01, ex05 = course.exercise("ex01"), course.exercise("ex05")
    # HW2's submission carries HW1's work too, and a course.toml and assignment.txt of its own
    hostile = {
        "course.toml": '[[assignment]]\nname = "hw1"\nexercises = ["ex01", "ex05"]\n',
        "assignment.txt": "hw1\n",
    }
    hw2 = run_autograder(
        tmp_path,
        zips[HW2],
        pythons[HW2],
        ALICE[HW2],
        reference("ex05") | reference("ex01") | hostile,
        "Homework 2",
    )
    assert {tag for t in hw2["tests"] for tag in t["tags"] if tag.startswith("ex")} == {ex05.id}
    assert hw2["extra_data"]["max_score"] == ex05.points
    assert hw2["score"] == pytest.approx(ex05.points * 0.8)  # 20% off
    late = hw2["extra_data"]["late"]
    assert list(late) == [ex05.id] and late[ex05.id]["percent"] == 20
    assert late[ex05.id]["due"] == "2026-10-12T23:59:00+00:00"
    reason = "1 d 2 h 1 min after the due date (2026-10-12T23:59:00+00:00): 2 day(s) started x 10% = 20% off"
    assert late[ex05.id]["reason"] == reason
    # what the student reads, as the output writes text (Markdown-escaped)
    came = "2026-10-14T02:00:00+00:00 (Gradescope's submission_metadata.json)"
    assert f"**Submitted:** {markdown.text(came)}" in hw2["output"]
    assert markdown.text(reason) in hw2["output"]

    hw1 = run_autograder(
        tmp_path, zips[HW1], pythons[HW1], ALICE[HW1], reference("ex01"), "Homework 1: meshes"
    )
    assert {tag for t in hw1["tests"] for tag in t["tags"] if tag.startswith("ex")} == {ex01.id}
    assert (
        hw1["score"] == pytest.approx(ex01.points) and hw1["extra_data"]["max_score"] == ex01.points
    )
    assert hw1["extra_data"]["late"][ex01.id]["reason"] == "on time"


# -- shardlab grade --assignment --------------------------------------------------------------------------


def grade(tmp_path: Path, course: term.Course, *arguments: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "grader.cli",
            "grade",
            str(tmp_path / "alice"),
            "--out",
            str(tmp_path / "out"),
            "--course",
            course.source.path,
            "--timing",
            "skip",
            "--quiet",
            *arguments,
        ],
        capture_output=True,
        text=True,
        timeout=600,
    )


def test_grade_names_an_assignment_the_term_does_not_have(course, tmp_path):
    (tmp_path / "alice").mkdir()
    done = grade(tmp_path, course, "--assignment", "HW9")
    assert done.returncode == 2
    assert "no assignment named 'HW9' in this term" in done.stderr and "'Homework 2'" in done.stderr


@pytest.mark.slow
def test_grading_one_assignment_into_a_report_keeps_the_others(course, tmp_path):
    (tmp_path / "alice").mkdir()
    for name, text in (reference("ex01") | reference("ex05")).items():
        (tmp_path / "alice" / name).write_text(text)
    hw1_time = ["--submitted-at", ALICE[HW1].isoformat()]
    assert grade(tmp_path, course, "--assignment", HW1, *hw1_time).returncode == 0
    before = json.loads((tmp_path / "out" / "report.json").read_text())["exercises"]
    assert list(before) == ["ex01_meshes"] and before["ex01_meshes"]["late"]["percent"] == 0
    hw2_time = ["--submitted-at", ALICE[HW2].isoformat()]
    assert grade(tmp_path, course, "--assignment", "Homework 2", *hw2_time).returncode == 0
    after = json.loads((tmp_path / "out" / "report.json").read_text())["exercises"]
    assert after["ex01_meshes"] == before["ex01_meshes"]  # HW1 not re-judged by HW2's time
    assert after["ex05_collectives"]["late"]["percent"] == 20
