"""Root conftest: force the host devices before anything imports jax, then load shardlab's plugin."""

import os
import tempfile

from grader.course.devices import force_host_devices
from grader.harness import timing_lock

force_host_devices()

# One timing lock for a whole pytest run and every grader it starts (grader.harness.timing_lock): with
# the suite split over workers (pytest -n 2), a speedup test, wherever it runs, measures while no
# other exercise test runs. Set once, by the first process; the workers and graders inherit it.
os.environ.setdefault(timing_lock.LOCK_DIR, os.path.join(tempfile.gettempdir(), f"shardlab-timing-{os.getpid()}"))

pytest_plugins = ["grader.harness.pytest_plugin"]
