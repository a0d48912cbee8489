"""Attacks on the harness through what a worker sends it, graded for real (`grade_submission`, every
student module in a confined worker): protocol bombs on the answer pipe, native kernels and huge buffers
in a traced program, and a module that reads the program the harness traced for it. The submission is
ex05's and ex11's references with a twist in some functions: only the tests of those functions may lose,
the harness stays small and alive, and the program it sends carries nothing of the tests but the
computation.

The student here has read grader/worker: it finds the worker's pipe to the harness in its own memory and
writes well-framed messages there itself, or hands the harness a program that jax.export accepts.
"""

from __future__ import annotations

import re
import textwrap
import threading
import time
from pathlib import Path
from typing import NamedTuple

import psutil
import pytest

from grader.course import catalog
from grader.grading.engine import grade_submission
from grader.grading.results import GradingResults
from grader.worker import programs

# one grading, shared by the tests below
pytestmark = pytest.mark.xdist_group("test_hostile_programs")

EX05, EX11 = catalog.get("ex05"), catalog.get("ex11")
TEST_TIMEOUT = 10
# The harness's peak resident memory grading ex05 and ex11: 300 MiB for the reference, 364 MiB for these
# attacks; before the bounds, 3.3 GiB under the huge buffer alone and 2.0 GiB under the huge message.
HARNESS_PEAK_BYTES = 1 << 30


def source(exercise) -> str:
    return "".join(
        line
        for line in exercise.solution_path().read_text().splitlines(keepends=True)
        if "### " not in line
    )


def code(text: str) -> str:
    return "\n" + textwrap.dedent(text).strip("\n") + "\n"


# The worker's pipe to the harness, found in the worker's memory, and a frame of the protocol written to it.
RAW_FRAMES = code("""
    import gc as _gc, os as _os, struct as _struct

    def _send_raw(body):
        fd = next(o.response_fd for o in _gc.get_objects() if type(o).__name__ == "Channel")
        for data in (memoryview(_struct.pack(">Q", len(body))), memoryview(body)):
            while data:
                data = data[_os.write(fd, data):]
""")

# Six of ex05's seven collectives attack the harness, each its own way (then answer as the reference
# does); ring_all_reduce and device_ranks stay honest.
KEEPS_THE_REFERENCE = code("""
    import jax.numpy as _jnp
    _reference = dict(globals())
""")
ATTACKS_EX05 = {
    # One 250 MB message: 83 million empty JSON objects (5 GB once parsed).
    "ring_shift": code("""
        def ring_shift(x, mesh, k=1):
            _send_raw(b'{"kind":"ok","value":{"t":"list","v":[' + b"{}," * 83_000_000 + b'{}]}}')
            return _reference["ring_shift"](x, mesh, k)
    """),
    # JSON nested 200,000 deep.
    "all_to_all": code("""
        def all_to_all(x, mesh):
            _send_raw(b'{"kind":"ok","value":' + b"[" * 200_000 + b"]" * 200_000 + b"}")
            return _reference["all_to_all"](x, mesh)
    """),
    # 15 MiB messages, each well under the size limit, one after the other (as callback requests).
    "all_reduce_via_scatter_gather": code("""
        def all_reduce_via_scatter_gather(x, mesh):
            padding = b"x" * (15 << 20)
            for _ in range(1000):
                _send_raw(b'{"kind":"callback","function":0,"args":{"t":"tuple","v":["' + padding
                          + b'"]},"kwargs":{"t":"dict","v":[]}}')
            return _reference["all_reduce_via_scatter_gather"](x, mesh)
    """),
    # lapack_sgetrf_ffi (on jax's list of stable custom calls) declared with a 1x1 result for a 512x512
    # operand: the kernel writes the whole factorization there.
    "all_reduce": code("""
        def all_reduce(x, mesh):
            def per_device(block):
                square = _jnp.zeros((512, 512), _jnp.float32) + block.sum()
                results = (jax.ShapeDtypeStruct((1, 1), _jnp.float32), jax.ShapeDtypeStruct((512,), _jnp.int32),
                           jax.ShapeDtypeStruct((), _jnp.int32))
                lu = jax.ffi.ffi_call("lapack_sgetrf_ffi", results)(square)[0]
                return jax.lax.psum(block, "i") + 0 * lu[0, 0]
            return jax.shard_map(per_device, mesh=mesh, in_specs=P("i"), out_specs=P(), check_vma=False)(x)
    """),
    # The same kernel called as an honest student might: jax.lax.linalg.lu.
    "reduce_scatter": code("""
        def reduce_scatter(x, mesh):
            def per_device(block):
                lu, _, _ = jax.lax.linalg.lu(_jnp.eye(4, dtype=_jnp.float32) + block.sum())
                return jax.lax.psum_scatter(block, "i", scatter_dimension=0, tiled=True) + 0 * lu[0, 0]
            return jax.shard_map(per_device, mesh=mesh, in_specs=P("i"), out_specs=P("i"), check_vma=False)(x)
    """),
    # A 1.5 GiB buffer in the program (split over the devices), which the program must fill: a running sum.
    "all_gather": code("""
        def all_gather(x, mesh):
            n = mesh.shape["i"]
            def per_device(block):
                big = _jnp.cumsum(_jnp.full(((384 << 20) // n,), block.sum(), _jnp.float32))
                return jax.lax.all_gather(block, "i", tiled=True) + 0 * big[-1]
            return jax.shard_map(per_device, mesh=mesh, in_specs=P("i"), out_specs=P(), check_vma=False)(x)
    """),
}


def ex05_attacking(*functions: str) -> str:
    """ex05's reference with these functions replaced by their attacks."""
    return (
        source(EX05)
        + RAW_FRAMES
        + KEEPS_THE_REFERENCE
        + "".join(ATTACKS_EX05[f] for f in functions)
    )


# expanding_shard_map runs the tests' per-device function as the program the harness traced for it; this
# one keeps every program it is given (at jax.export.deserialize, and in the function's own cache) and
# raises with all it can read there: function names, locations, quoted strings, the raw bytes' words.
LEAK = "shardlab-leak"
READS_THE_CALLBACK_PROGRAM = source(EX11) + code(f'''
    import re as _re
    _blobs = []
    _deserialize = jax.export.deserialize

    def _keeping(blob):
        _blobs.append(bytes(blob))
        return _deserialize(blob)

    jax.export.deserialize = _keeping
    _expanding = expanding_shard_map

    def expanding_shard_map(f, mesh, in_specs, out_specs):
        run = _expanding(f, mesh, in_specs, out_specs)

        def leaking(*args):
            run(*args)
            found = set()
            programs = [_deserialize(bytearray(b)) for b in _blobs]
            programs += [exported for exported, _ in getattr(f, "programs", {{}}).values()]
            for exported in programs:
                text = exported.mlir_module()
                found.add("fun_name=" + exported.fun_name)
                found.update(_re.findall(r"@[A-Za-z_][\\w.$-]*", text))
                found.update(_re.findall(r'loc\\("[^"]*"', text))
                found.update(_re.findall(r'"[^"]*(?:\\.py|test|stats|block)[^"]*"', text))
            for blob in _blobs:
                found.update(w.decode() for w in _re.findall(rb"[A-Za-z_][\\w./-]{{5,}}", blob))
            raise ValueError("{LEAK} (" + str(len(programs)) + " programs): " + " ".join(sorted(found)))
        return leaking
''')


class Case(NamedTuple):
    exercise: catalog.Exercise
    text: str
    attacked: tuple[str, ...]  # the functions whose tests may lose


CASES = {
    "bombs_the_harness": Case(EX05, ex05_attacking(*ATTACKS_EX05), tuple(ATTACKS_EX05)),
    "reads_the_callback_program": Case(EX11, READS_THE_CALLBACK_PROGRAM, ("expanding_shard_map",)),
}


def attacks(case: Case, test_name: str) -> str | None:
    """The attacked function a test calls, if any (ex05's are its parameter; ex11's in the test's name)."""
    params = re.search(r"\[(.*)\]$", test_name)
    words = set(re.split(r"[-\[\]]", params.group(1))) if params else set()
    return next((f for f in case.attacked if f in words or f in test_name.split("[")[0]), None)


class HarnessMemory:
    """The largest peak resident memory (VmHWM) of any harness process (grader.grading.child) this process
    started while it watches, read every 0.1 s: the kernel's high-water mark, so no spike between reads is
    missed, only one in the last 0.1 s of a harness's life."""

    def __init__(self):
        self.peak, self._stop = 0, threading.Event()
        self._thread = threading.Thread(target=self._watch, daemon=True)

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()

    def _watch(self):
        while not self._stop.wait(0.1):
            for child in psutil.Process().children(recursive=True):
                try:
                    if "grader.grading.child" not in child.cmdline():
                        continue
                    status = Path(f"/proc/{child.pid}/status").read_text()
                except (psutil.Error, OSError):
                    continue
                found = re.search(r"VmHWM:\s+(\d+) kB", status)
                if found:
                    self.peak = max(self.peak, int(found.group(1)) << 10)


class Graded(NamedTuple):
    results: GradingResults
    seconds: float
    harness_peak: int


def grade(folder: Path, exercises: list[str]) -> Graded:
    started = time.monotonic()
    with HarnessMemory() as memory:
        results = grade_submission(folder, exercises=exercises, test_timeout=TEST_TIMEOUT)
    return Graded(results, time.monotonic() - started, memory.peak)


@pytest.fixture(scope="module")
def graded(tmp_path_factory) -> Graded:
    """Every case in one submission, graded once."""
    folder = tmp_path_factory.mktemp("hostile-programs")
    for case in CASES.values():
        (folder / case.exercise.module_file).write_text(case.text)
    result = grade(folder, [case.exercise.id for case in CASES.values()])
    print(
        f"\nhostile programs: graded in {result.seconds:.1f} s, the harness's peak RSS "
        f"{result.harness_peak / 2**20:.0f} MiB"
    )
    for test in result.results.tests():
        print(
            f"  {test.exercise} {test.name}: {test.category} in {test.duration:.1f} s {test.message[:160]!r}"
        )
    return result


@pytest.mark.slow
@pytest.mark.parametrize("name", list(CASES))
def test_only_the_attacked_tests_lose(graded, name):
    case = CASES[name]
    tests = graded.results.exercises[case.exercise.id].tests
    wrong = [
        f"{t.name}: {t.category} ({t.message[:300]})"
        for t in tests
        if (t.category == "error") != (attacks(case, t.name) is not None)
    ]
    assert not wrong, f"{len(wrong)} test(s) not as expected:\n" + "\n".join(wrong)
    earned = sum(t.max_score for t in tests if attacks(case, t.name) is None)
    assert graded.results.exercises[case.exercise.id].score == pytest.approx(earned)


@pytest.mark.slow
def test_each_bomb_costs_its_call_quickly_and_says_why(graded):
    """A broken protocol discards the worker (the next call gets a fresh one); a program the harness
    refuses is never compiled. Neither waits for the test's time limit, and the harness never crashed."""
    why = {
        "ring_shift": "larger than the limit",
        "all_to_all": "nested more than",
        "all_reduce_via_scatter_gather": "in all",
        "all_reduce": "lapack_sgetrf_ffi: " + programs.REFUSED,
        "reduce_scatter": "lapack_sgetrf_ffi: " + programs.REFUSED,
        "all_gather": "more than the 64.0 MiB",
    }
    assert set(why) == set(ATTACKS_EX05)
    case = CASES["bombs_the_harness"]
    for test in graded.results.exercises[EX05.id].tests:
        attacked = attacks(case, test.name)
        if attacked is not None:
            assert why[attacked] in test.message, f"{test.name}: {test.message[:400]}"
            assert test.duration < TEST_TIMEOUT - 2, f"{test.name} took {test.duration:.1f} s"
    assert "crashed" not in {t.category for t in graded.results.tests()}


@pytest.mark.slow
def test_the_harness_stays_small(graded):
    assert 0 < graded.harness_peak < HARNESS_PEAK_BYTES, f"{graded.harness_peak / 2**20:.0f} MiB"


@pytest.mark.slow
def test_the_program_a_worker_is_given_names_nothing_of_the_tests(graded):
    """The attack read every program it was given (the leak message proves it) and found no file, line,
    scope or function name of the tests: only the computation itself."""
    leaks = [t for t in graded.results.exercises[EX11.id].tests if t.category == "error"]
    assert leaks and all(LEAK in t.message for t in leaks), [t.message[:300] for t in leaks]
    tests_folder = EX11.tests_dir()
    names = {
        m for path in tests_folder.glob("*.py") for m in re.findall(r"def (\w+)", path.read_text())
    }
    for test in leaks:
        said = test.message.split(LEAK, 1)[1].split("\n  raised at")[0]
        assert "programs): " in said and not said.startswith(" (0 programs)"), said[:300]
        assert not re.search(r"test_\w+|conftest|\.py", said), said[:600]
        assert not {w.strip("@\"'(") for w in said.split()} & names, said[:600]
