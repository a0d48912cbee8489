"""Grading fails loudly, never a class, and its options do what they say: the worker's view of Python (every
sys.path entry of the grading Python, nothing of the tests or solutions), the preflight proving that a
confined worker starts before the first student, and the memory limits the worker, the harness and the
submission's memory group get.

The venv tests build what the issue met: a venv whose jax is found only through a .pth file (naming a
hard-linked copy of this environment's site-packages, outside every prefix), under a 0700 folder, with
this checkout's editable install (its finder's MAPPING) and, as a compat-mode editable install would, a
.pth naming the checkout's root."""

import json
import os
import shutil
import subprocess
import sys
import sysconfig
import textwrap
from pathlib import Path

import pytest

import grader
from grader.core.options import HARNESS_MEMORY_BYTES
from grader.course import catalog, paths
from grader.grading import engine, preflight
from grader.sandbox import cgroups, confinement

# the module fixtures' gradings, once
pytestmark = pytest.mark.xdist_group("test_grading_environment")

EX01 = catalog.get("ex01")
GIB = 1 << 30


def shardlab(*args, python=sys.executable, env=None):
    return subprocess.run(
        [python, "-m", "grader.cli", *args],
        capture_output=True,
        text=True,
        env=dict(os.environ, **(env or {})),
    )


def inside(path: str, folders) -> bool:
    return any(path == f or path.startswith(f.rstrip("/") + "/") for f in folders)


def test_the_worker_sees_every_import_path_of_its_python_and_nothing_of_the_tests():
    shown = subprocess.run(
        [sys.executable, "-I", "-c", "import json, sys; print(json.dumps(sys.path))"],
        capture_output=True,
        text=True,
        check=True,
    )
    seen = confinement.python_paths()
    for entry in json.loads(shown.stdout):
        if os.path.isdir(entry):
            assert inside(os.path.realpath(entry), seen), (entry, seen)
    import grader

    assert inside(str(Path(grader.__file__).resolve().parent), seen)
    for hidden in (paths.REPO_ROOT / "tests", paths.SOLUTIONS_DIR):
        assert not inside(str(hidden.resolve()), seen), seen
        assert not any(inside(p, [str(hidden.resolve())]) for p in seen), seen


def test_the_preflight_proves_the_worker_and_reads_its_memory_limit():
    level = confinement.choose_isolation("auto")
    proof = preflight.prove_worker(level, confinement.worker_limits(5 * GIB))
    assert proof.level == level.value and proof.devices == 8 and proof.memory_bytes == 5 * GIB
    # none means none
    assert preflight.prove_worker(level, confinement.worker_limits(None)).memory_bytes is None


def test_a_proof_is_kept_for_its_environment_and_only_for_it(tmp_path, monkeypatch):
    """With the course's cache folder, the preflight runs once per environment: a second grading reuses the
    proof; different limits, or a grader file changed, prove again. A failure is never kept."""
    level = confinement.choose_isolation("auto")
    limits = confinement.worker_limits(5 * GIB)
    first = preflight.prove_worker(level, limits, tmp_path)
    again = preflight.prove_worker(level, limits, tmp_path)
    assert not first.reused and again.reused and again.memory_bytes == first.memory_bytes
    key = preflight.environment_key(level, limits)
    assert key != preflight.environment_key(level, confinement.worker_limits(4 * GIB))
    stamps = {}
    real_stamp = preflight._stamp
    monkeypatch.setattr(preflight, "_stamp", lambda p: stamps.get(str(p)) or real_stamp(p))
    stamps[str(Path(grader.__file__).resolve())] = (1, 1)  # the grader changed
    assert preflight.environment_key(level, limits) != key
    with pytest.raises(preflight.PreflightError):
        preflight.prove_worker(level, confinement.worker_limits(1 * GIB), tmp_path)
    assert len(list((tmp_path / "preflight").glob("*.json"))) == 1


def test_a_worker_that_cannot_start_stops_grading_with_the_reason():
    """1 GiB: jax's backend cannot start its threads. Measured here, idle: a worker starts from 1.625 GiB and
    not at 1.5 (three tries each); loaded, it needs less (fewer malloc arenas), and a CI run saw one start at
    1.5 GiB, so the test keeps well below the edge."""
    level = confinement.choose_isolation("auto")
    with pytest.raises(preflight.PreflightError) as raised:
        preflight.prove_worker(level, confinement.worker_limits(1 * GIB))
    message = str(raised.value)
    assert f"a confined worker ({level.value}, memory limit 1 GiB) does not work here" in message
    assert "exited with status" in message and "No student is graded" in message


def test_a_memory_limit_too_small_to_start_is_refused_up_front(tmp_path):
    done = shardlab("grade", str(tmp_path), "--out", str(tmp_path / "out"), "--memory-limit", "1.5")
    assert done.returncode == 2
    assert (
        "argument --memory-limit: 1.5 GiB is too small" in done.stderr
        and "at least 2 GiB" in done.stderr
    )
    assert not (tmp_path / "out").exists()


# A student's module that says what limits it runs under, and whose own bare assert fails.
PROBING_MODULE = """

def make_mesh_2x4():
    import resource
    raise ValueError(f"worker RLIMIT_AS {resource.getrlimit(resource.RLIMIT_AS)}")


def make_data_mesh(n, name="data"):
    assert n == -1
    return None
"""


@pytest.fixture(scope="module")
def graded_with_a_memory_limit(tmp_path_factory):
    folder = tmp_path_factory.mktemp("probing")
    (folder / EX01.module_file).write_text(EX01.solution_path().read_text() + PROBING_MODULE)
    out = folder.parent / "probing-out"
    done = shardlab(
        "grade",
        str(folder),
        "--out",
        str(out),
        "--exercise",
        "ex01",
        "--memory-limit",
        "3.5",
        "--timing",
        "skip",
        "--quiet",
    )
    assert done.returncode == 0, done.stdout + done.stderr
    report = json.loads((out / "report.json").read_text())
    return report, {t["nodeid"].split("::")[-1]: t for t in report["exercises"][EX01.id]["tests"]}


def test_the_memory_limit_is_the_workers_and_report_json_records_both(graded_with_a_memory_limit):
    report, tests = graded_with_a_memory_limit
    applied = int(3.5 * GIB)
    assert (
        f"ValueError: worker RLIMIT_AS ({applied}, {applied})"
        in tests["test_make_mesh_2x4"]["message"]
    )
    assert report["environment"]["limits"]["worker_memory_bytes"] == applied
    assert report["environment"]["limits"]["harness_memory_bytes"] == HARNESS_MEMORY_BYTES
    # and the submission's memory group, sized from the worker's limit (one harness: one exercise)
    group = (
        engine.submission_memory_limit(applied, 1) if "memory" in cgroups.hierarchies() else None
    )
    assert report["environment"]["limits"]["submission_memory_bytes"] == group
    # and the tmpfs its folder is, as root (grader.sandbox.disk); elsewhere the host's disk, unbounded
    disk = confinement.WorkerLimits().disk_bytes if os.geteuid() == 0 else None
    assert report["environment"]["limits"]["worker_disk_bytes"] == disk


def test_a_bare_assert_in_student_code_says_what_and_where(graded_with_a_memory_limit):
    _, tests = graded_with_a_memory_limit
    line = 1 + (EX01.solution_path().read_text() + PROBING_MODULE).splitlines().index(
        "    assert n == -1"
    )
    failed = [t for name, t in tests.items() if name.startswith("test_data_mesh_sizes")]
    assert failed and all(t["category"] == "error" for t in failed)
    assert failed[0]["message"] == (
        f"AssertionError\n  raised at {EX01.module_file}:{line} in make_data_mesh: assert n == -1"
    )


# --- a venv that finds jax through a .pth file ------------------------------------------------------------


@pytest.fixture(scope="module")
def venv(tmp_path_factory):
    """tmp/venv (0700) with this checkout's editable install; its jax is in tmp/deps, a hard-linked copy of
    this environment's site-packages named by a .pth file, and another .pth names the checkout's root."""
    root = tmp_path_factory.mktemp("venv-route")
    deps, venv = root / "deps", root / "venv"
    purelib = Path(sysconfig.get_paths()["purelib"])
    subprocess.run(["cp", "-al", str(purelib), str(deps)], check=True)
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    python = venv / "bin" / "python"
    site_packages = Path(
        subprocess.run(
            [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
    )
    (site_packages / "deps.pth").write_text(f"{deps}\n{paths.REPO_ROOT}\n")
    # A .pth in a folder named by a .pth is not read: this checkout's editable install goes into the venv.
    for path in purelib.glob("__editable__*shardlab*"):
        shutil.copy(path, site_packages / path.name)
    os.chmod(venv, 0o700)
    shown = subprocess.run(
        [str(python), "-I", "-c", "import jax, grader, sys; print(jax.__file__, grader.__file__)"],
        capture_output=True,
        text=True,
        check=True,
    )
    assert shown.stdout.startswith(str(deps)), shown.stdout
    return python, deps


@pytest.mark.slow
def test_in_the_venv_the_worker_sees_the_pth_folders_and_not_the_checkout(venv):
    python, deps = venv
    shown = subprocess.run(
        [
            str(python),
            "-I",
            "-c",
            "import json; from grader.sandbox.confinement import "
            "python_paths; print(json.dumps(python_paths()))",
        ],
        capture_output=True,
        text=True,
    )
    seen = json.loads(shown.stdout)
    assert str(deps) in seen and str(python.parent.parent) in seen, seen
    assert str(paths.REPO_ROOT) not in seen and not inside(str(paths.REPO_ROOT / "tests"), seen), (
        seen
    )


@pytest.mark.slow
@pytest.mark.parametrize("isolation", ["auto", "landlock"])
def test_the_venv_grades_the_reference_in_full(venv, tmp_path, isolation):
    """auto: bubblewrap's probe fails for a Python under a 0700 folder (nobody cannot enter it), so grading
    falls back to Landlock, where the worker imports jax from the .pth's folder."""
    python, _ = venv
    shutil.copy(EX01.solution_path(), tmp_path / EX01.module_file)
    done = shardlab(
        "grade",
        str(tmp_path),
        "--out",
        str(tmp_path / "out"),
        "--exercise",
        "ex01",
        "--isolation",
        isolation,
        python=python,
        env={"SHARDLAB_CACHE": str(tmp_path / "cache")},
    )
    assert done.returncode == 0, done.stdout + done.stderr
    report = json.loads((tmp_path / "out" / "report.json").read_text())
    assert report["score"] == pytest.approx(EX01.points), report["exercises"][EX01.id]["tests"][0][
        "message"
    ]
    # nobody cannot enter the venv: not bubblewrap
    as_nobody = os.geteuid() == 0 and confinement.bwrap_path()
    assert report["environment"]["isolation"]["level"] == (
        "landlock" if isolation == "landlock" or as_nobody else "bubblewrap"
    )


@pytest.mark.slow
def test_a_worker_that_cannot_read_its_jax_stops_grading_with_exit_2(venv, tmp_path):
    """The venv readable, the .pth's folder not (0700): under bubblewrap the worker, run as nobody, cannot
    import jax. Grading stops before the first student, saying why; no report, no zeros."""
    python, deps = venv
    shutil.copy(EX01.solution_path(), tmp_path / EX01.module_file)
    os.chmod(python.parent.parent, 0o755)
    os.chmod(deps, 0o700)
    try:
        done = shardlab(
            "grade",
            str(tmp_path),
            "--out",
            str(tmp_path / "out"),
            "--exercise",
            "ex01",
            "--isolation",
            "bubblewrap",
            python=python,
            env={"SHARDLAB_CACHE": str(tmp_path / "cache")},
        )
    finally:
        os.chmod(deps, 0o755)
        os.chmod(python.parent.parent, 0o700)
    assert done.returncode == 2, done.stdout + done.stderr
    assert (
        "shardlab grade: a confined worker (bubblewrap, memory limit 6 GiB) does not work here"
        in done.stderr
    )
    assert "jax" in done.stderr and str(deps) in done.stderr
    assert not (tmp_path / "out" / "report.json").exists()


def harness_child(
    rootdir: Path,
    test_file: Path,
    *,
    worker_memory: int,
    early: tuple[str, str] = ("-", "-"),
    pytest_args: list[str] = (),
) -> list[str]:
    """The grading child's command (grader.grading.child) running `test_file` with a 6 GiB harness; early:
    the level and folder of the worker whose zygote it starts first."""
    return [
        sys.executable,
        "-I",
        "-m",
        "grader.grading.child",
        str(6 * GIB),
        str(worker_memory),
        str(1 << 28),
        *early,
        "--",
        str(test_file),
        "-q",
        "-p",
        "no:cacheprovider",
        f"--rootdir={rootdir}",
        *pytest_args,
    ]


def test_harness_limits_leave_room_for_the_workers(tmp_path):
    """The harness's own limit is its soft limit; the hard one is the worker's when larger, or none."""
    probe = tmp_path / "test_limits.py"
    probe.write_text(
        textwrap.dedent(f"""
        import json, resource
        def test_write():
            with open({str(tmp_path / "limits.json")!r}, "a") as out:
                out.write(json.dumps(resource.getrlimit(resource.RLIMIT_AS)) + "\\n")
    """)
    )
    for worker in (8 * GIB, 3 * GIB, 0):
        subprocess.run(
            harness_child(tmp_path, probe, worker_memory=worker),
            cwd=tmp_path,
            capture_output=True,
            check=True,
        )
    seen = [json.loads(line) for line in (tmp_path / "limits.json").read_text().splitlines()]
    assert seen == [[6 * GIB, 8 * GIB], [6 * GIB, 6 * GIB], [6 * GIB, -1]]


def _zygotes_of(folder: Path) -> list:
    import psutil

    found = []
    for process in psutil.process_iter(["cmdline"]):
        line = process.info["cmdline"] or []
        if "grader.worker.zygote" in line and str(folder) in line:
            found.append(process)
    return found


@pytest.mark.parametrize("asked_memory", [4 * GIB, 5 * GIB], ids=["same", "other"])
def test_the_harness_takes_over_the_zygote_its_entry_point_started(tmp_path, asked_memory):
    """The grading child starts the worker's zygote before importing anything heavy; the harness's session
    serves from it when it asks for the same worker (folder, level, limits), and stops it and starts its
    own when it asks for another. Nothing is left running either way, and the level the grading process
    chose and proved is not probed again."""
    folder = tmp_path / "student"
    folder.mkdir()
    shutil.copy(catalog.get("ex01").solution_path(), folder)
    probe = tmp_path / "test_probe.py"
    probe.write_text(
        textwrap.dedent(f"""
        import json
        from grader.harness.session import session_of
        from grader.sandbox import confinement
        def test_worker(pytestconfig):
            probed = confinement._probe.cache_info().misses  # the level: the early zygote's, not probed
            worker = session_of(pytestconfig).the_worker()
            worker.warm_up()
            with open({str(tmp_path / "seen.json")!r}, "w") as out:
                json.dump([worker.started_early, probed], out)
    """)
    )
    level = confinement.choose_isolation("auto")
    done = subprocess.run(
        harness_child(
            tmp_path,
            probe,
            worker_memory=4 * GIB,
            early=(level.value, str(folder)),
            pytest_args=[
                "-p",
                "grader.harness.pytest_plugin",
                f"--impl={folder}",
                "--isolate",
                f"--isolation={level.value}",
                f"--worker-memory={asked_memory}",
            ],
        ),
        cwd=tmp_path,
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert json.loads((tmp_path / "seen.json").read_text()) == [asked_memory == 4 * GIB, 0]
    assert _zygotes_of(folder) == []
