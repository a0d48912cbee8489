"""Each test's time limit, from how long the reference solution takes on the grading machine.

    shardlab calibrate            # grades solutions/ once, writes <cache>/time-limits.json

limit = max(FLOOR, MULTIPLIER x the reference's duration of that test). Why these two numbers:

- FLOOR (10 s). Most tests take the reference 0.1-1 s, and much of that is fixed cost a student's
  program can make larger without being wrong: tracing and compiling a program the cache has never
  seen, a worker started again after an earlier test's crash, ex12's processes starting, and a second
  grading job sharing the two cores. Two timed-out tests end an exercise (MAX_TIMEOUTS_PER_EXERCISE), so
  10 s keeps an endless loop within about 30 s per exercise.
- MULTIPLIER (5x). For the tests whose reference takes seconds (the speedup tests, the multi-process
  runs), a correct but slower program: measured by bench/grade_speed.py, the corpus's alternative
  correct solutions take at most 2.4x the reference's time on tests of 0.2 s or more, and their
  slowest test used 0.2 of its limit; two jobs on two cores can double a test's time again.

A calibration belongs to one version of the course on one machine: it records a fingerprint of the
tests, the solutions, jax's version and the core count, and a mismatch is ignored (the limits fall back
to FALLBACK_SECONDS per test, and report.json says so). A test the calibration does not know gets the
fallback too. `--test-timeout S` sets every test's limit to S instead.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path

from grader.course import paths
from grader.course.devices import cores

FLOOR_SECONDS = 10.0
MULTIPLIER = 5.0
FALLBACK_SECONDS = 120.0
MAX_TIMEOUTS_PER_EXERCISE = 2   # after two tests of an exercise timed out, the rest of it is not run
STOPPED = "not run: earlier tests of this exercise timed out"


def is_strike(entry: dict) -> bool:
    """A test entry that counts towards MAX_TIMEOUTS_PER_EXERCISE: it timed out, it was not left unrun."""
    return entry.get("category") == "timeout" and bool(entry.get("exercise")) \
        and not str(entry.get("message", "")).startswith("not run:")
FILE_NAME = "time-limits.json"


class CalibrationError(RuntimeError):
    """The reference could not be timed (it failed a test here, or there is no reference)."""


def fingerprint() -> str:
    """What the reference's durations depend on: the tests, the solutions, the checks, jax, the cores."""
    digest = hashlib.sha256()
    for folder in (paths.EXERCISE_TESTS_DIR, paths.SOLUTIONS_DIR, paths.REPO_ROOT / "grader" / "checks"):
        for path in sorted(folder.rglob("*.py")) if folder.is_dir() else []:
            digest.update(str(path.relative_to(paths.REPO_ROOT)).encode() + b"\0" + path.read_bytes())
    digest.update(f"jax {metadata.version('jax')}, {cores()} cores".encode())
    return digest.hexdigest()[:16]


@dataclass(frozen=True)
class TimeLimits:
    reference: dict[str, float] = field(default_factory=dict)   # nodeid -> the reference's seconds
    override: float | None = None                               # --test-timeout: this for every test
    source: str = "not calibrated"                              # said in report.json

    def limit(self, nodeid: str) -> float:
        if self.override is not None:
            return self.override
        seconds = self.reference.get(nodeid)
        return FALLBACK_SECONDS if seconds is None else max(FLOOR_SECONDS, MULTIPLIER * seconds)

    def exercise_seconds(self, exercise_id: str) -> float:
        """The reference's time for one exercise (for sharing exercises among parallel harnesses)."""
        return sum(s for nodeid, s in self.reference.items() if f"/{exercise_id}/" in nodeid)

    def describe(self) -> dict:
        return {"source": self.source, "floor_seconds": FLOOR_SECONDS, "multiplier": MULTIPLIER,
                "override_seconds": self.override, "fallback_seconds": FALLBACK_SECONDS,
                "calibrated_tests": len(self.reference)}

    def save(self, path: Path) -> Path:
        """As a calibration (fingerprinted), or, for a harness, as the limits it must apply."""
        payload = {"fingerprint": fingerprint(), "measured": self.source, "reference_seconds": self.reference,
                   "override": self.override}
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
        return cls(reference=data["reference_seconds"], override=override if override is not None
                   else data.get("override"), source=data.get("measured", ""))


def load(folder: Path | None, override: float | None = None) -> TimeLimits:
    """The calibration in `folder` if it is for this course and machine; else the fallback (or override)."""
    if override is not None:
        return TimeLimits(override=override, source=f"--test-timeout {override:g} s for every test")
    if folder is None:
        return TimeLimits(source=f"not calibrated (no cache folder): {FALLBACK_SECONDS:g} s per test")
    path = Path(folder) / FILE_NAME
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        return TimeLimits(source=f"not calibrated (run `shardlab calibrate`): {FALLBACK_SECONDS:g} s per test")
    except (OSError, ValueError) as exc:
        return TimeLimits(source=f"unreadable calibration {path} ({exc}): {FALLBACK_SECONDS:g} s per test")
    if not isinstance(data, dict) or data.get("fingerprint") != fingerprint():
        return TimeLimits(source=f"calibration {path} is for another version of the course or machine: "
                                 f"{FALLBACK_SECONDS:g} s per test (run `shardlab calibrate` again)")
    seconds = data.get("reference_seconds")
    if not isinstance(seconds, dict) or not all(isinstance(v, (int, float)) for v in seconds.values()):
        return TimeLimits(source=f"malformed calibration {path}: {FALLBACK_SECONDS:g} s per test")
    return TimeLimits(reference={str(k): float(v) for k, v in seconds.items()}, source=str(data.get("measured")))


def calibrate(folder: Path, **grading) -> TimeLimits:
    """Grade the reference here as students are graded (same cache, isolation and parallelism) and keep
    each test's duration. Speedup tests measure as in grading but only report (a noisy measurement must
    not stop a calibration); every other test must pass: a reference that fails on this machine has no
    limits to give, and grading on it would be wrong anyway."""
    from grader.grading.engine import grade_submission

    if not paths.SOLUTIONS_DIR.is_dir():
        raise CalibrationError("there is no solutions/ folder here: time limits are calibrated on the reference")
    started = time.strftime("%Y-%m-%d %H:%M")
    grading.setdefault("timing", "report")
    results = grade_submission(paths.SOLUTIONS_DIR, time_limits=load(None, override=FALLBACK_SECONDS), **grading)
    failing = [t.nodeid for e in results.exercises.values() for t in e.tests
               if t.category not in ("passed", "skipped")]
    if failing:
        raise CalibrationError(f"the reference does not pass {len(failing)} test(s) here, e.g. {failing[:3]}")
    measured = {t.nodeid: round(t.duration, 3) for e in results.exercises.values() for t in e.tests}
    limits = TimeLimits(reference=measured, source=f"calibrated {started} on this machine: the reference took "
                                                   f"{results.duration:.0f} s, {len(measured)} tests")
    limits.save(Path(folder) / FILE_NAME)
    return limits
