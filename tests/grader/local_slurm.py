"""A real Slurm on this machine, for the cluster tests and benches: Debian's slurm-wlm and munge (which .ci/run
installs), started as the caller's own child processes: munged, slurmctld and one slurmd on localhost, with a
config folder of their own and free ports, and torn down after with every process their jobs left
(proctrack/linuxproc does not kill a double-forked process on scancel). task/affinity binds each task to the
cores it asked for. Without slurmdbd, `sacct` does not work here: job state comes from squeue and scontrol.

    with started() as cluster:            # after missing() said nothing is missing
        cluster.run("sbatch", ...)        # Slurm's commands need cluster.env (SLURM_CONF)

Loaded by file path (tests/grader/conftest.py's `local_slurm` fixture; bench/slurm_class.py).

Nothing outlives the caller, however it ends: slurmd and slurmstepd run in sessions of their own (so a
terminal's SIGINT never reaches them) and slurmstepd ignores SIGTERM, so a reaper process started first waits
for the caller's end of a pipe to close (its exit, SIGINT or SIGKILL alike) and then kills every process of
the cluster and removes its folder. Measured before: an interrupted run left slurmd and slurmstepd running.

    python tests/grader/local_slurm.py --reap-on-eof     # the reaper; its folder comes on its first line
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import psutil

DAEMONS = ("munged", "slurmctld", "slurmd")
REAP = "--reap-on-eof"
COMMANDS = ("sbatch", "squeue", "scontrol", "scancel", "srun", "sinfo")
START_SECONDS = 30.0


@dataclass
class LocalSlurm:
    folder: Path
    env: dict[str, str]  # the caller's environment plus SLURM_CONF: what Slurm's commands need
    cpus: int

    def run(
        self, *command: str, check: bool = True, timeout: float = 60
    ) -> subprocess.CompletedProcess:
        done = subprocess.run(
            list(command), env=self.env, capture_output=True, text=True, timeout=timeout
        )
        if check and done.returncode != 0:
            raise RuntimeError(f"{' '.join(command)} failed ({done.returncode}): {done.stderr}")
        return done


def missing() -> str | None:
    """Why no local Slurm can start here, or None."""
    absent = [name for name in (*DAEMONS, *COMMANDS) if shutil.which(name) is None]
    if absent:
        return f"no Slurm here ({', '.join(absent)} missing: apt-get install slurm-wlm munge; .ci/run does)"
    if os.geteuid() != 0:
        return "the local Slurm runs its daemons as root (slurmd starts jobs as their users)"
    return None


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def config(folder: Path, cpus: int) -> str:
    return "\n".join(
        [
            "ClusterName=shardlab-tests",
            "SlurmctldHost=localhost",
            f"SlurmctldPort={_free_port()}",
            f"SlurmdPort={_free_port()}",
            "SlurmUser=root",
            "SlurmdUser=root",
            "AuthType=auth/munge",
            f"AuthInfo=socket={folder / 'munge.socket'}",
            "CredType=cred/munge",
            f"StateSaveLocation={folder / 'state'}",
            f"SlurmdSpoolDir={folder / 'spool'}",
            f"SlurmctldPidFile={folder / 'slurmctld.pid'}",
            f"SlurmdPidFile={folder / 'slurmd.pid'}",
            f"SlurmctldLogFile={folder / 'slurmctld.log'}",
            f"SlurmdLogFile={folder / 'slurmd.log'}",
            "ProctrackType=proctrack/linuxproc",
            "TaskPlugin=task/affinity",
            "JobAcctGatherType=jobacct_gather/none",
            "AccountingStorageType=accounting_storage/none",
            "SelectType=select/cons_tres",
            "SelectTypeParameters=CR_Core",
            "ReturnToService=2",
            "MpiDefault=none",
            "MinJobAge=600",  # scontrol still knows an ended job's state for 10 minutes
            f"NodeName=localhost NodeAddr=127.0.0.1 CPUs={cpus} SocketsPerBoard=1 CoresPerSocket={cpus} "
            "ThreadsPerCore=1 RealMemory=16000 State=UNKNOWN",
            "PartitionName=debug Nodes=localhost Default=YES MaxTime=INFINITE State=UP",
            "",
        ]
    )


def cluster_processes(folder: Path) -> list[psutil.Process]:
    """Every process of the cluster in `folder`: its daemons (their command lines name the folder), its jobs
    (their environment names its slurm.conf), double-forked ones included, and its step daemons, which rewrite
    their command line and environment as their title ("slurmstepd: [1.batch]") but keep slurmd's log in the
    folder open."""
    conf, found = str(folder / "slurm.conf"), []
    for process in psutil.process_iter():
        try:
            if process.pid != os.getpid() and (
                str(folder) in " ".join(process.cmdline())
                or process.environ().get("SLURM_CONF") == conf
                or any(path.startswith(f"{folder}/") for path in _open_paths(process.pid))
            ):
                found.append(process)
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            pass
    return found


def _open_paths(pid: int) -> list[str]:
    """What `pid` holds open, deleted files included (psutil's open_files leaves those out)."""
    fds = f"/proc/{pid}/fd"
    try:
        return [os.readlink(f"{fds}/{fd}") for fd in os.listdir(fds)]
    except OSError:
        return []


def reap(folder: Path) -> None:
    for process in cluster_processes(folder):
        try:
            process.kill()
        except psutil.NoSuchProcess:
            pass


def start_reaper(folder: Path) -> int:
    """The reaper, in a session of its own: it reaps `folder`'s cluster once the returned pipe end closes."""
    read, write = os.pipe()
    subprocess.Popen(
        [sys.executable, __file__, REAP], stdin=read, start_new_session=True, close_fds=True
    )
    os.close(read)
    os.write(write, f"{folder}\n".encode())
    return write


def reaper_main() -> None:
    folder = Path(sys.stdin.readline().strip())
    sys.stdin.read()  # until the caller's end closes, however the caller ended
    reap(folder)
    shutil.rmtree(folder, ignore_errors=True)


@contextmanager
def started() -> Iterator[LocalSlurm]:
    # munged refuses a socket folder any parent of which is not searchable by all; pytest's tmp_path is 0700.
    folder = Path(tempfile.mkdtemp(prefix="shardlab-slurm-"))
    folder.chmod(0o755)
    reaper = start_reaper(folder)
    for sub in ("state", "spool"):
        (folder / sub).mkdir()
    key = folder / "munge.key"
    key.write_bytes(os.urandom(1024))
    key.chmod(0o600)
    cpus = len(os.sched_getaffinity(0))
    (folder / "slurm.conf").write_text(config(folder, cpus))
    env = {
        name: value
        for name, value in os.environ.items()  # an outer allocation must not leak into ours
        if not name.startswith(("SLURM_", "SBATCH_", "SRUN_"))
    } | {"SLURM_CONF": str(folder / "slurm.conf")}
    daemons: list[subprocess.Popen] = []
    logs = open(folder / "daemons.log", "ab")
    try:
        daemons.append(
            subprocess.Popen(
                [
                    "munged",
                    "--foreground",
                    "--force",
                    f"--socket={folder / 'munge.socket'}",
                    f"--key-file={key}",
                    f"--pid-file={folder / 'munged.pid'}",
                    f"--log-file={folder / 'munged.log'}",
                    f"--seed-file={folder / 'munged.seed'}",
                ],
                stdout=logs,
                stderr=logs,
                start_new_session=True,
            )
        )
        deadline = time.monotonic() + START_SECONDS
        while not (folder / "munge.socket").exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        for command in (["slurmctld", "-D", "-i"], ["slurmd", "-D", "-N", "localhost"]):
            daemons.append(
                subprocess.Popen(command, env=env, stdout=logs, stderr=logs, start_new_session=True)
            )
        cluster = LocalSlurm(folder, env, cpus)
        while cluster.run("sinfo", "--noheader", "--format=%T", check=False).stdout.strip() not in (
            "idle",
            "mixed",
        ):
            if any(daemon.poll() is not None for daemon in daemons) or time.monotonic() > deadline:
                logs.flush()
                said = "".join(
                    path.read_text()[-2000:]
                    for path in (folder / "daemons.log", folder / "slurmd.log")
                    if path.exists()
                )
                raise RuntimeError(f"the local Slurm did not come up: {said}")
            time.sleep(0.2)
        yield cluster
    finally:
        if daemons:
            subprocess.run(["scancel", "--full", "--user", "root"], env=env, capture_output=True)
        for daemon in reversed(daemons):
            daemon.terminate()
        psutil.wait_procs([psutil.Process(d.pid) for d in daemons if d.poll() is None], timeout=10)
        for daemon in daemons:
            if daemon.poll() is None:
                daemon.kill()
            daemon.wait()
        reap(folder)  # what the jobs left, and the step daemons
        logs.close()
        shutil.rmtree(folder, ignore_errors=True)
        os.close(reaper)


if __name__ == "__main__" and sys.argv[1:] == [REAP]:
    reaper_main()
