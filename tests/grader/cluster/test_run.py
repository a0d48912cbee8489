"""Multi-controller runs (ex12) for real: the reference's processes join the grader's coordinator over a
loopback and report every step, and the grader sees them join; each process writes only a folder of its
own and reads no other's; a run that hangs is stopped and says where each process stood; a process that
dies is reported; nothing is left running and no port stays open afterwards, also when runs overlap; and
another exercise's driver runs through the same route.

The hostile modules are the reference with one twist each. The hang tests stop a run after 6 s of
silence instead of grading's 10 (grader.cluster.run.QUIET_SECONDS), to keep the suite short."""

from __future__ import annotations

import os
import socket
import textwrap
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from grader.cluster.census import connected, tcp_connections
from grader.cluster.driver import DriverError, load_driver
from grader.cluster.records import LocalTopology, read_local_topology
from grader.cluster.run import ClusterCrashed, ClusterTimeout
from grader.cluster.run_cluster import run_cluster
from grader.core import wall_cap
from grader.course import catalog
from grader.course.implementations import ImplementationImportError
from grader.sandbox import confinement
from grader.sandbox.confinement import Isolation, worker_limits
from grader.sandbox.launch import landlock_abi

EX12 = catalog.get("ex12_multi_controller")
DRIVER = load_driver(EX12.tests_dir() / "driver.py")
STEPS, USE_STEP = DRIVER.steps, DRIVER.module.USE_STEP
QUIET = 6.0


def reference_with(twist: str = "") -> str:
    source = "".join(
        line
        for line in EX12.solution_path().read_text().splitlines(keepends=True)
        if "### " not in line
    )
    return source + textwrap.dedent(twist)


def module(tmp_path: Path, twist: str = "") -> Path:
    path = tmp_path / EX12.module_file
    path.write_text(reference_with(twist))
    tmp_path.chmod(0o755)  # the processes run as nobody when the tests run as root
    return path


def sandbox() -> Isolation:
    return confinement.choose_isolation("auto")


def assert_nothing_left(run) -> None:
    processes, sockets = run.left_behind()
    assert processes == [], "a process of the run is still there"
    assert sockets == [], f"the coordinator's port {run.coordinator} is still open"


@pytest.mark.parametrize("level", sorted({Isolation.PROCESS, sandbox()}, key=str))
def test_the_reference_joins_reports_every_step_and_leaves_nothing(level):
    run = run_cluster(
        DRIVER,
        EX12.solution_path(),
        processes=2,
        devices_per_process=4,
        isolation=None if level is Isolation.PROCESS else level,
    )
    assert run.stopped_after is None and run.exits == {0: 0, 1: 0}, run.output[-2000:]
    for process in range(2):
        for step in STEPS:
            run.result(process, step)  # raises what the step raised, or why it never finished
    assert run.result(1, "process_summary")["device_count"] == 8
    assert run.coordinator.startswith("127.0.0.1:")
    # What the grader saw itself: both registered with its coordinator, each published 4 devices of its
    # own, each held a connection to it; each had a Landlock ruleset of its own where the kernel has one.
    assert run.registered and [run.not_joined(p) for p in range(2)] == [None, None]
    assert [len(run.published[p]) for p in range(2)] == [4, 4] and set(run.published[0]).isdisjoint(
        run.published[1]
    )
    assert run.separated == (landlock_abi() >= 1)
    for process in range(2):
        assert (run.result(process, USE_STEP)["value"] == run.inputs.expected).all()
        assert (run.result(process, "gather_to_host")["value"] == run.inputs.given).all()
    assert_nothing_left(run)


# Process i writes a file into its own folder, then tries every other place it might share with the
# other process, and the other's file: it reports what it could do (as its process_summary).
SNOOP = """
    import os as _os, time as _time
    def process_summary():
        here, me = _os.getcwd(), jax.process_index()
        run_folder, other = _os.path.dirname(here), 1 - jax.process_index()
        with open(_os.path.join(here, f"mine-{me}"), "w") as mine:
            mine.write("rows")
        wrote, read = [], []
        for place in (here, run_folder, _os.path.join(run_folder, f"process-{other}"), "/tmp", "/dev/shm"):
            try:
                with open(_os.path.join(place, f"probe-{me}"), "w") as probe:
                    probe.write("rows")
                wrote.append(place)
            except OSError:
                pass
        _time.sleep(1)   # the other process has written its own file by now
        try:
            read.append(open(_os.path.join(run_folder, f"process-{other}", f"mine-{other}")).read())
        except OSError:
            pass
        return {"here": here, "wrote": wrote, "read": read}
"""


@pytest.mark.slow
@pytest.mark.skipif(landlock_abi() < 1, reason="each process's own folder needs Landlock")
def test_each_process_writes_only_its_own_folder_and_reads_no_other(tmp_path):
    run = run_cluster(DRIVER, module(tmp_path, SNOOP), isolation=sandbox(), quiet_seconds=QUIET)
    assert run.separated
    for process in range(2):
        seen = run.result(process, "process_summary")
        assert seen["here"] == os.path.join(run.workdir, f"process-{process}")
        assert seen["wrote"] == [seen["here"]] and seen["read"] == [], seen
    assert_nothing_left(run)


# What a process of a run could share with another besides TCP: it reports which of these it could make.
SIDE_CHANNELS = """
    import ctypes as _ctypes, socket as _socket
    def process_summary():
        made = []
        def _try(name, make):
            try:
                make()
                made.append(name)
            except OSError:
                pass
        _try("udp", lambda: _socket.socket(_socket.AF_INET, _socket.SOCK_DGRAM).close())
        _try("unix", lambda: _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM).close())
        _libc = _ctypes.CDLL(None, use_errno=True)
        for _name, _call in (("shm", lambda: _libc.shmget(0, 4096, 0o1600)),
                             ("sem", lambda: _libc.semget(0, 1, 0o1600)),
                             ("msg", lambda: _libc.msgget(0, 0o1600)),
                             ("mq", lambda: _libc.mq_open(b"/rows", 0o100, 0o600, None))):
            if _call() != -1:
                made.append(_name)
        _try("tcp", lambda: _socket.socket(_socket.AF_INET, _socket.SOCK_STREAM).close())
        return made
"""


@pytest.mark.slow
def test_a_process_of_a_run_can_make_tcp_sockets_and_nothing_else_to_share(tmp_path):
    run = run_cluster(
        DRIVER, module(tmp_path, SIDE_CHANNELS), isolation=sandbox(), quiet_seconds=QUIET
    )
    for process in range(2):
        assert run.result(process, "process_summary") == ["tcp"]  # jax's gRPC and gloo need no more
    assert_nothing_left(run)


ADDRESS_SPACE = """
    import resource as _resource
    def process_summary():
        return _resource.getrlimit(_resource.RLIMIT_AS)[0]
"""


@pytest.mark.slow
def test_each_process_of_a_run_holds_the_memory_limit_a_worker_would(tmp_path):
    limits = worker_limits(3 << 30)  # --memory-limit 3
    run = run_cluster(
        DRIVER,
        module(tmp_path, ADDRESS_SPACE),
        isolation=sandbox(),
        quiet_seconds=QUIET,
        limits=limits,
    )
    assert [run.result(p, "process_summary") for p in range(2)] == [limits.memory_bytes] * 2
    assert_nothing_left(run)


# What jax 0.10's CPU client published for processes 0 and 1 of a run of 2 x 4 devices (captured).
BOOT = b"\x12$b3217682-2ea3-4325-8710-0097c1362d79"
PUBLISHED = {
    0: BOOT
    + b"\x1a\x1dB\x03cpuJ\x0fCpuDevice(id=0)R\x05cpu:0\x1a!\x08\x01 \x01B\x03cpuJ\x0fCpuDevice(id=1)"
    b"R\x05cpu:1\x1a!\x08\x02 \x02B\x03cpuJ\x0fCpuDevice(id=2)R\x05cpu:2\x1a!\x08\x03 \x03B\x03cpu"
    b"J\x0fCpuDevice(id=3)R\x05cpu:3",
    1: b"\x08\x01"
    + BOOT
    + b"\x1a& \x80\x10B\x03cpuJ\x12CpuDevice(id=2048)R\x08cpu:2048\x1a(\x08\x01 \x81\x10B\x03cpu"
    b"J\x12CpuDevice(id=2049)R\x08cpu:2049\x1a(\x08\x02 \x82\x10B\x03cpuJ\x12CpuDevice(id=2050)R\x08cpu:2050"
    b"\x1a(\x08\x03 \x83\x10B\x03cpuJ\x12CpuDevice(id=2051)R\x08cpu:2051",
}


def test_the_devices_a_process_publishes_are_read():
    # node 0 and device 0: fields left out, as 0
    assert read_local_topology(PUBLISHED[0]) == LocalTopology(0, (0, 1, 2, 3))
    assert read_local_topology(PUBLISHED[1]) == LocalTopology(1, (2048, 2049, 2050, 2051))


def test_the_census_sees_a_connection_only_to_its_port():
    with socket.create_server(("127.0.0.1", 0)) as server:
        port = server.getsockname()[1]
        with socket.create_connection(("127.0.0.1", port)):
            held = tcp_connections(os.getpid())
            assert connected(held, port) is None
            elsewhere = port + 1 if port < 65535 else 1
            assert "none connected to the coordinator's port" in connected(held, elsewhere)


HANG_IN_SUM = """
    def global_sum(arr):   # the collective in process 0 only: it waits forever for the others
        if jax.process_index() == 0:
            return float(jax.jit(jnp.sum, out_shardings=NamedSharding(arr.sharding.mesh, P()))(arr))
        return 0.0
"""


def test_a_run_that_hangs_is_stopped_and_says_where_each_process_stood(tmp_path):
    begun = time.monotonic()
    run = run_cluster(
        DRIVER, module(tmp_path, HANG_IN_SUM), isolation=sandbox(), quiet_seconds=QUIET
    )
    assert run.stopped_after is not None
    # by its silence, judged on the wall clock less the time its processes waited for a processor: on a
    # busy machine that waiting (up to WAIT_CREDIT x the silence) is forgiven before a hang is called one
    judged = run.stopped_by
    assert judged.cap == QUIET and judged.counted > judged.cap
    assert time.monotonic() - begun < (1 + wall_cap.WAIT_CREDIT) * QUIET + 20
    for process in range(2):
        for step in ("initialize", "process_summary", "global_from_local"):
            run.result(process, step)
    with pytest.raises(
        ClusterTimeout, match=r"process 0 was still in global_sum\(\) and never finished global_sum"
    ):
        run.result(0, "global_sum")
    # it returned; the gather then waits
    assert run.result(1, "global_sum") == {"type": "float", "value": 0.0}
    with pytest.raises(ClusterTimeout, match=r"process 1 was still in gather_to_host\(\)"):
        run.result(1, "gather_to_host")
    with pytest.raises(ClusterTimeout):
        run.result(1, "barrier")
    assert_nothing_left(run)


def test_a_process_that_dies_is_reported_and_the_others_are_stopped(tmp_path):
    twist = """
        import os as _os
        _original = global_from_local
        def global_from_local(local_rows, mesh):
            if jax.process_index() == 1:
                _os._exit(3)
            return _original(local_rows, mesh)
    """
    run = run_cluster(DRIVER, module(tmp_path, twist), isolation=sandbox(), quiet_seconds=QUIET)
    with pytest.raises(
        ClusterCrashed, match=r"process 1 ended during global_from_local\(\).*exited with status 3"
    ):
        run.result(1, "global_from_local")
    run.result(0, "global_from_local")  # building it needs no other process
    with pytest.raises((ClusterTimeout, ClusterCrashed)):
        run.result(0, "global_sum")
    assert_nothing_left(run)


def test_a_process_that_dies_right_after_the_proof_still_joined(tmp_path):
    """The harness looks at each process as its join and its proof step left it (the process waits for that
    look), so a process that dies at its next call, before the harness has read its report, still joined."""
    twist = """
        import os as _os
        def process_summary():
            _os._exit(3)
    """
    run = run_cluster(DRIVER, module(tmp_path, twist), isolation=sandbox(), quiet_seconds=QUIET)
    assert [run.not_joined(p) for p in range(run.processes)] == [None] * run.processes
    run.result(0, "initialize")
    run.result(1, "initialize")
    with pytest.raises(
        ClusterCrashed, match=r"ended during process_summary\(\).*exited with status 3"
    ):
        run.result(1, "process_summary")
    assert_nothing_left(run)


def test_a_module_that_fails_to_import_fails_every_step_alike(tmp_path):
    run = run_cluster(
        DRIVER, module(tmp_path, "raise RuntimeError('broken on purpose')\n"), isolation=sandbox()
    )
    for step in ("initialize", "barrier"):
        with pytest.raises(ImplementationImportError, match="broken on purpose"):
            run.result(0, step)
    assert_nothing_left(run)


def test_runs_side_by_side_never_meet_on_a_port():
    """Two grading jobs at once, at the plain process level, where the ports are the machine's own."""
    with ThreadPoolExecutor(2) as pool:
        runs = list(
            pool.map(lambda _: run_cluster(DRIVER, EX12.solution_path(), isolation=None), range(2))
        )
    for run in runs:
        assert run.stopped_after is None, run.output[-2000:]
        assert run.result(0, "global_sum")["value"] == pytest.approx(
            float(run.inputs.given.sum()), rel=1e-5, abs=1e-4
        )
        assert_nothing_left(run)


# Another multi-process exercise, as a course author would add one: a driver and a module, nothing else.
OTHER_DRIVER = """
    from dataclasses import dataclass

    STEPS = ("join", "count", "double")

    @dataclass(frozen=True)
    class Inputs:
        numbers: list

        def for_process(self, process):
            return {"x": self.numbers[process]}

    def draw(rng, processes, devices_per_process):
        return Inputs([float(rng.integers(1, 1000)) for _ in range(processes)])

    def run(process):
        module = process.module
        joined, _ = process.step("join", lambda: module.join(process.coordinator, process.count, process.index))
        if joined:
            process.step("count", module.count)
            process.step("double", lambda: module.double(process.inputs["x"]), lambda value: {"doubled": value})
"""
OTHER_MODULE = """
    import jax

    def join(address, count, index):
        jax.distributed.initialize(coordinator_address=address, num_processes=count, process_id=index)

    def count():
        return jax.device_count()

    def double(x):
        return 2 * x
"""


def test_another_exercise_s_driver_runs_through_the_same_route(tmp_path):
    (tmp_path / "driver.py").write_text(textwrap.dedent(OTHER_DRIVER))
    (tmp_path / "other.py").write_text(textwrap.dedent(OTHER_MODULE))
    tmp_path.chmod(0o755)
    run = run_cluster(
        load_driver(tmp_path / "driver.py"),
        tmp_path / "other.py",
        processes=2,
        devices_per_process=2,
        isolation=sandbox(),
        quiet_seconds=QUIET,
    )
    assert run.stopped_after is None and run.exits == {0: 0, 1: 0}, run.output[-2000:]
    assert run.steps == ("join", "count", "double") and [run.not_joined(p) for p in range(2)] == [
        None,
        None,
    ]
    for process in range(2):
        assert run.result(process, "join") is None and run.result(process, "count") == 4
        assert run.result(process, "double") == {"doubled": 2 * run.inputs.numbers[process]}
    with pytest.raises(ValueError, match="not a step of this run's driver"):
        run.result(0, "initialize")
    assert_nothing_left(run)


def test_a_driver_must_name_its_steps_and_define_draw_and_run(tmp_path):
    for source, problem in (
        ("def draw(): pass\ndef run(): pass\n", "STEPS must be"),
        ("STEPS = ('join', 'join')\ndef draw(): pass\ndef run(): pass\n", "STEPS must be"),
        ("STEPS = ('join',)\ndef draw(): pass\n", "no function run"),
    ):
        path = tmp_path / "driver.py"
        path.write_text(source)
        with pytest.raises(DriverError, match=problem):
            load_driver(path)
