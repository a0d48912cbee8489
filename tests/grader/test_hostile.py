"""A corpus of hostile and broken submissions, graded as one class by the real grader (`grade_batch`,
two at a time): each must get exactly the points it earned, leave nothing running, change no file of
the checkout or the Python environment, reach no classmate's result, and carry no hidden test out.

Each case is a reference or a stub with a twist, so that exactly the tests the twist touches change
category. Stub-based cases are the sharp ones: an attack that worked would turn "not attempted" into
points. Grouped as the attacks are: crashes and limits; tampering with the grader; forging results;
reading what is secret; gaming the checks.
"""

import hashlib
import json
import os
import socket
import sys
import textwrap
import time
from pathlib import Path

import psutil
import pytest

from grader.course import catalog, paths
from grader.grading.batch import grade_batch
from grader.grading.results import GradingResults

EX01, EX02, EX04 = catalog.get("ex01"), catalog.get("ex02"), catalog.get("ex04")


def source(exercise, stub=False) -> str:
    path = exercise.stub_path() if stub else exercise.solution_path()
    return "".join(line for line in path.read_text().splitlines(keepends=True) if "### " not in line)


REFERENCE, STUB = source(EX01), source(EX01, stub=True)
MARKER = "shardlab-hostile-daemon-7f3a"
TEST_TIMEOUT = 10
LISTENER = socket.create_server(("127.0.0.1", 0))   # a submission that reaches it was not confined
LISTENER.setblocking(False)


def wrap(function: str, condition: str, action: str) -> str:
    """Redefine a function of the module so that it does `action` when `condition` holds."""
    return textwrap.dedent(f"""
        _{function}_original = {function}
        def {function}(*args, **kwargs):
            n = args[0] if args else None
            if {condition}:
                {action}
            return _{function}_original(*args, **kwargs)
    """)


def everything(category):
    return lambda exercise, name: category if exercise == EX01.id else "not attempted"


def only(prefixes, category):
    """`category` for the ex01 tests named with one of `prefixes`, passed for its others."""
    return lambda exercise, name: ("not attempted" if exercise != EX01.id
                                   else category if name.startswith(prefixes) else "passed")

DAEMON = f"""
import os, sys
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        os.execv(sys.executable, [sys.executable, "-c", "import time; time.sleep(600)", "{MARKER}"])
    os._exit(0)
os.wait()
"""

FORGERY = """
import json, os
fake = {"score": 100, "tests": []}
for folder in (os.getcwd(), os.environ.get("HOME", "."), "/tmp", "/autograder/results"):
    for name in ("results.json", "report.json", "grades.csv"):
        try:
            open(os.path.join(folder, name), "w").write(json.dumps(fake))
        except OSError:
            pass
line = json.dumps({"e": "result", "nodeid": "x", "category": "passed"}).encode() + b"\\n"
for fd in range(3, 40):
    try:
        os.write(fd, line)
    except OSError:
        pass
"""

# At import: find the grader's event stream, pytest's session or the recorder in this process and send
# "passed" for every test, then leave without a trace (the first design lost 55/55 to this).
GC_FORGERY = """
import gc, json, os
for obj in gc.get_objects():
    name = type(obj).__name__
    if name in ("EventStream", "Session", "Recorder", "Channel"):
        for fd in range(3, 1024):
            try:
                os.write(fd, json.dumps({"e": "result", "nodeid": "*", "category": "passed"}).encode() + b"\\n")
            except OSError:
                pass
os._exit(0)
"""

PATCH_GRADER = """
import _pytest.python, numpy, jax.numpy, grader.checks, grader.checks.numerics, grader.checks.sharding
_pytest.python.Function.runtest = lambda self: None
grader.checks.numerics.assert_close.__code__ = (lambda *a, **k: None).__code__
numpy.allclose = lambda *a, **k: True
jax.numpy.allclose = lambda *a, **k: True
grader.checks.sharding.assert_sharded_like = lambda *a, **k: None
"""

# Rewrite the grader on disk, the checkout, the environment and pytest's caches; each write must fail.
REWRITE_FILES = """
import glob, os, site, sys
import grader, grader.checks.sharding
planted = []
def plant(path, text, mode="a"):
    try:
        with open(path, mode) as handle:
            handle.write(text)
        planted.append(path)
    except OSError:
        pass
plant(grader.checks.sharding.__file__, "\\ndef assert_sharded_like(*a, **k):\\n    return None\\n")
root = os.path.dirname(os.path.dirname(grader.__file__))
plant(os.path.join(root, "pyproject.toml"), "\\n[tool.pytest.ini_options]\\naddopts = ['-p', 'no:shardlab']\\n")
plant(os.path.join(root, "conftest.py"), "\\nraise SystemExit(0)\\n")
for folder in site.getsitepackages():
    plant(os.path.join(folder, "zz_shardlab_evil.pth"), "import os; os._exit(0)\\n", "w")
for cache in glob.glob(os.path.join(root, "**", "__pycache__"), recursive=True):
    plant(os.path.join(cache, "evil.pyc"), "x", "w")
if planted:   # a write that went through is rewarded with the reference, so the test would see points
    exec(compile(open(os.path.join(root, "solutions", "ex01_meshes.py")).read(), "x", "exec"))
"""

# Find the batch's --out in the grader's command lines, rewrite every report.json and grades.csv below
# it, and kill every process it can see, the batch included.
ATTACK_CLASSMATES = """
import glob, json, os, signal
outs = []
for cmdline in glob.glob("/proc/*/cmdline"):
    try:
        words = open(cmdline, "rb").read().split(b"\\0")
    except OSError:
        continue
    for i, word in enumerate(words[:-1]):
        if word == b"--out":
            outs.append(os.path.dirname(words[i + 1].decode()))
for out in outs:
    for report in glob.glob(os.path.join(out, "*", "report.json")):
        try:
            open(report, "w").write(json.dumps({"score": 0, "exercises": {}}))
        except OSError:
            pass
    try:
        open(os.path.join(out, "grades.csv"), "w").write("student,total\\n")
    except OSError:
        pass
for pid in [os.getppid()] + [int(p) for p in os.listdir("/proc") if p.isdigit()]:
    if pid != os.getpid():
        for kill in (lambda: os.killpg(os.getpgid(pid), signal.SIGKILL), lambda: os.kill(pid, signal.SIGKILL)):
            try:
                kill()
            except (OSError, ProcessLookupError):
                pass
"""

# Read the reference or the hidden tests by path, through a directory descriptor, and with a shell.
READ_SECRETS = """
import os, subprocess
import grader
root = os.path.dirname(os.path.dirname(grader.__file__))
text = None
for attempt in (
    lambda: open(os.path.join(root, "solutions", "ex01_meshes.py")).read(),
    lambda: os.read(os.open("ex01_meshes.py", os.O_RDONLY, dir_fd=os.open(os.path.join(root, "solutions"),
                                                                            os.O_RDONLY)), 1 << 20).decode(),
    lambda: subprocess.run(["cat", os.path.join(root, "solutions", "ex01_meshes.py")], capture_output=True,
                           text=True, check=True).stdout,
):
    try:
        text = attempt()
        break
    except Exception:
        pass
if text:
    exec(compile("\\n".join(l for l in text.splitlines() if "### " not in l), "reference", "exec"))
"""

LEAK_HIDDEN = wrap("place", "True", "raise ValueError(open(__import__('os').path.join(__import__('os').path.dirname("
                   "__import__('os').path.dirname(__import__('grader').__file__)), 'tests', 'exercises', "
                   "'ex01_meshes', 'test_hidden.py')).read())")

NETWORK = f"""
import socket
import grader
connected = False
for address in (("127.0.0.1", {LISTENER.getsockname()[1]}), ("8.8.8.8", 53)):
    try:
        socket.create_connection(address, timeout=2).close()
        connected = True
    except OSError:
        pass
if connected:
    exec(compile(open(grader.__file__.replace("grader/__init__.py", "solutions/ex01_meshes.py")).read(), "x", "exec"))
"""

ALWAYS_EQUAL = """
class Anything(dict):
    def __eq__(self, other):
        return True
    def __ne__(self, other):
        return False
    __hash__ = object.__hash__
"""

EX01_ALWAYS_EQUAL = REFERENCE + ALWAYS_EQUAL + textwrap.dedent("""
    def make_mesh_2x4():
        return Anything()

    def shard_table(arr):
        return [Anything() for _ in range(8)]
""")

EX02_REFERENCE = source(EX02)
EX02_ALWAYS_EQUAL = EX02_REFERENCE + ALWAYS_EQUAL + textwrap.dedent("""
    def describe(arr):
        return Anything()

    def shard_shape(global_shape, mesh_shape, spec):
        return Anything()

    def bytes_per_device(global_shape, dtype, mesh_shape, spec):
        return Anything()
""")

EX02_READS_FRAMES = EX02_REFERENCE + textwrap.dedent("""
    import sys

    def shard_shape(global_shape, mesh_shape, spec):
        frame = sys._getframe(1)
        while frame is not None:
            for name in ("want", "expected", "expected_shape"):
                if name in frame.f_locals:
                    return frame.f_locals[name]
            frame = frame.f_back
        raise KeyError("want")
""")

FAKE_SHARDING = REFERENCE + textwrap.dedent("""
    class FakeSharding:
        def is_equivalent_to(self, other, ndim):
            return True

    class FakeArray:
        sharding = FakeSharding()
        addressable_shards = []
        shape = (8, 12)

    def place(x, mesh, spec):
        return FakeArray()
""")

# Make the worker send, for every traced call, a program of its own that names an unknown custom call.
FORGED_PROGRAM = source(EX04) + textwrap.dedent("""
    import base64
    import jax
    import grader.worker.protocol as _protocol

    def _forged(fn, args, kwargs, functions=None):
        shapes = [jax.ShapeDtypeStruct(a.shape, a.dtype) for a in jax.tree.leaves((args, kwargs))
                  if isinstance(a, jax.ShapeDtypeStruct)]
        out = jax.ShapeDtypeStruct((1,), jax.numpy.float32)
        target = "shardlab_forged"
        exported = jax.export.export(
            jax.jit(lambda *xs: jax.ffi.ffi_call(target, out)(*xs)),
            disabled_checks=[jax.export.DisabledSafetyCheck.custom_call(target)])(*shapes)
        return {"artifact": base64.b64encode(exported.serialize()).decode(), "out": {"t": "slot", "i": 0}}

    _protocol.export_traced = _forged
""")

TRACED_EX04 = ("test_layer_auto_has_no_collectives", "test_layer_shard_map_has_no_collectives",
               "test_layer_shard_map_divides_the_flops", "test_layer_feature_sharded_uses_one_all_reduce",
               "test_layer_shard_map_speedup_over_replicated", "test_layer_shard_map_speedup_over_one_device")


def for_exercises(rules: dict):
    """{exercise id: expected(name)}; an exercise not listed is not in the submission."""
    return lambda exercise, name: rules[exercise](name) if exercise in rules else "not attempted"


def all_of(category):
    return lambda name: category


def named(prefixes, category):
    return lambda name: category if name.startswith(prefixes) else "passed"


# name: (files of the submission, expected category of each test, message fragment of the non-passes)
CASES = {
    # -- crashes and limits --
    "exit_at_import": ({EX01.module_file: REFERENCE + "\nraise SystemExit(3)\n"}, everything("error"),
                       "called exit(3)"),
    "os_exit_at_import": ({EX01.module_file: REFERENCE + "\nimport os\nos._exit(3)\n"}, everything("crashed"),
                          "while importing ex01_meshes.py"),
    "os_exit_in_a_call": ({EX01.module_file: REFERENCE + wrap("make_data_mesh", "n == 5", "import os; os._exit(7)")},
                          only(("test_data_mesh_odd_sizes[5]",), "crashed"), "exited with status 7"),
    "endless_loop": ({EX01.module_file: REFERENCE + wrap("make_data_mesh", "n == 3", "while True: pass")},
                     only(("test_data_mesh_odd_sizes[3]",), "timeout"), "did not finish this call"),
    "memory_exhaustion": ({EX01.module_file: REFERENCE + wrap("make_data_mesh", "n == 1", "bytearray(64 * 2**30)")},
                          only(("test_data_mesh_odd_sizes[1]",), "error"), "MemoryError"),
    "spawns_a_daemon": ({EX01.module_file: REFERENCE + wrap("make_mesh_2x4", "True",
                                                            DAEMON.replace("\n", "\n                "))},
                        everything("passed"), ""),
    "huge_output": ({EX01.module_file: REFERENCE + "\nimport sys\nsys.__stdout__.write('x' * 30_000_000)\n"
                     + wrap("place", "True", "print('y' * 2_000_000)")}, everything("passed"), ""),
    "syntax_error": ({EX01.module_file: REFERENCE.replace("def make_mesh_2x4():", "def make_mesh_2x4(:")},
                     everything("error"), "syntax error at line"),
    "wrong_signature": ({EX01.module_file: REFERENCE.replace("def place(x, mesh, spec):", "def place(x, spec):")},
                        only(("test_place",), "error"), "TypeError"),
    # -- tampering with the grader --
    "ships_conftest_and_site_hooks": ({EX01.module_file: STUB, "conftest.py": textwrap.dedent("""
        import pytest
        @pytest.hookimpl(wrapper=True)
        def pytest_runtest_makereport(item, call):
            report = yield
            report.outcome = "passed"
            return report
        """), "pytest.ini": "[pytest]\naddopts = -p no:shardlab\n", "sitecustomize.py": "import os\nos._exit(1)\n",
        "evil.pth": "import os; os._exit(1)\n"}, everything("not attempted"), "ex01:"),
    "patches_pytest_and_the_checks": ({EX01.module_file: STUB + PATCH_GRADER}, everything("not attempted"), "ex01:"),
    "patches_a_check_during_a_call": ({EX01.module_file: REFERENCE + wrap(
        "place", "True", "import grader.checks.sharding as s; s.assert_shard_values = lambda *a, **k: None; "
                         "return _place_original(args[0] + 1, *args[1:])")},
        only(("test_place",), "failed"), "differs from the reference"),
    "rewrites_grader_files": ({EX01.module_file: STUB + REWRITE_FILES}, everything("not attempted"), "ex01:"),
    # Its lines reach the worker's own pipe to the harness (a protocol error) or nothing (it just exits).
    "finds_the_events_in_memory": ({EX01.module_file: STUB + GC_FORGERY}, everything(("error", "crashed")),
                                   "while importing ex01_meshes.py"),
    # -- forging results --
    "forges_result_files": ({EX01.module_file: STUB + FORGERY}, everything("not attempted"), "ex01:"),
    # Killing its own process group ends it while importing; either way it earns nothing.
    "attacks_classmates": ({EX01.module_file: STUB + ATTACK_CLASSMATES}, everything(("not attempted", "crashed")),
                           ""),
    # -- reading what is secret --
    "imports_solutions_as_a_package": ({EX01.module_file: REFERENCE + "\nfrom solutions.ex01_meshes import *\n"},
                                       everything("error"), "No module named 'solutions'"),
    "reads_solutions": ({EX01.module_file: STUB + READ_SECRETS}, everything("not attempted"), "ex01:"),
    "leaks_hidden_tests": ({EX01.module_file: REFERENCE + LEAK_HIDDEN}, only(("test_place",), "error"),
                           "Error"),
    "reaches_the_network": ({EX01.module_file: STUB + NETWORK}, everything("not attempted"), "ex01:"),
    # -- gaming the checks --
    "objects_equal_to_anything": (
        {EX01.module_file: EX01_ALWAYS_EQUAL, EX02.module_file: EX02_ALWAYS_EQUAL},
        for_exercises({EX01.id: named(("test_make_mesh_2x4", "test_mesh_2x4", "test_shard_table"), "error"),
                       EX02.id: named(("test_describe", "test_shard_shape", "test_bytes_per_device"), "error")}),
        "cannot be sent to the grader"),
    "reads_the_callers_frames": ({EX02.module_file: EX02_READS_FRAMES},
                                 for_exercises({EX02.id: named(("test_shard_shape",), "error")}), "KeyError"),
    "fakes_a_sharding": ({EX01.module_file: FAKE_SHARDING}, only(("test_place",), "error"),
                         "cannot be sent to the grader"),
    "forges_its_traced_programs": ({EX04.module_file: FORGED_PROGRAM},
                                   for_exercises({EX04.id: named(TRACED_EX04, "error")}), "shardlab_forged"),
    # -- an honest classmate, graded after the attacks --
    "zz_honest_classmate": ({EX01.module_file: REFERENCE, EX02.module_file: EX02_REFERENCE, EX04.module_file:
                             source(EX04)}, for_exercises({e: all_of("passed") for e in (EX01.id, EX02.id, EX04.id)}),
                            ""),
}
GRADED = ["ex01", "ex02", "ex04"]


def accepted(expected) -> tuple:
    return expected if isinstance(expected, tuple) else (expected,)


def daemons_running() -> list[int]:
    return [p.pid for p in psutil.process_iter(["cmdline", "status"])
            if MARKER in " ".join(p.info["cmdline"] or []) and p.info["status"] != psutil.STATUS_ZOMBIE]


def fingerprint(root: Path, *, contents: bool) -> dict[str, tuple]:
    """Every file under root (pycache included): size and mtime, and a digest of the small ones."""
    found = {}
    for folder, _, files in os.walk(root):
        for name in files:
            path = Path(folder, name)
            try:
                stat = path.stat()
            except OSError:
                continue
            digest = hashlib.sha256(path.read_bytes()).hexdigest() if contents and stat.st_size < 1 << 20 else ""
            found[str(path)] = (stat.st_size, stat.st_mtime_ns, digest)
    return found


def environment_roots() -> list[Path]:
    import site

    return sorted({Path(p) for p in site.getsitepackages()} | {Path(sys.prefix) / "bin"})


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    """The whole corpus graded as one class, two at a time, as an instructor would:
    {case: (results read back from its report.json, its output folder)}, plus the fingerprints."""
    class_dir = tmp_path_factory.mktemp("class")
    for name, (files, _, _) in CASES.items():
        (class_dir / name).mkdir()
        for filename, text in files.items():
            (class_dir / name / filename).write_text(text)
    out = tmp_path_factory.mktemp("graded")
    checkout_before = fingerprint(paths.REPO_ROOT, contents=True)
    environment_before = {str(root): fingerprint(root, contents=False) for root in environment_roots()}
    started = time.monotonic()
    summary = grade_batch(class_dir, out, jobs=2,
                          grade_args=[*(f"--exercise={e}" for e in GRADED), f"--test-timeout={TEST_TIMEOUT}"])
    print(f"hostile corpus: {len(CASES)} submissions graded in {time.monotonic() - started:.1f} s wall time")
    assert sorted(o.status for o in summary.outcomes) == ["graded"] * len(CASES), summary.outcomes
    results = {name: (GradingResults.from_dict(json.loads((out / name / "report.json").read_text())), out / name)
               for name in CASES}
    changes = {
        "checkout": _differences(checkout_before, fingerprint(paths.REPO_ROOT, contents=True)),
        "environment": [d for root in environment_roots()
                        for d in _differences(environment_before[str(root)], fingerprint(root, contents=False))],
    }
    return results, changes, out, summary


def _differences(before: dict, after: dict) -> list[str]:
    return sorted(f"{path}: {'added' if path not in before else 'removed' if path not in after else 'changed'}"
                  for path in before.keys() | after.keys() if before.get(path) != after.get(path))


@pytest.mark.slow
@pytest.mark.parametrize("case", list(CASES))
def test_each_case_gets_exactly_what_it_earned(graded, case):
    results, _, out, _ = graded
    graded_results, folder = results[case]
    _, expected, fragment = CASES[case]
    tests = [t for e in graded_results.exercises.values() for t in e.tests]
    wrong = [f"{t.exercise} {t.name}: {t.category} ({t.message[:200]})" for t in tests
             if t.category not in accepted(expected(t.exercise, t.name))]
    assert not wrong, "\n".join(wrong[:10])
    assert all(fragment in t.message for t in tests if t.category not in ("passed", "not attempted")), \
        [t.message[:200] for t in tests if t.category not in ("passed", "not attempted")][:3]
    earned = sum(t.max_score for t in tests if t.category == "passed")
    assert graded_results.score == pytest.approx(earned)
    assert json.loads((folder / "results.json").read_text())["score"] == pytest.approx(round(earned, 4), abs=1e-3)


@pytest.mark.slow
def test_the_worker_was_sandboxed(graded):
    results, _, _, _ = graded
    isolation = results["zz_honest_classmate"][0].environment["isolation"]
    print(f"isolation in force: {isolation}")
    assert isolation["level"] in ("bubblewrap", "landlock")


@pytest.mark.slow
def test_nothing_is_left_running(graded):
    assert daemons_running() == [], "a submission's daemon outlived its grading"
    assert [p for p in psutil.Process().children(recursive=True) if p.status() != psutil.STATUS_ZOMBIE] == []


@pytest.mark.slow
def test_the_checkout_and_the_environment_are_unchanged(graded):
    _, changes, _, _ = graded
    checkout = [c for c in changes["checkout"] if "/.git/" not in c]
    assert checkout == [], checkout[:10]
    assert changes["environment"] == [], changes["environment"][:10]


@pytest.mark.slow
def test_no_classmate_result_changes(graded):
    results, _, out, summary = graded
    honest, folder = results["zz_honest_classmate"]
    assert honest.score == pytest.approx(honest.max_score) and honest.max_score == sum(
        catalog.get(e).points for e in GRADED)
    rows = {line.split(",")[0]: line for line in (out / "grades.csv").read_text().splitlines()[1:]}
    assert set(rows) == set(CASES)
    for name, (graded_results, folder) in results.items():
        report = json.loads((folder / "report.json").read_text())
        assert report["score"] == pytest.approx(graded_results.score)
        assert f",{round(graded_results.score, 2)}," in rows[name], rows[name]
    assert {o.student for o in summary.outcomes} == set(CASES)


@pytest.mark.slow
def test_no_hidden_test_line_reaches_any_output(graded):
    _, _, out, _ = graded
    hidden = {line.strip() for e in catalog.EXERCISES
              for line in (e.tests_dir() / "test_hidden.py").read_text().splitlines() if len(line.strip()) > 25}
    for path in out.rglob("*"):
        if path.is_file() and path.suffix in (".json", ".xml", ".csv", ".log"):
            text = path.read_text(errors="replace")
            leaked = [line for line in hidden if line in text]
            assert not leaked, f"{path.relative_to(out)} holds hidden test lines: {leaked[:3]}"


@pytest.mark.slow
def test_the_network_was_not_reached(graded):
    try:
        LISTENER.accept()
    except BlockingIOError:
        return
    raise AssertionError("a submission connected to the listener on 127.0.0.1")


@pytest.mark.slow
def test_shipped_files_are_listed_and_never_loaded(graded):
    results, _, _, _ = graded
    problem = next(p for p in results["ships_conftest_and_site_hooks"][0].problems
                   if p.startswith("not graded and never loaded"))
    for name in ("conftest.py", "pytest.ini", "sitecustomize.py", "evil.pth"):
        assert name in problem


@pytest.mark.slow
def test_huge_output_is_truncated(graded):
    results, _, _, _ = graded
    graded_results, folder = results["huge_output"]
    tests = graded_results.exercises[EX01.id].tests
    assert all(len(t.output) < 6000 for t in tests)
    assert any(t.output.startswith("yyyy") for t in tests)
    assert (folder / "report.json").stat().st_size < 2_000_000
