"""The one runner of pytest on the exercise tests: the arguments of a run, and its results read back as
TestResults. Three routes use it: `shardlab check`, dev-check and the suite run pytest in a subprocess
here (run_tests, through grader.harness.pytest_main); grading runs it in a supervised child with limits
(grader.grading.process); a notebook runs it in its kernel (grader.platforms.notebooks).

Every route reads a test's result in the one form the plugin records it (grader.harness.recording):
TestResult.to_dict, read back by `read_result`. It travels two ways. A run that ends by itself (a check,
a kernel's cell) reads the --shardlab-results file, written as the session ends: nothing else is needed,
and a kernel could not read a pipe it writes itself. A supervised grading run reads the same entries as
"result" events (grader.harness.events), one as each test ends: it must know which test was running
when it kills the harness, and a killed harness writes no file."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from grader.core.errors import ShardlabError
from grader.core.options import GradingOptions
from grader.core.results import TestResult
from grader.course import paths
from grader.harness.events import Finished

# The grading options a run without --isolate takes: the others (isolation, test timeout, worker memory)
# are the confined worker's.
IN_PROCESS_OPTIONS = ("timing", "visible_only")
HYPOTHESIS_PLUGIN = "_hypothesis_pytestplugin"  # the module of hypothesis's pytest11 entry point
# A test module or conftest that imports one of these has property tests (hypothesis, directly or through
# the grader's settings for it).
_PROPERTY_IMPORT = re.compile(
    r"^\s*(?:from|import)\s+(?:hypothesis|grader\.checks\.properties)\b", re.MULTILINE
)


def has_property_tests(targets: Sequence[str | Path], rootdir: Path = paths.REPO_ROOT) -> bool:
    """Whether any test module under `targets` (folders, files or node ids), or a conftest.py above them,
    imports hypothesis: only then does a run load hypothesis's pytest plugin, whose import is about 0.3 s
    of every run's start. A target that cannot be read counts as having them."""
    for target in targets:
        path = Path(str(target).split("::", 1)[0])
        path = path if path.is_absolute() else rootdir / path
        if not path.exists():
            return True
        try:
            files = sorted(path.rglob("*.py")) if path.is_dir() else [path]
            files += [parent / "conftest.py" for parent in path.parents]
            if any(f.is_file() and _PROPERTY_IMPORT.search(f.read_text()) for f in files):
                return True
        except (OSError, UnicodeDecodeError):
            return True
    return False


def pytest_arguments(
    targets: Sequence[str | Path],
    *,
    impl: str | Path,
    results: Path | None = None,
    options: GradingOptions | None = None,
    isolate: bool = False,
    rootdir: Path = paths.REPO_ROOT,
    config: Path = paths.REPO_ROOT / "pyproject.toml",
    plugins: Sequence[str] = (),
    extra: Sequence[str] = (),
) -> list[str]:
    """pytest's arguments for a run of `targets` against `impl`: quiet, no cache, `config` as its
    configuration; results: where the --shardlab-results file goes; options: the grading options the
    harness takes (those of a confined worker only with `isolate`), none given: the harness's defaults;
    plugins: loaded with -p; extra: added last, as given."""
    arguments = [
        *(str(target) for target in targets),
        "-q",
        "--no-header",
        "-p",
        "no:cacheprovider",
        # No pytest plugin the environment happens to have takes part (jupyter's anyio plugin alone cost a
        # tenth of a second per run, and a plugin has no say in a verdict): only hypothesis's own, where
        # the tests run have property tests.
        "--disable-plugin-autoload",
        # Nor pytest's unraisable-exception plugin: it turns an exception raised in a __del__ into a warning,
        # which no route shows or grades, and makes five full gc.collect() passes as the session ends (about
        # 0.3 s of every run with jax loaded; in a kernel, where it was first found, 0.6 s a cell).
        "-p",
        "no:unraisableexception",
    ]
    if has_property_tests(targets, rootdir):
        arguments += ["-p", HYPOTHESIS_PLUGIN]
    for plugin in plugins:
        arguments += ["-p", plugin]
    arguments += [f"--rootdir={rootdir}", "-c", str(config), f"--impl={impl}"]
    arguments += [f"--shardlab-results={results}"] if results is not None else []
    arguments += ["--isolate"] if isolate else []
    if options is not None:
        arguments += options.harness_arguments(None if isolate else IN_PROCESS_OPTIONS)
    return arguments + list(extra)


def read_result(entry: dict[str, Any]) -> TestResult:
    """One test's result, as the plugin records it: an entry of the results file."""
    return TestResult.from_dict(entry)


def read_result_event(event: Finished) -> TestResult:
    """One test's result from its event: the same entry as in the results file."""
    return read_result(event.result)


def read_results(path: Path) -> list[TestResult]:
    """Every test's result from a --shardlab-results file, in the order the tests ran."""
    return [read_result(entry) for entry in json.loads(path.read_text())["tests"]]


@dataclass(frozen=True)
class TestRun:
    results: list[TestResult]  # one per test, as grader.harness.recording records it
    returncode: int
    output: str  # pytest's terminal output, for when something went wrong

    __test__ = False  # not a pytest test class


class RunFailed(ShardlabError, RuntimeError):
    pass


def run_tests(
    impl: str | Path,
    *,
    tests: list[Path] | None = None,
    timing: str = "enforce",
    visible_only: bool = False,
    slow: bool = False,
    extra_args: tuple[str, ...] = (),
    timeout: float | None = None,
    env: dict[str, str] | None = None,
) -> TestRun:
    """pytest in a subprocess, from the repo root, on `tests` (default: every exercise's tests); env: added
    to its environment (a compile cache's)."""
    targets = tests or [paths.EXERCISE_TESTS_DIR]
    options = GradingOptions(timing=timing, visible_only=visible_only)
    with tempfile.TemporaryDirectory(prefix="shardlab-run-") as tmp:
        results = Path(tmp) / "results.json"
        arguments = pytest_arguments(
            targets,
            impl=impl,
            results=results,
            options=options,
            extra=[*extra_args, *(["--slow"] if slow else [])],
        )
        try:
            done = subprocess.run(
                [sys.executable, "-m", "grader.harness.pytest_main", *arguments],
                cwd=paths.REPO_ROOT,
                env={**os.environ, **(env or {})},
                capture_output=True,
                text=True,
                timeout=timeout,
            )
        except subprocess.TimeoutExpired:
            raise RunFailed(
                f"the tests ran longer than {timeout:.0f} s and were stopped: does the code loop "
                "forever, or do far too much work?"
            ) from None
        if not results.exists():
            raise RunFailed(
                f"pytest wrote no results (exit {done.returncode}):\n{done.stdout[-3000:]}"
                f"\n{done.stderr[-3000:]}"
            )
        return TestRun(read_results(results), done.returncode, done.stdout + done.stderr)
