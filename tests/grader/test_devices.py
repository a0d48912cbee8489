"""Device forcing: this session has the 8 devices it asked for, and a conflicting request is refused."""

import jax
import pytest

from grader.course.devices import HOST_DEVICES, DeviceCountError, force_host_devices, verify_host_devices


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
    import os
    assert os.environ["XLA_FLAGS"].count("--xla_force_host_platform_device_count=8") == 1
