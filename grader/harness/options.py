"""The harness's pytest options (shardlab check, shardlab grade's harness processes, a plain pytest run)."""

from __future__ import annotations

import os

from grader.course import paths


def pytest_addoption(parser):
    group = parser.getgroup("shardlab")
    # A student handout has no solutions/: there the student's exercises/ are what is under test.
    group.addoption("--impl", default="reference" if paths.SOLUTIONS_DIR.is_dir() else "exercises",
                    help="implementation under test: 'reference' (solutions/, the default in the course), "
                         "'exercises' (the student's modules, the default in a handout) or the path of a "
                         "submission folder")
    group.addoption("--timing", default=os.environ.get("SHARDLAB_TIMING", "enforce"),
                    choices=["enforce", "report", "skip"],
                    help="speedup tests: enforce thresholds, report figures only, or skip (default: "
                         "$SHARDLAB_TIMING or enforce)")
    group.addoption("--slow", action="store_true", help="also run the tests marked slow")
    group.addoption("--visible-only", action="store_true", help="leave out the hidden tests")
    group.addoption("--shardlab-results", metavar="PATH", help="write every test's category as JSON")
    group.addoption("--repeat", type=int, default=1, metavar="N",
                    help="run every selected test N times, to show that a (timing) test does not flake")
    group.addoption("--isolate", action="store_true",
                    help="run the implementation in a confined worker process and only data crosses back "
                         "(how grading runs)")
    group.addoption("--isolation", default="auto",
                    help="with --isolate: auto (the best this machine has), strict (refuse without a sandbox), "
                         "bubblewrap, landlock or process")
    group.addoption("--test-timeout", type=float, default=None, metavar="SECONDS",
                    help="with --isolate: how long every test may run (default: from --time-limits, else "
                         "120 s)")
    group.addoption("--time-limits", metavar="PATH",
                    help="with --isolate: each test's limit from the reference's durations "
                         "(grader.harness.time_limits; the grading process writes this file)")
    group.addoption("--prior-timeouts", action="append", default=[], metavar="ID",
                    help="an exercise one of whose tests timed out in an earlier harness (repeatable)")
    group.addoption("--worker-memory", type=int, default=None, metavar="BYTES",
                    help="with --isolate: the worker's address-space limit, 0 for none (default: "
                         "grader.worker.confinement.WorkerLimits; `shardlab grade --memory-limit` sets it)")
