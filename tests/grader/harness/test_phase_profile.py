"""The phase profile the grader's benchmark reads (bench/grading_phases.py): a stack is charged to the phase it
is in, and a harness run with $SHARDLAB_PHASE_PROFILE writes where each test's time went; without it, nothing."""

import json
import os
import subprocess
import sys
import threading

import jax
import jax.numpy as jnp

from grader.checks.speedup import measure_speedup
from grader.course import catalog, paths
from grader.harness import phase_profile
from grader.harness.phase_profile import Classifier


def test_a_speed_measurement_is_one_whatever_it_runs():
    seen = []

    def candidate():
        seen.append(Classifier().phase(sys._getframe()))
        return jnp.zeros(())

    measure_speedup(candidate, candidate, threshold=1.0, label="x", devices=1, repeats=3)
    assert set(seen) == {phase_profile.SPEED}


def test_jaxs_own_work_is_named_by_the_innermost_activity():
    seen = []

    def traced(x):
        seen.append(Classifier().phase(sys._getframe()))
        return x + 1

    jax.jit(traced)(jnp.ones(3))
    assert seen == [phase_profile.TRACE]
    assert Classifier().phase(sys._getframe()) == phase_profile.OTHER


def test_the_students_code_in_process_is_its_own_phase(tmp_path):
    module = tmp_path / "student.py"
    module.write_text("import sys\n\ndef where(classify):\n    return classify(sys._getframe())\n")
    namespace: dict = {}
    exec(compile(module.read_text(), str(module), "exec"), namespace)
    assert namespace["where"](Classifier(tmp_path).phase) == phase_profile.STUDENT_IN_PROCESS
    assert namespace["where"](Classifier().phase) == phase_profile.OTHER


def run_ex03_visible(tmp_path, **env):
    """ex03's visible tests: sin_layer compiles inside the reference's own code, for tens of milliseconds."""
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            str(catalog.get("ex03").tests_dir() / "test_visible.py"),
            "--impl=reference",
            "-q",
            "-p",
            "no:cacheprovider",
        ],
        cwd=paths.REPO_ROOT,
        env={k: v for k, v in os.environ.items() if k != phase_profile.PROFILE_DIR} | env,
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_a_profiled_run_says_where_each_tests_time_went(tmp_path):
    folder = tmp_path / "profile"
    folder.mkdir()
    done = run_ex03_visible(tmp_path, **{phase_profile.PROFILE_DIR: str(folder)})
    assert done.returncode == 0, done.stdout[-2000:]
    (path,) = folder.glob("harness-*.json")
    profile = json.loads(path.read_text())
    tests = {k: v for k, v in profile["seconds"].items() if k != phase_profile.OUTSIDE_TESTS}
    assert tests and all(
        k.startswith("tests/exercises/ex03_computation_follows_data/test_visible.py::")
        for k in tests
    )
    assert all(set(phases) <= set(phase_profile.PHASES) for phases in profile["seconds"].values())
    outside = profile["seconds"][phase_profile.OUTSIDE_TESTS]
    assert outside[phase_profile.PROCESS_START] > 0.2  # python, pytest and jax imported
    # the reference's code ran in this process, and it is where the tests' time mostly went
    student = sum(p.get(phase_profile.STUDENT_IN_PROCESS, 0.0) for p in tests.values())
    assert student > 0
    # jax's own count of what it compiled, the reference's compiles named as the student's code's
    compiled = sum(
        c.get(f"compiling ({phase_profile.STUDENT_IN_PROCESS})", 0)
        for c in profile["jax_counts"].values()
    )
    assert compiled >= 1


def test_unprofiled_nothing_samples():
    """This very session runs the harness's plugin without the variable: no sampling thread."""
    assert phase_profile.folder() is None
    assert not [t for t in threading.enumerate() if t.name == "phase-profile"]
