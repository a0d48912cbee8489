"""Running the exercise tests against an implementation in a fresh pytest process, and reading back
every test's result from the JSON the plugin writes."""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from grader.core.errors import ShardlabError
from grader.core.options import GradingOptions
from grader.core.results import TestResult
from grader.course import paths


@dataclass(frozen=True)
class TestRun:
    results: list[TestResult]   # one per test, as grader.harness.recording records it
    returncode: int
    output: str                 # pytest's terminal output, for when something went wrong

    __test__ = False            # not a pytest test class

    @property
    def tests(self) -> list[dict]:
        """The results in their JSON form (TestResult.to_dict), for readers of plain data."""
        return [result.to_dict() for result in self.results]


class RunFailed(ShardlabError, RuntimeError):
    pass


def run_tests(impl: str | Path, *, tests: list[Path] | None = None, timing: str = "enforce",
              visible_only: bool = False, slow: bool = False, extra_args: tuple[str, ...] = (),
              timeout: float | None = None) -> TestRun:
    """pytest in a subprocess, from the repo root, on `tests` (default: every exercise's tests)."""
    targets = [str(t) for t in (tests or [paths.EXERCISE_TESTS_DIR])]
    with tempfile.TemporaryDirectory(prefix="shardlab-run-") as tmp:
        results = Path(tmp) / "results.json"
        shared = GradingOptions(timing=timing, visible_only=visible_only).harness_arguments(("timing", "visible_only"))
        command = [sys.executable, "-m", "pytest", *targets, "-q", "--no-header", "-p", "no:cacheprovider",
                   f"--impl={impl}", f"--shardlab-results={results}", *extra_args, *shared]
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
    return TestRun([TestResult.from_dict(t) for t in payload["tests"]], done.returncode, done.stdout + done.stderr)
