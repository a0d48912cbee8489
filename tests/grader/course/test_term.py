"""A term of the course, without grading anything: the course file read (and refused with the line of each
problem), the late policy's arithmetic, extensions, the instructor's adjustments, a student's standing, and a
regrade merged into an earlier report."""

from datetime import datetime, timedelta, timezone

import pytest

from grader.commands.term import append
from grader.core.results import Category, TestResult
from grader.course import adjustments, catalog, term
from grader.grading import lateness, regrade
from grader.grading.results import GradingResults, score_exercise
from grader.grading.standing import standing

PARIS = "Europe/Paris"

COURSE = f'''
name = "Autumn"
timezone = "{PARIS}"
timing = "report"

[points]
ex04 = 30

[late]
percent = 10
per = "day"
cap = 30
grace = "15m"

[[assignment]]
name = "week1"
due = 2026-10-05T23:59:00
exercises = ["ex01", "ex04"]
lms_id = 111

[[assignment]]
name = "week2"
due = "2026-10-12 23:59"
exercises = ["ex05"]

[[extension]]
student = "carol"
days = 3
assignments = ["week1"]
'''


def at(text: str) -> datetime:
    return datetime.fromisoformat(text)


@pytest.fixture
def course(tmp_path):
    path = tmp_path / "course.toml"
    path.write_text(COURSE)
    return term.load(path)


def test_a_course_file_gives_the_terms_exercises_points_and_due_dates(course):
    assert [e.id for e in course.exercises] == [
        "ex01_meshes",
        "ex04_sharded_layer",
        "ex05_collectives",
    ]
    assert [e.points for e in course.exercises] == [10, 30, 15]
    assert course.max_score == 55
    assert course.due("ex04", "al") == (at("2026-10-05T23:59:00+02:00"), False)
    assert course.due("ex05", "al") == (at("2026-10-12T23:59:00+02:00"), False)
    assert course.due("ex04", "carol") == (at("2026-10-08T23:59:00+02:00"), True)
    assert course.due("ex05", "carol") == (at("2026-10-12T23:59:00+02:00"), False)  # week1 only
    assert course.assignments[0].lms_id == "111" and course.timing == "report"
    assert len(course.source.digest) == 64
    with pytest.raises(catalog.UnknownExercise):
        course.exercise("ex06")


def test_without_a_course_file_the_catalog_is_the_course(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    default = term.load(None)
    assert default.exercises == catalog.EXERCISES and default.source is None
    assert default.due("ex04", "anyone") == (None, False)
    (tmp_path / "course.toml").write_text(COURSE)
    # found where it runs
    assert term.load(None).source.path == str((tmp_path / "course.toml").resolve())


@pytest.mark.parametrize(
    "submitted, percent",
    [
        ("2026-10-05T23:59:00+02:00", 0),  # on the due date
        ("2026-10-06T00:10:00+02:00", 0),  # within the grace
        ("2026-10-06T00:20:00+02:00", 10),  # a day started
        ("2026-10-05T22:20:00+00:00", 10),  # the same moment written in UTC
        ("2026-10-07T23:59:00+02:00", 20),  # two days exactly
        ("2026-10-08T00:00:00+02:00", 30),  # a third started
        ("2026-10-20T00:00:00+02:00", 30),  # the cap
    ],
)
def test_the_late_policy_takes_a_percentage_per_day_started_with_a_grace_and_a_cap(
    course, submitted, percent
):
    assert course.lateness("ex04", "al", at(submitted)).percent == percent


def test_an_extension_moves_the_students_due_date_only(course):
    submitted = at("2026-10-07T12:00:00+02:00")
    assert course.lateness("ex01", "al", submitted).percent == 20
    late = course.lateness("ex01", "carol", submitted)
    assert late.percent == 0 and "extended" in late.reason


def test_per_hour_and_zero_after():
    policy = term.LatePolicy(
        percent=5, per="hour", cap=100, zero_after=at("2026-10-10T00:00:00+00:00")
    )
    due = at("2026-10-05T00:00:00+00:00")
    assert policy.judge(due + timedelta(hours=2, minutes=1), due).percent == 15
    after = policy.judge(at("2026-10-10T00:00:01+00:00"), due)
    assert after.percent == 100 and "0 points" in after.reason


def test_every_problem_of_a_course_file_is_named_with_its_line(tmp_path):
    path = tmp_path / "course.toml"
    path.write_text(
        'name = "x"\ncolour = 1\n\n[late]\npercent = 150\n\n[[assignment]]\nname = "w"\n'
        'due = 2026-10-05T23:59:00\nexercises = ["ex01", "ex99"]\n\n[[extension]]\nstudent = "b"\n'
        'assignments = ["nope"]\n'
    )
    with pytest.raises(term.CourseFileError) as caught:
        term.load(path)
    problems = caught.value.problems
    assert problems[0].startswith("line 2: unknown key 'colour'")
    assert problems[1].startswith("line 5: percent must be a percentage")
    assert problems[2].startswith(
        "line 9: due has no UTC offset and the course file names no timezone"
    )
    assert problems[3].startswith("line 10: no exercise 'ex99'")
    assert problems[4].startswith("line 12: extension 1 needs one of days")
    assert problems[5].startswith("line 14: no assignment named 'nope'")


def test_a_course_file_that_is_not_toml_says_where(tmp_path):
    path = tmp_path / "course.toml"
    path.write_text('name = "x"\n[late\n')
    with pytest.raises(term.CourseFileError, match="not valid TOML.*line 2"):
        term.load(path)


def test_an_exercise_in_two_assignments_is_refused(tmp_path):
    path = tmp_path / "course.toml"
    path.write_text(
        '[[assignment]]\nname = "a"\nexercises = ["ex01"]\n[[assignment]]\nname = "b"\n'
        'exercises = ["ex1"]\n'
    )
    with pytest.raises(term.CourseFileError, match="line 6: ex01_meshes is in two assignments"):
        term.load(path)


def test_an_assignment_has_a_slug_from_its_name_or_its_own_and_is_found_by_either(tmp_path):
    path = tmp_path / "course.toml"
    path.write_text(
        '[[assignment]]\nname = "Week 1: meshes"\nexercises = ["ex01"]\n'
        '[[assignment]]\nname = "HW 2"\nslug = "hw2"\nexercises = ["ex05"]\n'
    )
    course = term.load(path)
    assert [a.slug for a in course.assignments] == ["week-1-meshes", "hw2"]
    assert course.assignment("hw2") is course.assignment("HW 2") is course.assignments[1]
    assert "  Week 1: meshes [week-1-meshes]: due no due date" in "\n".join(term.describe(course))
    with pytest.raises(KeyError, match="no assignment named 'HW 3'.*'Week 1: meshes', 'HW 2'"):
        course.assignment("HW 3")


def test_a_slug_that_no_platform_takes_or_two_assignments_share_is_refused(tmp_path):
    path = tmp_path / "course.toml"
    path.write_text(
        '[[assignment]]\nname = "HW 1"\nexercises = ["ex01"]\n'
        '[[assignment]]\nname = "hw-1"\nexercises = ["ex02"]\n'
        '[[assignment]]\nname = "c"\nslug = "c d"\nexercises = ["ex03"]\n'
    )
    with pytest.raises(term.CourseFileError) as raised:
        term.load(path)
    assert raised.value.problems == [
        "line 5: two assignments would share the slug 'hw-1': give one a slug = \"...\" of its own",
        "line 9: slug 'c d' must be letters, digits, - and _ only (it names nbgrader's folder and "
        "files)",
    ]


# -- adjustments and standings -------------------------------------------------------------------------


def results_of(scores: dict[str, list[tuple[str, str, float]]], course) -> GradingResults:
    """A grading of `course`'s exercises: {exercise: [(test name, category, weight)]}."""
    exercises = {}
    for ex_id, tests in scores.items():
        exercise = course.exercise(ex_id)
        results = [
            TestResult(
                f"tests/exercises/{exercise.id}/test_hidden.py::{name}",
                exercise.id,
                True,
                weight,
                category,
            )
            for name, category, weight in tests
        ]
        exercises[exercise.id] = score_exercise(exercise, results)
    return GradingResults("alice", exercises)


def timed(results: GradingResults, course, student: str, time: str) -> GradingResults:
    """`results` judged by the course as if all came in at `time` (a grading's one time for all)."""
    every = lateness.SubmissionTime(at(time), "--submitted-at")
    return lateness.with_term(
        lateness.stamped(results, course, lateness.Times(every)), course, student
    )


def test_course_points_scale_every_test_alike(course):
    graded = results_of(
        {"ex04": [("test_a", Category.PASSED, 15.0), ("test_b", Category.FAILED, 5.0)]}, course
    )
    ex04 = graded.exercises["ex04_sharded_layer"]
    assert (ex04.max_score, ex04.score) == (30.0, 22.5)  # the catalog's 20 points as 30


def test_an_adjustments_file_with_problems_names_their_lines():
    text = (
        "student,exercise,test,set,add,reason,by\n"
        "bob,ex04,,,2,flaky,Ann\n"
        "bob,ex99,,,2,x,Ann\n"
        "bob,ex04,,1,2,x,Ann\n"
        "bob,ex04,,,,x,Ann\n"
        "bob,ex04,,,abc,x,Ann\n"
        "bob,ex04,,,1,,Ann\n"
    )
    with pytest.raises(adjustments.AdjustmentsError) as caught:
        adjustments.parse(text)
    lines = [p.split(":", 1)[0] for p in caught.value.problems]
    assert lines == ["line 3", "line 4", "line 5", "line 6", "line 7"]
    assert adjustments.parse(text.split("bob,ex99")[0])[0].add == 2.0


def test_a_standing_applies_test_adjustments_then_lateness_then_exercise_adjustments(
    course, tmp_path
):
    graded = results_of(
        {
            "ex04": [("test_a", Category.PASSED, 10.0), ("test_b", Category.FAILED, 10.0)],
            "ex01": [("test_c", Category.PASSED, 10.0)],
        },
        course,
    )
    graded = lateness.with_term(
        lateness.stamped(
            graded,
            course,
            lateness.Times(
                lateness.SubmissionTime(at("2026-10-06T12:00:00+02:00"), "--submitted-at")
            ),
        ),
        course,
        "bob",
    )
    assert graded.exercises["ex04_sharded_layer"].late.percent == 10
    path = tmp_path / "adjustments.csv"
    append(
        path,
        adjustments.Adjustment("bob", "ex04_sharded_layer", "test_b", 6.0, None, "by hand", "Ann"),
    )
    append(path, adjustments.Adjustment("bob", "ex01_meshes", None, None, 2.0, "kind", "Ann"))
    append(path, adjustments.Adjustment("al", "ex01_meshes", None, 0.0, None, "not bob", "Ann"))
    mine = standing(graded, adjustments.load(path), "bob")
    ex04, ex01 = mine.exercise("ex04_sharded_layer"), mine.exercise("ex01_meshes")
    # (15+6) x 0.9
    assert (ex04.raw, ex04.penalty, ex04.final) == (15.0, pytest.approx(2.1), pytest.approx(18.9))
    assert ex04.override == pytest.approx(6.0)
    # 9 + 2, capped at 10
    assert (ex01.raw, ex01.penalty, ex01.override, ex01.final) == (10.0, 1.0, 1.0, 10.0)
    assert mine.final == pytest.approx(mine.raw - mine.penalty + mine.override)
    assert "by hand" in " ".join(mine.adjusted) and "10% off" in " ".join(mine.late)
    # Never written into the raw results.
    assert graded.exercises["ex04_sharded_layer"].score == 15.0 and "by hand" not in str(
        graded.to_dict()
    )


def test_an_adjustment_recorded_is_never_a_formula_and_reads_back_as_written(tmp_path):
    path = tmp_path / "adjustments.csv"
    hostile = adjustments.Adjustment(
        '=HYPERLINK("x")', "ex01_meshes", None, 1.5, None, "@SUM(1)", "+Ann"
    )
    append(path, adjustments.Adjustment("bob", "ex01_meshes", None, None, -2.0, "copied", "Ann"))
    append(path, hostile)
    text = path.read_text()
    assert "'=HYPERLINK" in text and "'@SUM(1)" in text and "'+Ann" in text and ",-2.0," in text
    [first, second] = adjustments.load(path)
    assert first.add == -2.0 and (second.student, second.reason, second.by) == (
        hostile.student,
        "@SUM(1)",
        "+Ann",
    )


def test_an_adjustment_for_a_test_the_grading_does_not_have_is_reported_not_applied(course):
    graded = results_of({"ex01": [("test_c", Category.PASSED, 10.0)]}, course)
    mine = standing(
        graded,
        [adjustments.Adjustment("alice", "ex01_meshes", "test_nope", 1.0, None, "x", "A", 4)],
    )
    assert mine.final == 10.0 and "line 4" in mine.problems[0]


# -- regrades -----------------------------------------------------------------------------------------


def test_a_regrade_of_one_exercise_keeps_the_others_and_records_before_and_after(course):
    earlier = results_of(
        {"ex01": [("test_c", Category.PASSED, 10.0)], "ex04": [("test_a", Category.FAILED, 20.0)]},
        course,
    )
    new = results_of({"ex04": [("test_a", Category.PASSED, 20.0)]}, course)
    merged = regrade.merge(
        earlier, new, partial=True, at=datetime(2026, 11, 1, tzinfo=timezone.utc)
    )
    assert (
        GradingResults.from_dict(merged.to_dict()).exercises["ex01_meshes"].tests[0].to_dict()
        == earlier.exercises["ex01_meshes"].tests[0].to_dict()
    )
    assert merged.score == 40.0
    [record] = merged.regrades
    assert (record.exercise, record.before, record.after, record.at) == (
        "ex04_sharded_layer",
        0.0,
        30.0,
        "2026-11-01T00:00:00+00:00",
    )
    whole = regrade.merge(earlier, new, partial=False)
    assert list(whole.exercises) == ["ex04_sharded_layer"]  # a whole grading replaces the report


def test_a_report_with_a_term_and_regrades_reads_back_the_same(course):
    graded = lateness.with_term(
        lateness.stamped(
            results_of({"ex01": [("test_c", Category.PASSED, 10.0)]}, course),
            course,
            lateness.Times(lateness.SubmissionTime(at("2026-10-09T00:00:00+02:00"), "times.csv")),
        ),
        course,
        "bob",
    )
    graded = regrade.merge(graded, graded, partial=True)
    back = GradingResults.from_dict(graded.to_dict())
    assert back.to_dict() == graded.to_dict()
    assert (
        back.term.submitted_at == "2026-10-09T00:00:00+02:00"
        and back.exercises["ex01_meshes"].late.percent == 30
    )
    assert back.final == pytest.approx(7.0)


def test_submission_times_file_names_the_line_of_a_bad_time(tmp_path, course):
    path = tmp_path / "times.csv"
    path.write_text(
        "student,submitted_at\nal,2026-10-05T10:00:00+02:00\nbo,yesterday\ncy,2026-10-05T10:00:00\n"
    )
    with pytest.raises(lateness.SubmissionTimeError) as caught:
        lateness.read_times(path, term.default_course())
    assert "line 3: 'yesterday' is not an ISO 8601" in str(caught.value)
    assert "line 4: '2026-10-05T10:00:00' has no UTC offset" in str(caught.value)


def test_a_git_clones_last_commit_is_its_submission_time(tmp_path):
    import subprocess

    clone = tmp_path / "alice"
    clone.mkdir()
    env = {
        "GIT_AUTHOR_NAME": "a",
        "GIT_AUTHOR_EMAIL": "a@x",
        "GIT_COMMITTER_NAME": "a",
        "GIT_COMMITTER_EMAIL": "a@x",
        "GIT_COMMITTER_DATE": "2026-10-06T08:30:00+02:00",
        "GIT_AUTHOR_DATE": "2026-10-06T08:30:00+02:00",
        "PATH": "/usr/bin:/bin",
        "HOME": str(tmp_path),
    }
    for command in (["git", "init", "-q"], ["git", "commit", "-q", "--allow-empty", "-m", "x"]):
        subprocess.run(command, cwd=clone, env=env, check=True)
    found = lateness.from_git(clone)
    assert found.at == at("2026-10-06T08:30:00+02:00") and "commit" in found.source
    assert lateness.from_git(tmp_path) is None


def test_a_handouts_course_file_is_the_term_its_check_and_list_go_through(tmp_path, monkeypatch):
    """`shardlab release` writes the term's course.toml at the handout's root: check and list follow it."""
    from grader.commands import student
    from grader.course import paths

    (tmp_path / "course.toml").write_text(COURSE)
    monkeypatch.setattr(paths, "REPO_ROOT", tmp_path)
    assert [(e.id, e.points) for e in student.term_exercises()] == [
        ("ex01_meshes", 10),
        ("ex04_sharded_layer", 30),
        ("ex05_collectives", 15),
    ]
    with pytest.raises(student.CheckUsageError, match="not in this term"):
        student.check("ex06", impl=paths.EXERCISES_DIR, record=False)
    (tmp_path / "course.toml").write_text("[late]\npercent = 300\n")
    with pytest.raises(student.CheckUsageError, match="line 2: percent"):
        student.term_exercises()
