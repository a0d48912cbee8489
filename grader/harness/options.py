"""The harness's pytest options (shardlab check, shardlab grade's harness processes, a plain pytest run):
its own, and those it shares with the grading options (grader.core.options)."""

from __future__ import annotations

import pytest

from grader.core.options import LAUNCHERS, add_harness_options
from grader.course import paths


def pytest_addoption(parser):
    group = parser.getgroup("shardlab")
    # A student handout has no solutions/: there the student's exercises/ are what is under test.
    group.addoption(
        "--impl",
        default="reference" if paths.SOLUTIONS_DIR.is_dir() else "exercises",
        help="implementation under test: 'reference' (solutions/, the default in the course), "
        "'exercises' (the student's modules, the default in a handout) or the path of a "
        "submission folder",
    )
    group.addoption("--slow", action="store_true", help="also run the tests marked slow")
    group.addoption(
        "--shardlab-results", metavar="PATH", help="write every test's category as JSON"
    )
    group.addoption(
        "--repeat",
        type=int,
        default=1,
        metavar="N",
        help="run every selected test N times, to show that a (timing) test does not flake",
    )
    group.addoption(
        "--isolate",
        action="store_true",
        help="run the implementation in a confined worker process and only data crosses back "
        "(how grading runs)",
    )
    group.addoption(
        "--time-limits",
        metavar="PATH",
        help="with --isolate: each test's limit from the reference's durations "
        "(grader.harness.time_limits; the grading process writes this file)",
    )
    group.addoption(
        "--launcher",
        choices=LAUNCHERS,
        default="local",
        help="how a multi-process exercise (ex12) starts its processes: 'local' (on this machine, the "
        "default) or 'srun' (one Slurm step, each process joining through jax's reading of "
        "Slurm's environment; not with --isolate)",
    )
    group.addoption(
        "--prior-timeouts",
        action="append",
        default=[],
        metavar="ID[:FUNCTION]",
        help="a strike in an earlier harness: the exercise, and the student's function it is counted "
        "against if one is (repeatable; grader.harness.strikes)",
    )
    # Those it shares with `shardlab grade` (--timing, --visible-only, --test-timeout, --worker-memory,
    # --isolation), as grader.core.options declares them: the grading process passes them on from there.
    add_harness_options(group)


def pytest_configure(config):
    if config.getoption("--launcher") == "srun" and config.getoption("--isolate"):
        from grader.cluster.srun import NOT_WITH_ISOLATION

        raise pytest.UsageError(NOT_WITH_ISOLATION)
