"""A corpus of hostile and broken submissions, graded as one class by the real grader (`grade_batch`, two
at a time, every student module in a confined worker): each must get exactly the points it earned, leave
nothing running, change no file of the checkout or the Python environment, reach no classmate's result,
no network and no secret, and carry no hidden test out.

Each case is a reference module or a stub with a twist, so that exactly the tests the twist touches
change category. Stub-based cases are the sharp ones: an attack that worked would turn "not attempted"
into points (or, where it says so, into a distinctive error). Grouped as the attacks are: crashes and
limits; tampering with the grader; forging results; reading what is secret; gaming the checks. The
harness never runs student code, so every attack here runs in the worker, and the question each case
asks is whether anything it does there reaches the harness, the grading process or the machine.
"""

from __future__ import annotations

import csv
import hashlib
import json
import os
import socket
import sys
import textwrap
import time
from pathlib import Path
from typing import NamedTuple

import psutil
import pytest

from grader.course import catalog, paths
from grader.grading.batch import grade_batch, student_folder
from grader.grading.results import GradingResults

pytestmark = pytest.mark.xdist_group("test_hostile")   # its module-scoped fixture does the heavy work once

EX01, EX02, EX03, EX04 = (catalog.get(f"ex0{n}") for n in (1, 2, 3, 4))
GRADED = [EX01, EX02, EX03, EX04]
TEST_TIMEOUT = 10
MARKER = "shardlab-hostile-daemon-7f3a"   # in the daemon's command line, to find it afterwards
PORT = "__SHARDLAB_LISTENER_PORT__"       # replaced by the port of a listener the fixture opens
CACHE = "__SHARDLAB_COMPILE_CACHE__"      # replaced by the graders' compile cache folder (SHARDLAB_CACHE)
PLANTED = "planted-by-a-student-cache"    # an entry's name as jax writes them (<key>-cache)


def source(exercise, stub: bool = False) -> str:
    path = exercise.stub_path() if stub else exercise.solution_path()
    return "".join(line for line in path.read_text().splitlines(keepends=True) if "### " not in line)


REF1, REF2, REF3, REF4 = (source(e) for e in GRADED)
STUB1, STUB4 = source(EX01, stub=True), source(EX04, stub=True)


def code(text: str) -> str:
    return "\n" + textwrap.dedent(text).strip("\n") + "\n"


def wrap(function: str, condition: str, action: str) -> str:
    """Redefine a function of the module so that it does `action` when `condition` holds (n: the first
    positional argument)."""
    return code(f"""
        _{function}_original = {function}
        def {function}(*args, **kwargs):
            n = args[0] if args else None
            if {condition}:
                {action}
            return _{function}_original(*args, **kwargs)
    """)


# --- expectations ----------------------------------------------------------------------------------
# expected(exercise id, test name) -> a category or a tuple of accepted ones; an exercise a case has no
# module for is "not attempted".

def expect(**rules):
    """expect(ex01=rule, ...): rule(test name) gives the category of each test of that exercise."""
    by_id = {catalog.get(number).id: rule for number, rule in rules.items()}
    return lambda exercise, name: by_id[exercise](name) if exercise in by_id else "not attempted"


def every(category):
    return lambda name: category


def named(prefixes, category, others="passed"):
    return lambda name: category if name.startswith(prefixes) else others


class Case(NamedTuple):
    files: dict[str, str]     # the submission: file name -> text
    expected: object          # expected(exercise id, test name) -> category or tuple of categories
    messages: dict            # category -> a fragment every test of that category must show


def only_ex01(text: str, expected, messages: dict | None = None, **extra_files) -> Case:
    return Case({EX01.module_file: text, **extra_files}, expected, messages or {})


# --- crashes and limits ----------------------------------------------------------------------------

DAEMON = f"""
import os, sys
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        os.execv(sys.executable, [sys.executable, "-c", "import time; time.sleep(600)", "{MARKER}"])
    os._exit(0)
os.wait()
"""

# --- tampering with the grader ---------------------------------------------------------------------

# What a submission ships beside its module: each would take over pytest or Python if it were loaded.
SHIPPED = {
    "conftest.py": code("""
        import pytest
        @pytest.hookimpl(wrapper=True)
        def pytest_runtest_makereport(item, call):
            report = yield
            report.outcome = "passed"
            return report
    """),
    "pytest.ini": "[pytest]\naddopts = -p no:shardlab\n",
    "sitecustomize.py": "import os\nos._exit(1)\n",
    "evil.pth": "import os; os._exit(1)\n",
}

# At import: make every comparison and every check of the grader say yes.
PATCHES_AT_IMPORT = code("""
    try:
        import numpy, numpy.testing, jax.numpy
        import grader.checks, grader.checks.hlo, grader.checks.numerics, grader.checks.sharding
        _yes, _nothing = (lambda *a, **k: True), (lambda *a, **k: None)
        numpy.allclose = numpy.array_equal = jax.numpy.allclose = jax.numpy.array_equal = _yes
        numpy.testing.assert_allclose = numpy.testing.assert_array_equal = _nothing
        for _module in (grader.checks, grader.checks.hlo, grader.checks.numerics, grader.checks.sharding):
            for _name in dir(_module):
                if _name.startswith("assert_"):
                    setattr(_module, _name, _nothing)
        grader.checks.numerics.compare = _nothing
    except Exception:
        pass
""")

# At import: pytest's own test runner becomes a no-op, and the checks' code objects are swapped in place.
PATCHES_CODE_OBJECTS = code("""
    try:
        import _pytest.python, _pytest.runner
        import grader.checks.numerics, grader.checks.sharding
        _pytest.python.Function.runtest = lambda self: None
        _pytest.runner.pytest_runtest_call = lambda item: None
        _noop = (lambda *a, **k: None).__code__
        for _check in (grader.checks.numerics.assert_close, grader.checks.numerics.assert_computes,
                       grader.checks.numerics.compare, grader.checks.sharding.assert_sharded_like):
            _check.__code__ = _noop
    except Exception:
        pass
""")

# During a call: neuter the checks, then return wrong values (x + 1), which only a working patch would pass.
PATCHES_DURING_A_CALL = code("""
    def place(x, mesh, spec):
        import numpy
        import grader.checks, grader.checks.numerics, grader.checks.sharding
        _nothing = lambda *a, **k: None
        for module in (grader.checks, grader.checks.numerics, grader.checks.sharding):
            for name in dir(module):
                if name.startswith("assert_"):
                    setattr(module, name, _nothing)
        grader.checks.numerics.compare.__code__ = _nothing.__code__
        numpy.allclose = lambda *a, **k: True
        return jax.device_put(numpy.asarray(x) + 1, NamedSharding(mesh, spec))
""")

# Rewrite the grader on disk (its source, a valid bytecode cache the harness would load instead), the
# checkout's configuration, the environment's site-packages and the __pycache__ folders of the grader and
# of the tests. Every write must fail; one that worked is reported by a distinctive error at import.
REWRITES_FILES = code("""
    import glob, importlib.util, os, site
    import grader, grader.checks.sharding
    _planted = []
    def _plant(path, data, mode="a"):
        try:
            with open(path, mode) as handle:
                handle.write(data)
            _planted.append(path)
        except (OSError, ValueError):
            pass
    _neutered = "\\ndef assert_sharded_like(*a, **k):\\n    return None\\n"
    _sharding = grader.checks.sharding.__file__
    _plant(_sharding, _neutered)
    try:
        _stat = os.stat(_sharding)
        _code = compile(open(_sharding).read() + _neutered, _sharding, "exec")
        _pyc = importlib._bootstrap_external._code_to_timestamp_pyc(_code, _stat.st_mtime, _stat.st_size)
        _plant(importlib.util.cache_from_source(_sharding), bytes(_pyc), "wb")
    except Exception:
        pass
    _root = os.path.dirname(os.path.dirname(grader.__file__))
    _plant(os.path.join(_root, "pyproject.toml"), "\\n# shardlab-hostile\\n")
    _plant(os.path.join(_root, "conftest.py"), "\\n# shardlab-hostile\\n")
    for _folder in site.getsitepackages():
        _plant(os.path.join(_folder, "zz_shardlab_hostile.pth"), "# shardlab-hostile\\n", "w")
    _caches = set(glob.glob(os.path.join(_root, "**", "__pycache__"), recursive=True))
    _caches |= {os.path.join(_root, "tests", "__pycache__"), os.path.join(_root, "tests", "grader", "__pycache__"),
                *(os.path.join(_root, "tests", "exercises", e, "__pycache__") for e in
                  ("ex01_meshes", "ex02_sharding_properties", "ex03_computation_follows_data", "ex04_sharded_layer"))}
    for _cache in _caches:
        try:
            os.makedirs(_cache, exist_ok=True)
        except OSError:
            pass
        _plant(os.path.join(_cache, "shardlab_hostile.cpython-311.pyc"), b"shardlab-hostile", "wb")
    if _planted:
        raise RuntimeError("shardlab-hostile: wrote " + ", ".join(_planted))
""")

# --- forging results -------------------------------------------------------------------------------

# Result files everywhere it can think of, and event lines into every descriptor it has.
FORGES_RESULT_FILES = code("""
    import json, os
    _fake = {"score": 55, "max_score": 55, "exercises": {}, "tests": []}
    _here = os.path.dirname(os.path.abspath(__file__))
    _folders = {os.getcwd(), os.environ.get("HOME", "."), os.environ.get("TMPDIR", "/tmp"), "/tmp", _here,
                os.path.dirname(_here), "/autograder/results", "/autograder"}
    for _folder in _folders:
        for _name in ("results.json", "report.json", "grades.csv", "junit.xml"):
            try:
                with open(os.path.join(_folder, _name), "w") as handle:
                    handle.write(json.dumps(_fake))
            except OSError:
                pass
    _line = json.dumps({"e": "result", "nodeid": "*", "category": "passed", "message": ""}).encode() + b"\\n"
    for _fd in range(3, 41):
        try:
            os.write(_fd, _line)
        except OSError:
            pass
""")

# At import: look in this process's memory for the grader's event stream, pytest's session or the results
# recorder, tell each that every test passed, send "passed" lines down every descriptor, and vanish.
FINDS_THE_EVENTS_IN_MEMORY = code("""
    import gc, json, os
    _passed = {"e": "result", "nodeid": "*", "category": "passed", "message": ""}
    for _obj in gc.get_objects():
        try:
            _kind = type(_obj).__name__
            if _kind in ("EventStream", "Session", "Recorder", "Worker", "RemoteModule", "Channel"):
                if hasattr(_obj, "send"):
                    _obj.send(_passed)
                for _entry in getattr(_obj, "entries", {}).values():
                    _entry.update(category="passed", message="")
                for _item in getattr(_obj, "items", None) or []:
                    _item.runtest = lambda: None
        except Exception:
            pass
    _line = json.dumps(_passed).encode() + b"\\n"
    _fds = list(range(3, 256))
    if os.environ.get("SHARDLAB_EVENTS_FD", "").isdigit():
        _fds.insert(0, int(os.environ["SHARDLAB_EVENTS_FD"]))
    for _fd in _fds:
        try:
            os.write(_fd, _line)
        except OSError:
            pass
    os._exit(0)
""")

# Find the batch's --out in the command lines it can see, rewrite every report.json / results.json below
# it and grades.csv, then kill every process it can see, its parent's process group first.
ATTACKS_CLASSMATES = code("""
    import glob, json, os, signal
    _outs = set()
    for _cmdline in [f"/proc/{os.getppid()}/cmdline", *glob.glob("/proc/*/cmdline")]:
        try:
            _words = open(_cmdline, "rb").read().split(b"\\0")
        except OSError:
            continue
        for _i, _word in enumerate(_words):
            if _word == b"--out" and _i + 1 < len(_words):
                _outs.add(_words[_i + 1].decode(errors="replace"))
            elif _word.startswith(b"--out="):
                _outs.add(_word[6:].decode(errors="replace"))
    for _out in _outs:
        for _folder in (_out, os.path.dirname(_out)):
            for _name in ("report.json", "results.json"):
                for _report in glob.glob(os.path.join(_folder, "**", _name), recursive=True):
                    try:
                        with open(_report, "w") as handle:
                            handle.write(json.dumps({"score": 0, "max_score": 100, "exercises": {}}))
                    except OSError:
                        pass
            try:
                with open(os.path.join(_folder, "grades.csv"), "w") as handle:
                    handle.write("student,total\\nzz_honest_classmate,0\\n")
            except OSError:
                pass
    _me = os.getpid()
    for _pid in [int(p) for p in os.listdir("/proc") if p.isdigit()]:
        if _pid != _me:
            for _kill in (lambda: os.kill(_pid, signal.SIGKILL), lambda: os.killpg(os.getpgid(_pid), signal.SIGKILL)):
                try:
                    _kill()
                except OSError:
                    pass
    for _kill in (lambda: os.kill(os.getppid(), signal.SIGKILL),
                  lambda: os.killpg(os.getpgid(os.getppid()), signal.SIGKILL)):
        try:
            _kill()
        except OSError:
            pass
""")

# Monkeypatch the worker itself: every traced call answers with a program of its own that calls an
# unknown custom call, and every array it sends back claims zeros. The harness must refuse the program
# (and never compile or run it) and check the claimed values like any others.
PATCHES_THE_WORKER = code("""
    import base64, sys
    import numpy as _np
    import grader.worker.protocol as _protocol

    def _forged_program(fn=None, args=(), kwargs=None, functions=None, **_):
        structs = [jax.ShapeDtypeStruct(a.shape, a.dtype) for a in jax.tree.leaves((args, kwargs or {}))
                   if isinstance(a, jax.ShapeDtypeStruct)]
        out = jax.ShapeDtypeStruct(structs[0].shape if structs else (1,), jax.numpy.float32)
        target = "shardlab_forged"
        exported = jax.export.export(jax.jit(lambda *xs: jax.ffi.ffi_call(target, out)(*xs)),
                                     disabled_checks=[jax.export.DisabledSafetyCheck.custom_call(target)])(*structs)
        return {"artifact": base64.b64encode(exported.serialize()).decode(), "out": {"t": "slot", "i": 0}}

    _encode = _protocol.encode

    def _forged_encode(value, *args, **kwargs):
        if isinstance(value, jax.Array) and not isinstance(value, jax.core.Tracer):
            value = jax.device_put(_np.zeros(value.shape, value.dtype), value.sharding)
        return _encode(value, *args, **kwargs)

    _protocol.export_traced = _forged_program
    _protocol.encode = _forged_encode
    _worker_main = sys.modules.get("__main__")
    if hasattr(_worker_main, "handle"):
        _handle = _worker_main.handle

        def _forged_handle(module, module_path, channel, request):
            if request.get("op") == "export":
                args = _protocol.decode(request["args"])
                return {"ok": _forged_program(None, args, _protocol.decode(request["kwargs"]))}
            return _handle(module, module_path, channel, request)

        _worker_main.handle = _forged_handle
""")

# --- reading what is secret ------------------------------------------------------------------------

IMPORTS_SOLUTIONS = code("""
    import importlib, importlib.util, sys
    from grader.course import paths as _paths
    def _as_package():
        return importlib.import_module("solutions.ex01_meshes")
    def _from_the_checkout():
        sys.path.insert(0, str(_paths.REPO_ROOT))
        return importlib.import_module("solutions.ex01_meshes")
    def _by_spec():
        spec = importlib.util.spec_from_file_location("_reference", _paths.SOLUTIONS_DIR / "ex01_meshes.py")
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return module
    for _attempt in (_as_package, _from_the_checkout, _by_spec):
        try:
            _reference = _attempt()
            make_mesh_2x4, make_data_mesh = _reference.make_mesh_2x4, _reference.make_data_mesh
            place, shard_table = _reference.place, _reference.shard_table
            break
        except Exception:
            pass
""")

# A file of the checkout by path, through a directory descriptor, with a shell, through other processes'
# views of the file system (/proc/*/root, /proc/*/cwd): `_secret(relative path)` -> its text or None.
SECRET_READER = code("""
    def _secret(relative):
        import glob, os, subprocess
        from grader.course import paths
        root = str(paths.REPO_ROOT)
        folder, name = os.path.split(os.path.join(root, relative))
        attempts = [
            lambda: open(os.path.join(folder, name)).read(),
            lambda: os.read(os.open(name, os.O_RDONLY, dir_fd=os.open(folder, os.O_RDONLY | os.O_DIRECTORY)),
                            1 << 20).decode(),
            lambda: subprocess.run(["cat", os.path.join(folder, name)], capture_output=True, text=True,
                                   check=True, timeout=5).stdout,
            lambda: subprocess.run(["/bin/sh", "-c", f"cat {folder}/{name}"], capture_output=True, text=True,
                                   check=True, timeout=5).stdout,
        ]
        for view in glob.glob("/proc/*/root") + glob.glob("/proc/*/cwd"):
            attempts.append(lambda view=view: open(view + os.path.join(folder, name)).read())
            attempts.append(lambda view=view: open(os.path.join(view, relative)).read())
        for attempt in attempts:
            try:
                text = attempt()
            except Exception:
                continue
            if text and text.strip():
                return text
        return None
""")

READS_SOLUTIONS = SECRET_READER + code("""
    _text = _secret("solutions/ex01_meshes.py")
    if _text and "def place" in _text:
        exec(compile(_text, "reference", "exec"))
""")

LEAKS_HIDDEN_TESTS = SECRET_READER + code("""
    def place(x, mesh, spec):
        text = _secret("tests/exercises/ex01_meshes/test_hidden.py")
        raise ValueError(text or "shardlab-hostile: the hidden tests could not be read")
""")

# Notes every call of place (in memory and in files that outlive a worker) and raises with all it has
# noted: a visible test's message, which students see before the due date, would carry the hidden tests'
# calls if a worker that had served them served it.
NOTES_HIDDEN_CALLS = code("""
    import os as _os
    _noted = []
    _place = place

    def place(x, mesh, spec):
        _noted.append(f"note:{tuple(x.shape)}:{spec}")
        for folder in ("/tmp", _os.environ.get("HOME", "/tmp")):
            try:
                with open(_os.path.join(folder, "shardlab-notes"), "a+") as notes:
                    notes.write(_noted[-1] + "\\n")
                    notes.seek(0)
                    _noted.extend(line.strip() for line in notes if line.strip() not in _noted)
            except OSError:
                pass
        raise ValueError(" ".join(dict.fromkeys(_noted)))
""")

# At import: connect to a listener the test opened on 127.0.0.1, and to 8.8.8.8:53; a connection that
# worked is reported by a distinctive error (and the listener sees it).
REACHES_THE_NETWORK = code(f"""
    import socket
    _reached = []
    for _address in (("127.0.0.1", {PORT}), ("8.8.8.8", 53)):
        try:
            socket.create_connection(_address, timeout=3).close()
            _reached.append(_address)
        except OSError:
            pass
    if _reached:
        raise RuntimeError(f"shardlab-hostile: connected to {{_reached}}")
""")

# The graders' compile cache, its folder known (the worst case): an entry planted there would be loaded
# by a classmate's grading, and what is there is what the reference and classmates compiled.
REACHES_THE_COMPILE_CACHE = code(f"""
    import os
    _reached = []
    for _folder in ("{CACHE}", os.path.join("{CACHE}", "xla")):
        try:
            _reached.append(("listed", _folder, len(os.listdir(_folder))))
        except OSError:
            pass
        try:
            with open(os.path.join(_folder, "{PLANTED}"), "wb") as _entry:
                _entry.write(b"not a compiled program")
            _reached.append(("wrote", _folder))
        except OSError:
            pass
    if _reached:
        raise RuntimeError(f"shardlab-hostile: reached the compile cache: {{_reached}}")
""")

# --- gaming the checks -----------------------------------------------------------------------------

EQUAL_TO_ANYTHING = code("""
    class _Anything:
        def __eq__(self, other):
            return True
        def __ne__(self, other):
            return False
        __hash__ = object.__hash__

    class _AnyDict(_Anything, dict):
        __hash__ = object.__hash__

    class _AnyTuple(_Anything, tuple):
        __hash__ = tuple.__hash__

    class _AnyInt(_Anything, int):
        __hash__ = int.__hash__
""")

EX01_EQUAL_TO_ANYTHING = REF1 + EQUAL_TO_ANYTHING + code("""
    def make_mesh_2x4():
        return _Anything()

    def shard_table(arr):
        return [_AnyTuple((0, (), ())) for _ in range(len(arr.addressable_shards))]
""")

EX02_EQUAL_TO_ANYTHING = REF2 + EQUAL_TO_ANYTHING + code("""
    def describe(arr):
        return _AnyDict(shard_shape=_AnyTuple(), num_devices=_AnyInt(0))

    def shard_shape(global_shape, mesh_shape, spec):
        return _AnyTuple(global_shape)

    def bytes_per_device(global_shape, dtype, mesh_shape, spec):
        return _AnyInt(0)
""")

# shard_shape reads the expected answer out of its callers' frames, or raises: any point it earned
# would be stolen. bytes_per_device keeps computing, with the reference's shard_shape.
EX02_READS_FRAMES = REF2 + code("""
    import sys
    _computed_shard_shape = shard_shape

    def shard_shape(global_shape, mesh_shape, spec):
        frame = sys._getframe(1)
        while frame is not None:
            for name in ("want", "expected", "expected_shape"):
                if name in frame.f_locals:
                    return frame.f_locals[name]
            frame = frame.f_back
        raise KeyError("shardlab-hostile: no 'want' in any caller's frame")

    def bytes_per_device(global_shape, dtype, mesh_shape, spec):
        return math.prod(_computed_shard_shape(global_shape, mesh_shape, spec)) * np.dtype(dtype).itemsize
""")

FAKE_ARRAY = code("""
    import numpy as _np

    class _FakeArray(jax.Array):
        is_fully_addressable = True
        addressable_shards = ()

        def __init__(self, value, sharding):
            self._value, self._sharding = _np.asarray(value), sharding

        sharding = property(lambda self: self._sharding)
        shape = property(lambda self: self._value.shape)
        dtype = property(lambda self: self._value.dtype)
        ndim = property(lambda self: self._value.ndim)

        def __array__(self, dtype=None, copy=None):
            return self._value
""")

# A jax.Array subclass holding the right values, whose sharding is no sharding at all but says it is
# equivalent to anything.
FAKES_AN_ARRAY = REF1 + FAKE_ARRAY + code("""
    class _AnySharding:
        def is_equivalent_to(self, other, ndim):
            return True
        def __eq__(self, other):
            return True
        __hash__ = object.__hash__

    def place(x, mesh, spec):
        return _FakeArray(x, _AnySharding())
""")

# A jax.Array subclass holding the right values on a real NamedSharding subclass that replicates (P())
# but says it is equivalent to anything: only the layout it really describes can cross.
FAKES_A_SHARDING = REF1 + FAKE_ARRAY + code("""
    class _LyingSharding(NamedSharding):
        def is_equivalent_to(self, other, ndim):
            return True
        def __eq__(self, other):
            return True
        __hash__ = NamedSharding.__hash__

    def place(x, mesh, spec):
        return _FakeArray(x, _LyingSharding(mesh, jax.sharding.PartitionSpec()))
""")

# ex03's column_sum: each device sums its own rows only (no collective, and wrong values even on a 1xN
# mesh), inside a named scope that puts "all-reduce(" in the compiled program's metadata.
FAKES_A_COLLECTIVE = REF3 + code("""
    def column_sum(x):
        with jax.named_scope("all-reduce("):
            mesh = jax.typeof(x).sharding.mesh
            local = jax.shard_map(lambda block: block.sum(0) + 1.0, mesh=mesh, in_specs=P("x", "y"),
                                  out_specs=P("y"), check_vma=False)
            return jax.jit(local)(x)
""")

TRACED_EX04 = ("test_layer_auto_has_no_collectives", "test_layer_shard_map_has_no_collectives",
               "test_layer_shard_map_divides_the_flops", "test_layer_feature_sharded_uses_one_all_reduce",
               "test_layer_shard_map_speedup_over_replicated", "test_layer_shard_map_speedup_over_one_device")


# Reads the handout's tests and generators, and computes at trace time the answers for the inputs it
# predicts (the tests' own generator, seeds 0-9, matched by the traced shapes); its program only looks
# the answer up, per device (no collective; a dummy all-reduce where one is asked for). Direct calls raise
# the stub's error. With inputs drawn from the grading's secret, no prediction matches.
PREDICTS_THE_INPUTS = STUB4 + code("""
    import numpy as _np
    from jax import numpy as _jnp

    def _predicted(n_data, n_features, n_out, seed):   # copied from the handout's tests/.../conftest.py
        rng = _np.random.default_rng(seed)
        return (rng.standard_normal((n_data, n_features), dtype=_np.float32),
                rng.standard_normal((n_features, n_out), dtype=_np.float32) / _np.sqrt(n_features),
                rng.standard_normal(n_out, dtype=_np.float32))

    def _answer(x, W):
        for seed in range(10):
            px, pW, pb = _predicted(x.shape[0], x.shape[1], W.shape[1], seed)
            z = px.astype(_np.float64) @ pW + pb
            e = _np.exp(z - z.max(axis=-1, keepdims=True))
            return (e / e.sum(axis=-1, keepdims=True)).astype(_np.float32)

    def _looked_up(x, W, b, mesh, in_specs, out_spec, reduce):
        if not isinstance(x, jax.core.Tracer):
            raise NotImplementedError("ex04: not attempted")
        answer = _answer(x, W)
        def per_device(xb, Wb, bb):
            if reduce:
                return _jnp.asarray(answer) + jax.lax.psum(_jnp.zeros((), _jnp.float32), "data")
            rows = answer.shape[0] // mesh.shape["data"]
            return jax.lax.dynamic_slice_in_dim(_jnp.asarray(answer), jax.lax.axis_index("data") * rows, rows)
        return jax.shard_map(per_device, mesh=mesh, in_specs=in_specs, out_specs=out_spec)(x, W, b)

    def layer_auto(x, W, b, mesh):
        return _looked_up(x, W, b, mesh, (P("data", None), P(), P()), P("data", None), False)

    def layer_shard_map(x, W, b, mesh):
        return _looked_up(x, W, b, mesh, (P("data", None), P(), P()), P("data", None), False)

    def layer_feature_sharded(x, W, b, mesh):
        return _looked_up(x, W, b, mesh, (P(None, "data"), P("data", None), P()), P(), True)
""")


def predicted(name: str) -> object:
    """The traced tests meet the looked-up program on unforeseen inputs and fail; the direct ones meet
    the stub's error. The report-only speed figure (no points) may pass."""
    if name.startswith("test_layer_shard_map_speedup_over_one_device"):
        return ("passed", "failed")
    return "failed" if name.startswith(TRACED_EX04) else "not attempted"


def ex04_forged(name: str) -> str:
    """The traced tests meet the forged program; the direct ones the forged (zero) values, the test of the
    types the layer saw included (it earns only beside the right output)."""
    return "error" if name.startswith(TRACED_EX04) else "failed"


REFUSED = "host callbacks and custom kernels are not allowed in graded functions"

CASES: dict[str, Case] = {
    # -- crashes and limits --
    "exit_at_import": only_ex01(REF1 + "\nraise SystemExit(3)\n", expect(ex01=every("error")),
                                {"error": "called exit(3)"}),
    "os_exit_at_import": only_ex01(REF1 + "\nimport os\nos._exit(3)\n", expect(ex01=every("crashed")),
                                   {"crashed": "while importing ex01_meshes.py"}),
    "os_exit_in_a_call": only_ex01(REF1 + wrap("make_data_mesh", "n == 5", "import os; os._exit(7)"),
                                   expect(ex01=named("test_data_mesh_odd_sizes[5]", "crashed")),
                                   {"crashed": "exited with status 7"}),
    "endless_loop_in_a_call": only_ex01(REF1 + wrap("make_data_mesh", "n == 3", "while True: pass"),
                                        expect(ex01=named("test_data_mesh_odd_sizes[3]", "timeout")),
                                        {"timeout": "did not finish this call"}),
    "memory_exhaustion_in_a_call": only_ex01(REF1 + wrap("make_data_mesh", "n == 1", "bytearray(64 * 2**30)"),
                                             expect(ex01=named("test_data_mesh_odd_sizes[1]", "error")),
                                             {"error": "MemoryError"}),
    "spawns_a_daemon": only_ex01(REF1 + wrap("make_mesh_2x4", "True", DAEMON.replace("\n", "\n                ")),
                                 expect(ex01=every("passed"))),
    "huge_output": only_ex01(REF1 + "\nimport sys\nsys.__stdout__.write('x' * 30_000_000)\n"
                             + wrap("place", "True", "print('y' * 2_000_000)"), expect(ex01=every("passed"))),
    "syntax_error": only_ex01(REF1.replace("def make_mesh_2x4():", "def make_mesh_2x4(:"), expect(ex01=every("error")),
                              {"error": "syntax error at line"}),
    "wrong_signature": only_ex01(REF1.replace("def place(x, mesh, spec):", "def place(x, spec):"),
                                 expect(ex01=named("test_place", "error")), {"error": "TypeError"}),
    # -- tampering with the grader --
    "ships_conftest_and_site_hooks": only_ex01(STUB1, expect(ex01=every("not attempted")), **SHIPPED),
    "patches_numpy_and_the_checks_at_import": only_ex01(STUB1 + PATCHES_AT_IMPORT,
                                                        expect(ex01=every("not attempted"))),
    "patches_pytest_and_code_objects": only_ex01(STUB1 + PATCHES_CODE_OBJECTS, expect(ex01=every("not attempted"))),
    "patches_the_checks_during_a_call": only_ex01(STUB1 + PATCHES_DURING_A_CALL,
                                                  expect(ex01=named("test_place", "failed", "not attempted")),
                                                  {"failed": "differs from the reference"}),
    "rewrites_grader_files": only_ex01(STUB1 + REWRITES_FILES, expect(ex01=every("not attempted"))),
    # -- forging results --
    # Its event lines reach only the worker's own pipe to the harness: a broken protocol, an error.
    "forges_result_files": only_ex01(STUB1 + FORGES_RESULT_FILES, expect(ex01=every(("error", "not attempted"))),
                                     {"error": "broke the protocol while importing ex01_meshes.py"}),
    "finds_the_events_in_memory": only_ex01(STUB1 + FINDS_THE_EVENTS_IN_MEMORY,
                                            expect(ex01=every(("error", "crashed", "not attempted"))),
                                            {"error": "while importing ex01_meshes.py",
                                             "crashed": "while importing ex01_meshes.py"}),
    # Killing its own process group ends it while importing; either way it earns nothing.
    "attacks_classmates": only_ex01(STUB1 + ATTACKS_CLASSMATES, expect(ex01=every(("not attempted", "crashed"))),
                                    {"crashed": "while importing ex01_meshes.py"}),
    "patches_the_worker": Case({EX04.module_file: REF4 + PATCHES_THE_WORKER}, expect(ex04=ex04_forged),
                               {"error": REFUSED, "failed": "differs from the reference"}),
    # -- reading what is secret --
    "imports_solutions": only_ex01(STUB1 + IMPORTS_SOLUTIONS, expect(ex01=every("not attempted"))),
    "reads_solutions": only_ex01(STUB1 + READS_SOLUTIONS, expect(ex01=every("not attempted"))),
    "leaks_hidden_tests_in_an_error": only_ex01(REF1 + LEAKS_HIDDEN_TESTS, expect(ex01=named("test_place", "error")),
                                                {"error": "ValueError"}),
    "notes_hidden_calls": only_ex01(REF1 + NOTES_HIDDEN_CALLS, expect(ex01=named("test_place", "error")),
                                    {"error": "note:"}),
    "reaches_the_network": only_ex01(STUB1 + REACHES_THE_NETWORK, expect(ex01=every("not attempted"))),
    "reaches_the_compile_cache": only_ex01(STUB1 + REACHES_THE_COMPILE_CACHE, expect(ex01=every("not attempted"))),
    # -- gaming the checks --
    "objects_equal_to_anything": Case(
        {EX01.module_file: EX01_EQUAL_TO_ANYTHING, EX02.module_file: EX02_EQUAL_TO_ANYTHING},
        expect(ex01=named(("test_make_mesh_2x4", "test_mesh_2x4", "test_shard_table"), "error"),
               ex02=named(("test_describe", "test_shard_shape", "test_bytes_per_device"), "error")),
        {"error": "cannot be sent to the grader"}),
    "reads_the_callers_frames": Case({EX02.module_file: EX02_READS_FRAMES},
                                     expect(ex02=named("test_shard_shape", "error")), {"error": "KeyError"}),
    "fakes_an_array": only_ex01(FAKES_AN_ARRAY, expect(ex01=named("test_place", "error")),
                                {"error": "cannot be sent to the grader"}),
    "fakes_a_sharding": only_ex01(FAKES_A_SHARDING, expect(ex01=named("test_place", "failed")),
                                  {"failed": "wrong sharding"}),
    "predicts_the_inputs": Case({EX04.module_file: PREDICTS_THE_INPUTS}, expect(ex04=predicted),
                                {"failed": "differs from the reference"}),
    "fakes_a_collective": Case({EX03.module_file: FAKES_A_COLLECTIVE}, expect(ex03=named("test_column_sum", "failed")),
                               {"failed": "differs from the reference"}),
    # -- an honest classmate, graded after every attack (the batch goes in alphabetical order) --
    "zz_honest_classmate": Case({e.module_file: source(e) for e in GRADED},
                                expect(**{e.number: every("passed") for e in GRADED}), {}),
}


# --- grading the corpus ----------------------------------------------------------------------------

def accepted(expected) -> tuple:
    return expected if isinstance(expected, tuple) else (expected,)


def fingerprint(root: Path, *, contents: bool, skip: tuple[str, ...] = ()) -> dict[str, tuple]:
    """Every file under root (__pycache__ included): size and mtime, and the digest of those under 1 MB."""
    found = {}
    for folder, folders, files in os.walk(root):
        folders[:] = [f for f in folders if f not in skip]
        for name in files:
            path = Path(folder, name)
            try:
                stat = path.lstat()
                digest = hashlib.sha256(path.read_bytes()).hexdigest() \
                    if contents and path.is_file() and stat.st_size < 1 << 20 else ""
            except OSError:
                continue
            found[str(path)] = (stat.st_size, stat.st_mtime_ns, digest)
    return found


def checkout() -> dict[str, tuple]:
    # Not .git, nor the cache of a linter that may run beside the suite: grading reaches neither. Nor the
    # venv the suite may run from (.ci/run's .venv): environment() watches it.
    return fingerprint(paths.REPO_ROOT, contents=True, skip=(".git", ".ruff_cache", ".venv"))


def environment_roots() -> list[Path]:
    import site

    return sorted({Path(p) for p in site.getsitepackages()} | {Path(sys.prefix) / "bin"})


def environment() -> dict[str, tuple]:
    return {path: entry for root in environment_roots() for path, entry in fingerprint(root, contents=False).items()}


def differences(before: dict, after: dict) -> list[str]:
    return sorted(f"{path}: {'added' if path not in before else 'removed' if path not in after else 'changed'}"
                  for path in before.keys() | after.keys() if before.get(path) != after.get(path))


def daemons_running() -> list[int]:
    return [p.pid for p in psutil.process_iter(["cmdline", "status"])
            if MARKER in " ".join(p.info["cmdline"] or []) and p.info["status"] != psutil.STATUS_ZOMBIE]


class Graded(NamedTuple):
    results: dict[str, GradingResults | None]   # read back from each student's report.json
    out: Path
    summary: object
    changes: dict[str, list[str]]
    listener: socket.socket


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    """The whole corpus graded as one class, two at a time, as an instructor would."""
    listener = socket.create_server(("127.0.0.1", 0))   # a submission that reaches it was not confined
    listener.setblocking(False)
    port = str(listener.getsockname()[1])
    class_dir = tmp_path_factory.mktemp("class")
    for name, case in CASES.items():
        (class_dir / name).mkdir()
        for filename, text in case.files.items():
            (class_dir / name / filename).write_text(text.replace(PORT, port)
                                                     .replace(CACHE, os.environ["SHARDLAB_CACHE"]))
    out = tmp_path_factory.mktemp("graded")
    checkout_before, environment_before = checkout(), environment()
    started = time.monotonic()
    summary = grade_batch(class_dir, out, jobs=2, exercises=[e.number for e in GRADED],
                          test_timeout=TEST_TIMEOUT)
    print(f"\nhostile corpus: {len(CASES)} submissions graded in {time.monotonic() - started:.1f} s wall time")
    for outcome in sorted(summary.outcomes, key=lambda o: -o.seconds):
        print(f"  {outcome.student}: {outcome.status} in {outcome.seconds:.1f} s {outcome.detail[:200]}")
    changes = {"checkout": differences(checkout_before, checkout()),
               "environment": differences(environment_before, environment())}
    results = {}
    for name in CASES:
        report = student_folder(out, name) / "report.json"
        results[name] = GradingResults.from_dict(json.loads(report.read_text())) if report.is_file() else None
    yield Graded(results, out, summary, changes, listener)
    listener.close()


def expected_score(case: Case, results: GradingResults) -> float:
    """What the case earns by its expectations alone: the tests expected to pass, and nothing else."""
    return sum(t.max_score for t in results.tests() if accepted(case.expected(t.exercise, t.name)) == ("passed",))


@pytest.mark.slow
def test_every_submission_was_graded(graded):
    statuses = sorted((o.student, o.status, o.detail[:300]) for o in graded.summary.outcomes)
    assert statuses == [(name, "graded", "") for name in sorted(CASES)]


@pytest.mark.slow
@pytest.mark.parametrize("case", list(CASES))
def test_each_case_gets_exactly_what_it_earned(graded, case):
    results = graded.results[case]
    assert results is not None, f"no report.json for {case}"
    expected = CASES[case]
    tests = results.tests()
    assert {t.exercise for t in tests} == {e.id for e in GRADED}
    wrong = [f"{t.exercise} {t.name}: {t.category} ({t.message[:300]})" for t in tests
             if t.category not in accepted(expected.expected(t.exercise, t.name))]
    assert not wrong, f"{len(wrong)} test(s) not as expected:\n" + "\n".join(wrong[:12])
    for category, fragment in expected.messages.items():
        missing = [f"{t.name}: {t.message[:300]}" for t in tests
                   if t.category == category and fragment not in t.message]
        assert not missing, f"{category} without {fragment!r}:\n" + "\n".join(missing[:5])
    earned = expected_score(expected, results)
    assert results.score == pytest.approx(earned)
    gradescope = json.loads((student_folder(graded.out, case) / "results.json").read_text())
    assert gradescope["score"] == pytest.approx(round(earned, 4), abs=1e-3)


@pytest.mark.slow
def test_the_worker_was_sandboxed(graded):
    isolation = graded.results["zz_honest_classmate"].environment["isolation"]
    print(f"\nisolation in force: {isolation['level']} ({isolation})")
    assert isolation["level"] in ("bubblewrap", "landlock")
    assert all(r is None or r.environment["isolation"]["level"] == isolation["level"] for r in graded.results.values())


@pytest.mark.slow
def test_nothing_is_left_running(graded):
    assert daemons_running() == [], "a submission's daemon outlived its grading"
    left = [p for p in psutil.Process().children(recursive=True) if p.status() != psutil.STATUS_ZOMBIE]
    assert left == [], [(p.pid, p.cmdline()) for p in left]


@pytest.mark.slow
def test_the_checkout_and_the_environment_are_unchanged(graded):
    assert graded.changes["checkout"] == [], "\n".join(graded.changes["checkout"][:30])
    assert graded.changes["environment"] == [], graded.changes["environment"][:20]


@pytest.mark.slow
def test_no_classmate_result_changes(graded):
    """Every report.json and grades.csv row says what its case earned, whatever the others did."""
    honest = graded.results["zz_honest_classmate"]
    assert honest.max_score == sum(e.points for e in GRADED)
    assert honest.score == pytest.approx(honest.max_score)
    with open(graded.out / "grades.csv", newline="") as handle:
        table = csv.DictReader(handle)
        header, rows = table.fieldnames, {row["student"]: row for row in table}
    assert "total" in header and set(rows) == set(CASES)
    for name, case in CASES.items():
        results = graded.results[name]
        earned = expected_score(case, results)
        report = json.loads((student_folder(graded.out, name) / "report.json").read_text())
        assert report["score"] == pytest.approx(earned), name
        assert report["max_score"] == pytest.approx(sum(e.points for e in GRADED)), name
        assert float(rows[name]["total"]) == pytest.approx(round(earned, 2), abs=0.011), rows[name]
        assert rows[name]["status"] == "graded", rows[name]


@pytest.mark.slow
def test_no_hidden_test_line_reaches_any_output(graded):
    hidden = {line.strip() for e in catalog.EXERCISES
              for line in (e.tests_dir() / "test_hidden.py").read_text().splitlines() if len(line.strip()) > 25}
    checked = 0
    for path in graded.out.rglob("*"):
        if path.is_file() and path.suffix in (".json", ".xml", ".csv", ".log", ".txt"):
            text = path.read_text(errors="replace")
            checked += path.name in ("report.json", "results.json")
            leaked = sorted(line for line in hidden if line in text)
            assert not leaked, f"{path.relative_to(graded.out)} holds hidden test lines: {leaked[:3]}"
    assert checked == 2 * len(CASES)
    leak = graded.results["leaks_hidden_tests_in_an_error"]
    assert any("could not be read" in t.message for t in leak.tests())


@pytest.mark.slow
def test_the_network_was_not_reached(graded):
    try:
        connection, address = graded.listener.accept()
    except BlockingIOError:
        return
    connection.close()
    raise AssertionError(f"a submission connected to the listener on 127.0.0.1 from {address}")


@pytest.mark.slow
def test_the_compile_cache_holds_only_what_the_graders_compiled(graded):
    honest = graded.results["zz_honest_classmate"].environment["compile_cache"]
    assert honest["enabled"] and honest["folder"].startswith(os.environ["SHARDLAB_CACHE"])
    assert honest["entries"] > 0 and honest["hits"] + honest["misses"] > 0, honest
    planted = list(Path(os.environ["SHARDLAB_CACHE"]).rglob(f"*{PLANTED}*"))
    assert not planted, planted


@pytest.mark.slow
def test_shipped_files_are_listed_and_never_loaded(graded):
    ignored = graded.results["ships_conftest_and_site_hooks"].ignored
    assert all(any(name in listed for listed in ignored) for name in SHIPPED), ignored


@pytest.mark.slow
def test_visible_tests_never_meet_a_worker_that_served_hidden_ones(graded):
    """The one visible call of place is the only one its message can name: visible tests run first."""
    results = graded.results["notes_hidden_calls"]
    visible = [t for t in results.tests() if not t.hidden and t.name.startswith("test_place")]
    hidden = [t for t in results.tests() if t.hidden and t.name.startswith("test_place")]
    assert len(visible) == 1 and hidden, [t.name for t in results.tests()]
    assert visible[0].message.count("note:") == 1, visible[0].message
    assert max(t.message.count("note:") for t in hidden) > 1   # the attack did note calls


@pytest.mark.slow
def test_huge_output_is_truncated(graded):
    results = graded.results["huge_output"]
    tests = results.exercises[EX01.id].tests
    assert all(len(t.output) < 6000 for t in tests)
    assert any(t.output.startswith("yyyy") for t in tests)
    assert len(results.output) < 50_000
    assert (student_folder(graded.out, "huge_output") / "report.json").stat().st_size < 2_000_000
