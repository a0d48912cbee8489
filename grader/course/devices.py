"""Forcing the host CPU devices every test runs on, before JAX starts its backend.

Two variables ask jax for a number of host devices: XLA_FLAGS (--xla_force_host_platform_device_count=N)
and JAX_NUM_CPU_DEVICES, which wins over XLA_FLAGS. Either one asking for another count than the course's
is a set-up error, said before anything runs (`check_environment`), never a crash blamed on the student's
code. Every message about the device count is written here."""

from __future__ import annotations

import contextlib
import os
import re
from collections.abc import Callable, Iterator, Mapping

from grader.core.errors import ShardlabError

HOST_DEVICES = 8
_FLAG = "--xla_force_host_platform_device_count"
NUM_CPU_DEVICES = "JAX_NUM_CPU_DEVICES"


def cores() -> int:
    """The cores this process may run on (what the forced host devices share)."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


class DeviceCountError(ShardlabError, RuntimeError):
    pass


def experiment_recipe(count: int = HOST_DEVICES) -> str:
    """The one way to experiment on the course's devices (the handout's README, "Experimenting on 8 devices")."""
    return f'import jax; jax.config.update("jax_num_cpu_devices", {count})'


def _experiment_hint(count: int) -> str:
    return (
        f"To experiment on {count} devices yourself, start your script, REPL or notebook with "
        f"`{experiment_recipe(count)}` instead of setting a variable."
    )


def _flag_conflict(value: str, count: int) -> str:
    return (
        f"XLA_FLAGS asks for {value} host devices ({_FLAG}={value}) but shardlab grades on {count}. "
        f"Fix: `unset XLA_FLAGS` (or set {_FLAG}={count} in it), then run the command again. "
        + _experiment_hint(count)
    )


def _variable_conflict(value: str, count: int) -> str:
    return (
        f"{NUM_CPU_DEVICES}={value} asks jax for {value} CPU devices but shardlab grades on {count}. "
        f"Fix: `unset {NUM_CPU_DEVICES}` (or `export {NUM_CPU_DEVICES}={count}`), then run the command "
        "again. " + _experiment_hint(count)
    )


def _is_count(value: str, count: int) -> bool:
    try:
        return int(value) == count
    except ValueError:
        return False


def check_environment(count: int = HOST_DEVICES, environ: Mapping[str, str] = os.environ) -> None:
    """Raise DeviceCountError, naming the variable, its value and the fix, when XLA_FLAGS or
    JAX_NUM_CPU_DEVICES asks for another number of host devices than `count`. Reads only."""
    for value in re.findall(rf"{_FLAG}=(\S*)", environ.get("XLA_FLAGS", "")):
        if not _is_count(value, count):
            raise DeviceCountError(_flag_conflict(value, count))
    value = environ.get(NUM_CPU_DEVICES)
    if value is not None and not _is_count(value, count):
        raise DeviceCountError(_variable_conflict(value, count))


def force_host_devices(count: int = HOST_DEVICES) -> None:
    """Ask XLA for `count` CPU devices. Must run before jax is imported; a conflicting request raises."""
    check_environment(count)
    flags = os.environ.get("XLA_FLAGS", "")
    if _FLAG not in flags:
        os.environ["XLA_FLAGS"] = f"{flags} {_FLAG}={count}".strip()
    # One request, in XLA_FLAGS: JAX_NUM_CPU_DEVICES (checked above: `count` too) would win over the XLA_FLAGS a
    # child given this environment sets for another count (ex12's srun tasks, grader.cluster.srun).
    os.environ.pop(NUM_CPU_DEVICES, None)
    # The course grades on host devices; a machine with an accelerator can opt in with JAX_PLATFORMS.
    os.environ.setdefault("JAX_PLATFORMS", "cpu")


def verify_host_devices(count: int = HOST_DEVICES) -> None:
    """Raise if the backend came up with another device count (jax was imported too early)."""
    import jax

    actual = jax.device_count()
    if actual != count:
        raise DeviceCountError(
            f"JAX started with {actual} {jax.default_backend()} device(s), shardlab needs {count}. "
            f"jax was imported before the device count was forced ({_FLAG}={count} in XLA_FLAGS); "
            "import jax only after shardlab's conftest has run (in a notebook: restart the kernel and run "
            "this first)."
        )


_CONFIG_NAME = "jax_num_cpu_devices"


def import_time_request(value: object, module: str, count: int = HOST_DEVICES) -> str:
    """What a module asking for `value` devices at import is told: one message on every route."""
    return (
        f'remove the jax.config.update("{_CONFIG_NAME}", {value!r}) line from {module}: the check and '
        f"grading give JAX {count} devices themselves, so a module may ask only for those {count}; put "
        f"that line in a scratch script for your own experiments."
    )


def refuse_other_requests(module: str, count: int = HOST_DEVICES) -> Callable[[], None]:
    """From now on `jax.config.update("jax_num_cpu_devices", count)` is a no-op and any other value raises
    DeviceCountError; returns what undoes it. A no-op on every route: honouring it would depend on whether
    the process's backend has started (the check's and a graded notebook's have, a fresh worker's has
    not), and a request must never change the devices a process shares with other exercises' tests or
    ex12's tasks."""
    import jax

    config = type(jax.config)
    original = config.update

    def update(self, name: str, value: object) -> None:
        if name != _CONFIG_NAME:
            return original(self, name, value)
        if isinstance(value, bool) or not isinstance(value, int) or value != count:
            raise DeviceCountError(import_time_request(value, module, count))

    config.update = update

    def undo() -> None:
        config.update = original

    return undo


@contextlib.contextmanager
def import_time_requests_checked(module: str, count: int = HOST_DEVICES) -> Iterator[None]:
    """refuse_other_requests while a student module is imported."""
    undo = refuse_other_requests(module, count)
    try:
        yield
    finally:
        undo()
