"""Each test's time limit, from how long the reference solution takes on the grading machine.

    shardlab calibrate            # grades solutions/ once (grader.grading.calibration), writes <cache>/time-limits.json

limit = max(FLOOR, MULTIPLIER x the reference's duration of that test). Why these two numbers:

- FLOOR (10 s). Most tests take the reference 0.1-1 s, and much of that is fixed cost a student's
  program can make larger without being wrong: tracing and compiling a program the cache has never
  seen, a worker started again after an earlier test's crash, ex12's processes starting. Two timed-out
  tests stop the function that hung (grader.harness.strikes), so 10 s keeps an endless loop within
  about 30 s per function.
- MULTIPLIER (5x). For the tests whose reference takes seconds (the speedup tests, the multi-process
  runs), a correct but slower program: measured by bench/grade_speed.py, the corpus's alternative
  correct solutions take at most 2.4x the reference's time on tests of 0.2 s or more, and their
  slowest test used 0.2 of its limit (of wall-clock time, as limits were then).

What the limit measures is processor time in user mode, so that a verdict does not depend on the
machine's load (other gradings, an instructor's shared server, a busy Slurm node) nor on how the machine
provides memory (the kernel's time on the code's behalf is the cap's: grader.core.processor_time): the
worker's, as its sandbox's
cgroup counts it (grader.sandbox.cgroups.processor_time; where there is no such cgroup, the sandbox's
live processes as the kernel counts them), checked every quarter second while the harness waits for
an answer (grader.worker.supervisor); and the harness's own, where the student's compiled programs
run, checked by the grading process (grader.grading.process). A test waiting for a processor on a
loaded machine uses none. A program that uses several cores at once spends its limit that many times
faster than the wall clock. A wall-clock cap of WALL_MULTIPLIER x the limit (3x: 30 s at the floor)
ends a test that uses no processor time and never ends (a sleep, a wait on something that never
comes); runs of several processes (ex12) are held to that cap. The cap does not count the time the
test's processes waited for a processor either (grader.core.wall_cap, up to a ceiling). A timeout's
message says which of the two ended the test, and its result records what it was judged on. The
reference's durations are still its wall-clock times (of a calibration, on a machine as quiet as it can
be made).

A calibration belongs to one version of the course on one machine: it records a fingerprint of the
tests, the solutions, jax's version and the core count, and a mismatch is ignored (report.json says so).
`--test-timeout S` sets every test's limit to S instead.

Without a calibration of this machine, the limits come from the reference's timings shipped in the
package (SHIPPED_FILE, written by `shardlab calibrate --ship` on a course author's machine), with
SHIPPED_MULTIPLIER in place of MULTIPLIER: so `shardlab grade` stops an endless loop in seconds from the
first grading, without a manual calibration. Shipped rather than calibrated on first use, because a
calibration cannot run where students and platforms grade (the handout and the Gradescope autograder
hold no solutions, and a Gradescope container starts afresh for every submission), and grading the
reference first would add its minute and a half to a newcomer's first `shardlab grade` (and to every
test process of the suite that grades through the command line). The price: another machine's
timings, hence the doubled multiplier; where the floor applies (most tests) nothing changes. Each
shipped timing is keyed by a hash of the test's id and of its file and conftest.py as they were
measured: a test changed since, or new, gets FALLBACK_SECONDS, never a limit measured on other code
(and the keys name no hidden test: the table ships in the handout).
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path

from grader.core.errors import ShardlabError
from grader.course import catalog, paths
from grader.course.devices import cores

FLOOR_SECONDS = 10.0
MULTIPLIER = 5.0
FALLBACK_SECONDS = 120.0
# a test's wall-clock cap, in multiples of its limit of processor time
WALL_MULTIPLIER = 3.0
FILE_NAME = "time-limits.json"
SHIPPED_FILE = Path(__file__).with_name("reference_times.json")
# timings from another machine, which may be twice as fast as this one
SHIPPED_MULTIPLIER = 2 * MULTIPLIER


class CalibrationError(ShardlabError, RuntimeError):
    """The reference could not be timed (it failed a test here, or there is no reference)."""


def fingerprint() -> str:
    """What the reference's durations depend on: the tests, the solutions, the checks, jax, the cores."""
    digest = hashlib.sha256()
    for folder in (
        paths.EXERCISE_TESTS_DIR,
        paths.SOLUTIONS_DIR,
        paths.REPO_ROOT / "grader" / "checks",
    ):
        for path in sorted(folder.rglob("*.py")) if folder.is_dir() else []:
            digest.update(
                str(path.relative_to(paths.REPO_ROOT)).encode() + b"\0" + path.read_bytes()
            )
    digest.update(f"jax {metadata.version('jax')}, {cores()} cores".encode())
    return digest.hexdigest()[:16]


def shipped_key(nodeid: str) -> str:
    """A test's key in the shipped timings: its folder, then a hash of its id and of its file and the
    folder's conftest.py as they are now (unreadable: a key no table holds)."""
    file = nodeid.split("::", 1)[0]
    return f"{Path(file).parent.as_posix()}/{hashlib.sha256(_files_digest(file) + nodeid.encode()).hexdigest()[:20]}"


@functools.cache
def _files_digest(file: str) -> bytes:
    path = paths.REPO_ROOT / file
    digest = hashlib.sha256()
    for part in (path, path.parent / "conftest.py"):
        try:
            digest.update(part.read_bytes() + b"\0")
        except OSError:
            digest.update(b"missing\0")
    return digest.digest()


@dataclass(frozen=True)
class TimeLimits:
    # nodeid -> the reference's seconds, here
    reference: dict[str, float] = field(default_factory=dict)
    override: float | None = None  # --test-timeout: this for every test
    source: str = "not calibrated"  # said in report.json
    # shipped_key -> the reference's seconds, there
    shipped: dict[str, float] = field(default_factory=dict)

    def limit(self, nodeid: str) -> float:
        if self.override is not None:
            return self.override
        if (seconds := self.reference.get(nodeid)) is not None:
            return max(FLOOR_SECONDS, MULTIPLIER * seconds)
        if self.shipped and (seconds := self.shipped.get(shipped_key(nodeid))) is not None:
            # Never longer than without them: they exist to stop a loop sooner.
            return min(FALLBACK_SECONDS, max(FLOOR_SECONDS, SHIPPED_MULTIPLIER * seconds))
        return FALLBACK_SECONDS

    def exercise_seconds(self, exercise_id: str) -> float:
        """The reference's time for one exercise (for sharing exercises among parallel harnesses)."""
        for timings in (self.reference, self.shipped):
            if found := [s for key, s in timings.items() if f"/{exercise_id}/" in key]:
                return sum(found)
        return 0.0

    def describe(self) -> dict:
        return {
            "source": self.source,
            # what a limit counts, and what ends a test that uses none of it (see the module's docstring)
            "measures": "processor time: the worker's (its sandbox's cgroup, else its processes) and "
            "the harness's own",
            "wall_clock_cap_multiplier": WALL_MULTIPLIER,
            "floor_seconds": FLOOR_SECONDS,
            "multiplier": MULTIPLIER,
            "override_seconds": self.override,
            "fallback_seconds": FALLBACK_SECONDS,
            "calibrated_tests": len(self.reference),
            "shipped_tests": len(self.shipped),
            "shipped_multiplier": SHIPPED_MULTIPLIER,
        }

    def save(self, path: Path) -> Path:
        """As a calibration (fingerprinted), or, for a harness, as the limits it must apply."""
        payload = {
            "fingerprint": fingerprint(),
            "measured": self.source,
            "reference_seconds": self.reference,
            "override": self.override,
            "shipped_seconds": self.shipped,
        }
        tmp = path.with_suffix(".tmp")
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp.write_text(json.dumps(payload, indent=1, sort_keys=True))
        os.replace(tmp, path)
        return path

    @classmethod
    def for_harness(cls, path: Path | None, override: float | None) -> TimeLimits:
        """In the harness: the limits its grading process chose (no fingerprint check: that was done)."""
        if path is None:
            return cls(override=override)
        data = json.loads(Path(path).read_text())
        return cls(
            reference=data["reference_seconds"],
            override=override if override is not None else data.get("override"),
            source=data.get("measured", ""),
            shipped=data.get("shipped_seconds", {}),
        )


def graded_ids(term_ids: tuple[str, ...], names: tuple[str, ...]) -> tuple[str, ...]:
    """The exercises a grading grades: those `names` (--exercise) give, else the term's `term_ids`. A name
    that is no exercise: the term's (the grading itself says what is wrong with it)."""
    try:
        return tuple(catalog.get(name).id for name in names) or term_ids
    except catalog.UnknownExercise:
        return term_ids


def batch_should_calibrate(
    folder: Path | None, override: float | None, exercise_ids: tuple[str, ...] | None = None
) -> bool:
    """Whether a class's grading should time the reference before its first student: no limit for every test
    was given, `folder`'s calibration of this course and machine has no test of one of `exercise_ids` (those
    graded: graded_ids; None: any at all), and the course's solutions are here."""
    if override is not None or not paths.SOLUTIONS_DIR.is_dir():
        return False
    if exercise_ids is None:
        return not load(folder).reference
    return bool(uncalibrated(folder, exercise_ids))


def uncalibrated(folder: Path | None, exercise_ids: tuple[str, ...]) -> tuple[str, ...]:
    """Those of `exercise_ids` that `folder`'s calibration of this course and machine has no test of: what a
    class's grading times before its first student (the others' limits are kept)."""
    timed = load(folder).reference
    return tuple(e for e in exercise_ids if not any(f"/{e}/" in nodeid for nodeid in timed))


# how a calibration names the machine it timed, and how the shipped timings name it
HERE = "on this machine"
SHIPPED_FROM = "on the machine the course was shipped from"


def load(folder: Path | None, override: float | None = None) -> TimeLimits:
    """The calibration in `folder` if it is for this course and machine; else the shipped timings (see the
    module's docstring), or the fallback; `override` for every test if given."""
    if override is not None:
        return TimeLimits(override=override, source=f"--test-timeout {override:g} s for every test")
    if folder is None:
        return _uncalibrated(f"not calibrated {HERE} (no cache folder)")
    path = Path(folder) / FILE_NAME
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        return _uncalibrated(f"not calibrated {HERE} (`shardlab calibrate` does it)")
    except (OSError, ValueError) as exc:
        return _uncalibrated(f"unreadable calibration {path} ({exc})")
    if not isinstance(data, dict) or data.get("fingerprint") != fingerprint():
        return _uncalibrated(
            f"calibration {path} is for another version of the course or machine "
            "(run `shardlab calibrate` again)"
        )
    seconds = data.get("reference_seconds")
    if not isinstance(seconds, dict) or not all(
        isinstance(v, (int, float)) for v in seconds.values()
    ):
        return _uncalibrated(f"malformed calibration {path}")
    return TimeLimits(
        reference={str(k): float(v) for k, v in seconds.items()},
        source=str(data.get("measured")),
        shipped=shipped_timings()[1],
    )


def _uncalibrated(why: str) -> TimeLimits:
    measured, shipped = shipped_timings()
    if not shipped:
        return TimeLimits(source=f"{why}: {FALLBACK_SECONDS:g} s per test")
    return TimeLimits(
        shipped=shipped,
        source=f"{why}: the reference's timings shipped with the course (x"
        f"{SHIPPED_MULTIPLIER:g}, {measured}), {FALLBACK_SECONDS:g} s for a "
        "test they do not know",
    )


@functools.cache
def shipped_timings() -> tuple[str, dict[str, float]]:
    """(where and when they were measured, {shipped_key: seconds}) from SHIPPED_FILE; none if unreadable."""
    try:
        data = json.loads(SHIPPED_FILE.read_text())
        seconds = {str(k): float(v) for k, v in data["seconds"].items()}
        return str(data.get("measured", "")), seconds
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return "", {}


def ship(limits: TimeLimits, path: Path = SHIPPED_FILE) -> Path:
    """Write a calibration of this machine as the package's shipped timings (course authors, after
    changing tests: `shardlab calibrate --ship`). Where they are read, "this machine" is another one."""
    seconds = {shipped_key(nodeid): s for nodeid, s in sorted(limits.reference.items())}
    measured = limits.source.replace(HERE, SHIPPED_FROM)
    payload = {
        "measured": f"{measured}; {cores()} cores, jax {metadata.version('jax')}",
        "seconds": seconds,
    }
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(payload, indent=0, sort_keys=True) + "\n")
    os.replace(tmp, path)
    shipped_timings.cache_clear()
    return path
