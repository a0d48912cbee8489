"""The worker's confinement, tested for real at every level this machine offers: a probe process is
started confined and reports what it could do; each level must deny what it promises to deny. Then what
each sandbox holds of its own (a user, a process budget, no capability, a network, the sockets it may
make), what `strict` refuses, and the cgroups: a submission's memory in all, and nothing left behind by
a grader killed in the middle."""

import json
import os
import socket
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import psutil
import pytest

from grader.cluster import launcher
from grader.course import paths
from grader.sandbox import cgroups, confinement, disk, restrictions, users
from grader.sandbox.launch import landlock_abi
from grader.sandbox.restrictions import Identity, Isolation

# Its checks look for the probe's daemon among all the machine's processes: the cases of two levels must
# not run at once on two pytest-xdist workers.
pytestmark = pytest.mark.xdist_group("test_confinement")

MARKER = "shardlab-confinement-daemon-51c2"
FIRST_UID, LAST_UID = users.FIRST_UID, users.FIRST_UID + users.UID_COUNT

PROBE = textwrap.dedent(
    """
    import json, os, socket, subprocess, sys
    allowed, secret, outside, repo, port, parent = sys.argv[1:7]
    found = {"uid": os.getuid()}

    def attempt(name, action):
        try:
            action()
            found[name] = True
        except Exception as exc:
            found[name] = False

    attempt("read_allowed", lambda: open(allowed).read())
    attempt("read_secret", lambda: open(secret).read())
    attempt("read_tests", lambda: os.listdir(os.path.join(repo, "tests")))
    attempt("read_solutions", lambda: os.listdir(os.path.join(repo, "solutions")))
    attempt("write_outside", lambda: open(os.path.join(outside, "planted"), "w").write("x"))
    attempt("write_home", lambda: open(os.path.join(os.environ["HOME"], "mine"), "w").write("x"))
    attempt("connect", lambda: socket.create_connection(("127.0.0.1", int(port)), timeout=2))
    attempt("signal_parent", lambda: os.kill(int(parent), 0))
    if os.fork() == 0:
        os.setsid()
        if os.fork() == 0:
            os.execv(sys.executable, [sys.executable, "-c", "import time; time.sleep(600)", "%s"])
        os._exit(0)
    os.wait()
    print(json.dumps(found), flush=True)
    import time; time.sleep(600)
"""
    % MARKER
)


def levels():
    found = []
    for level in Isolation:
        try:
            found.append(confinement.choose_isolation(level.value))
        except confinement.IsolationUnavailable:
            pass
    return found


def daemons() -> list[int]:
    """The probe's daemons still alive (a zombie has ended; its parent reaps it)."""
    return [
        p.pid
        for p in psutil.process_iter(["cmdline", "status"])
        if MARKER in " ".join(p.info["cmdline"] or []) and p.info["status"] != psutil.STATUS_ZOMBIE
    ]


@pytest.fixture
def probed(tmp_path, request):
    """Start the probe at `request.param`'s level and read its report; kill it afterwards."""
    level = request.param
    readable = tmp_path / "submission"
    readable.mkdir()
    (readable / "allowed.txt").write_text("yes")
    secret = tmp_path / "elsewhere"
    secret.mkdir()
    (secret / "secret.txt").write_text("no")
    outside = tmp_path / "world-writable"
    outside.mkdir()
    outside.chmod(0o1777)
    (readable / "probe.py").write_text(PROBE)
    workdir = tmp_path / "work"
    workdir.mkdir()
    listener = socket.create_server(("127.0.0.1", 0))
    listener.settimeout(0.5)
    confinement.become_subreaper()  # as the harness is: a daemon that leaves the tree comes back here
    output = open(tmp_path / "probe.out", "wb")
    argv = [
        sys.executable,
        "-I",
        str(readable / "probe.py"),
        str(readable / "allowed.txt"),
        str(secret / "secret.txt"),
        str(outside),
        str(paths.REPO_ROOT),
        str(listener.getsockname()[1]),
        str(os.getpid()),
    ]
    process = confinement.spawn_confined(
        argv,
        level=level,
        workdir=workdir,
        readable=[readable],
        env={"PATH": "/usr/bin:/bin", "HOME": str(workdir)},
        stdout=output,
    )
    deadline = time.monotonic() + 60
    report = None
    while time.monotonic() < deadline and report is None:
        text = (tmp_path / "probe.out").read_text()
        report = json.loads(text.splitlines()[0]) if text.strip() else None
        time.sleep(0.1)
    try:
        listener.accept()
        report["listener_saw_a_connection"] = True
    except (TimeoutError, socket.timeout):
        report["listener_saw_a_connection"] = False
    yield level, report, process, outside
    process.kill_tree()
    listener.close()
    output.close()


@pytest.mark.parametrize("probed", levels(), indirect=True, ids=str)
def test_what_each_level_allows_and_denies(probed):
    level, report, process, outside = probed
    assert report["read_allowed"] and report["write_home"], report
    if level in confinement.SANDBOXES:
        assert not report["read_secret"], "the worker read a file outside its allowed folders"
        assert not report["read_tests"] and not report["read_solutions"], (
            "the worker saw tests/ or solutions/"
        )
        assert not report["write_outside"] and not (outside / "planted").exists(), (
            "the worker wrote outside"
        )
    plan = restrictions.plan(level)
    if plan.network_namespace or (level is Isolation.LANDLOCK and landlock_abi() >= 4):
        assert not report["connect"] and not report["listener_saw_a_connection"], (
            "the worker reached the network"
        )
    if level is Isolation.BUBBLEWRAP or (level is Isolation.LANDLOCK and landlock_abi() >= 6):
        assert not report["signal_parent"], "the worker could signal the grader"
    if plan.identity is Identity.OWN_UID:
        assert FIRST_UID <= report["uid"] < LAST_UID, report["uid"]


@pytest.mark.parametrize("probed", levels(), indirect=True, ids=str)
def test_kill_tree_leaves_nothing_behind(probed):
    level, _, process, _ = probed
    deadline = time.monotonic() + 10
    while not daemons() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert daemons(), "the probe's daemon did not start"
    process.kill_tree()
    assert daemons() == []
    assert process.popen.poll() is not None


def test_jax_runs_confined_with_eight_devices(tmp_path):
    level = confinement.choose_isolation("auto")
    (tmp_path / "work").mkdir()
    output = open(tmp_path / "out", "wb")
    code = "import jax; print(jax.device_count(), flush=True)"
    env = {
        "PATH": "/usr/bin:/bin",
        "XLA_FLAGS": "--xla_force_host_platform_device_count=8",
        "JAX_PLATFORMS": "cpu",
    }
    started = time.monotonic()
    process = confinement.spawn_confined(
        [sys.executable, "-I", "-c", code],
        level=level,
        workdir=tmp_path / "work",
        readable=[],
        env=env,
        stdout=output,
    )
    try:
        assert process.popen.wait(timeout=120) == 0, (tmp_path / "out").read_text()
    finally:
        process.kill_tree()
    print(f"confined ({level}) python importing jax: {time.monotonic() - started:.2f} s")
    assert (tmp_path / "out").read_text().split() == ["8"]


def test_strict_finds_a_sandbox_here_and_a_missing_tool_is_explained(monkeypatch):
    assert confinement.choose_isolation("strict") in confinement.SANDBOXES
    monkeypatch.setenv("PATH", "/nonexistent")
    confinement._probe.cache_clear()
    try:
        with pytest.raises(confinement.IsolationUnavailable, match="apt-get install bubblewrap"):
            confinement.choose_isolation("bubblewrap")
    finally:
        confinement._probe.cache_clear()
    with pytest.raises(confinement.IsolationUnavailable, match="unknown isolation"):
        confinement.choose_isolation("chroot")


def test_the_python_installation_and_grader_are_readable_and_the_repository_is_not():
    readable = confinement.python_paths()
    assert str(Path(confinement.__file__).resolve().parents[1]) in readable  # the grader package
    assert str(paths.REPO_ROOT) not in readable
    assert not any(str(paths.REPO_ROOT / name) in readable for name in ("tests", "solutions"))


# --- what each sandbox holds of its own ---------------------------------------------------------


def sandboxes():
    return [level for level in levels() if level in confinement.SANDBOXES]


def confined(
    tmp_path: Path,
    name: str,
    level: Isolation,
    script: str,
    *args: str,
    network: bool = False,
    limits: confinement.WorkerLimits | None = None,
) -> tuple[confinement.ConfinedProcess, Path]:
    """Start `script` confined at `level` in a folder of its own; its output goes to the returned file. With
    `network`, as a process of a run (ex12): in a run's sandbox, under the filter each process gets on top."""
    folder = tmp_path / name
    (folder / "work").mkdir(parents=True)
    (folder / "script.py").write_text(textwrap.dedent(script))
    folder.chmod(0o755)
    output = folder / "out"
    command = [sys.executable, "-I", str(folder / "script.py"), *args]
    if network and restrictions.plan(level).seccomp:
        command = [
            *launcher.launched_with(
                {"cwd": str(folder / "work"), "seccomp": {"profile": "process"}}
            ),
            *command,
        ]
    with open(output, "wb") as stdout:
        process = confinement.spawn_confined(
            command,
            level=level,
            workdir=folder / "work",
            readable=[folder],
            stdout=stdout,
            env={"PATH": "/usr/bin:/bin"},
            network=network,
            limits=limits or confinement.WorkerLimits(),
        )
    return process, output


def first_report(output: Path, seconds: float = 60) -> dict:
    ended = time.monotonic() + seconds
    while time.monotonic() < ended:
        lines = [line for line in output.read_text().splitlines() if line.startswith("{")]
        if lines:
            return json.loads(lines[0])
        time.sleep(0.05)
    raise AssertionError(f"no report from the confined process: {output.read_text()[-2000:]}")


def lock_is_free(uid: int) -> bool:
    import fcntl

    fd = os.open(users.lock_folder() / str(uid), os.O_RDWR)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return True
    except BlockingIOError:
        return False
    finally:
        os.close(fd)


FILL_THE_BUDGET = """
    import json, os, time
    children = 0
    while True:
        try:
            pid = os.fork()
        except OSError:
            break
        if pid == 0:
            time.sleep(600)
            os._exit(0)
        children += 1
    print(json.dumps({"children": children, "uid": os.getuid()}), flush=True)
    time.sleep(600)
"""

START_TWENTY = """
    import json, os
    for _ in range(20):
        pid = os.fork()
        if pid == 0:
            os._exit(0)
        os.waitpid(pid, 0)
    print(json.dumps({"forked": 20, "uid": os.getuid()}), flush=True)
"""


@pytest.mark.parametrize("level", levels(), ids=str)
def test_a_fork_bomb_fills_its_own_sandbox_budget_and_nothing_of_another(tmp_path, level):
    plan = restrictions.plan(level)
    if not plan.process_budget:
        pytest.skip(f"{level} has no process budget of its own here")
    limits = confinement.WorkerLimits(processes=48)
    bomb, bomb_output = confined(tmp_path, "bomb", level, FILL_THE_BUDGET, limits=limits)
    try:
        filled = first_report(bomb_output)
        classmate, classmate_output = confined(
            tmp_path, "classmate", level, START_TWENTY, limits=limits
        )
        try:
            assert classmate.popen.wait(timeout=60) == 0, classmate_output.read_text()[-2000:]
            started = first_report(classmate_output)
        finally:
            classmate.kill_tree()
    finally:
        groups, user = bomb.cgroup, bomb.user
        bomb.kill_tree()
    print(
        f"\n{level}: the bomb started {filled['children']} processes of its {limits.processes} "
        f"({' and '.join(plan.process_budget)})"
    )
    # The budget holds the sandbox's own tasks (bubblewrap's two processes count in its pids group)
    assert limits.processes - 4 <= filled["children"] < limits.processes, filled
    assert started["forked"] == 20
    if plan.identity is Identity.OWN_UID:
        assert FIRST_UID <= filled["uid"] < LAST_UID and FIRST_UID <= started["uid"] < LAST_UID
        assert filled["uid"] != started["uid"], "two sandboxes ran as one user"
        assert lock_is_free(filled["uid"]), "the bomb's uid is still held after kill_tree()"
    if groups is not None:
        assert not any(d.exists() for d in groups.directories.values()), (
            "the bomb's cgroup is still there"
        )
    assert user is None or user.lock_fd == -1


ESCAPES = """
    import ctypes, json, os, resource, socket, sys
    port, unix_path, network = int(sys.argv[1]), sys.argv[2], sys.argv[3] == "network"
    found = {}

    def attempt(name, action):
        try:
            found[name] = action() or True
        except Exception as exc:
            found[name] = f"refused: {type(exc).__name__}: {exc}"

    def udp():   # the host's listener echoes: only an answer proves the host was reached
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
            sock.settimeout(3)
            sock.connect(("127.0.0.1", port))
            sock.send(b"escaped")
            return sock.recv(100).decode()

    def tcp():
        socket.create_connection(("127.0.0.1", port), timeout=3).close()

    def named_socket():   # a socket of the grader's user (root): its uid alone would let root's uid in
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
            sock.connect(unix_path)

    def raise_back(limit):
        resource.setrlimit(limit, (resource.RLIM_INFINITY, resource.RLIM_INFINITY))

    def new_user_namespace():
        libc = ctypes.CDLL(None, use_errno=True)
        if libc.unshare(0x10000000) != 0:
            raise OSError(ctypes.get_errno(), os.strerror(ctypes.get_errno()))

    def among_themselves():   # ex12's processes: TCP between two of the sandbox's own processes
        server = socket.create_server(("127.0.0.1", 0))
        if os.fork() == 0:
            socket.create_connection(server.getsockname(), timeout=3).sendall(b"hello")
            os._exit(0)
        connection, _ = server.accept()
        return connection.recv(10).decode()

    attempt("udp_to_the_host", udp)
    attempt("tcp_to_the_host", tcp)
    attempt("named_socket", named_socket)
    attempt("raise_nproc", lambda: raise_back(resource.RLIMIT_NPROC))
    attempt("raise_as", lambda: raise_back(resource.RLIMIT_AS))
    attempt("setuid", lambda: os.setuid(12345))
    attempt("raise_priority", lambda: os.nice(-5))   # CAP_SYS_NICE
    attempt("new_user_namespace", new_user_namespace)
    if network:
        attempt("among_themselves", among_themselves)
    status = dict(line.split(":", 1) for line in open("/proc/self/status") if ":" in line)
    found.update({key: status[key].strip() for key in ("CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb",
                                                        "NoNewPrivs", "Seccomp")})
    found["uid"] = os.getuid()
    print(json.dumps(found), flush=True)
"""


def echo_datagrams(sock: socket.socket, received: list, stop) -> None:
    sock.settimeout(0.2)
    while not stop.is_set():
        try:
            data, sender = sock.recvfrom(100)
        except OSError:
            continue
        received.append(sender)
        sock.sendto(data, sender)


@pytest.mark.parametrize("network", [False, True], ids=["worker", "ex12"])
@pytest.mark.parametrize("level", levels(), ids=str)
def test_no_way_out_of_a_sandbox_not_even_as_root(tmp_path, level, network):
    """Landlock as root above all (Python under root's home here: the sandbox keeps root's uid), and every
    level: nothing reaches the host's loopback over UDP or TCP, nor a named socket of the grader's user;
    no capability is left in any set, no limit can be raised back, no user namespace made; ex12's processes
    still reach each other over their own loopback."""
    import threading

    if not restrictions.plan(level).network_namespace:
        pytest.skip(f"{level} has no network namespace of its own here")
    tcp = socket.create_server(("127.0.0.1", 0))
    tcp.setblocking(False)
    port = tcp.getsockname()[1]
    udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    udp.bind(("127.0.0.1", port))
    received, stop = [], threading.Event()
    echo = threading.Thread(target=echo_datagrams, args=(udp, received, stop), daemon=True)
    echo.start()
    unix_folder = tmp_path / "daemon"
    unix_folder.mkdir(mode=0o755)
    unix = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    unix.bind(str(unix_folder / "socket"))
    unix.listen()
    unix.setblocking(False)
    process, output = confined(
        tmp_path,
        "escapes",
        level,
        ESCAPES,
        str(port),
        str(unix_folder / "socket"),
        "network" if network else "worker",
        network=network,
    )
    try:
        found = first_report(output)
        assert process.popen.wait(timeout=30) == 0
    finally:
        process.kill_tree()
        stop.set()
        echo.join(timeout=5)
    seen = {"tcp": _accepted(tcp), "unix": _accepted(unix), "udp": received}
    for sock in (tcp, udp, unix):
        sock.close()
    print(f"\n{level} ({'ex12' if network else 'worker'}): {json.dumps(found)}")
    escaped = [
        name
        for name, value in found.items()
        if value is True or (name == "udp_to_the_host" and value == "escaped")
    ]
    assert escaped == [], found
    if network:
        assert found["among_themselves"] == "hello", found
    assert seen == {"tcp": 0, "unix": 0, "udp": []}, f"the host saw the sandbox: {seen}"
    assert all(
        int(found[key], 16) == 0 for key in ("CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb")
    ), found
    assert found["NoNewPrivs"] == "1" and found["Seccomp"] == "2", found
    assert confinement.describe(level)["not_applied"] == (
        [] if level in confinement.SANDBOXES else ["a filesystem sandbox (bubblewrap or Landlock)"]
    )


def _accepted(sock: socket.socket) -> int:
    count = 0
    while True:
        try:
            connection, _ = sock.accept()
        except (BlockingIOError, OSError):
            return count
        connection.close()
        count += 1


def test_strict_refuses_a_sandbox_that_cannot_contain_the_worker(monkeypatch):
    """Landlock on a machine without user or network namespaces (as on some CI runners): the level still
    works and says what it lacks, but strict grading refuses it with the reason."""
    if Isolation.LANDLOCK not in levels():
        pytest.skip("Landlock does not work here")
    real_plan = restrictions.plan
    degraded = restrictions.Plan(
        Identity.GRADER, network_namespace=False, seccomp=True, nproc_per_sandbox=False, cgroups=()
    )
    monkeypatch.setattr(
        restrictions,
        "plan",
        lambda level: degraded if level is Isolation.LANDLOCK else real_plan(level),
    )
    monkeypatch.setenv("PATH", "/nonexistent")  # no bubblewrap either
    confinement._probe.cache_clear()
    try:
        with pytest.raises(confinement.IsolationUnavailable) as refused:
            confinement.choose_isolation("strict")
        reason = str(refused.value)
        assert "landlock cannot contain the worker here" in reason
        assert (
            "a process budget of its own" in reason and "a network namespace of its own" in reason
        )
        assert "apt-get install bubblewrap" in reason
        # asked for by name: accepted
        assert confinement.choose_isolation("landlock") is Isolation.LANDLOCK
        described = confinement.describe(Isolation.LANDLOCK)
        assert described["not_applied"] and described["process_budget"].startswith("none")
        assert described["network"].startswith("the grader's network"), described
        # really started so
        assert confinement._probe(Isolation.LANDLOCK).observed.own_network is False
    finally:
        confinement._probe.cache_clear()


KILLED_GRADER = """
import json, sys, time
from pathlib import Path
from grader.sandbox import confinement
from grader.sandbox.restrictions import Isolation
level, folder = Isolation(sys.argv[1]), Path(sys.argv[2])
marker = "'%s' + '%s'"   # only the daemon's own command line holds the marker whole
daemon = "import os, sys, time\\nif os.fork() == 0:\\n    os.setsid()\\n    if os.fork() == 0:\\n" \\
         f"        os.execv(sys.executable, [sys.executable, '-c', 'import time; time.sleep(600)', {marker}])\\n" \\
         "    os._exit(0)\\nos.wait()\\ntime.sleep(600)\\n"
process = confinement.spawn_confined([sys.executable, "-I", "-c", daemon], level=level, workdir=folder,
                                     readable=[], env={"PATH": "/usr/bin:/bin"})
print(json.dumps({"groups": [str(d) for d in process.cgroup.directories.values()] if process.cgroup else [],
                  "uid": process.user.uid if process.user else None}), flush=True)
time.sleep(600)
""" % (MARKER[:10], MARKER[10:])


@pytest.mark.parametrize("level", sandboxes(), ids=str)
def test_what_a_killed_grader_left_is_ended_by_the_next_sweep(tmp_path, level):
    """A grader killed with SIGKILL (a batch's timeout, say) cannot clean up: the next grading's sweep (or
    the batch's, after each student) kills what is left in its groups, removes them, and its uid is free; the
    tmpfs on its sandbox's folder (as root) is unmounted by the next grading's disk sweep."""
    if not cgroups.hierarchies().get("pids"):
        pytest.skip("no pids cgroup here")
    (tmp_path / "work").mkdir()
    grader = subprocess.Popen(
        [sys.executable, "-c", KILLED_GRADER, level.value, str(tmp_path / "work")],
        stdout=subprocess.PIPE,
        text=True,
        cwd=paths.REPO_ROOT,
    )
    held = json.loads(grader.stdout.readline())
    deadline = time.monotonic() + 20
    while not daemons() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert daemons(), "the sandbox's daemon did not start"
    work = os.path.realpath(tmp_path / "work")
    assert disk.is_bounded(work) == disk.can_bound()
    assert work not in disk.sweep()  # its owner lives: kept
    grader.kill()
    grader.wait()
    grader.stdout.close()
    removed = cgroups.sweep()
    assert {Path(d).name for d in held["groups"]} <= set(removed), (held, removed)
    assert daemons() == [], "a killed grader's daemon outlived the sweep"
    assert not any(Path(d).exists() for d in held["groups"])
    if held["uid"] is not None:
        assert lock_is_free(held["uid"])
    assert (work in disk.sweep()) == disk.can_bound()
    assert not disk.is_bounded(work)


@pytest.mark.skipif("memory" not in cgroups.hierarchies(), reason="no memory cgroup here")
def test_a_submissions_harness_and_workers_share_one_memory_limit(tmp_path):
    """Out of memory in a submission's group, the kernel kills a worker (oom_score_adj 1000), not its
    harness; nothing outside the group notices; the group is gone when the grading ends."""
    hold = (
        "import sys, time\nblock = bytearray(int(sys.argv[1]) << 20)\n"
        "block[::4096] = bytes(len(block) // 4096)\nprint('held', flush=True)\ntime.sleep(600)\n"
    )
    with cgroups.submission_memory(256 << 20) as memory:
        harness_leaf = memory.harness()
        command = restrictions.launcher(
            {"cgroups": harness_leaf}, [sys.executable, "-c", hold, "100"]
        )
        harness = subprocess.Popen(command, stdout=subprocess.PIPE, text=True)
        assert harness.stdout.readline().strip() == "held"
        worker = subprocess.Popen(
            restrictions.launcher(
                {"cgroups": harness_leaf, "oom_score_adj": 1000},
                [sys.executable, "-c", hold, "200"],
            ),
            stdout=subprocess.PIPE,
            text=True,
        )
        assert worker.wait(timeout=60) == -9, "the worker outgrew its submission's memory and lived"
        assert harness.poll() is None, "the harness was killed in the worker's place"
        group = memory.group
        harness.kill()
        harness.wait()
        for process in (harness, worker):
            process.stdout.close()
    assert not any(d.exists() for d in group.directories.values())
    assert memory.peak is not None and memory.peak >= 0.9 * (256 << 20), memory.peak
    assert "for the submission in all" in memory.describe() and "peak" in memory.describe()


# What a sandbox writes: at each level (as root), where the folder is a tmpfs of its own and where not.
WRITES_ALL_IT_CAN = """
import json, os
def fill(path):
    written = 0
    try:
        with open(path, "wb") as f:
            while True:
                written += f.write(b"x" * (1 << 20))
    except OSError as exc:
        return [written, exc.errno]
print(json.dumps({"folder": fill("a"), "again": fill("b"), "tmp": fill("/tmp/c")}))
"""


@pytest.mark.skipif(
    not disk.can_bound(), reason="a tmpfs per sandbox needs the grader to run as root"
)
@pytest.mark.parametrize("level", [*sandboxes(), Isolation.PROCESS], ids=str)
def test_a_sandboxs_folder_holds_its_disk_bound_and_is_gone_with_it(tmp_path, level):
    """Its folder takes `disk_bytes` in all (ENOSPC past it, whatever the files), nothing of it on the
    host's disk; unmounted when the sandbox ends. Under bubblewrap as root its /tmp is not its to write;
    at the process level the host's /tmp is (per file only: RLIMIT_FSIZE)."""
    import errno

    work, out = tmp_path / "work", tmp_path / "out.txt"
    work.mkdir()
    limits = confinement.WorkerLimits(disk_bytes=8 << 20)
    with open(out, "wb") as output:
        process = confinement.spawn_confined(
            [sys.executable, "-I", "-c", WRITES_ALL_IT_CAN],
            level=level,
            workdir=work,
            readable=[],
            env=confinement.sandbox_environment(work),
            limits=limits,
            stdout=output,
        )
    try:
        assert process.popen.wait(timeout=60) == 0
        assert disk.is_bounded(work) and process.filled() == ["its folder"]
        seen = json.loads(out.read_text().splitlines()[-1])
    finally:
        process.kill_tree()
    assert seen["folder"][1] == errno.ENOSPC and seen["folder"][0] <= 8 << 20
    assert seen["again"] == [0, errno.ENOSPC]  # the bound is the folder's, not a file's
    if level is Isolation.PROCESS:
        assert seen["tmp"][1] == errno.EFBIG  # the host's /tmp: RLIMIT_FSIZE only
        os.unlink("/tmp/c")
    else:
        assert seen["tmp"] == [0, errno.EACCES]  # nothing else is writable
    assert not disk.is_bounded(work) and not any(work.iterdir())


def test_without_root_the_disk_bound_is_said_missing(monkeypatch):
    monkeypatch.setattr(disk, "can_bound", lambda: False)
    level = confinement.choose_isolation("auto")
    assert any("a bound on its disk" in m for m in confinement.not_applied(level))
    assert confinement.describe(level)["disk"].startswith(
        "not bounded: its folder is on the host's disk"
    )
