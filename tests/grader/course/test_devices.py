"""Device forcing: this session has the 8 devices it asked for, and a conflicting request (XLA_FLAGS or
JAX_NUM_CPU_DEVICES asking for another count) is refused as a set-up error naming the variable and the fix,
by the library, by `shardlab check` and by plain pytest alike: never as the student's crash."""

import os
import subprocess
import sys

import jax
import pytest

from grader.cli import setup_error
from grader.course import paths
from grader.course.devices import (
    HOST_DEVICES,
    DeviceCountError,
    check_environment,
    force_host_devices,
    verify_host_devices,
)

FLAG = "--xla_force_host_platform_device_count"
# Each conflict, with what its message must name: the variable and the fix in shell words.
CONFLICTS = {
    "XLA_FLAGS": (
        {"XLA_FLAGS": f"{FLAG}=4"},
        ["XLA_FLAGS asks for 4 host devices", "`unset XLA_FLAGS`", f"{FLAG}=8"],
    ),
    "JAX_NUM_CPU_DEVICES": (
        {"JAX_NUM_CPU_DEVICES": "4"},
        ["JAX_NUM_CPU_DEVICES=4", "`unset JAX_NUM_CPU_DEVICES`", "`export JAX_NUM_CPU_DEVICES=8`"],
    ),
}
RECIPE = 'jax.config.update("jax_num_cpu_devices", 8)'  # the experiment recipe every message gives


def test_the_session_runs_on_the_forced_host_devices():
    assert jax.device_count() == HOST_DEVICES
    verify_host_devices()


def test_another_count_is_refused(monkeypatch):
    with pytest.raises(DeviceCountError, match="shardlab needs 4"):
        verify_host_devices(4)
    monkeypatch.setenv("XLA_FLAGS", "--xla_force_host_platform_device_count=2")
    with pytest.raises(DeviceCountError, match="asks for 2 host devices"):
        force_host_devices(8)


def test_the_flag_is_added_once(monkeypatch):
    monkeypatch.setenv("XLA_FLAGS", "--xla_cpu_enable_fast_math=false")
    force_host_devices(8)
    force_host_devices(8)
    assert os.environ["XLA_FLAGS"].count("--xla_force_host_platform_device_count=8") == 1


@pytest.mark.parametrize("conflict", CONFLICTS)
def test_each_conflict_names_its_cause_and_fix(conflict, monkeypatch):
    env, named = CONFLICTS[conflict]
    with pytest.raises(DeviceCountError) as raised:
        check_environment(environ=env)
    for words in [*named, RECIPE]:
        assert words in str(raised.value)
    for variable, value in env.items():  # force_host_devices refuses it the same way
        monkeypatch.setenv(variable, value)
    with pytest.raises(DeviceCountError, match=named[0]):
        force_host_devices()


@pytest.mark.parametrize(
    "env",
    [
        {"JAX_NUM_CPU_DEVICES": "eight"},
        {"XLA_FLAGS": f"{FLAG}=4 {FLAG}=8"},
        {"XLA_FLAGS": f"{FLAG}=8", "JAX_NUM_CPU_DEVICES": "2"},
    ],
)
def test_any_request_but_8_is_refused(env):
    with pytest.raises(DeviceCountError):
        check_environment(environ=env)


def test_both_variables_at_8_are_fine_and_leave_one_request(monkeypatch):
    """JAX_NUM_CPU_DEVICES goes: inherited, it would win over the XLA_FLAGS ex12's srun tasks are given."""
    monkeypatch.setenv("XLA_FLAGS", f"{FLAG}=8")
    monkeypatch.setenv("JAX_NUM_CPU_DEVICES", "8")
    check_environment()
    force_host_devices()
    assert os.environ["XLA_FLAGS"] == f"{FLAG}=8" and "JAX_NUM_CPU_DEVICES" not in os.environ


def test_only_the_commands_that_run_tests_are_refused(monkeypatch):
    monkeypatch.setenv("JAX_NUM_CPU_DEVICES", "4")
    for command in ("check", "grade", "grade-batch", "calibrate", "dev-check"):
        assert "JAX_NUM_CPU_DEVICES=4" in setup_error(command)
    for command in ("list", "release", "stubs"):
        assert setup_error(command) is None


# ------------------------------------------------------------------------------- real processes


def run_with(conflict: str, *command: str) -> subprocess.CompletedProcess:
    """`command` from the repo root, in this environment with only `conflict`'s request for devices."""
    env = {k: v for k, v in os.environ.items() if k not in ("XLA_FLAGS", "JAX_NUM_CPU_DEVICES")}
    return subprocess.run(
        [sys.executable, *command],
        cwd=paths.REPO_ROOT,
        env=env | CONFLICTS[conflict][0],
        capture_output=True,
        text=True,
        timeout=300,
    )


@pytest.mark.parametrize("conflict", CONFLICTS)
def test_check_says_set_up_error_not_crash(conflict):
    done = run_with(conflict, "-m", "grader.cli", "check", "ex01")
    assert done.returncode == 2, done.stdout + done.stderr
    assert done.stderr.startswith("shardlab check: set-up error: ")
    for words in [*CONFLICTS[conflict][1], RECIPE]:
        assert words in done.stderr
    for blame in ("Hint:", "Edit exercises", "crash"):  # nothing of a student's failure
        assert blame not in done.stdout + done.stderr


@pytest.mark.parametrize("conflict", CONFLICTS)
def test_plain_pytest_is_a_usage_error_without_traceback(conflict):
    done = run_with(
        conflict, "-m", "pytest", "tests/exercises/ex01_meshes", "-p", "no:cacheprovider"
    )
    assert done.returncode == pytest.ExitCode.USAGE_ERROR, done.stdout + done.stderr
    assert "ERROR: set-up error: " in done.stderr
    for words in CONFLICTS[conflict][1]:
        assert words in done.stderr
    assert (
        "Traceback" not in done.stdout + done.stderr and "conftest" not in done.stdout + done.stderr
    )
