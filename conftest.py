"""Root conftest: force the host devices before anything imports jax, then load shardlab's plugin."""

from grader.devices import force_host_devices

force_host_devices()

pytest_plugins = ["grader.pytest_plugin"]
