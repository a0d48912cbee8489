"""Root conftest: force the host devices before anything imports jax, then load shardlab's plugin."""

import os
import tempfile

import pytest

from grader.course.devices import DeviceCountError, force_host_devices
from grader.harness import timing_lock

try:
    force_host_devices()
    _SETUP_ERROR = None
except DeviceCountError as exc:
    # Raised here, it would be a traceback "while loading conftest"; from pytest_configure it is a usage error.
    _SETUP_ERROR = str(exc)


# before the plugin's pytest_configure starts jax on the wrong devices
@pytest.hookimpl(tryfirst=True)
def pytest_configure(config):
    if _SETUP_ERROR:
        raise pytest.UsageError(f"set-up error: {_SETUP_ERROR}")


# One timing lock for a whole pytest run and every grader it starts (grader.harness.timing_lock): with
# the suite split over workers (pytest -n 2), a speedup test, wherever it runs, measures while no
# other exercise test runs. Set once, by the first process; the workers and graders inherit it.
os.environ.setdefault(
    timing_lock.LOCK_DIR, os.path.join(tempfile.gettempdir(), f"shardlab-timing-{os.getpid()}")
)

pytest_plugins = ["grader.harness.pytest_plugin"]
