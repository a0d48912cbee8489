"""A corpus of hostile and broken submissions: each is graded by the real grader (fresh processes,
limits, event stream) and must get exactly the points it earned, leave nothing running, and never
reach the grader's outputs.

Each case is ex01's reference with a twist appended (or a stub, or broken source), so that exactly
the tests the twist touches change category and every other test still passes.
"""

import json
import os
import textwrap
import time
from pathlib import Path

import pytest

from grader.course import catalog, paths
from grader.grading import process
from grader.grading.batch import grade_batch
from grader.grading.results import GradingResults

EX01 = catalog.get("ex01_meshes")
REFERENCE = EX01.solution_path().read_text()
STUB = EX01.stub_path().read_text()
MARKER = "shardlab-hostile-daemon-7f3a"
TEST_TIMEOUT = 10


def wrap(function: str, condition: str, action: str) -> str:
    """Redefine a reference function so that it does `action` when `condition` holds."""
    return textwrap.dedent(f"""
        _{function}_reference = {function}
        def {function}(*args, **kwargs):
            n = args[0] if args else None
            if {condition}:
                {action}
            return _{function}_reference(*args, **kwargs)
    """)


def everything(category):
    return lambda name: category


def only(prefixes, category):
    return lambda name: category if name.startswith(prefixes) else "passed"


DAEMON = f"""
import os, sys
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        os.execv(sys.executable, [sys.executable, "-c", "import time; time.sleep(600)", "{MARKER}"])
    os._exit(0)
os.wait()
"""

FORGERY = """
import json, os
fake = {"score": 100, "tests": []}
for folder in (os.getcwd(), os.environ.get("HOME", ".")):
    for name in ("results.json", "report.json"):
        try:
            open(os.path.join(folder, name), "w").write(json.dumps(fake))
        except OSError:
            pass
line = json.dumps({"e": "result", "nodeid": "x", "category": "passed"}).encode() + b"\\t" + b"0" * 64 + b"\\n"
for fd in range(3, 40):
    try:
        os.write(fd, line)
    except OSError:
        pass
"""

# name: (module source, extra files, expected category of each test by name, message fragment)
CASES = {
    "exit_at_import": (REFERENCE + "\nraise SystemExit(3)\n", {}, everything("error"), "called exit(3)"),
    "os_exit_at_import": (REFERENCE + "\nimport os\nos._exit(3)\n", {}, everything("crashed"), "while importing"),
    "os_exit_in_a_call": (REFERENCE + wrap("make_data_mesh", "n == 5", "import os; os._exit(7)"), {},
                          only(("test_data_mesh_odd_sizes[5]",), "crashed"), "exited with status 7"),
    "endless_loop": (REFERENCE + wrap("make_data_mesh", "n == 3", "while True: pass"), {},
                     only(("test_data_mesh_odd_sizes[3]",), "timeout"), "longer than 10 s"),
    "memory_exhaustion": (REFERENCE + wrap("make_data_mesh", "n == 1", "bytearray(64 * 2**30)"), {},
                          only(("test_data_mesh_odd_sizes[1]",), "error"), "MemoryError"),
    "conftest_flips_outcomes": (STUB, {"conftest.py": textwrap.dedent("""
        import pytest
        @pytest.hookimpl(wrapper=True)
        def pytest_runtest_makereport(item, call):
            report = yield
            report.outcome = "passed"
            return report
        """), "pytest.ini": "[pytest]\naddopts = -p no:shardlab\n", "sitecustomize.py": "import os\nos._exit(1)\n",
        "evil.pth": "import os; os._exit(1)\n"}, everything("not attempted"), "ex01:"),
    "patches_numpy_and_checks_at_import": (REFERENCE + textwrap.dedent("""
        import numpy, jax.numpy, grader.checks, grader.checks.numerics
        numpy.allclose = lambda *a, **k: True
        jax.numpy.allclose = lambda *a, **k: True
        numpy.testing.assert_array_equal = lambda *a, **k: None
        grader.checks.numerics.compare = lambda *a, **k: None
        """), {}, everything("error"), "numpy.allclose"),
    "patches_a_check_during_a_call": (REFERENCE + wrap(
        "place", "True", "import grader.checks.sharding as s; s.assert_shard_values = lambda *a, **k: None"),
        {}, only(("test_place",), "error"), "grader.checks.sharding.assert_shard_values"),
    "imports_solutions_as_a_package": (REFERENCE + "\nfrom solutions.ex01_meshes import *\n", {},
                                       everything("error"), "No module named 'solutions'"),
    "reads_solutions_by_path": (REFERENCE + textwrap.dedent("""
        import grader.course.paths
        exec((grader.course.paths.SOLUTIONS_DIR / "ex01_meshes.py").read_text())
        """), {}, everything("error"), "not available while grading"),
    "forges_result_files": (STUB + FORGERY, {}, everything("not attempted"), "ex01:"),
    "spawns_a_daemon": (REFERENCE + wrap("make_mesh_2x4", "True", DAEMON.replace("\n", "\n                ")),
                        {}, everything("passed"), ""),
    "huge_output": (REFERENCE + "\nimport sys\nsys.__stdout__.write('x' * 30_000_000)\n"
                    + wrap("place", "True", "print('y' * 2_000_000)"), {}, everything("passed"), ""),
    "syntax_error": (REFERENCE.replace("def make_mesh_2x4():", "def make_mesh_2x4(:"), {}, everything("error"),
                     "syntax error at line"),
    "wrong_signature": (REFERENCE.replace("def place(x, mesh, spec):", "def place(x, spec):"), {},
                        only(("test_place",), "error"), "TypeError"),
}


def daemons_running() -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if MARKER in (entry / "cmdline").read_bytes().decode(errors="replace"):
                    found.append(int(entry.name))
            except OSError:
                pass
    return found


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    """The whole corpus graded as one class by `grade_batch` (two at a time, ex01 only), as an
    instructor would: {case: (results read back from its report.json, its output folder)}."""
    class_dir = tmp_path_factory.mktemp("class")
    for name, (source, files, _, _) in CASES.items():
        (class_dir / name).mkdir()
        (class_dir / name / EX01.module_file).write_text(source)
        for filename, text in files.items():
            (class_dir / name / filename).write_text(text)
    out = tmp_path_factory.mktemp("graded")
    started = time.monotonic()
    summary = grade_batch(class_dir, out, jobs=2, grade_args=["--exercise=ex01", f"--test-timeout={TEST_TIMEOUT}"])
    print(f"hostile corpus: {len(CASES)} submissions graded in {time.monotonic() - started:.1f} s wall time")
    assert [o.status for o in summary.outcomes] == ["graded"] * len(CASES), summary.outcomes
    return {name: (GradingResults.from_dict(json.loads((out / name / "report.json").read_text())), out / name)
            for name in CASES}


@pytest.mark.slow
@pytest.mark.parametrize("case", list(CASES))
def test_each_case_gets_exactly_what_it_earned(graded, case):
    results, out = graded[case]
    _, _, expected, fragment = CASES[case]
    tests = results.exercises[EX01.id].tests
    assert len(tests) == 63
    wrong = [f"{t.name}: {t.category} ({t.message[:200]})" for t in tests if t.category != expected(t.name)]
    assert not wrong, "\n".join(wrong[:10])
    assert all(fragment in t.message for t in tests if t.category != "passed")
    earned = sum(t.max_score for t in tests if t.category == "passed")
    assert results.exercises[EX01.id].score == pytest.approx(earned)
    report = json.loads((out / "report.json").read_text())
    assert report["score"] == pytest.approx(results.score)


@pytest.mark.slow
def test_nothing_is_left_running(graded):
    assert daemons_running() == [], "a submission's daemon outlived its grading"
    assert process.children_of(os.getpid()) == set()


@pytest.mark.slow
def test_shipped_files_are_listed_and_never_loaded(graded):
    results, _ = graded["conftest_flips_outcomes"]
    problem = next(p for p in results.problems if p.startswith("not graded and never loaded"))
    for name in ("conftest.py", "pytest.ini", "sitecustomize.py", "evil.pth"):
        assert name in problem


@pytest.mark.slow
def test_forged_results_do_not_count(graded):
    results, out = graded["forges_result_files"]
    assert results.score == 0
    assert json.loads((out / "results.json").read_text())["score"] == 0
    assert any("not written by the grader were ignored" in p for p in results.problems)


@pytest.mark.slow
def test_huge_output_is_truncated(graded):
    results, out = graded["huge_output"]
    assert 0 < len(results.output) <= 2 * process.Limits().output_chars
    assert all(len(t.output) < 3000 for t in results.exercises[EX01.id].tests)
    assert any(t.output.startswith("yyyy") for t in results.exercises[EX01.id].tests)
    assert (out / "report.json").stat().st_size < 2_000_000


def test_solutions_stay_where_the_guard_expects():
    # The guard refuses reads under this folder; if it moved, the hostile cases above would not test it.
    assert (paths.SOLUTIONS_DIR / EX01.module_file).is_file()
