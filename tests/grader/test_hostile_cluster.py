"""Hostile ex12 submissions (several processes): each gets exactly what it earned.

The reference and the attack of issue 16 are graded for real, by `grade_batch` two at a time, under
bubblewrap and under Landlock (a grading of ex12 takes 20 to 60 s here). The other attacks are judged
one level down, where their verdicts are made: a real run of their processes (grader.worker.cluster,
in the best sandbox here), judged by the exercise's own checks (its conftest's Checks, which every ex12
test calls); the visible tests' configuration, 2 processes of 4 devices.

Each case is a whole ex12_multi_controller.py a student who has read the grader could write: it fakes
what the exercise asks for by rewriting the grader's reporting code in its own process (the driver's
function that describes the array global_from_local returned, and the grader's own use of that array), by
passing rows and barrier arrivals through files in every folder the processes might share (their own,
the run's, each other's, /tmp, /dev/shm), and, for joining, by never calling jax.distributed at all or
by opening plain TCP connections to the coordinator's port. What defeats them (grader.worker.cluster):
the grader runs and observes the coordinator (every process must register and publish its devices
there) and looks at each process's connections itself; the processes share no writable folder and
cannot read each other's; the array global_from_local returns is judged on rows drawn for that call
only, which the grader gathers from it in every process.

Graded for real on the grader as it was before (bubblewrap / Landlock, out of 15): never_joins 15 / 15,
sockets_never_joins 13.75 / 15 (its file barrier was once seen late), joins_then_files 15 / 15,
forged_layout 15 / 15; the reference 15 / 15. Now: 0 / 0, 0 / 0, 1.88 / 1.88 (initialize and
process_summary of the visible tests, which are real: it joins; its runs then hang and two stopped tests
end the exercise), 11.25 / 11.25 (all but global_from_local); the reference 15 / 15.
"""

from __future__ import annotations

import importlib.util
import json
import textwrap
from typing import NamedTuple

import pytest

from grader.course import catalog
from grader.grading.batch import grade_batch
from grader.grading.results import GradingResults
from grader.worker import confinement
from grader.worker.cluster import ClusterTimeout, run_cluster
from grader.worker.cluster_driver import load_driver

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("test_hostile_cluster")]

EX12 = catalog.get("ex12_multi_controller")
DRIVER = load_driver(EX12.tests_dir() / "driver.py")


def code(text: str) -> str:
    return textwrap.dedent(text).lstrip("\n")


REFERENCE = "".join(line for line in EX12.solution_path().read_text().splitlines(keepends=True) if "### " not in line)

HEAD = code('''
    import glob, os, pickle, socket, sys, time
    import jax
    import jax.numpy as jnp
    import numpy as np
    from jax.experimental import multihost_utils
    from jax.sharding import NamedSharding, PartitionSpec as P

    _me = {}
''')

# A channel through files: every folder the processes might share, the sibling folders included.
FILES = code('''
    def _places():
        here = os.getcwd()
        found = []
        for place in (here, os.path.dirname(here), *glob.glob(os.path.join(os.path.dirname(here), "*")),
                      os.environ.get("TMPDIR"), os.environ.get("HOME"), "/tmp", "/dev/shm", "/var/tmp"):
            if place and os.path.isdir(place) and place not in found:
                found.append(place)
        return found

    def _post(name, value):
        data = pickle.dumps(value)
        for place in _places():
            try:
                part = os.path.join(place, f".ex12-{name}.{os.getpid()}")
                with open(part, "wb") as f:
                    f.write(data)
                os.replace(part, os.path.join(place, f".ex12-{name}"))
            except OSError:
                pass

    def _fetch(name, wait=30.0):
        end = time.monotonic() + wait
        while time.monotonic() < end:
            for place in _places():
                try:
                    with open(os.path.join(place, f".ex12-{name}"), "rb") as f:
                        return pickle.loads(f.read())
                except (OSError, EOFError, pickle.UnpicklingError):
                    pass
            time.sleep(0.01)
        raise TimeoutError(f"no process posted {name}")

    def _all(prefix, mine):
        _post(f"{prefix}-{_me['id']}", mine)
        return [_fetch(f"{prefix}-{i}") for i in range(_me["n"])]

    def _own_rows(arr):
        shards = sorted(arr.addressable_shards, key=lambda s: s.index[0].start or 0)
        return np.concatenate([np.asarray(s.data) for s in shards])
''')

# The reporting code, replaced in this process's driver (ex12's driver.py, run by grader.worker.cluster_process
# as the module shardlab_driver): what global_from_local "built" is described from this process's own rows
# on its own devices, and the grader's use of that array answers with whatever _global_rows() finds.
FORGED_REPORTS = code('''
    def _forged_description(arr, *rest):
        rows = _me["rows"]
        per = len(rows) // _me["local"]
        first = _me["id"] * len(rows)
        devices = sorted(d.id for d in jax.local_devices())
        shards = [{"device": devices[k], "index": [[first + k * per, first + (k + 1) * per], [0, rows.shape[1]]],
                   "data": rows[k * per:(k + 1) * per]} for k in range(_me["local"])]
        return {"type": "jax.Array", "shape": [_me["n"] * len(rows), rows.shape[1]], "dtype": "float32",
                "sharding": "NamedSharding(mesh=Mesh('d': 8), spec=PartitionSpec('d',))", "equivalent": True,
                "fully_addressable": False, "shards": shards}

    def _forged_use(arr, *rest):
        return _global_rows()

    _driver = sys.modules["shardlab_driver"]
    _driver.describe_global_array = _forged_description
    _driver.use_global_array = _forged_use
''')

JOINS = code('''
    def initialize(coordinator_address, num_processes, process_id):
        jax.distributed.initialize(coordinator_address=coordinator_address, num_processes=num_processes,
                                   process_id=process_id)
        _me.update(id=process_id, n=num_processes, local=len(jax.local_devices()))

    def process_summary():
        return {"process_index": jax.process_index(), "process_count": jax.process_count(),
                "device_count": jax.device_count(), "local_device_count": jax.local_device_count()}
''')

THROUGH_FILES = code('''
    def global_from_local(local_rows, mesh):
        _me["rows"] = np.array(local_rows)
        _me["all rows"] = _all("rows", _me["rows"])
        return None

    def _global_rows():
        return np.concatenate(_me["all rows"])

    def global_sum(arr):
        return float(np.sum(np.concatenate(_all("given", _own_rows(arr))), dtype=np.float64))

    def gather_to_host(arr):
        return np.concatenate(_all("gathered", _own_rows(arr)))

    def barrier(name):
        _all(f"arrived-{name}", True)
''')

# The attack of issue 16: never joins; process_summary repeats its arguments; everything else through files.
NEVER_JOINS = HEAD + FILES + code('''
    def initialize(coordinator_address, num_processes, process_id):
        _me.update(id=process_id, n=num_processes, local=len(jax.local_devices()))

    def process_summary():
        local = len(jax.local_devices())
        return {"process_index": _me["id"], "process_count": _me["n"], "device_count": _me["n"] * local,
                "local_device_count": local}
''') + THROUGH_FILES + FORGED_REPORTS

# The same, and each process holds a plain TCP connection to the coordinator's port (process 0 listening
# there, where no one else does), so that each seems to have joined.
SOCKETS_NEVER_JOINS = NEVER_JOINS + code('''
    _held = []

    def _seem_joined(address):
        host, port = address.rsplit(":", 1)
        if _me["id"] == 0:
            try:
                _held.append(socket.create_server(("", int(port)), family=socket.AF_INET6, dualstack_ipv6=True))
            except OSError:
                pass
        for _ in range(500):
            try:
                _held.append(socket.create_connection((host, int(port)), timeout=1))
                return
            except OSError:
                time.sleep(0.02)

    _initialize = initialize

    def initialize(coordinator_address, num_processes, process_id):
        _initialize(coordinator_address, num_processes, process_id)
        _seem_joined(coordinator_address)
''')

# Joins for real, then does the rest through files and forged reports.
JOINS_THEN_FILES = HEAD + FILES + JOINS + THROUGH_FILES + FORGED_REPORTS

# Honest but for global_from_local, which builds nothing: its array is only described, and the grader's
# use of it answers with what gather_to_host gathered (the grader's own array).
FORGED_LAYOUT = HEAD + JOINS + code('''
    def global_from_local(local_rows, mesh):
        _me["rows"] = np.array(local_rows)
        return None

    def _global_rows():
        return _me["gathered"]

    def global_sum(arr):
        return float(jax.jit(jnp.sum, out_shardings=NamedSharding(arr.sharding.mesh, P()))(arr))

    def gather_to_host(arr):
        _me["gathered"] = np.asarray(multihost_utils.process_allgather(arr, tiled=True))
        return _me["gathered"]

    def barrier(name):
        multihost_utils.sync_global_devices(name)
''') + FORGED_REPORTS

STEP_TESTS = ("test_initialize", "test_process_summary", "test_global_from_local", "test_global_sum",
              "test_gather_to_host", "test_barrier")


class Case(NamedTuple):
    source: str
    earns: tuple[str, ...]    # the tests (by name prefix) it may pass: everything else must not
    must: tuple[str, ...]     # of those, the tests it must pass (in both configurations)
    message: str = ""         # in the message of the first test it fails


CASES = {
    "reference": Case(REFERENCE, STEP_TESTS, STEP_TESTS),
    "never_joins": Case(NEVER_JOINS, (), (), "was not connected to the coordinator"),
    "sockets_never_joins": Case(SOCKETS_NEVER_JOINS, (), (), "not every process registered with the coordinator"),
    # Its initialize and process_summary are real; then its run hangs (a file that never comes).
    "joins_then_files": Case(JOINS_THEN_FILES, ("test_initialize", "test_process_summary"), (), "stopped after"),
    "forged_layout": Case(FORGED_LAYOUT, tuple(t for t in STEP_TESTS if t != "test_global_from_local"),
                          tuple(t for t in STEP_TESTS if t != "test_global_from_local"),
                          "the array global_from_local built, gathered in process"),
}
LEVELS = ("bubblewrap", "landlock")
GRADED = ("reference", "never_joins")   # graded for real at each level
RUN_ONLY = tuple(case for case in CASES if case not in GRADED)
QUIET = 6.0   # seconds of silence that stop a run (grading's is 10): a faker's wait for a file ends sooner


@pytest.fixture(scope="module", params=LEVELS)
def graded(request, tmp_path_factory) -> tuple[str, dict[str, GradingResults | None]]:
    """The cases GRADED at one isolation level, as one class."""
    level = request.param
    class_dir = tmp_path_factory.mktemp(f"class-{level}")
    for name in GRADED:
        case = CASES[name]
        (class_dir / name).mkdir()
        (class_dir / name / EX12.module_file).write_text(case.source)
    out = tmp_path_factory.mktemp(f"graded-{level}")
    summary = grade_batch(class_dir, out, jobs=2, exercises=[EX12.number], isolation=level)
    for outcome in sorted(summary.outcomes, key=lambda o: o.student):
        print(f"{level} {outcome.student}: {outcome.status} in {outcome.seconds:.1f} s {outcome.detail[:200]}")
    results = {}
    for name in GRADED:
        report = out / name / "report.json"
        results[name] = GradingResults.from_dict(json.loads(report.read_text())) if report.is_file() else None
    return level, results


def ex12(results: GradingResults | None):
    assert results is not None, "no report.json"
    return results.exercises[EX12.id]


def check_case(case: str, where: str, outcomes: list[tuple[str, str, str]], score=None, max_score=None) -> None:
    """outcomes: (test name, category, message) of every test; score: the points, when graded."""
    rules = CASES[case]
    table = "\n".join(f"  {name}: {category} {message[:200]}" for name, category, message in outcomes)
    print(f"{case} [{where}]" + (f": {score:.2f}/{max_score:g}" if score is not None else "") + f"\n{table}")
    for name, category, _ in outcomes:
        if not name.startswith(rules.earns):
            assert category != "passed", f"{case} [{where}] earned {name} for what it faked:\n{table}"
        elif name.startswith(rules.must):
            assert category == "passed", f"{case} [{where}] lost {name}, which it did:\n{table}"
    failed = [message for _, category, message in outcomes if category != "passed"]
    if rules.message:
        assert rules.message in failed[0], table


@pytest.mark.parametrize("case", GRADED)
def test_graded_for_real_each_earns_only_what_it_did(graded, case):
    level, results = graded
    exercise = ex12(results[case])
    assert results[case].environment["isolation"]["level"] == level
    check_case(case, level, [(t.name, t.category, t.message) for t in exercise.tests], exercise.score,
               exercise.max_score)
    rules = CASES[case]
    earned = sum(t.max_score for t in exercise.tests if t.name.startswith(rules.earns))
    assert exercise.score == pytest.approx(earned)   # the reference: full marks; the attack: nothing


def exercise_checks():
    """The Checks class of ex12's tests (their conftest.py), which decides every ex12 test's verdict."""
    spec = importlib.util.spec_from_file_location("ex12_checks", EX12.tests_dir() / "conftest.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.Checks


def judged(run, checks) -> list[tuple[str, str, str]]:
    """Each visible test's category and message, as its check decides on this run."""
    outcomes = []
    for name in STEP_TESTS:
        try:
            getattr(checks, name.removeprefix("test_"))(run)
            outcomes.append((name, "passed", ""))
        except AssertionError as exc:
            outcomes.append((name, "failed", str(exc)))
        except ClusterTimeout as exc:
            outcomes.append((name, "timeout", str(exc)))
        except Exception as exc:   # what the student's code raised, or a process that died
            outcomes.append((name, "error", f"{type(exc).__name__}: {exc}"))
    return outcomes


@pytest.mark.parametrize("case", RUN_ONLY)
def test_run_and_judged_each_earns_only_what_it_did(case, tmp_path):
    (tmp_path / EX12.module_file).write_text(CASES[case].source)
    tmp_path.chmod(0o755)   # the sandbox's user must reach it
    level = confinement.choose_isolation("auto")
    run = run_cluster(DRIVER, tmp_path / EX12.module_file, isolation=level, quiet_seconds=QUIET)
    check_case(case, f"{level} run", judged(run, exercise_checks()))
