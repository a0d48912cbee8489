"""Grading fast without grading wrong: the compile cache (the grader's side only), each test's time limit
from the reference's own duration, and one submission's exercises shared among parallel harnesses.

The figures (how much faster) are measured by bench/grade_speed.py, not asserted here; these tests
check what must hold whatever the machine: hits on a second grading, limits that follow from the
calibration, an endless loop stopped within 30 s per function, a slow honest submission not cut off, and
the same verdicts whether the exercises ran side by side or not."""

import json
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import grader
from grader.core.results import TimeoutBy
from grader.course import catalog, paths
from grader.grading.batch import student_folder
from grader.grading.calibration import calibrate
from grader.grading.compile_cache import CompileCache
from grader.grading.engine import GradingError, _share, grade_submission
from grader.harness import time_limits
from grader.harness.strikes import MAX_STRIKES_PER_FUNCTION, STOPPED, function_stopped_message
from grader.harness.time_limits import FALLBACK_SECONDS, FLOOR_SECONDS, MULTIPLIER, TimeLimits

pytestmark = pytest.mark.xdist_group("test_grading_speed")  # one calibration for the whole file

EX01, EX02, EX04, EX13 = (catalog.get(n) for n in ("ex01", "ex02", "ex04", "ex13"))
# what an endless loop may cost per function it is in, in processor time (issue: grading speed)
LOOP_BUDGET = 30.0


def submission(folder, *exercises, twist: str = ""):
    """The reference of `exercises`, the first one followed by `twist` (which may redefine a function)."""
    folder.mkdir(parents=True, exist_ok=True)
    for i, exercise in enumerate(exercises):
        text = exercise.solution_path().read_text()
        (folder / exercise.module_file).write_text(
            text + (textwrap.dedent(twist) if i == 0 else "")
        )
    return folder


@pytest.fixture(scope="module")
def calibrated(tmp_path_factory):
    """ex01's tests timed on the reference here, into a cache folder of their own."""
    folder = tmp_path_factory.mktemp("course-cache")
    told = []
    timed = calibrate(
        folder,
        cache=CompileCache(folder),
        exercises=[EX01.id],
        progress=lambda exercise, tests: told.append((exercise, tests)),
    )
    return folder, timed, told


def test_calibration_gives_each_test_a_limit_from_the_reference(calibrated):
    folder, measured, told = calibrated
    loaded = time_limits.load(folder)
    assert loaded.reference == measured.reference and len(loaded.reference) > 20
    # its progress: the exercise, once its every test was timed
    assert told == [(EX01.id, len(loaded.reference))]
    assert all(f"/{EX01.id}/" in nodeid for nodeid in loaded.reference)
    for nodeid, seconds in loaded.reference.items():
        assert 0 < seconds < FALLBACK_SECONDS
        assert loaded.limit(nodeid) == max(FLOOR_SECONDS, MULTIPLIER * seconds)
    assert (
        loaded.limit("tests/exercises/ex02_sharding_properties/test_visible.py::test_new")
        == FALLBACK_SECONDS
    )
    assert "calibrated" in loaded.source and "the reference took" in loaded.source


def test_a_calibration_for_another_course_or_machine_is_not_used(calibrated, tmp_path):
    folder, _, _ = calibrated
    data = json.loads((folder / time_limits.FILE_NAME).read_text())
    (tmp_path / time_limits.FILE_NAME).write_text(json.dumps(data | {"fingerprint": "0" * 16}))
    stale = time_limits.load(tmp_path)
    assert not stale.reference and "another version of the course or machine" in stale.source
    (tmp_path / time_limits.FILE_NAME).write_text("{not json")
    assert "unreadable" in time_limits.load(tmp_path).source
    assert "not calibrated" in time_limits.load(tmp_path / "none").source


def test_test_timeout_overrides_the_calibration(calibrated):
    folder, measured, _ = calibrated
    forced = time_limits.load(folder, override=7.0)
    assert {forced.limit(nodeid) for nodeid in measured.reference} == {7.0}


def test_a_calibration_needs_a_reference_that_passes(tmp_path, monkeypatch):
    monkeypatch.setattr(time_limits.paths, "SOLUTIONS_DIR", tmp_path / "missing")
    with pytest.raises(time_limits.CalibrationError, match="no solutions/ folder"):
        calibrate(tmp_path, exercises=[EX01.id])


def test_a_second_grading_compiles_nothing_again(tmp_path):
    cache = CompileCache(tmp_path / "cache")
    sub = submission(tmp_path / "alice", EX04)
    first = grade_submission(sub, exercises=[EX04.id], cache=cache, timing="skip")
    second = grade_submission(sub, exercises=[EX04.id], cache=cache, timing="skip")
    cold, warm = first.environment.compile_cache, second.environment.compile_cache
    assert cold["enabled"] and cold["folder"] == str(tmp_path / "cache" / "xla")
    assert cold["misses"] > 10 and cold["entries"] >= cold["misses"] and cold["bytes"] > 0, cold
    assert warm["hits"] >= cold["misses"] and warm["misses"] == 0, (cold, warm)
    assert first.score == second.score == EX04.points
    # the workers' user cannot look in
    assert oct((tmp_path / "cache").stat().st_mode & 0o777) == "0o700"
    # The harnesses' bytecode of the grader and the tests is kept there too, none in the checkout.
    kept = tmp_path / "cache" / "pycache" / str(paths.REPO_ROOT).lstrip("/")
    assert list((kept / "grader" / "harness").glob("pytest_plugin.*.pyc"))
    assert list((kept / "tests" / "exercises" / EX04.id).glob("test_hidden.*.pyc"))


def test_a_harness_keeps_bytecode_only_in_the_folder_given(tmp_path):
    """The child's keep_bytecode: modules imported after it go to the folder, never beside their source."""
    module = tmp_path / "source" / "some_module.py"
    module.parent.mkdir()
    module.write_text("VALUE = 1\n")
    script = (
        "import sys; from grader.grading.child import keep_bytecode; "
        f"keep_bytecode({str(tmp_path / 'kept')!r}); sys.path.insert(0, {str(module.parent)!r}); "
        "import some_module"
    )
    done = subprocess.run(
        [sys.executable, "-I", "-B", "-c", script], capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    assert list((tmp_path / "kept").rglob("some_module.*.pyc"))
    assert not (module.parent / "__pycache__").exists()


def test_without_a_cache_nothing_is_written(tmp_path):
    results = grade_submission(submission(tmp_path / "bob", EX13), exercises=[EX13.id])
    assert results.environment.compile_cache == {"enabled": False}


def test_a_cache_the_students_code_could_read_is_refused(tmp_path):
    sub = submission(tmp_path / "carol", EX13)
    inside = Path(grader.__file__).parent / "compile-cache"  # the worker reads the grader package
    with pytest.raises(GradingError, match="which the student's code can read"):
        grade_submission(sub, exercises=[EX13.id], cache=CompileCache(inside))
    assert not inside.exists()


@pytest.mark.slow  # its two timeouts are waited out for real
def test_an_endless_loop_costs_seconds_per_exercise(calibrated, tmp_path):
    """Every call of make_data_mesh loops: two tests time out at their calibrated limit of processor
    time, the tests that call make_data_mesh after that are not run, and ex01's other functions are
    still graded."""
    folder, _, _ = calibrated
    sub = submission(
        tmp_path / "dave",
        EX01,
        EX13,
        twist="""
        def make_data_mesh(*args, **kwargs):
            while True:
                pass
    """,
    )
    results = grade_submission(sub, exercises=[EX01.id, EX13.id], cache=CompileCache(folder))
    tests = results.exercises[EX01.id].tests
    timed_out = [
        t for t in tests if t.category == "timeout" and not t.message.startswith("not run")
    ]
    assert len(timed_out) == 2, [(t.nodeid, t.category, t.message) for t in tests]
    assert all("did not finish" in t.message and "processor time" in t.message for t in timed_out)
    assert all(t.strike and t.strike_function == "make_data_mesh" for t in timed_out)
    not_run = [t for t in tests if t.message.startswith("not run")]
    assert not_run and {t.message for t in not_run} == {
        function_stopped_message("make_data_mesh", MAX_STRIKES_PER_FUNCTION)
    }
    assert not any(t.strike for t in not_run)
    assert [t for t in tests if t.category == "passed"], "tests of ex01's other functions still run"
    # The loop's cost: its strikes' limits of processor time, whatever the machine's load (on a quiet
    # machine about as much wall-clock time; a loaded one stretches it, by design).
    limits = time_limits.load(folder)
    assert sum(limits.limit(t.nodeid) for t in timed_out) <= LOOP_BUDGET
    assert all(
        f"limit of {limits.limit(t.nodeid):.1f} s of processor" in t.message for t in timed_out
    )
    # the other exercise is untouched
    assert results.exercises[EX13.id].score == pytest.approx(EX13.points)
    assert results.environment.time_limits["calibrated_tests"] > 20


@pytest.mark.slow  # its slow calls (2 s each) are waited out for real
def test_a_slow_honest_submission_is_not_cut_off(calibrated, tmp_path):
    """Each call of make_data_mesh takes 2 s longer than the reference's whole test: still within its limit."""
    folder, _, _ = calibrated
    sub = submission(
        tmp_path / "erin",
        EX01,
        twist="""
        _make_data_mesh = make_data_mesh
        def make_data_mesh(*args, **kwargs):
            import time
            time.sleep(2.0)
            return _make_data_mesh(*args, **kwargs)
    """,
    )
    results = grade_submission(sub, exercises=[EX01.id], cache=CompileCache(folder))
    assert {t.category for t in results.exercises[EX01.id].tests} == {"passed"}


@pytest.mark.slow
def test_a_loop_in_a_compiled_program_also_stops_after_two_timeouts(tmp_path):
    """A program that never ends runs in the harness (it compiles and runs the student's traced
    programs): the grading process kills the harness, starts another, and the strikes carry over."""
    sub = submission(
        tmp_path / "frank",
        EX04,
        twist="""
        _layer_shard_map = layer_shard_map
        def layer_shard_map(x, W, b, mesh):
            out = _layer_shard_map(x, W, b, mesh)
            if isinstance(out, jax.core.Tracer):   # traced for the checks: a program that never ends
                forever = lambda c: (c[0] + 1.0, c[1] + 1.0)   # the count stops growing at 2**24
                out = jax.lax.while_loop(lambda c: c[0] < float("inf"), forever, (0.0, out))[1]
            return out
    """,
    )
    results = grade_submission(
        sub, exercises=[EX04.id], time_limits=TimeLimits(override=FLOOR_SECONDS), timing="skip"
    )
    tests = results.exercises[EX04.id].tests
    timed_out = [
        t for t in tests if t.category == "timeout" and not t.message.startswith("not run")
    ]
    assert len(timed_out) == 2, [(t.nodeid, t.category, t.message[:80]) for t in tests]
    assert all(
        t.message.startswith("timeout: the test used more than") and "processor time" in t.message
        for t in timed_out
    ), timed_out
    # each judged on the harness's processor time (on a loaded machine too: its wall-clock cap forgives
    # the time the harness waited for a processor, so the limit strikes first)
    for judged in (t.timeout for t in timed_out):
        assert judged is not None and judged.by is TimeoutBy.PROCESSOR_TIME, timed_out
        assert judged.cpu > judged.limit == FLOOR_SECONDS and judged.counted <= judged.cap
    stopped = [t for t in tests if t.message == STOPPED]
    assert stopped and all(t.category == "timeout" for t in stopped)
    assert [
        t
        for t in tests
        if t.nodeid.split("::")[-1].startswith("test_layer_shard_map_values")
        and t.category == "passed"
    ], "direct calls, which do not loop, keep their verdicts"
    # What the loop costs: its timed-out tests' limits of processor time in the harness (the rest is not
    # run; the visible tests, which run first and pass, are the submission's honest work, not the loop's).
    assert len(timed_out) * FLOOR_SECONDS <= LOOP_BUDGET


def test_parallel_harnesses_give_the_same_verdicts(tmp_path):
    sub = submission(
        tmp_path / "gina",
        EX01,
        EX02,
        EX13,
        twist="""
        def make_mesh_2x4():
            raise ValueError("wrong on purpose")
    """,
    )
    chosen = [EX01.id, EX02.id, EX13.id]
    alone = grade_submission(sub, exercises=chosen, parallel=1, timing="skip")
    shared = grade_submission(sub, exercises=chosen, parallel=2, timing="skip")
    assert alone.environment.parallel == 1 and shared.environment.parallel == 2
    verdicts = [
        {t.nodeid: (t.category, t.message) for e in r.exercises.values() for t in e.tests}
        for r in (alone, shared)
    ]
    assert verdicts[0] == verdicts[1] and len(verdicts[0]) > 100
    assert any(category == "error" for category, _ in verdicts[0].values())


def test_exercises_are_shared_by_the_references_time():
    chosen = [catalog.get(n) for n in ("ex01", "ex02", "ex03", "ex04")]
    seconds = {
        "ex01_meshes": 1.0,
        "ex02_sharding_properties": 1.0,
        "ex03_computation_follows_data": 6.0,
        "ex04_sharded_layer": 5.0,
    }
    limits = TimeLimits(
        reference={f"tests/exercises/{k}/test_x.py::t": v for k, v in seconds.items()}
    )
    groups = _share(chosen, 2, limits)
    # The longest first, each to the least loaded group: 6 + 1 against 5 + 1.
    assert [[e.id for e in g] for g in groups] == [
        ["ex02_sharding_properties", "ex03_computation_follows_data"],
        ["ex01_meshes", "ex04_sharded_layer"],
    ]
    assert [[e.id for e in g] for g in _share(chosen, 1, limits)] == [[e.id for e in chosen]]
    assert len(_share(chosen[:1], 4, limits)) == 1


def test_a_copy_of_the_calibration_is_what_the_harness_applies(calibrated, tmp_path):
    folder, measured, _ = calibrated
    copy = measured.save(tmp_path / "limits.json")
    in_harness = TimeLimits.for_harness(copy, None)
    assert in_harness.reference == measured.reference
    assert TimeLimits.for_harness(copy, 3.0).limit(next(iter(measured.reference))) == 3.0
    shutil.rmtree(tmp_path)


def test_grade_batch_uses_the_class_cache_and_its_calibration(calibrated, tmp_path):
    """The command line: a calibrated cache folder is used as it is (no second calibration), every
    student's report says which limits and cache were in force, and the cores are shared out."""
    folder, _, _ = calibrated
    cache = tmp_path / "class-cache"
    shutil.copytree(folder, cache, ignore=shutil.ignore_patterns("xla"))
    submission(tmp_path / "class" / "hana", EX01)
    submission(tmp_path / "class" / "ivan", EX13)
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "grader.cli",
            "grade-batch",
            str(tmp_path / "class"),
            "--out",
            str(tmp_path / "graded"),
            "--jobs",
            "2",
            "--cache",
            str(cache),
            "--exercise",
            EX01.id,
        ],
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "timing the reference" not in done.stdout
    report = json.loads((student_folder(tmp_path / "graded", "hana") / "report.json").read_text())
    environment = report["environment"]
    assert environment["time_limits"]["source"].startswith("calibrated")
    assert (
        environment["compile_cache"]["folder"] == str(cache / "xla")
        and environment["parallel"] == 1
    )
    assert report["score"] == pytest.approx(EX01.points)
    # The pages: each student's, and the class's linking to them.
    index = (tmp_path / "graded" / "index.html").read_text()
    assert f"class page {tmp_path / 'graded' / 'index.html'}" in done.stdout
    for student in ("hana", "ivan"):
        assert (
            (student_folder(tmp_path / "graded", student) / "feedback.html")
            .read_text()
            .startswith("<!DOCTYPE")
        )
        assert f'href="students/{student}/feedback.html"' in index


def test_a_batch_calibrates_when_an_exercise_it_grades_was_never_timed(tmp_path):
    """A calibration keeps each test's duration: one of ex01 serves a grading of ex01, and a term with an
    exercise it never timed is calibrated again (for that term's exercises), never graded on the fallback."""
    ex01_tests = {f"tests/exercises/{EX01.id}/test_hidden.py::test_{i}": 0.5 for i in range(3)}
    TimeLimits(reference=ex01_tests).save(tmp_path / time_limits.FILE_NAME)
    assert not time_limits.batch_should_calibrate(tmp_path, None, (EX01.id,))
    assert time_limits.batch_should_calibrate(tmp_path, None, (EX01.id, EX02.id))
    assert not time_limits.batch_should_calibrate(tmp_path, 7.0, (EX02.id,))  # --test-timeout
    assert not time_limits.batch_should_calibrate(tmp_path, None)  # no term: any calibration
    assert time_limits.batch_should_calibrate(tmp_path / "empty", None)
    # what a batch grades: its --exercise, else the term's
    assert time_limits.graded_ids((EX01.id, EX02.id), ("4",)) == (EX04.id,)
    assert time_limits.graded_ids((EX01.id, EX02.id), ()) == (EX01.id, EX02.id)


def test_calibrating_a_term_times_its_exercises_only_and_keeps_the_others(calibrated, tmp_path):
    """`shardlab calibrate` with a term's course file: its exercises only (here ex02), the earlier
    calibration's ex01 kept as it was, no other exercise timed; --ship refuses a term that is not the
    catalog (the shipped timings are every exercise's)."""
    folder, earlier, _ = calibrated
    cache = tmp_path / "cache"
    cache.mkdir()
    shutil.copyfile(folder / time_limits.FILE_NAME, cache / time_limits.FILE_NAME)
    course = tmp_path / "course.toml"
    course.write_text(
        'name = "one exercise"\n\n[[assignment]]\nname = "HW"\nexercises = ["ex02"]\n'
    )
    command = [sys.executable, "-m", "grader.cli", "calibrate", "--course", str(course)]
    done = subprocess.run(
        [*command, "--cache", str(cache)], capture_output=True, text=True, timeout=1200
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "of 1 exercise(s)" in done.stdout
    timed = time_limits.load(cache).reference
    assert {nodeid.split("/")[2] for nodeid in timed} == {EX01.id, EX02.id}
    assert {k: v for k, v in timed.items() if f"/{EX01.id}/" in k} == earlier.reference
    assert "ex02" in time_limits.load(cache).source and "earlier calibration" in done.stdout
    assert not time_limits.batch_should_calibrate(cache, None, (EX01.id, EX02.id))
    shipped = subprocess.run(
        [*command, "--cache", str(tmp_path / "other"), "--ship"], capture_output=True, text=True
    )
    assert shipped.returncode == 2 and "--ship times every exercise" in shipped.stderr
    assert not (tmp_path / "other").exists()


def test_grade_batch_with_a_course_file_calibrates_the_terms_exercises_only(tmp_path):
    """Before its first student, a batch of a one-exercise term times that exercise, not the catalog."""
    course = tmp_path / "course.toml"
    course.write_text(
        'name = "one exercise"\n\n[[assignment]]\nname = "HW"\nexercises = ["ex02"]\n'
    )
    submission(tmp_path / "class" / "hana", EX02)
    cache = tmp_path / "cache"
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "grader.cli",
            "grade-batch",
            str(tmp_path / "class"),
            "--out",
            str(tmp_path / "graded"),
            "--cache",
            str(cache),
            "--course",
            str(course),
        ],
        capture_output=True,
        text=True,
        timeout=1200,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "timing the reference solutions of 1 exercise(s) (ex02)" in done.stdout
    assert f"  timed {EX02.id} (" in done.stdout and "(1 of 1)" in done.stdout
    timed = time_limits.load(cache).reference
    assert timed and {nodeid.split("/")[2] for nodeid in timed} == {EX02.id}
    report = json.loads((student_folder(tmp_path / "graded", "hana") / "report.json").read_text())
    assert report["environment"]["time_limits"]["source"].startswith("calibrated")


def test_calibrate_times_the_course_it_is_given_never_one_found_again(tmp_path, monkeypatch):
    """grade-batch hands calibrate the course it read (a course.toml inside the submissions it refused is
    not found again from the current folder); alone, calibrate reads --course, else the folder's file."""
    from grader.commands import grading
    from grader.core.options import GradingOptions
    from grader.course import term
    from grader.grading import calibration

    timed = []

    def fake(folder, options, *, cache=None, course=None, **overrides):
        timed.append(tuple(e.id for e in course.exercises))
        return TimeLimits(source="fake")

    monkeypatch.setattr(calibration, "calibrate", fake)
    (tmp_path / "course.toml").write_text(
        'name = "found"\n\n[[assignment]]\nname = "HW"\nexercises = ["ex02"]\n'
    )
    monkeypatch.chdir(tmp_path)
    options = GradingOptions(cache=tmp_path / "cache", no_compile_cache=True)
    assert grading.calibrate(options) == 0
    assert grading.calibrate(options, course=term.default_course()) == 0
    assert timed == [(EX02.id,), tuple(e.id for e in catalog.EXERCISES)]
    (tmp_path / "bad.toml").write_text("[late]\npercent = 300\n")
    assert grading.calibrate(GradingOptions(course=tmp_path / "bad.toml")) == 2
