"""The whole suite's own conftest (not shipped: the handout carries the root conftest.py and the exercises'),
read first, by the process that starts the run (with pytest -n, the controller, before its workers start).

One compile cache for the whole run: the suite runs the exercise tests many times over, in this process and
in subprocesses (the reference, both routes of every corpus submission, dev-check, the graders it starts),
and a program compiled once by any of them is not compiled again by the next. Set here, in the environment,
before anything imports jax: both xdist workers, their plain pytest subprocesses (JAX_COMPILATION_CACHE_DIR)
and the graders (SHARDLAB_CACHE, which `shardlab grade` reads to build its harness's environment) share it.
Workers never see it (grader.grading.compile_cache). It is the course's cache layout, capped, with jax's file
lock, so that processes writing it at once do not read each other's half-written entries. The subprocesses'
bytecode is kept there too.

At the end of a run: the processor seconds each test module took, so that a change sees what it costs.

Wall times say little on 2 cores shared by two pytest workers and the graders they start; processor time
does: each test's setup, call and teardown are measured in the process that runs them, its own and its
finished children's (the graders, their workers and the sandboxes, waited for as they end), and added up by
module where the run is reported (the controller, with pytest -n)."""

from __future__ import annotations

import atexit
import os
import resource
import shutil
import tempfile
from collections import defaultdict
from pathlib import Path

import pytest

from grader.grading.compile_cache import CACHE_ENV, CompileCache

if CACHE_ENV not in os.environ:  # the run's first process; its workers and subprocesses inherit it
    os.environ[CACHE_ENV] = tempfile.mkdtemp(prefix="shardlab-tests-cache-")
    atexit.register(shutil.rmtree, os.environ[CACHE_ENV], ignore_errors=True)
os.environ.update(CompileCache(Path(os.environ[CACHE_ENV])).environment())
# The suite's own subprocesses (its hundred or so plain pytest runs and shardlab commands; graders set their
# own) keep their bytecode in the run's cache folder, never the checkout: where the environment says not to
# write any (this machine's and CI's do), each would compile the grader and the tests from source again.
os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
os.environ["PYTHONPYCACHEPREFIX"] = os.path.join(os.environ[CACHE_ENV], "suite-pycache")

SHOWN = 40  # the modules listed, most costly first; the rest are summed in one line
_STARTED = pytest.StashKey[float]()  # on a test: the processor time its current phase started at
_by_module: defaultdict[str, float] = defaultdict(float)  # where the run is reported


def _processor_seconds() -> float:
    own, children = (
        resource.getrusage(w) for w in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN)
    )
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item, nextitem):
    item.stash[_STARTED] = _processor_seconds()
    return (yield)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item, call):
    """Each phase's report carries its processor seconds (user_properties travel to xdist's controller)."""
    report = yield
    now = _processor_seconds()
    report.user_properties.append(("processor_seconds", now - item.stash.get(_STARTED, now)))
    item.stash[_STARTED] = now
    return report


def pytest_runtest_logreport(report):
    seconds = dict(report.user_properties).get("processor_seconds")
    if seconds is not None:
        _by_module[report.nodeid.split("::", 1)[0]] += seconds


def pytest_terminal_summary(terminalreporter, config):
    if hasattr(config, "workerinput") or not _by_module:
        return
    ranked = sorted(_by_module.items(), key=lambda item: -item[1])
    terminalreporter.write_sep("=", "processor seconds per test module")
    for module, seconds in ranked[:SHOWN]:
        terminalreporter.write_line(f"{seconds:9.1f}  {module}")
    if rest := ranked[SHOWN:]:
        others = sum(seconds for _, seconds in rest)
        terminalreporter.write_line(f"{others:9.1f}  the other {len(rest)} modules")
    terminalreporter.write_line(f"{sum(_by_module.values()):9.1f}  in all")
