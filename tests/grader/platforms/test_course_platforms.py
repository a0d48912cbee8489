"""The platforms read the term's course file: the handout holds the term's exercises only and a course.toml
students may read (no extension, roster or adjustments); nbgrader's assignments are the course's, with its
points and its due dates in the gradebook, where nbgrader itself reads them (slow: `nbgrader db assignment
list` and `generate_assignment`); the Gradescope zip holds the course file whole, and run_autograder grades
with it and with Gradescope's submission metadata."""

import json
import os
import shutil
import subprocess
import sys
import zipfile
from datetime import datetime, timezone
from pathlib import Path
from zoneinfo import ZoneInfo

import nbformat
import pytest
from nbgrader.api import Gradebook
from traitlets.config.loader import PyFileConfigLoader

from grader.course import catalog, handout_layout, term
from grader.grading.collection import collect_tests
from grader.platforms import gradescope, notebooks
from grader.platforms.handout import build_handout, student_course_file, verify_handout
from grader.platforms.nbgrader_course import build_course, course_assignments, gradebook_url

pytestmark = pytest.mark.xdist_group("test_course_platforms")  # module-scoped builds, done once

PARIS = ZoneInfo("Europe/Paris")
COURSE = """
name = "JAX parallelism, autumn 2026"
timezone = "Europe/Paris"
hidden_visibility = "after_due_date"
timing = "report"
roster = "roster.csv"
adjustments = "grades-adjusted.csv"

[points]
ex04 = 30
ex12 = 12.5

[late]
percent = 10
per = "day"
cap = 50
grace = "15m"
zero_after = 2026-12-20T23:59:00

[[assignment]]
name = "week1"
due = 2026-10-05T23:59:00
exercises = ["ex04", "ex01"]

[[assignment]]
name = "week2"
due = 2026-10-12T23:59:00+00:00
exercises = ["ex12"]

[[assignment]]
name = "practice"
exercises = ["ex02"]

[[extension]]
student = "bob.secretname"
days = 3
assignments = ["week1"]
"""
TERM_IDS = [
    "ex04_sharded_layer",
    "ex01_meshes",
    "ex12_multi_controller",
    "ex02_sharding_properties",
]
OTHERS = [e for e in catalog.EXERCISES if e.id not in TERM_IDS]


def write_course(folder: Path, text: str = COURSE) -> term.Course:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "course.toml").write_text(text)
    return term.load(folder / "course.toml")


@pytest.fixture(scope="module")
def course(tmp_path_factory) -> term.Course:
    return write_course(tmp_path_factory.mktemp("instructor"))


def test_the_course_file_is_the_term_this_module_means(course):
    assert [e.id for e in course.exercises] == TERM_IDS
    assert course.exercise("ex04").points == 30 and course.exercise("ex12").points == 12.5
    assert course.extensions and course.roster is not None


# -- the handout ----------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def handout(course, tmp_path_factory) -> Path:
    return build_handout(tmp_path_factory.mktemp("release") / "handout", course=course)


def files_outside_grader(root: Path) -> set[str]:
    return {
        p.relative_to(root).as_posix()
        for p in root.rglob("*")
        if p.is_file() and p.relative_to(root).parts[0] != "grader"
    }


def test_the_handout_holds_the_terms_exercises_only(handout, course):
    expected = {
        "README.md",
        "pyproject.toml",
        ".gitignore",
        "conftest.py",
        ".github/workflows/grade.yml",
        ".github/grade.sh",
        ".github/grade_summary.py",
        "course.toml",
    }
    for exercise in course.exercises:
        expected.add(f"exercises/{exercise.module_file}")
        expected.add(f"tests/exercises/{exercise.id}/test_visible.py")
        expected |= {
            f"tests/exercises/{exercise.id}/{support.name}" for support in exercise.support_files()
        }
    assert "tests/exercises/ex12_multi_controller/driver.py" in expected
    expected |= {f"docs/{name}" for name in handout_layout.HANDOUT_DOCS}  # whatever the term
    assert files_outside_grader(handout) == expected
    for exercise in OTHERS:
        assert not exercise.stub_path(handout / "exercises").exists()
        assert not exercise.tests_dir(handout / "tests" / "exercises").exists()
    assert verify_handout(handout) == []


def test_the_handouts_course_file_is_the_term_without_what_names_students(handout, course):
    text = (handout / "course.toml").read_text()
    for secret in (
        "bob.secretname",
        "extension",
        "roster",
        "grades-adjusted",
        "hidden_visibility",
        "timing",
    ):
        assert secret not in text
    public = term.load(handout / "course.toml")
    assert public.name == course.name
    assert [(e.id, e.points) for e in public.exercises] == [
        (e.id, e.points) for e in course.exercises
    ]
    assert public.assignments == course.assignments  # names, exercises in order, the same instants
    assert public.assignments[0].due == datetime(2026, 10, 5, 23, 59, tzinfo=PARIS)
    assert public.late == course.late
    assert public.extensions == () and public.roster is None
    assert public.hidden_visibility is None and public.timing is None
    assert 'timezone = "Europe/Paris"' in text


def test_verify_flags_a_course_file_students_must_not_read(handout, tmp_path):
    copy = Path(shutil.copytree(handout, tmp_path / "handout"))
    (copy / "course.toml").write_text(COURSE)  # the instructor's own, copied in by hand
    problems = verify_handout(copy)
    assert problems == [
        f"course.toml: {key}: the instructor's, not for students"
        for key in ("adjustments", "extension", "hidden_visibility", "roster", "timing")
    ]


def test_the_catalogs_course_reads_back_as_itself(tmp_path):
    (tmp_path / "course.toml").write_text(student_course_file(term.default_course()))
    again = term.load(tmp_path / "course.toml")
    assert again.exercises == catalog.EXERCISES
    assert (
        again.assignments == term.default_course().assignments and again.late == term.LatePolicy()
    )


def test_the_handouts_readme_gives_the_terms_points_and_due_dates(handout, course):
    text = (handout / "README.md").read_text()
    assert text.startswith("# JAX parallelism, autumn 2026\n")
    assert (
        "| `ex04_sharded_layer` | One layer, three ways | 30 | week1 | 2026-10-05 23:59 (UTC+02:00) |"
        in text
    )
    assert (
        "| `ex12_multi_controller` | One program, several processes | 12.5 | week2 "
        "| 2026-10-12 23:59 (UTC+00:00) |" in text
    )
    assert (
        "| `ex02_sharding_properties` | What a sharding says | 10 | practice | no due date |"
        in text
    )
    # no bonus exercise in this term: no bonus wording; ex12 is, so its cluster section is
    assert f"| | total | {course.max_score:g} | | |" in text and "bonus" not in text.lower()
    assert "## Several processes on a cluster (ex12)" in text
    assert not [e.id for e in OTHERS if f"`{e.id}`" in text]
    assert "10% per day started, at most 50%" in text


def test_without_a_course_the_handout_is_the_catalogs(tmp_path):
    out = build_handout(tmp_path / "handout", course_name="JAX parallelism 101")
    assert not (out / "course.toml").exists()
    assert {p.name for p in (out / "exercises").iterdir()} == {
        e.module_file for e in catalog.EXERCISES
    }


# -- nbgrader -------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def collected(course):
    return collect_tests(list(course.exercises))


@pytest.fixture(scope="module")
def nbgrader_course(course, collected, tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("nbgrader")
    build_course(root, course=course, course_id="jax2026", tests=collected)
    return root


def utc(moment: datetime) -> datetime:
    """As nbgrader keeps a time: in UTC, without a zone."""
    return moment.astimezone(timezone.utc).replace(tzinfo=None)


def test_nbgrader_assignments_are_the_courses_in_its_order(nbgrader_course, course):
    notebooks_of = {
        folder.name: sorted(p.stem for p in folder.glob("*.ipynb"))
        for folder in (nbgrader_course / "source").iterdir()
    }
    assert notebooks_of == {
        "week1": ["ex01_meshes", "ex04_sharded_layer"],
        "week2": ["ex12_multi_controller"],
        "practice": ["ex02_sharding_properties"],
    }
    assert {
        name: [e.id for e in members] for name, members in course_assignments(course).items()
    } == {
        "week1": ["ex04_sharded_layer", "ex01_meshes"],
        "week2": ["ex12_multi_controller"],
        "practice": ["ex02_sharding_properties"],
    }


@pytest.mark.parametrize(
    "exercise_id, assignment",
    [("ex04_sharded_layer", "week1"), ("ex12_multi_controller", "week2"), ("ex01_meshes", "week1")],
)
def test_test_cells_share_the_terms_points(nbgrader_course, course, exercise_id, assignment):
    notebook = nbformat.read(nbgrader_course / "source" / assignment / f"{exercise_id}.ipynb", 4)
    graded = [c for c in notebook.cells if c.metadata.nbgrader["grade"]]
    assert sum(c.metadata.nbgrader["points"] for c in graded) == pytest.approx(
        course.exercise(exercise_id).points
    )
    assert notebook.metadata.shardlab["points"] == course.exercise(exercise_id).points
    for cell in graded:  # what the test cell's runner gives, at most
        assert f"--points {cell.metadata.nbgrader['points']!r}" in cell.source.split("\n", 1)[0]


def test_due_dates_are_in_the_gradebook_nbgrader_config_names(nbgrader_course, course):
    url = gradebook_url(nbgrader_course)
    assert url == f"sqlite:///{nbgrader_course.resolve() / 'gradebook.db'}"
    with Gradebook(url, "jax2026") as gradebook:
        dues = {a.name: a.duedate for a in gradebook.assignments}
    assert dues == {
        "week1": datetime(2026, 10, 5, 21, 59),
        "week2": datetime(2026, 10, 12, 23, 59),
        "practice": None,
    }
    assert dues["week1"] == utc(course.assignments[0].due)
    config = PyFileConfigLoader("nbgrader_config.py", str(nbgrader_course)).load_config()
    assert config.NbGraderAPI.timezone == "Europe/Paris"
    assert config.CourseDirectory.course_id == "jax2026"
    assert (
        "#   week1: 2026-10-05T23:59:00+02:00"
        in (nbgrader_course / "nbgrader_config.py").read_text()
    )


def test_a_rebuild_moves_a_due_date_and_a_local_config_chooses_the_gradebook(
    nbgrader_course, course, collected, tmp_path
):
    root = tmp_path / "course"
    # Gradebooks copied from the built course's: a new one costs nbgrader an `alembic heads` of seconds.
    elsewhere = tmp_path / "shared" / "gradebook.db"
    for gradebook in (root / "gradebook.db", elsewhere):
        gradebook.parent.mkdir(parents=True)
        shutil.copy(nbgrader_course / "gradebook.db", gradebook)
    build_course(root, course=course, exercises=["ex12"], tests=collected)
    assert sorted(p.name for p in (root / "source").iterdir()) == ["week2"]
    moved = write_course(
        tmp_path / "moved", COURSE.replace("2026-10-12T23:59:00+00:00", "2026-10-14T12:00:00+00:00")
    )
    (root / "nbgrader_config_local.py").write_text(
        f"c.CourseDirectory.db_url = 'sqlite:///{elsewhere}'\n"
    )
    build_course(root, course=moved, exercises=["ex12"], tests=collected)
    with Gradebook(f"sqlite:///{root / 'gradebook.db'}") as gradebook:
        # untouched since
        assert gradebook.find_assignment("week2").duedate == datetime(2026, 10, 12, 23, 59)
    with Gradebook(f"sqlite:///{elsewhere}") as gradebook:
        assert gradebook.find_assignment("week2").duedate == datetime(2026, 10, 14, 12, 0)


def test_a_course_without_due_dates_makes_no_gradebook(collected, tmp_path):
    undated = write_course(
        tmp_path / "undated", '[[assignment]]\nname = "lab"\nexercises = ["ex01"]\n'
    )
    build_course(tmp_path / "course", course=undated, tests=collected)
    assert (tmp_path / "course" / "source" / "lab" / "ex01_meshes.ipynb").is_file()
    assert not (tmp_path / "course" / "gradebook.db").exists()  # generate_assignment makes it


def test_a_course_file_and_groups_are_refused_together(course, tmp_path):
    with pytest.raises(
        ValueError, match=r"--group is not taken beside the course file .*course\.toml: "
    ):
        build_course(tmp_path, course=course, groups={"lab": [catalog.get("ex01")]}, tests=[])
    with pytest.raises(catalog.UnknownExercise, match="not in this term"):
        build_course(tmp_path, course=course, exercises=["ex05"], tests=[])
    assert not (tmp_path / "source").exists()


def test_an_assignment_named_with_spaces_is_built_under_its_slug(collected, tmp_path):
    """Before: "nbgrader names an assignment with letters, digits, - and _ only", for a name `course check`
    takes. Now nbgrader's assignment is the slug, and the title stays in the config beside it."""
    titled = write_course(
        tmp_path / "titled",
        COURSE.replace('name = "practice"', 'name = "Practice run: meshes"')
        .replace('name = "week1"', 'name = "Week 1"\nslug = "w1"')
        .replace('assignments = ["week1"]', 'assignments = ["Week 1"]'),
    )
    build_course(tmp_path / "course", course=titled, exercises=["ex01", "ex02"], tests=collected)
    assert sorted(p.name for p in (tmp_path / "course" / "source").iterdir()) == [
        "practice-run-meshes",
        "w1",
    ]
    config = (tmp_path / "course" / "nbgrader_config.py").read_text()
    assert "#   w1 (Week 1): 2026-10-05T23:59:00+02:00" in config
    assert "#   practice-run-meshes (Practice run: meshes): no due date" in config
    with Gradebook(f"sqlite:///{tmp_path / 'course' / 'gradebook.db'}") as gradebook:
        assert {a.name for a in gradebook.assignments} == {"w1", "practice-run-meshes"}


OWN_TOOLS = os.path.dirname(sys.executable)


def nbgrader(course_dir: Path, *args: str) -> str:
    path = [
        entry
        for entry in os.environ.get("PATH", os.defpath).split(os.pathsep)
        if entry != OWN_TOOLS
    ]
    done = subprocess.run(
        [sys.executable, "-m", "nbgrader", *args],
        cwd=course_dir,
        capture_output=True,
        text=True,
        timeout=300,
        env=os.environ | {"PATH": os.pathsep.join(path)},
    )
    assert done.returncode == 0, (
        f"nbgrader {' '.join(args)}:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    )
    return done.stdout + done.stderr


@pytest.mark.slow
def test_nbgrader_itself_reads_the_due_dates_and_generate_assignment_keeps_them(
    nbgrader_course, course, tmp_path
):
    # its config names its own gradebook
    root = Path(shutil.copytree(nbgrader_course, tmp_path / "course"))
    listed = nbgrader(root, "db", "assignment", "list")
    assert "week1 (due: 2026-10-05 21:59:00)" in listed and "practice (due: None)" in listed
    nbgrader(root, "generate_assignment", "week1", "--force")
    with Gradebook(f"sqlite:///{root / 'gradebook.db'}") as gradebook:
        week1 = gradebook.find_assignment("week1")
        assert week1.duedate == utc(course.assignments[0].due)
        assert sorted(n.name for n in week1.notebooks) == ["ex01_meshes", "ex04_sharded_layer"]
        assert week1.max_score == pytest.approx(
            course.exercise("ex04").points + course.exercise("ex01").points
        )
    released = nbformat.read(root / "release" / "week1" / "ex04_sharded_layer.ipynb", 4)
    hidden = [c for c in released.cells if notebooks.role_of(c)[0] == "hidden"]
    assert hidden and all(notebooks.HIDDEN_BEGIN not in c.source for c in hidden)


# -- Gradescope -----------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def course_zip(course, tmp_path_factory) -> Path:
    return gradescope.build_gradescope_zip(
        tmp_path_factory.mktemp("gradescope") / "autograder.zip", course=course, assignment="week1"
    )


def test_the_zip_holds_the_course_file_whole(course_zip, course):
    with zipfile.ZipFile(course_zip) as zf:
        shipped = zf.read("course.toml")
        names = set(zf.namelist())
    assert shipped == Path(course.source.path).read_bytes()
    assert b"bob.secretname" in shipped  # the instructor's: extensions included
    assert gradescope.verify_autograder_zip(course_zip) == []
    # week1's hidden tests, and no other exercise's
    hidden = {n for n in names if n.endswith("/test_hidden.py")}
    assert hidden == {
        f"tests/exercises/{e}/test_hidden.py" for e in course.assignment("week1").exercises
    }


def test_without_a_course_the_zip_has_no_course_file(tmp_path):
    plain = gradescope.build_gradescope_zip(tmp_path / "plain.zip")
    catalog_course = gradescope.build_gradescope_zip(
        tmp_path / "catalog.zip", course=term.default_course()
    )
    for path in (plain, catalog_course):
        with zipfile.ZipFile(path) as zf:
            assert "course.toml" not in zf.namelist()


def test_a_course_file_changed_since_it_was_read_is_refused(tmp_path):
    changed = write_course(tmp_path / "instructor")
    (tmp_path / "instructor" / "course.toml").write_text(COURSE.replace("ex04 = 30", "ex04 = 35"))
    out = tmp_path / "out" / "autograder.zip"
    with pytest.raises(gradescope.GradescopeBuildError, match="changed since it was read"):
        gradescope.build_gradescope_zip(out, course=changed)
    assert not out.exists()


def test_verification_catches_a_course_file_grading_cannot_read(course_zip, tmp_path):
    broken = tmp_path / "broken.zip"
    with zipfile.ZipFile(course_zip) as source, zipfile.ZipFile(broken, "w") as target:
        for info in source.infolist():
            data = source.read(info)
            target.writestr(
                info,
                data.replace(b"ex04 = 30", b"ex04 = -1")
                if info.filename == "course.toml"
                else data,
            )
    problems = gradescope.verify_autograder_zip(broken)
    assert problems and all(p.startswith("course.toml: ") for p in problems)
    assert "points for ex04 must be a number above 0" in problems[0]


def autograder(tmp_path: Path, course_zip: Path, *, with_course: bool = True) -> Path:
    """/autograder as Gradescope lays it out: source/ (the zip), submission/, results/, the metadata file."""
    root = tmp_path / "autograder"
    with zipfile.ZipFile(course_zip) as zf:
        (root / "source").mkdir(parents=True)
        for name in ("run_autograder", "course.toml", "assignment.txt"):
            if name == "run_autograder" or with_course:
                (root / "source" / name).write_bytes(zf.read(name))
    (root / "submission").mkdir()
    (root / "results").mkdir()
    metadata = {
        "id": 1,
        "created_at": "2026-10-06T08:00:00.000000+02:00",
        "submission_method": "upload",
        "assignment": {
            "due_date": "2026-10-05T23:59:00.000000+02:00",
            "late_due_date": None,
            "title": "week1",
        },
        "users": [{"email": "ada@example.com", "id": 7, "name": "Ada", "sid": "a7"}],
    }
    (root / "submission_metadata.json").write_text(json.dumps(metadata))
    shutil.copy(root / "source" / "run_autograder", root / "run_autograder")
    (root / "run_autograder").chmod(0o755)
    return root


def grader_arguments(root: Path, tmp_path: Path, **env: str) -> list[str]:
    """The arguments run_autograder gives the grader: a stand-in Python records them."""
    record = tmp_path / "arguments.json"
    python = tmp_path / "python"
    python.write_text(
        f"#!{sys.executable}\nimport json, sys\njson.dump(sys.argv[1:], open({str(record)!r}, 'w'))\n"
        "sys.exit(1)\n"
    )
    python.chmod(0o755)
    done = subprocess.run(
        [str(root / "run_autograder")],
        cwd=root,
        capture_output=True,
        text=True,
        timeout=60,
        env=os.environ | {"SHARDLAB_AUTOGRADER": str(root), "SHARDLAB_PYTHON": str(python)} | env,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    # the stand-in failed
    assert json.loads((root / "results" / "results.json").read_text())["score"] == 0
    return json.loads(record.read_text())


def option(arguments: list[str], flag: str) -> str | None:
    return arguments[arguments.index(flag) + 1] if flag in arguments else None


def test_run_autograder_grades_with_the_course_file_and_the_metadata(course_zip, tmp_path):
    root = autograder(tmp_path, course_zip)
    arguments = grader_arguments(root, tmp_path)
    assert arguments[:4] == ["-I", "-m", "grader.cli", "grade"]
    assert option(arguments, "--course") == str(root / "source" / "course.toml")
    assert option(arguments, "--submission-metadata") == str(root / "submission_metadata.json")
    assert option(arguments, "--assignment") == "week1"  # the zip's assignment.txt
    assert "--timing" not in arguments  # the course file's timing, else enforce
    assert option(grader_arguments(root, tmp_path, SHARDLAB_TIMING="skip"), "--timing") == "skip"


def test_run_autograder_without_a_course_file_or_metadata(course_zip, tmp_path):
    root = autograder(tmp_path, course_zip, with_course=False)
    (root / "submission_metadata.json").unlink()
    arguments = grader_arguments(root, tmp_path)
    assert "--course" not in arguments and "--submission-metadata" not in arguments
    assert "--assignment" not in arguments
    assert option(arguments, "--out") and option(arguments, "--test-timeout") == "30"


# -- Gradescope: a zip per assignment ---------------------------------------------------------------------


def test_a_term_narrowed_to_one_assignment_scores_and_dates_it_only(course):
    week2 = course.only("week2")
    assert [e.id for e in week2.exercises] == ["ex12_multi_controller"]
    assert week2.max_score == 12.5 and course.max_score > 12.5
    assert [a.name for a in week2.assignments] == ["week2"]
    assert week2.due("ex12") == course.due("ex12")
    with pytest.raises(KeyError, match="no assignment named 'week9'.*'week1', 'week2', 'practice'"):
        course.only("week9")


def test_a_zip_of_a_several_assignment_term_names_its_assignment(course, tmp_path):
    """Before: one zip graded the whole term in every Gradescope assignment ("Total 20/80")."""
    out = tmp_path / "autograder.zip"
    with pytest.raises(gradescope.GradescopeBuildError, match=r"3 assignments .*--assignment NAME"):
        gradescope.build_gradescope_zip(out, course=course)
    with pytest.raises(gradescope.GradescopeBuildError, match="no assignment named 'week9'"):
        gradescope.build_gradescope_zip(out, course=course, assignment="week9")
    assert not out.exists()
    zips = gradescope.build_each_assignment(tmp_path / "each", course=course)
    assert [p.name for p in zips] == ["week1.zip", "week2.zip", "practice.zip"]
    for path, assignment in zip(zips, course.assignments, strict=True):
        with zipfile.ZipFile(path) as zf:
            assert zf.read("assignment.txt").decode() == assignment.slug + "\n"
            # its own exercises' tests and no other's (every zip once carried all 18 exercises' hidden tests)
            tested = {n.split("/")[2] for n in zf.namelist() if n.startswith("tests/exercises/")}
        assert tested == set(assignment.exercises), path.name
        assert gradescope.verify_autograder_zip(path) == []


def test_verification_refuses_a_zip_that_carries_another_assignments_tests(course, tmp_path):
    week2 = gradescope.build_gradescope_zip(
        tmp_path / "week2.zip", course=course, assignment="week2"
    )
    week1 = gradescope.build_gradescope_zip(
        tmp_path / "week1.zip", course=course, assignment="week1"
    )
    mixed = tmp_path / "mixed.zip"
    with zipfile.ZipFile(week2) as source, zipfile.ZipFile(mixed, "w") as target:
        for info in source.infolist():
            target.writestr(info, source.read(info))
        with zipfile.ZipFile(week1) as other:
            for info in other.infolist():
                if info.filename.startswith("tests/exercises/ex01_meshes/"):
                    target.writestr(info, other.read(info))
    assert gradescope.verify_autograder_zip(mixed) == [
        "tests/exercises/ex01_meshes/: the tests of an exercise this zip does not grade"
    ]


def test_verification_catches_an_assignment_the_course_does_not_have(course_zip, tmp_path):
    broken = tmp_path / "broken.zip"
    with zipfile.ZipFile(course_zip) as source, zipfile.ZipFile(broken, "w") as target:
        for info in source.infolist():
            data = source.read(info)
            target.writestr(info, b"week9\n" if info.filename == "assignment.txt" else data)
    assert gradescope.verify_autograder_zip(broken) == [
        "assignment.txt: 'week9' is no assignment of the course (its slugs: week1, week2, practice)"
    ]


def test_the_environment_may_grade_the_whole_course(course_zip, tmp_path):
    root = autograder(tmp_path, course_zip)
    assert "--assignment" not in grader_arguments(root, tmp_path, SHARDLAB_ASSIGNMENT="")
