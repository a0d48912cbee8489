"""What the grader's own tests share: the run's compile cache in this process (tests/conftest.py makes it),
every compile cross-checked, a real browser, a local Slurm, the class commands and courses of the term
tests."""

import csv
import json
import os
import shutil
import struct
import subprocess
import sys
import zlib
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import jax
import pytest
from jax._src import compilation_cache

from grader.checks import compile_policy

# The run's one compile cache (tests/conftest.py), for this process too, should jax have read its settings
# before they were set.
jax.config.update("jax_compilation_cache_dir", os.environ["JAX_COMPILATION_CACHE_DIR"])
jax.config.update(
    "jax_compilation_cache_max_size", int(os.environ["JAX_COMPILATION_CACHE_MAX_SIZE"])
)
jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
jax.config.update("jax_persistent_cache_min_entry_size_bytes", 0)
compilation_cache.reset_cache()  # forget a "no cache" decision taken by an earlier compile

# The suite's own run of the exercise tests on the reference (and every check this process compiles) compiles
# each program both ways and fails where they differ: what lets a run that times nothing (--timing=skip, the
# corpus's runs) compile quickly (grader.checks.compile_policy).
compile_policy.cross_check_compiles()


def pytest_configure(config):
    # `-n 2 --dist loadgroup` (how CI runs the suite): a file whose module-scoped fixture does heavy work
    # (a graded class, a built course) keeps its tests on one worker, so the work is done once.
    config.addinivalue_line(
        "markers", "xdist_group(name): run these tests on one pytest-xdist worker"
    )


# -- a real browser, for the pages' tests ---------------------------------------------------------------------
# Playwright driving the system's Chromium (Debian's `chromium`, which .ci/run installs), with every request that
# is not the page's own file aborted and recorded, and every console message, page error and CSP violation kept.
# Where Playwright or Chromium is missing, the tests that ask for `browser` skip with the reason.

CHROMIUM_NAMES = ("chromium", "chromium-browser", "google-chrome")


def chromium_path() -> str | None:
    given = os.environ.get("SHARDLAB_CHROMIUM")
    if given:
        return given
    return next((found for name in CHROMIUM_NAMES if (found := shutil.which(name))), None)


def _browser_or_skip():
    """A launched Chromium, or a skip that says what is missing."""
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        pytest.skip("Playwright for Python is not installed (pip install -e '.[dev]')")
    executable = chromium_path()
    if executable is None:
        pytest.skip("no Chromium on this machine (apt-get install chromium; .ci/run installs it)")
    playwright = sync_playwright().start()
    try:
        # --no-sandbox is Playwright's own choice as root; the others keep Chromium from calling home.
        return playwright, playwright.chromium.launch(
            executable_path=executable,
            args=[
                "--disable-gpu",
                "--disable-background-networking",
                "--disable-component-update",
                "--disable-sync",
                "--no-first-run",
                "--disable-quic",
            ],
        )
    except Exception as exc:
        playwright.stop()
        pytest.skip(f"Chromium at {executable} did not start: {exc}")


@dataclass
class Visit:
    """What a page did while it loaded and was looked at."""

    page: object  # playwright's Page
    # every request other than the page's own file
    requests: list[str] = field(default_factory=list)
    console: list[str] = field(default_factory=list)  # console messages of type error or warning
    errors: list[str] = field(default_factory=list)  # uncaught page errors


@contextmanager
def visit(browser, path: Path, *, javascript: bool = False, width: int = 1280) -> Iterator[Visit]:
    """Open `path` in a fresh context, `width` px wide. Script is off, as a reader without it would see the
    page (the pages need none); tests that evaluate JavaScript to measure the page turn it on for the test's
    own scripts only."""
    context = browser.new_context(
        java_script_enabled=javascript, viewport={"width": width, "height": 900}
    )
    page = context.new_page()
    seen = Visit(page)
    own = path.resolve().as_uri()

    def route(route):
        if route.request.url == own:
            route.continue_()
        else:
            seen.requests.append(route.request.url)
            route.abort()

    context.route("**/*", route)
    page.on(
        "console",
        lambda message: (
            seen.console.append(f"{message.type}: {message.text}")
            if message.type in ("error", "warning")
            else None
        ),
    )
    page.on("pageerror", lambda error: seen.errors.append(str(error)))
    try:
        page.goto(own, wait_until="load")
        yield seen
    finally:
        context.close()


@pytest.fixture(scope="session")
def browser():
    """A Chromium launched once per test process."""
    playwright, launched = _browser_or_skip()
    yield launched
    launched.close()
    playwright.stop()


def read_png(data: bytes) -> tuple[int, int, list[bytes]]:
    """A Chromium screenshot (8-bit RGB or RGBA, not interlaced) as width, height and rows of RGB bytes."""
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    at, idat, header = 8, b"", None
    while at < len(data):
        length, kind = struct.unpack(">I4s", data[at : at + 8])
        body = data[at + 8 : at + 8 + length]
        if kind == b"IHDR":
            header = struct.unpack(">IIBBBBB", body)
        elif kind == b"IDAT":
            idat += body
        at += 12 + length
    width, height, depth, colour, _, _, interlace = header
    assert depth == 8 and colour in (2, 6) and interlace == 0
    step = 4 if colour == 6 else 3
    raw, rows, previous = zlib.decompress(idat), [], bytearray(width * step)
    stride = width * step + 1
    for y in range(height):
        kind, line = raw[y * stride], bytearray(raw[y * stride + 1 : (y + 1) * stride])
        for i in range(len(line)):
            left = line[i - step] if i >= step else 0
            up, corner = previous[i], previous[i - step] if i >= step else 0
            if kind == 1:
                line[i] = (line[i] + left) & 255
            elif kind == 2:
                line[i] = (line[i] + up) & 255
            elif kind == 3:
                line[i] = (line[i] + (left + up) // 2) & 255
            elif kind == 4:
                p = left + up - corner
                near = min((abs(p - left), 0), (abs(p - up), 1), (abs(p - corner), 2))[1]
                line[i] = (line[i] + (left, up, corner)[near]) & 255
        rows.append(bytes(b for i, b in enumerate(line) if i % step < 3))
        previous = line
    return width, height, rows


@pytest.fixture
def page_visit():
    """`with page_visit(browser, path) as seen:` opens a page (see visit)."""
    return visit


@pytest.fixture
def png_pixels():
    """read_png, for the tests that read a screenshot's pixels."""
    return read_png


# -- a real Slurm, for the cluster tests ------------------------------------------------------------------------
# tests/grader/local_slurm.py starts one (bench/ uses it too); without Slurm's commands or root, the tests that
# ask for it skip, saying why.


def _helper_module(name: str, file: str):
    """A helper beside this file that bench/ loads too, loaded by its path."""
    import importlib.util

    spec = importlib.util.spec_from_file_location(name, Path(__file__).with_name(file))
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="session")
def local_slurm():
    local = _helper_module("shardlab_local_slurm", "local_slurm.py")
    missing = local.missing()
    if missing:
        pytest.skip(missing)
    with local.started() as cluster:
        yield cluster


class ClassCommands:
    """The staff's commands over a graded class, as a term's tests run them."""

    @staticmethod
    def run(*arguments: str, cwd: Path) -> subprocess.CompletedProcess:
        """`python -m grader.cli ARGUMENTS` in `cwd`, which must succeed (the ends of its output if not)."""
        done = subprocess.run(
            [sys.executable, "-m", "grader.cli", *arguments],
            capture_output=True,
            text=True,
            timeout=1800,
            cwd=cwd,
        )
        assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
        return done

    @staticmethod
    def grades(out: Path) -> dict[str, dict[str, str]]:
        """grades.csv of the class graded into `out`, by student."""
        with (out / "grades.csv").open(newline="") as handle:
            return {row["student"]: row for row in csv.DictReader(handle)}

    @staticmethod
    def report(out: Path, student: str) -> dict:
        return json.loads((out / "students" / student / "report.json").read_text())


@pytest.fixture(scope="session")
def class_commands() -> ClassCommands:
    return ClassCommands()


@pytest.fixture(scope="session")
def two_assignment_course() -> str:
    """A term's course file of two assignments, a fortnight apart (the submission-time tests' term): a time 8
    days after HW1's due date is on time for HW2."""
    return """
name = "Two assignments"
timezone = "Europe/Paris"

[points]
ex01 = 10
ex05 = 10

[late]
percent = 10
per = "day"
cap = 50

[[assignment]]
name = "Homework 1"
slug = "HW1"
due = 2026-10-05T23:59:00
exercises = ["ex01"]

[[assignment]]
name = "Homework 2"
slug = "HW2"
due = 2026-10-19T23:59:00
exercises = ["ex05"]
"""


# -- the course's two parts ---------------------------------------------------------------------------------


@pytest.fixture
def two_parts(monkeypatch):
    """The catalog with a part 2 whatever the real one holds: ex13_comm_costs moved to part 2 (its stub, tests
    and solution exist, so every build can ship it) and every other exercise in part 1. Returns it."""
    import dataclasses

    from grader.course import catalog

    exercises = tuple(
        dataclasses.replace(e, part=2 if e.id == "ex13_comm_costs" else 1)
        for e in catalog.EXERCISES
        if e.number <= "ex13"
    )
    monkeypatch.setattr(catalog, "EXERCISES", exercises)
    monkeypatch.setattr(catalog, "_BY_ID", {e.id: e for e in exercises})
    return catalog.get("ex13")


# -- a loaded machine ----------------------------------------------------------------------------------------------
# Busy loops beside a test (tests/grader/busy_loops.py), never while a speedup test of the suite's other worker
# measures: they hold the suite's timing lock as an exercise test does.


@pytest.fixture
def busy_loops():
    """busy_loops(count): a context in which `count` processes spin, each in a session of its own."""
    from grader.harness import timing_lock

    loops = _helper_module("shardlab_busy_loops", "busy_loops.py")

    @contextmanager
    def spinning(count: int):
        with timing_lock.hold(exclusive=False), loops.spinning(count):
            yield

    return spinning
