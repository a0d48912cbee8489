"""Running the exercise tests against an implementation in a fresh pytest process, and reading back
the category of every test from the JSON the plugin writes."""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from grader.course import paths


@dataclass(frozen=True)
class TestRun:
    tests: list[dict]       # one entry per test, as grader.harness.pytest_plugin records it
    returncode: int
    output: str             # pytest's terminal output, for when something went wrong

    __test__ = False        # not a pytest test class


class RunFailed(RuntimeError):
    pass


def run_tests(impl: str | Path, *, tests: list[Path] | None = None, timing: str = "enforce",
              visible_only: bool = False, slow: bool = False, extra_args: tuple[str, ...] = (),
              timeout: float | None = None) -> TestRun:
    """pytest in a subprocess, from the repo root, on `tests` (default: every exercise's tests)."""
    targets = [str(t) for t in (tests or [paths.EXERCISE_TESTS_DIR])]
    with tempfile.TemporaryDirectory(prefix="shardlab-run-") as tmp:
        results = Path(tmp) / "results.json"
        command = [sys.executable, "-m", "pytest", *targets, "-q", "--no-header", "-p", "no:cacheprovider",
                   f"--impl={impl}", f"--timing={timing}", f"--shardlab-results={results}", *extra_args]
        command += ["--visible-only"] if visible_only else []
        command += ["--slow"] if slow else []
        try:
            done = subprocess.run(command, cwd=paths.REPO_ROOT, capture_output=True, text=True, timeout=timeout)
        except subprocess.TimeoutExpired:
            raise RunFailed(f"the tests ran longer than {timeout:.0f} s and were stopped: does the code loop "
                            "forever, or do far too much work?") from None
        if not results.exists():
            raise RunFailed(f"pytest wrote no results (exit {done.returncode}):\n{done.stdout[-3000:]}"
                            f"\n{done.stderr[-3000:]}")
        payload = json.loads(results.read_text())
    return TestRun(payload["tests"], done.returncode, done.stdout + done.stderr)
