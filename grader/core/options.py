"""The grading options, declared once.

Each option is one field of `GradingOptions`, declared with `option(...)`: its flag, type, default,
help, choices, the commands that take it, where report.json records it and, when the harness takes
it too, the harness's own pytest option. Everything else is derived from those fields:

- `add_arguments(parser, command)`: the `shardlab grade | grade-batch | calibrate` flags;
- `GradingOptions.from_args(args, command)`: the typed options from what argparse parsed;
- `options.arguments(command)`: back into flags (grade-batch runs `shardlab grade` with them);
- `options.harness_arguments()` and `add_harness_options(group)`: the harness's pytest options, which
  carry the worker's memory limit (`--memory-limit` GiB becomes the harness's `--worker-memory` bytes);
- `options.describe()`: report.json's environment ("timing", "limits").

Adding an option is one declaration here. core is the lowest layer: this module imports nothing of grader.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

GIB = 1 << 30
MIB = 1 << 20
# How a multi-process exercise (ex12) starts its processes: on this machine, or as one Slurm step
# (grader.cluster.run_cluster; `shardlab check --launcher`, the harness's --launcher).
LAUNCHERS = ("local", "srun")

# The harness's own address space. It runs the grader's code: the tests' references and baselines, and the
# student's exported programs on the tests' inputs, so its need is the course's, not a choice per student:
# it does not follow --memory-limit (a small limit would break the grader itself, not limit the student).
HARNESS_MEMORY_BYTES = 6 << 30
# The smallest worker limit grading accepts. Measured (2 cores, bubblewrap): jax's backend on 8 host devices
# cannot start its threads in 1.5 GiB and starts in 1.75; the reference passes every test of the course with
# a 2 GiB worker. A machine that needs more (more cores, more threads) is caught by the preflight.
MIN_WORKER_MEMORY_BYTES = 2 << 30
# What one harness may hold in the submission's memory cgroup beyond its worker's limit: the harness itself,
# its worker's fork server and ex12's processes (the student's worker has its own limit's worth on top).
# Measured: one harness grading the reference's whole course, its worker and ex12's processes included,
# peaked at 0.92 GiB.
HARNESS_ALLOWANCE_BYTES = 2 << 30
# What each writable place of a sandbox may hold (its private folder; under bubblewrap its /tmp too): a
# tmpfs of this size (grader.sandbox.disk), 512 MiB a sandbox under bubblewrap, as RLIMIT_FSIZE allows one file.
SANDBOX_DISK_BYTES = 256 << 20
# A tmpfs is memory, charged to the submission's memory cgroup: one harness's sandboxes (its worker's and
# ex12's run's, each a folder and a /tmp) may hold this much there, on top of HARNESS_ALLOWANCE_BYTES.
SANDBOX_DISK_PER_HARNESS_BYTES = 4 * SANDBOX_DISK_BYTES
MAX_PARALLEL = 4  # harnesses per submission: more than the cores only adds start-up work

TIMINGS = ("enforce", "report", "skip")
ISOLATIONS = ("auto", "strict", "bubblewrap", "landlock", "process")
# Gradescope's visibility values (gradescope-autograders.readthedocs.io/en/latest/specs/).
VISIBILITIES = ("hidden", "after_due_date", "after_published", "visible")

GRADE, GRADE_BATCH, CALIBRATE = "grade", "grade-batch", "calibrate"
GRADING = frozenset({GRADE, GRADE_BATCH})
EVERY_COMMAND = frozenset({GRADE, GRADE_BATCH, CALIBRATE})
# The commands that read the course file (grader.course.term): grading, calibrating (the term's exercises only)
# and the staff's builds and exports.
COURSE_COMMANDS = GRADING | {
    CALIBRATE,
    "release",
    "nbgrader build",
    "gradescope build",
    "course",
    "override",
    "export",
}
# The students' commands, which read the handout's course.toml (`shardlab list`, `check`): --part only.
STUDENT_COMMANDS = frozenset({"check", "list"})


def memory_gib(text: str) -> float:
    """--memory-limit: refused at once when no worker could start with it (every test would crash)."""
    gib = float(text)
    minimum = MIN_WORKER_MEMORY_BYTES / GIB
    if gib != 0 and not gib >= minimum:
        raise argparse.ArgumentTypeError(
            f"{text} GiB is too small: the student's worker needs at least {minimum:g} GiB of address space to "
            f"start jax on its host devices and run the course's tests (0: no limit)"
        )
    return gib


def _same(value: Any) -> Any:
    return value


@dataclass(frozen=True)
class HarnessOption:
    """How the harness (pytest, grader.harness.options) takes a grading option."""

    flag: str
    help: str
    type: Callable[[str], Any] | None = None  # None: a switch
    metavar: str | None = None
    default: Any = None  # in a plain pytest run, which passes no grading options
    default_env: str | None = None  # ... unless this environment variable is set
    to_harness: Callable[[Any], Any] = _same  # the grading value as the harness takes it
    from_harness: Callable[[Any], Any] = _same  # and back


@dataclass(frozen=True)
class Declaration:
    flag: str
    help: str
    commands: frozenset[str]  # the shardlab commands that take it
    type: Callable[[str], Any] | None = None  # None: a switch (store_true)
    metavar: str | None = None
    choices: tuple[str, ...] | None = None
    repeated: bool = False  # given once per value (action="append")
    harness: HarnessOption | None = None  # the harness takes it too, as this pytest option
    report: str | None = None  # where report.json's environment records it ("limits.x")
    to_report: Callable[[Any], Any] = _same  # the value as report.json records it
    in_course_file: bool = False  # the course file may set it; a flag given says otherwise


def option(
    default: Any, flag: str, help: str, *, commands: frozenset[str] = GRADING, **declared: Any
) -> Any:
    """A field of GradingOptions and its one declaration."""
    return field(
        default=default, metadata={"option": Declaration(flag, help, commands, **declared)}
    )


def _gib_to_bytes(gib: float) -> int:
    return int(gib * GIB)


def _bytes_to_gib(count: int | None) -> float:
    return (count or 0) / GIB


def _gib_to_limit(gib: float) -> int | None:
    """An address-space limit in bytes; None: none."""
    return _gib_to_bytes(gib) or None


@dataclass(frozen=True)
class GradingOptions:
    """How one grading runs: what `shardlab grade` was asked, typed."""

    visible_only: bool = option(
        False,
        "--visible-only",
        "run only the visible tests",
        harness=HarnessOption("--visible-only", "leave out the hidden tests"),
    )
    timing: str = option(
        "enforce",
        "--timing",
        "speedup thresholds: enforce (default: the course file's timing, else enforce), report "
        "the figures only, or skip",
        type=str,
        choices=TIMINGS,
        report="timing",
        in_course_file=True,
        harness=HarnessOption(
            "--timing",
            "speedup tests: enforce thresholds, report figures only, or skip "
            "(default: $SHARDLAB_TIMING or enforce)",
            type=str,
            default="enforce",
            default_env="SHARDLAB_TIMING",
        ),
    )
    test_timeout: float | None = option(
        None,
        "--test-timeout",
        "seconds every test may run (default: each test's own limit, from the reference's "
        "time measured here by `shardlab calibrate`, else from its timings shipped with the "
        "course; 120 for a test neither knows)",
        type=float,
        metavar="S",
        report="limits.test_timeout",
        harness=HarnessOption(
            "--test-timeout",
            "with --isolate: how long every test may run (default: from --time-limits, else 120 s)",
            type=float,
            metavar="SECONDS",
        ),
    )
    time_limit: float = option(
        1800.0,
        "--time-limit",
        "seconds one submission may take in all (default 1800)",
        type=float,
        metavar="S",
    )
    # The student's worker's address space. The harness gets it as --worker-memory (bytes), for the worker it
    # starts; report.json records the limit a confined worker actually read (grader.grading.preflight), and the
    # submission's memory cgroup it sizes (limits.submission_memory_bytes, grader.grading.engine).
    memory_limit: float = option(
        6.0,
        "--memory-limit",
        f"address-space limit of the student's worker process in GiB, at least "
        f"{MIN_WORKER_MEMORY_BYTES / GIB:g}, 0 for none (default 6); the grader's own "
        f"harness keeps {HARNESS_MEMORY_BYTES / GIB:g} GiB. Where the machine has a memory "
        f"cgroup, a submission's harnesses and workers together hold at most this plus "
        f"{(HARNESS_ALLOWANCE_BYTES + SANDBOX_DISK_PER_HARNESS_BYTES) / GIB:g} GiB per harness (its own "
        f"{HARNESS_ALLOWANCE_BYTES / GIB:g} GiB, and its sandboxes' disk: a tmpfs is memory; 0: no limit "
        f"there either)",
        commands=EVERY_COMMAND,
        type=memory_gib,
        metavar="GIB",
        report="limits.worker_memory_bytes",
        to_report=_gib_to_limit,
        harness=HarnessOption(
            "--worker-memory",
            "with --isolate: the worker's address-space limit, 0 for none "
            "(default: grader.sandbox.confinement.WorkerLimits; `shardlab "
            "grade --memory-limit` sets it)",
            type=int,
            metavar="BYTES",
            to_harness=_gib_to_bytes,
            from_harness=_bytes_to_gib,
        ),
    )
    isolation: str = option(
        "auto",
        "--isolation",
        "how the student's code is confined: auto (the best this machine has: bubblewrap, "
        "then landlock, then a plain process), strict (refuse to grade without bubblewrap "
        "or landlock), or one level",
        commands=EVERY_COMMAND,
        type=str,
        choices=ISOLATIONS,
        harness=HarnessOption(
            "--isolation",
            "with --isolate: auto (the best this machine has), strict (refuse "
            "without a sandbox), bubblewrap, landlock or process",
            type=str,
            default="auto",
        ),
    )
    exercises: tuple[str, ...] = option(
        (),
        "--exercise",
        "grade (calibrate: time) only this exercise (repeatable)",
        commands=EVERY_COMMAND,
        type=str,
        metavar="ID",
        repeated=True,
    )
    cache: Path | None = option(
        None,
        "--cache",
        "the compile cache and the calibrated time limits (default: $SHARDLAB_CACHE or "
        "~/.cache/shardlab; grade-batch: OUT/.cache). Only the grader reads and writes it.",
        commands=EVERY_COMMAND,
        type=Path,
        metavar="DIR",
    )
    no_compile_cache: bool = option(
        False, "--no-compile-cache", "compile every program afresh", commands=EVERY_COMMAND
    )
    cache_max_mb: float = option(
        1024.0,
        "--cache-max-mb",
        "the compile cache's size cap: least recently used entries go first (default 1024)",
        commands=EVERY_COMMAND,
        type=float,
        metavar="MB",
    )
    parallel: int | None = option(
        None,
        "--parallel",
        f"harnesses grading one submission's exercises at once (default: the cores, at most "
        f"{MAX_PARALLEL}; grade-batch: cores / jobs)",
        commands=EVERY_COMMAND,
        type=int,
        metavar="N",
    )

    hidden_visibility: str = option(
        "after_due_date",
        "--hidden-visibility",
        "when students see the hidden tests' names and messages: results.json's Gradescope visibility of each "
        "hidden test; feedback.html shows them unless hidden (instructors only), so hand it out accordingly "
        "(default: the course file's hidden_visibility, else after_due_date)",
        type=str,
        choices=VISIBILITIES,
        report="hidden_visibility",
        in_course_file=True,
    )
    course: Path | None = option(
        None,
        "--course",
        "the term's course file (default: course.toml in the current folder, else every exercise "
        "of the catalog with its points and no due dates)",
        commands=COURSE_COMMANDS,
        type=Path,
        metavar="FILE",
    )
    assignment: str | None = option(
        None,
        "--assignment",
        "one assignment of the course file, by its name or slug: only its exercises are graded, each with "
        "the course file's due date and points; the other assignments' grades are kept as graded (release, "
        "gradescope build, nbgrader build: only this assignment's exercises)",
        commands=frozenset({GRADE, GRADE_BATCH, "release", "gradescope build", "nbgrader build"}),
        type=str,
        metavar="NAME",
    )
    part: int | None = option(
        None,
        "--part",
        "one part of the course, by its number (`shardlab list` heads each part's exercises): only "
        "the term's exercises of that part (default: every part)",
        commands=EVERY_COMMAND
        | {"release", "nbgrader build", "gradescope build"}
        | STUDENT_COMMANDS,
        type=int,
        metavar="N",
    )

    # The options the course file may set that no flag gave (from_args): with_course fills them.
    unset: frozenset[str] = field(default=frozenset(), compare=False, repr=False)

    def __post_init__(self):
        # a list given by a caller: kept as an immutable tuple
        if not isinstance(self.exercises, tuple):
            object.__setattr__(self, "exercises", tuple(self.exercises or ()))

    @property
    def worker_memory_bytes(self) -> int | None:
        """The worker's RLIMIT_AS; None: no limit."""
        return _gib_to_limit(self.memory_limit)

    @property
    def cache_max_bytes(self) -> int:
        return int(self.cache_max_mb * MIB)

    @classmethod
    def from_args(cls, args: argparse.Namespace, command: str) -> GradingOptions:
        """The options `command` takes, from what argparse parsed (add_arguments); the others keep their
        defaults (calibrating from grade-batch's arguments times every test of its term, whatever it grades)."""
        given = {}
        for name, declaration in DECLARATIONS.items():
            if command in declaration.commands:
                value = getattr(args, name)
                if declaration.in_course_file and value is None:
                    continue  # not given: the course file's, else the default (with_course)
                given[name] = tuple(value or ()) if declaration.repeated else value
        return cls(
            **given,
            unset=frozenset(
                name
                for name, d in DECLARATIONS.items()
                if d.in_course_file and command in d.commands and getattr(args, name) is None
            ),
        )

    def with_course(self, settings: dict[str, Any]) -> GradingOptions:
        """These options with the course file's `settings` ({option name: value}) for the options it may set
        and no flag set: a flag given wins over the course file, the course file over the default."""
        return dataclasses.replace(
            self,
            unset=frozenset(),
            **{
                name: value
                for name, value in settings.items()
                if name in self.unset and value is not None and DECLARATIONS[name].in_course_file
            },
        )

    def for_command(self, command: str) -> GradingOptions:
        """These options, but only those `command` takes: the others back to their defaults."""
        return dataclasses.replace(
            DEFAULTS,
            **{
                name: getattr(self, name)
                for name, declaration in DECLARATIONS.items()
                if command in declaration.commands
            },
        )

    def arguments(self, command: str = GRADE) -> list[str]:
        """The flags that give `command` these options (grade-batch runs `shardlab grade` with them)."""
        found = []
        for name, declaration in DECLARATIONS.items():
            if command in declaration.commands:
                found += _flags(declaration.flag, getattr(self, name), declaration.repeated)
        return found

    def harness_arguments(self, names: tuple[str, ...] | None = None) -> list[str]:
        """The harness's pytest options for these options (or for the options `names` only)."""
        found = []
        for name, declaration in DECLARATIONS.items():
            if declaration.harness is not None and (names is None or name in names):
                found += _flags(
                    declaration.harness.flag, declaration.harness.to_harness(getattr(self, name))
                )
        return found

    @classmethod
    def from_harness(cls, getoption: Callable[[str], Any]) -> GradingOptions:
        """The options the harness took, read with pytest's config.getoption; None: the default."""
        given = {}
        for name, declaration in DECLARATIONS.items():
            if (
                declaration.harness is not None
                and (value := getoption(declaration.harness.flag)) is not None
            ):
                given[name] = declaration.harness.from_harness(value)
        return cls(**given)

    def describe(self) -> dict[str, Any]:
        """report.json's environment: each option at its `report` place (the engine puts the limits as applied
        over the requested ones)."""
        described: dict[str, Any] = {}
        for name, declaration in DECLARATIONS.items():
            if declaration.report is not None:
                *outer, key = declaration.report.split(".")
                place = described
                for part in outer:
                    place = place.setdefault(part, {})
                place[key] = declaration.to_report(getattr(self, name))
        return described


DECLARATIONS: dict[str, Declaration] = {
    f.name: f.metadata["option"]
    for f in dataclasses.fields(GradingOptions)
    if "option" in f.metadata
}
DEFAULTS = GradingOptions()


def _flags(flag: str, value: Any, repeated: bool = False) -> list[str]:
    if value is None or value is False:
        return []
    if value is True:
        return [flag]
    if repeated:
        return [f"{flag}={item}" for item in value]
    return [f"{flag}={value}"]


def add_arguments(parser: argparse.ArgumentParser, command: str) -> None:
    """The options `command` takes, as argparse flags whose dest is the option's name."""
    for name, declaration in DECLARATIONS.items():
        if command not in declaration.commands:
            continue
        if declaration.type is None:
            parser.add_argument(
                declaration.flag, dest=name, action="store_true", help=declaration.help
            )
        else:
            default = None if declaration.in_course_file else getattr(DEFAULTS, name)
            parser.add_argument(
                declaration.flag,
                dest=name,
                type=declaration.type,
                metavar=declaration.metavar,
                choices=declaration.choices,
                help=declaration.help,
                **({"action": "append"} if declaration.repeated else {"default": default}),
            )


def add_harness_options(group) -> None:
    """The options the harness takes, on pytest's option group (or any parser with argparse's signature)."""
    for declaration in DECLARATIONS.values():
        harness = declaration.harness
        if harness is None:
            continue
        if harness.type is None:
            group.addoption(harness.flag, action="store_true", help=harness.help)
        else:
            default = (
                os.environ.get(harness.default_env, harness.default)
                if harness.default_env
                else harness.default
            )
            group.addoption(
                harness.flag,
                type=harness.type,
                default=default,
                choices=declaration.choices,
                metavar=harness.metavar,
                help=harness.help,
            )
