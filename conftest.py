"""Root conftest: force the host devices before anything imports jax, then load shardlab's plugin."""

from grader.course.devices import force_host_devices

force_host_devices()

pytest_plugins = ["grader.harness.pytest_plugin"]
