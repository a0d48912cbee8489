"""No student can take another's resources, and Landlock as root is contained: real gradings (the
`shardlab grade` command, as an instructor runs it) of hostile submissions written by a student who has
read the grader's source.

- A fork bomb that fills its process budget and holds it, with processes spinning in sessions of their
  own and others taking memory until the kernel refuses (and starting again when one is killed), graded
  with a small --memory-limit side by side with an honest classmate: the classmate keeps every point, the
  bomb stays within its sandbox's budget and its submission's memory (sized from that limit, as
  report.json records it), earns nothing, and nothing of it outlives its grading.
- A worker under `--isolation landlock` run as root (Python under root's home here, so the sandbox cannot
  take another uid): it sends UDP and connects TCP to listeners the test opens on the host's loopback,
  reads its capabilities, tries to raise its limits back and to use a capability; so do ex12's
  processes, which may use TCP among themselves. A stub-based module that turns any success into a
  distinctive error: every test must stay "not attempted", and the listeners see nothing.
- A reference module that fills the disk (1 GiB in four files at import and a thread writing on, or the
  thread alone), graded beside an honest classmate under bubblewrap and Landlock as root: each test that
  found its folder full crashes saying it wrote more than the bound, the host's disk does not grow by the
  bound, and the classmate keeps every point; ex12's processes doing the same have every result refused.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import textwrap
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import psutil
import pytest

from grader.cluster.driver import load_driver
from grader.cluster.run import ClusterFilledDisk
from grader.cluster.run_cluster import run_cluster
from grader.course import catalog
from grader.grading import engine
from grader.sandbox import cgroups, confinement, disk, users

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("test_hostile_resources")]

EX01, EX12 = catalog.get("ex01"), catalog.get("ex12")
GIB = 1 << 30
# the bomb's --memory-limit: its submission may hold 5 GiB (grader.grading.engine)
HOG_LIMIT = 2 * GIB
BUDGET = confinement.WorkerLimits().processes
HOST_PORT = "__SHARDLAB_HOST_PORT__"  # replaced by the port of the test's listeners
V1_GROUPS = {"pids", "memory"} <= set(cgroups.hierarchies()) and cgroups.hierarchies()[
    "memory"
].version == 1


def source(exercise, stub: bool = False) -> str:
    path = exercise.stub_path() if stub else exercise.solution_path()
    return "".join(
        line for line in path.read_text().splitlines(keepends=True) if "### " not in line
    )


def code(text: str) -> str:
    return "\n" + textwrap.dedent(text).strip("\n") + "\n"


def grade(submission: Path, out: Path, *options: str, test_timeout: int = 10) -> subprocess.Popen:
    """`shardlab grade` in a session of its own, as grade-batch starts it."""
    command = [
        sys.executable,
        "-m",
        "grader.cli",
        "grade",
        str(submission),
        "--out",
        str(out),
        "--quiet",
        "--test-timeout",
        str(test_timeout),
        *options,
    ]
    return subprocess.Popen(
        command,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        stdin=subprocess.DEVNULL,
        start_new_session=True,
    )


def report(out: Path) -> dict:
    return json.loads((out / "report.json").read_text())


def categories(data: dict) -> set[str]:
    return {t["category"] for exercise in data["exercises"].values() for t in exercise["tests"]}


def end_sampling_and_gradings(stop: threading.Event, sampler: threading.Thread, *gradings) -> None:
    """Stop the sampler, and kill what is left of each grading (a session of its own) with all it started."""
    stop.set()
    sampler.join(timeout=10)
    for process in gradings:
        if process is not None and process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()


# --- a student's fork bomb and memory hog --------------------------------------------------------

# Run as a fresh small Python (a fork of it is cheap, unlike a fork of the worker with jax imported).
BOMB = code("""
    import os, sys, time

    # Each 64 MiB block really held: one byte written in each of its pages.
    HOG = "held = []\\nwhile True:\\n    try:\\n        block = bytearray(64 << 20)\\n    except MemoryError:\\n" \\
          "        break\\n    block[::4096] = bytes(len(block) // 4096)\\n    held.append(block)\\n" \\
          "import time\\nwhile True:\\n    time.sleep(1)\\n"

    def start(action):
        pid = os.fork()
        if pid == 0:
            try:
                os.setsid()           # a session (and a scheduling group, were it not for the cgroup) of its own
                action()
            finally:
                os._exit(0)
        return pid

    def hog():                        # a fresh Python: all of the address-space limit free for memory
        os.execv(sys.executable, [sys.executable, "-S", "-c", HOG])

    def spin():
        while True:
            pass

    def hold():
        while True:
            time.sleep(60)

    import resource

    room = resource.getrlimit(resource.RLIMIT_NPROC)[0] - 64   # its own worker keeps a few threads: it holds on
    hogs, holders, spinners = set(), [], 0
    while True:                       # hold on: whatever ends (a hog killed out of memory) starts again
        try:
            while (ended := os.waitpid(-1, os.WNOHANG)[0]):
                hogs.discard(ended)
        except ChildProcessError:
            pass
        try:
            if len(hogs) < 3:
                hogs.add(start(hog))
            elif spinners < 2:
                start(spin)
                spinners += 1
            elif len(holders) < room:
                holders.append(start(hold))
            else:
                time.sleep(0.05)
        except OSError:               # the process budget is full: memory first, a holder makes room
            if len(hogs) < 3 and holders:
                os.kill(holders.pop(), 9)
            time.sleep(0.02)
""")

FILLS_ITS_BUDGET = code(f"""
    import os as _os, sys as _sys, time as _time

    if _os.fork() == 0:
        _os.setsid()
        _os.execv(_sys.executable, [_sys.executable, "-S", "-c", {BOMB!r}])

    def _slowly(function):
        def slow(*args, **kwargs):
            _time.sleep(0.8)          # the grading lasts, and the bomb with it
            return function(*args, **kwargs)
        return slow

    for _name in ("make_mesh_2x4", "make_data_mesh", "place", "shard_table"):
        globals()[_name] = _slowly(globals()[_name])
""")


@dataclass
class Watch:
    """What the test saw of the hostile grading's groups, sampled twice a second."""

    # (time.monotonic(), tasks in
    samples: list[tuple[float, int, int, int]] = field(default_factory=list)
    #       the bomb's sandbox, bytes its submission's memory group holds, processes the kernel killed there)
    memory_limit: int = 0
    pids_groups: set[Path] = field(default_factory=set)
    memory_groups: set[Path] = field(default_factory=set)
    uids: set[int] = field(default_factory=set)  # the users the bomb's processes ran as
    pids: set[int] = field(default_factory=set)  # each process seen below the bomb's grading

    def between(self, begun: float, ended: float) -> tuple[list[int], list[int], int]:
        """Tasks and bytes held while the classmate was graded, and how many processes the kernel killed
        in the bomb's submission for want of memory meanwhile."""
        inside = [sample for sample in self.samples if begun <= sample[0] <= ended]
        kills = inside[-1][3] - inside[0][3] if inside else 0
        return [sample[1] for sample in inside], [sample[2] for sample in inside], kills


def watch(root: int, into: Watch, stop: threading.Event) -> None:
    """Sample the groups of every process below `root` (the hostile `shardlab grade`) until `stop`."""
    while not stop.wait(0.5):
        try:
            below = psutil.Process(root).children(recursive=True)
        except psutil.Error:
            continue
        into.pids.update(process.pid for process in below)
        for process in below:
            found = cgroups.cgroups_of(process.pid)
            if "pids" in found and found["pids"][1].name.startswith("shardlab-sandbox-"):
                into.pids_groups.add(found["pids"][1])
                try:
                    into.uids.add(process.uids().real)
                except psutil.Error:
                    pass
            if "memory" in found and found["memory"][1].name.startswith("shardlab-harness-"):
                into.memory_groups.add(found["memory"][1].parent)  # the grading's group
        tasks = max((_read_int(group / "pids.current") for group in into.pids_groups), default=0)
        memory = max(
            (_read_int(group / "memory.usage_in_bytes") for group in into.memory_groups), default=0
        )
        limits = [_read_int(group / "memory.limit_in_bytes") for group in into.memory_groups]
        into.memory_limit = max([into.memory_limit, *limits])
        kills = max((_oom_kills(group) for group in into.memory_groups), default=0)
        into.samples.append((time.monotonic(), tasks, memory, kills))


def in_another_sandbox(pid: int, not_these: set[Path]) -> bool:
    """Whether `pid` is held in a sandbox's pids group other than `not_these`."""
    group = cgroups.cgroups_of(pid).get("pids")
    return (
        group is not None
        and group[1].name.startswith("shardlab-sandbox-")
        and group[1] not in not_these
    )


def flock_holder(path: Path) -> int | None:
    """The pid that took the flock on `path`, from the kernel's table of locks, or None if it is free."""
    info = os.stat(path)
    device = f"{os.major(info.st_dev):02x}:{os.minor(info.st_dev):02x}:{info.st_ino}"
    for line in Path("/proc/locks").read_text().splitlines():
        fields = line.split()
        # "1: FLOCK  ADVISORY  WRITE 17976 fe:00:2146317 0 EOF" ("->" marks a waiter, one field more)
        if fields[1] == "FLOCK" and fields[5] == device:
            return int(fields[4])
    return None


def _oom_kills(group: Path) -> int:
    """Processes killed out of memory in the group (cgroup v1 counts them in the victim's own leaf)."""
    total = 0
    for folder, _, _ in os.walk(group):
        try:
            lines = Path(folder, "memory.oom_control").read_text().splitlines()
        except OSError:
            continue
        total += next((int(line.split()[1]) for line in lines if line.startswith("oom_kill ")), 0)
    return total


def _read_int(path: Path) -> int:
    try:
        return int(path.read_text())
    except (OSError, ValueError):
        return 0


@pytest.mark.skipif(
    not V1_GROUPS, reason="needs writable cgroup v1 pids and memory controllers (as on CI here)"
)
def test_a_fork_bomb_and_a_memory_hog_take_nothing_from_a_classmate(tmp_path):
    hostile, honest = tmp_path / "hostile", tmp_path / "honest"
    hostile.mkdir()
    honest.mkdir()
    (hostile / EX01.module_file).write_text(source(EX01, stub=True) + FILLS_ITS_BUDGET)
    (honest / EX01.module_file).write_text(source(EX01))
    started, classmate = time.monotonic(), None
    attacker = grade(
        hostile,
        tmp_path / "out-hostile",
        "--exercise",
        "ex01",
        "--time-limit",
        "150",
        "--memory-limit",
        f"{HOG_LIMIT / GIB:g}",
    )
    seen, stop = Watch(), threading.Event()
    sampler = threading.Thread(target=watch, args=(attacker.pid, seen, stop), daemon=True)
    sampler.start()
    try:
        # The classmate starts once the bomb holds its budget and its hogs have already run out of their
        # submission's memory (the hogs are slow on a loaded machine: waiting beats hoping it happens later).
        while (
            not (seen.samples and seen.samples[-1][1] >= 0.9 * BUDGET and seen.samples[-1][3] > 0)
            and time.monotonic() - started < 120
        ):
            time.sleep(0.5)
        assert seen.samples and seen.samples[-1][1] >= 0.9 * BUDGET, (
            f"the bomb never filled its budget: {seen}"
        )
        assert seen.samples[-1][3] > 0, (
            f"the hogs never ran out of their submission's memory: {seen.samples[-5:]}"
        )
        classmate_started = time.monotonic()
        classmate = grade(honest, tmp_path / "out-honest", "--exercise", "ex01")
        classmate_log, _ = classmate.communicate(timeout=600)
        classmate_ended = time.monotonic()
        attacker_log, _ = attacker.communicate(timeout=600)
        attacker_ended = time.time()
    finally:
        end_sampling_and_gradings(stop, sampler, attacker, classmate)
    tasks, memory, kills = seen.between(classmate_started, classmate_ended)
    print(
        f"\nclassmate graded in {classmate_ended - classmate_started:.1f} s beside a bomb holding {min(tasks)} to "
        f"{max(tasks)} tasks of its {BUDGET} (median {sorted(tasks)[len(tasks) // 2]}), its submission "
        f"{min(memory) / 2**30:.2f} to {max(memory) / 2**30:.2f} GiB of its {seen.memory_limit / 2**30:.1f} GiB, "
        f"{kills} of its processes killed out of memory meanwhile"
    )
    assert classmate.returncode == 0, classmate_log[-3000:]
    graded = report(tmp_path / "out-honest")
    assert graded["score"] == pytest.approx(EX01.points) and categories(graded) == {"passed"}, (
        classmate_log[-3000:]
    )
    assert sorted(tasks)[len(tasks) // 2] >= 0.9 * BUDGET, (
        f"the bomb let go while the classmate was graded: {tasks}"
    )
    assert max(sample[1] for sample in seen.samples) <= BUDGET, (
        "the bomb's sandbox went past its budget"
    )
    assert seen.memory_limit == engine.submission_memory_limit(HOG_LIMIT, 1)
    # Still holding much of it meanwhile (each hog killed out of memory starts again).
    assert sorted(memory)[len(memory) // 2] >= 0.4 * seen.memory_limit, f"the hogs let go: {memory}"
    assert max(sample[2] for sample in seen.samples) <= seen.memory_limit
    # The bomb itself earns nothing, and leaves nothing: its groups, its uid and its processes are gone.
    assert attacker.returncode == 0, attacker_log[-3000:]
    bomb = report(tmp_path / "out-hostile")
    assert bomb["score"] == 0 and categories(bomb) <= {"not attempted", "crashed", "timeout"}, (
        categories(bomb)
    )
    assert f"peak {seen.memory_limit / 2**30:.2f} GiB" in bomb["environment"]["isolation"]["memory"]
    assert bomb["environment"]["limits"]["worker_memory_bytes"] == HOG_LIMIT
    # as the kernel held it
    assert bomb["environment"]["limits"]["submission_memory_bytes"] == seen.memory_limit
    assert not any(group.exists() for group in seen.pids_groups | seen.memory_groups)
    bomb_uids = seen.uids - {0}
    if (
        os.geteuid() == 0
        and confinement.choose_isolation("auto") is confinement.Isolation.BUBBLEWRAP
    ):
        assert bomb_uids and all(
            users.FIRST_UID <= u < users.FIRST_UID + users.UID_COUNT for u in bomb_uids
        ), seen.uids
    # A uid is free again once its sandbox ended, and a grading running beside this test (pytest -n) may take
    # it meanwhile, even before the bomb's `shardlab grade` has exited: a process started after that, or held in
    # another sandbox's own group (which no process of the bomb's can join), is that grading's, not the bomb's.
    for uid in bomb_uids:
        of_uid = [
            p
            for p in psutil.process_iter(["uids", "create_time"])
            if p.info["uids"]
            and p.info["uids"].real == uid
            and p.info["create_time"] < attacker_ended
        ]
        assert not [p.pid for p in of_uid if not in_another_sandbox(p.pid, seen.pids_groups)]
        # Free again, or held by another grading: the kernel names the process that took the lock, which
        # must be alive (not a lock inherited by an orphan) and none of the bomb's.
        holder = flock_holder(users.lock_folder() / str(uid))
        assert holder is None or (
            holder not in seen.pids | {attacker.pid} and psutil.pid_exists(holder)
        ), f"uid {uid} is still locked by pid {holder}, which was the bomb's or has ended"


# --- a student who fills the disk ----------------------------------------------------------------

DISK_BOUND = confinement.WorkerLimits().disk_bytes
# A thread started at import that goes on writing files of 64 MiB in its folder, in TMPDIR and in /tmp,
# whatever fails: the host's whole disk if it could.
WRITES_FROM_A_THREAD = code("""
    import os as _os, tempfile as _tempfile, threading as _threading, time as _time

    def _write(path, mib):
        try:
            with open(path, "wb") as f:
                for _ in range(mib):
                    f.write(b"x" * (1 << 20))
        except OSError:
            pass

    def _forever():
        n = 0
        while True:
            for folder in (".", _tempfile.gettempdir(), "/tmp"):
                _write(_os.path.join(folder, f"loop-{n}.bin"), 64)
                n += 1
            _time.sleep(0.01)

    _threading.Thread(target=_forever, daemon=True).start()
""")
# And first, at import: four files of 256 MiB (RLIMIT_FSIZE's most) in its folder, 1 GiB. It then waits a
# second: the harness stops a worker whose folder is full as soon as the import answers, and refuses every
# test of a module whose import failed without importing it again, so the full tmpfs lasts only that second,
# long enough for a sampler that looks five times a second (it saw none of a 0.1 s fill, in CI).
FILLS_THE_DISK = WRITES_FROM_A_THREAD + code("""
    for _n in range(4):
        _write(f"import-{_n}.bin", 256)
    _time.sleep(1)
""")


def host_disk_used(path: Path) -> int:
    usage = shutil.disk_usage(path)
    return usage.total - usage.free


def mounted_for(gradings: list[int], source: str) -> bool:
    """Whether the tmpfs named `source` was mounted by a harness of one of `gradings` (pids): other tests
    grade beside this one (pytest -n 2), with mounts of their own."""
    owner = source[len(disk.SOURCE_PREFIX) :].partition(".")[0]
    try:
        process = psutil.Process(int(owner))
        return bool({process.pid, *(p.pid for p in process.parents())} & set(gradings))
    except (psutil.Error, ValueError):
        return False


def watch_disk(
    roots: list[Path],
    into: list[tuple[int, int]],
    points: set[str],
    stop: threading.Event,
    gradings: list[int] = (),
) -> None:
    """Sample the host's disk below `roots` and the most any sandbox's tmpfs holds, until `stop`; `points`
    collects the mounts of `gradings`' harnesses (filled as they start)."""
    while not stop.wait(0.2):
        measured = {}
        for point, source in disk._our_mounts():
            if mounted_for(gradings, source):
                points.add(point)
            try:
                measured[point] = disk.used(point)
            except OSError:
                pass
        # A sandbox unmounted between the listing and the measure was measured on the host's disk below it
        # (47 GiB "held", once in CI): only a mount still there after its measure counts.
        still = {point for point, _ in disk._our_mounts()}
        held = max((used for point, used in measured.items() if point in still), default=0)
        into.append((max(host_disk_used(root) for root in roots), held))


ROOT_ONLY = pytest.mark.skipif(
    os.geteuid() != 0, reason="a tmpfs per sandbox needs the grader to run as root"
)
SANDBOXES = ("bubblewrap", "landlock")


@ROOT_ONLY
@pytest.mark.parametrize("level", SANDBOXES)
@pytest.mark.parametrize("attack", ["at_import", "from_a_thread"])
def test_a_student_who_fills_the_disk_is_stopped_at_the_bound_and_the_classmate_keeps_every_point(
    tmp_path, level, attack
):
    hostile, honest = tmp_path / "hostile", tmp_path / "honest"
    hostile.mkdir()
    honest.mkdir()
    attack_code = FILLS_THE_DISK if attack == "at_import" else WRITES_FROM_A_THREAD
    (hostile / EX01.module_file).write_text(source(EX01) + attack_code)
    (honest / EX01.module_file).write_text(source(EX01))
    roots = [tmp_path, Path(tempfile.gettempdir())]
    before = max(host_disk_used(root) for root in roots)
    samples: list[tuple[int, int]] = []
    points: set[str] = set()  # the tmpfs mounts of these two gradings' sandboxes, seen
    gradings: list[int] = []
    stop = threading.Event()
    sampler = threading.Thread(
        target=watch_disk, args=(roots, samples, points, stop, gradings), daemon=True
    )
    sampler.start()
    attacker = classmate = None
    try:
        attacker = grade(
            hostile, tmp_path / "out-hostile", "--exercise", "ex01", "--isolation", level
        )
        gradings.append(attacker.pid)
        classmate = grade(
            honest, tmp_path / "out-honest", "--exercise", "ex01", "--isolation", level
        )
        gradings.append(classmate.pid)
        classmate_log, _ = classmate.communicate(timeout=600)
        attacker_log, _ = attacker.communicate(timeout=600)
    finally:
        end_sampling_and_gradings(stop, sampler, attacker, classmate)
    grown = max(used for used, _ in samples) - before
    held = max(tmpfs for _, tmpfs in samples)
    print(
        f"\nhost disk grew by at most {grown / 2**20:.0f} MiB while a student wrote 1 GiB and on; "
        f"the fullest sandbox tmpfs held {held / 2**20:.0f} MiB of its {DISK_BOUND >> 20} MiB"
    )
    # The classmate graded beside it keeps every point.
    assert classmate.returncode == 0, classmate_log[-3000:]
    graded = report(tmp_path / "out-honest")
    assert graded["score"] == pytest.approx(EX01.points) and categories(graded) == {"passed"}
    # The writer's grading went on to its end, each test that found its folder full told so. Written at
    # import, every test (an import that failed is not tried again); from a thread, the tests during which it
    # filled up (the reference's work of the others is done, and counts).
    assert attacker.returncode == 0, attacker_log[-3000:]
    filled = report(tmp_path / "out-hostile")
    tests = [t for exercise in filled["exercises"].values() for t in exercise["tests"]]
    said = f"your code wrote more than {DISK_BOUND >> 20} MiB to disk (its folder"
    refused = [t for t in tests if t["category"] != "passed"]
    assert refused and all(t["category"] == "crashed" and said in t["message"] for t in refused), [
        t["message"][:300] for t in refused
    ]
    if attack == "at_import":
        assert filled["score"] == 0 and len(refused) == len(tests)
    print(f"{len(refused)} of {len(tests)} tests refused: {refused[0]['message'][:400]}")
    assert filled["environment"]["limits"]["worker_disk_bytes"] == DISK_BOUND
    assert filled["environment"]["isolation"]["level"] == level
    # Its writes went to a tmpfs of the bound's size (seen five times a second: it fills in a moment and is
    # emptied when stopped, so the peak itself is seen as the folder found full, in the message; the sampler
    # sees it held while the attack waits), never to the host's disk (others share the disk: anything under
    # the bound is their noise; 1 GiB was written before the bound).
    assert 0 < held <= DISK_BOUND
    assert grown < DISK_BOUND, f"the host's disk grew by {grown} bytes"
    # and nothing of them is left mounted once the gradings ended
    assert points and not points & {point for point, _ in disk._our_mounts()}


@ROOT_ONLY
@pytest.mark.parametrize("level", SANDBOXES)
def test_ex12s_processes_that_fill_their_disk_have_every_result_refused(tmp_path, level):
    """ex12's run is one sandbox: its processes' folders share one tmpfs of the bound's size."""
    (tmp_path / EX12.module_file).write_text(source(EX12) + FILLS_THE_DISK)
    tmp_path.chmod(0o755)  # the sandbox's user must reach it
    driver = load_driver(EX12.tests_dir() / "driver.py")
    level = confinement.choose_isolation(level)
    grown, before = [], host_disk_used(Path(tempfile.gettempdir()))
    stop = threading.Event()
    sampler = threading.Thread(
        target=watch_disk, args=([Path(tempfile.gettempdir())], grown, set(), stop), daemon=True
    )
    sampler.start()
    try:
        run = run_cluster(driver, tmp_path / EX12.module_file, isolation=level, quiet_seconds=6)
    finally:
        stop.set()
        sampler.join(timeout=10)
    assert run.filled_disk == (["its folder"], DISK_BOUND), (level, run.filled_disk)
    for process in range(run.processes):
        for step in run.steps:
            with pytest.raises(ClusterFilledDisk, match=f"wrote more than {DISK_BOUND >> 20} MiB"):
                run.result(process, step)
    assert max(used for used, _ in grown) - before < DISK_BOUND


# --- Landlock as root ------------------------------------------------------------------------------

# At import, in the worker and in each of ex12's processes: every way out a worker running as root had.
ESCAPES = code(f"""
    import os as _os, resource as _resource, socket as _socket

    def _escapes():
        found = []

        def _attempt(name, action):
            try:
                action()
                found.append(name)
            except Exception:
                pass

        def _udp():   # the host's listener echoes: an answer means the host was reached
            with _socket.socket(_socket.AF_INET, _socket.SOCK_DGRAM) as sock:
                sock.settimeout(3)
                sock.connect(("127.0.0.1", {HOST_PORT}))   # no one there: the receive is refused at once
                sock.send(b"escaped")
                sock.recv(100)

        def _tcp():
            _socket.create_connection(("127.0.0.1", {HOST_PORT}), timeout=3).close()

        def _capabilities():
            status = dict(line.split(":", 1) for line in open("/proc/self/status") if ":" in line)
            if int(status["CapEff"], 16) == 0 and int(status["CapBnd"], 16) == 0:
                raise PermissionError("no capability")

        def _raise(limit):
            soft, hard = _resource.getrlimit(limit)
            _resource.setrlimit(limit, (_resource.RLIM_INFINITY, _resource.RLIM_INFINITY))
            if _resource.getrlimit(limit)[1] == hard:
                raise PermissionError("unchanged")

        _attempt("UDP to the host", _udp)
        _attempt("TCP to the host", _tcp)
        _attempt("capabilities", _capabilities)
        _attempt("a process limit raised back", lambda: _raise(_resource.RLIMIT_NPROC))
        _attempt("a memory limit raised back", lambda: _raise(_resource.RLIMIT_AS))
        _attempt("a capability used (setuid)", lambda: _os.setuid(12345))
        _attempt("a capability used (priority)", lambda: _os.nice(-5))
        return found

    _ESCAPED = _escapes()
    if _ESCAPED:
        def _escaped(*args, **kwargs):
            raise RuntimeError("escaped: " + ", ".join(_ESCAPED))
        for _name in FUNCTIONS:
            globals()[_name] = _escaped
""")


def echo_datagrams(sock: socket.socket, received: list, stop: threading.Event) -> None:
    sock.settimeout(0.2)
    while not stop.is_set():
        try:
            data, sender = sock.recvfrom(100)
        except (TimeoutError, OSError):
            continue
        received.append((data, sender))
        sock.sendto(data, sender)


@pytest.mark.skipif(os.geteuid() != 0, reason="Landlock as root: the grader must run as root")
def test_landlock_as_root_reaches_nothing_and_holds_no_capability(tmp_path):
    try:
        level = confinement.choose_isolation("landlock")
    except confinement.IsolationUnavailable as exc:
        pytest.skip(str(exc))
    tcp = socket.create_server(("127.0.0.1", 0))
    tcp.setblocking(False)
    port = tcp.getsockname()[1]
    udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    udp.bind(("127.0.0.1", port))
    received, stop = [], threading.Event()
    echo = threading.Thread(target=echo_datagrams, args=(udp, received, stop), daemon=True)
    echo.start()
    submission = tmp_path / "submission"
    submission.mkdir()
    for exercise, functions in (
        (EX01, ("make_mesh_2x4", "make_data_mesh", "place", "shard_table")),
        (EX12, ("initialize",)),
    ):
        attack = ESCAPES.replace(HOST_PORT, str(port)).replace("FUNCTIONS", repr(functions))
        (submission / exercise.module_file).write_text(source(exercise, stub=True) + attack)
    try:
        # ex12's 4 processes start jax in 10 s or more on 2 busy cores: a timeout must not hide the verdict
        grading = grade(
            submission,
            tmp_path / "out",
            "--isolation",
            level.value,
            "--exercise",
            "ex01",
            "--exercise",
            "ex12",
            test_timeout=30,
        )
        log, _ = grading.communicate(timeout=900)
        assert grading.returncode == 0, log[-3000:]
        graded = report(tmp_path / "out")
        wrong = [
            f"{t['name']}: {t['category']} {t['message'][:200]}"
            for e in graded["exercises"].values()
            for t in e["tests"]
            if t["category"] != "not attempted"
        ]
        assert not wrong, "\n".join(wrong[:10])
        assert graded["score"] == 0
        isolation = graded["environment"]["isolation"]
        print(f"\nLandlock as root: {json.dumps(isolation, indent=1)}")
        assert isolation["level"] == "landlock" and isolation["not_applied"] == [], isolation
        assert (
            isolation["capabilities"].startswith("none")
            and "namespace of its own" in isolation["network"]
        )
        with pytest.raises(BlockingIOError):
            tcp.accept()
        assert received == [], f"datagrams reached the host: {received}"
    finally:
        stop.set()
        echo.join(timeout=5)
        tcp.close()
        udp.close()
