"""ex12 under srun (`shardlab check ex12 --launcher srun`, grader.cluster.srun), on a real Slurm (the
`local_slurm` fixture: Debian's slurm-wlm on localhost, 2 CPUs): the reference passes with jax's own reading
of Slurm's environment, a stub is not attempted, a module that never joins fails, a hang is a timeout that
leaves nothing running, grading refuses the launcher; and the handout README's srun example runs as written."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from grader.cluster import srun
from grader.cluster.driver import load_driver
from grader.cluster.run import ClusterCrashed, ClusterTimeout
from grader.cluster.run_cluster import run_cluster
from grader.commands import student
from grader.core.results import Category
from grader.course import paths
from grader.platforms import handout

pytestmark = pytest.mark.xdist_group("test_cluster_srun")

MODULE = "ex12_multi_controller.py"
REFERENCE = paths.SOLUTIONS_DIR / MODULE
DRIVER = paths.EXERCISE_TESTS_DIR / "ex12_multi_controller" / "driver.py"
JOIN = """    jax.distributed.initialize(
        coordinator_address=coordinator_address, num_processes=num_processes, process_id=process_id
    )
"""
BARRIER = "    multihost_utils.sync_global_devices(name)\n"
# The venv's executables, found beside the Python running the tests (.ci/run does not activate the venv).
OWN_TOOLS = os.path.dirname(sys.executable)


def _path(env: dict[str, str], *, activated: bool) -> dict[str, str]:
    """`env` with the venv's bin/ first on PATH (activated) or not on it at all (a user who runs
    .venv/bin/shardlab without activating)."""
    rest = [entry for entry in env.get("PATH", os.defpath).split(os.pathsep) if entry != OWN_TOOLS]
    return env | {"PATH": os.pathsep.join([OWN_TOOLS, *rest] if activated else rest)}


def _module(folder: Path, source: str) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / MODULE).write_text(source)
    return folder


def _reference_with(old: str, new: str) -> str:
    source = REFERENCE.read_text()
    assert old in source, f"the reference no longer has {old!r}"
    return source.replace(old, new)


def _run_processes(slurm_conf: str) -> list[psutil.Process]:
    """What is still running of this cluster's ex12 runs: srun and its tasks (both name the task module)."""
    found = []
    for process in psutil.process_iter(["cmdline"]):
        try:
            if (
                any("grader.cluster.srun" in part for part in process.info["cmdline"] or ())
                and process.environ().get("SLURM_CONF") == slurm_conf
            ):
                found.append(process)
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            pass
    return found


@pytest.fixture
def on_slurm(local_slurm, monkeypatch):
    """This process's environment pointed at the local Slurm: the harness's pytest, and srun under it,
    inherit it."""
    monkeypatch.setenv("SLURM_CONF", local_slurm.env["SLURM_CONF"])
    return local_slurm


def _check(folder: Path) -> dict[str, object]:
    """`shardlab check ex12 --launcher srun` on `folder`: each visible test's result by function."""
    report = student.check("ex12", impl=folder, record=False, launcher="srun")
    (item,) = report.checks
    assert not item.crash, item.crash
    return {test.function: test for test in item.tests}


@pytest.mark.slow
def test_shardlab_check_passes_for_the_reference_under_srun(local_slurm, tmp_path):
    folder = _module(tmp_path / "solutions", REFERENCE.read_text())
    begun = time.monotonic()
    done = subprocess.run(
        [
            os.path.join(OWN_TOOLS, "shardlab"),
            "check",
            "ex12",
            "--impl",
            str(folder),
            "--launcher",
            "srun",
        ],
        cwd=paths.REPO_ROOT,
        env=_path(local_slurm.env, activated=False),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert (
        "ex12_multi_controller: visible: 6 of 15 points checked, all pass (6 tests)" in done.stdout
    ), done.stdout
    print(f"shardlab check ex12 --launcher srun: {time.monotonic() - begun:.1f} s")
    assert not _run_processes(local_slurm.env["SLURM_CONF"])


@pytest.mark.slow
def test_the_stub_is_not_attempted_under_srun(on_slurm, tmp_path):
    folder = _module(tmp_path / "stub", (paths.EXERCISES_DIR / MODULE).read_text())
    results = _check(folder)
    assert len(results) == 6
    assert {test.category for test in results.values()} == {Category.NOT_ATTEMPTED.value}, {
        name: (test.category, test.message) for name, test in results.items()
    }


@pytest.mark.slow
def test_a_module_that_never_joins_fails_process_summary_under_srun(on_slurm, tmp_path):
    """No coordinator of the grader's watches the join under srun: the answers alone show it."""
    folder = _module(tmp_path / "alone", _reference_with(JOIN, "    pass\n"))
    summary = _check(folder)["test_process_summary"]
    assert summary.category == Category.FAILED.value, summary.message
    assert "never joined" in summary.message and "'process_count': 1" in summary.message, (
        summary.message
    )


@pytest.mark.slow
def test_a_hang_in_barrier_is_a_timeout_and_leaves_nothing_running(on_slurm, tmp_path):
    """Every process sleeps in barrier, deaf to SIGTERM: stopped after the quiet time, the steps it never
    finished are timeouts saying where each process stood, and neither srun nor a task survives the run."""
    hang = "    import signal, time\n    signal.signal(signal.SIGTERM, signal.SIG_IGN)\n    time.sleep(3600)\n"
    folder = _module(tmp_path / "hang", _reference_with(BARRIER, hang))
    run = run_cluster(
        load_driver(DRIVER),
        folder / MODULE,
        processes=2,
        devices_per_process=4,
        quiet_seconds=4,
        launcher="srun",
    )
    assert run.stopped_after is not None and not run.observed_joins
    for process in range(2):
        assert run.result(process, "global_sum")["value"] == pytest.approx(
            float(run.inputs.given.sum()), rel=1e-4
        )
        with pytest.raises(ClusterTimeout, match=f"process {process} was still in barrier"):
            run.result(process, "barrier")
    assert run.seconds < run.stopped_after + 10, "stopping the step took too long"
    assert run.left_behind() == ([], [])
    assert not _run_processes(on_slurm.env["SLURM_CONF"])


def test_a_run_srun_cannot_start_says_what_srun_said(on_slurm, monkeypatch):
    # srun reads it as if given --partition
    monkeypatch.setenv("SLURM_PARTITION", "no-such-partition")
    run = run_cluster(load_driver(DRIVER), REFERENCE, launcher="srun")
    assert run.stopped_after is None and run.seconds < 30
    for step in ("initialize", "barrier"):
        with pytest.raises(
            ClusterCrashed, match=r"srun ended \(1\) before any process started: srun: .*partition"
        ):
            run.result(1, step)


def test_srun_is_refused_with_isolate():
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "tests/exercises/ex12_multi_controller",
            "--isolate",
            "--launcher",
            "srun",
            "-q",
            "-p",
            "no:cacheprovider",
        ],
        cwd=paths.REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == pytest.ExitCode.USAGE_ERROR, done.stdout + done.stderr
    assert "--launcher srun cannot grade" in done.stderr and "trustworthy" in done.stderr, (
        done.stderr
    )
    with pytest.raises(srun.LauncherRefused, match="coordinator of the grader's"):
        from grader.sandbox import confinement

        run_cluster(
            load_driver(DRIVER), REFERENCE, launcher="srun", isolation=confinement.Isolation.PROCESS
        )


def test_srun_exits_are_read_from_what_srun_says():
    said = (
        "0: hello\nsrun: error: localhost: task 1: Exited with exit code 3\n"
        "srun: error: n2: tasks 0,2-3: Killed\nsrun: error: n3: task 9: Killed\n"
    )
    assert srun.task_exits(said, 4) == {1: 3, 0: -9, 2: -9, 3: -9}


# ---- the handout README's srun example -----------------------------------------------------------------------


def _readme_job(tmp_path: Path) -> str:
    """The bash block of the README's "Several processes on a cluster" section, as the handout renders it."""
    handout._write_templates(tmp_path, handout.DEFAULT_COURSE_NAME)
    readme = (tmp_path / "README.md").read_text()
    section = readme.split("## Several processes on a cluster (ex12)", 1)[1]
    (job,) = re.findall(r"```bash\n(.*?)```", section.split("\n## ", 1)[0], re.DOTALL)
    assert "srun python -c" in job
    return job


@pytest.mark.slow
def test_the_readme_srun_example_runs_on_slurm(local_slurm, tmp_path):
    """The README's job, run as written inside a 2-task allocation (its #SBATCH lines, for two GPU nodes, are
    comments to bash), by a student whose environment is activated (its `python` is the course's): srun starts
    2 processes of 4 host CPU devices against the reference, and each prints its own summary and the same sum
    and shape."""
    job = _readme_job(tmp_path / "handout")
    work = tmp_path / "work"
    shutil.copy(REFERENCE, _module(work / "exercises", "") / MODULE)
    (work / "job.sh").write_text(job)
    env = _path(local_slurm.env, activated=True) | {
        "XLA_FLAGS": "--xla_force_host_platform_device_count=4",
        "JAX_PLATFORMS": "cpu",
    }
    done = subprocess.run(
        ["salloc", "--ntasks=2", "--overcommit", "bash", "job.sh"],
        cwd=work,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    lines = [
        line
        for line in done.stdout.splitlines()
        if line.startswith("{") or re.match(r"[\d.]+ \(", line)
    ]
    summaries = sorted(line for line in lines if line.startswith("{"))
    assert summaries == [
        str({"process_index": i, "process_count": 2, "device_count": 8, "local_device_count": 4})
        for i in range(2)
    ], done.stdout + done.stderr
    # Process i's rows are all i, one per device: 4 rows of 3 zeros and 4 of 3 ones.
    assert [line for line in lines if not line.startswith("{")] == ["12.0 (8, 3)"] * 2, done.stdout
