"""The suite's local Slurm leaves nothing behind however its owner ends: killed with SIGKILL while a job runs
(so that slurmstepd, which ignores SIGTERM, is up), the owner's reaper kills the daemons, the step daemon and
the job, and removes the cluster's folder."""

from __future__ import annotations

import importlib.util
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

LOCAL_SLURM = Path(__file__).with_name("local_slurm.py")
OWNER = f"""
import importlib.util, sys, time
spec = importlib.util.spec_from_file_location("local_slurm", {str(LOCAL_SLURM)!r})
local = importlib.util.module_from_spec(spec)
sys.modules["local_slurm"] = local
spec.loader.exec_module(local)
with local.started() as cluster:
    cluster.run("sbatch", "--wrap", "sleep 300", "--output", "/dev/null")
    while "RUNNING" not in cluster.run("squeue", "--noheader", "--format=%T").stdout:
        time.sleep(0.2)
    print(cluster.folder, flush=True)
    time.sleep(600)
"""


def local_slurm():
    spec = importlib.util.spec_from_file_location("shardlab_local_slurm_reaped", LOCAL_SLURM)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


@pytest.mark.slow
def test_a_killed_owner_leaves_no_slurm_daemon_or_job_behind():
    local = local_slurm()
    if local.missing():
        pytest.skip(local.missing())
    owner = subprocess.Popen(
        [sys.executable, "-c", OWNER], stdout=subprocess.PIPE, text=True, start_new_session=True
    )
    try:
        folder = Path(owner.stdout.readline().strip())
        assert str(folder) != ".", "the local Slurm did not start"
        kinds = {"munged", "slurmctld", "slurmd", "slurmstepd", "sleep"}
        deadline = time.monotonic() + 30  # the job's step starts a moment after squeue says RUNNING
        while not kinds <= (running := {p.name() for p in local.cluster_processes(folder)}):
            assert time.monotonic() < deadline, running
            time.sleep(0.2)
        os.kill(owner.pid, signal.SIGKILL)
        owner.wait()
        deadline = time.monotonic() + 30
        while local.cluster_processes(folder) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert local.cluster_processes(folder) == []
        assert not folder.exists()
    finally:
        if owner.poll() is None:
            owner.kill()
