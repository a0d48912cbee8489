"""Forcing the host CPU devices every test runs on, before JAX starts its backend."""

from __future__ import annotations

import os
import re

from grader.core.errors import ShardlabError

HOST_DEVICES = 8
_FLAG = "--xla_force_host_platform_device_count"


def cores() -> int:
    """The cores this process may run on (what the forced host devices share)."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


class DeviceCountError(ShardlabError, RuntimeError):
    pass


def force_host_devices(count: int = HOST_DEVICES) -> None:
    """Ask XLA for `count` CPU devices. Must run before jax is imported; a conflicting request raises."""
    flags = os.environ.get("XLA_FLAGS", "")
    found = re.search(rf"{_FLAG}=(\d+)", flags)
    if found and int(found.group(1)) != count:
        raise DeviceCountError(
            f"XLA_FLAGS asks for {found.group(1)} host devices but shardlab grades on {count}: "
            f"unset {_FLAG} in XLA_FLAGS"
        )
    if not found:
        os.environ["XLA_FLAGS"] = f"{flags} {_FLAG}={count}".strip()
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
            "import jax only after shardlab's conftest has run."
        )
