"""The grading options are declared once (grader.core.options) and every route derives them from there:
the CLI's flags, the options back from what argparse parsed, `shardlab grade`'s arguments (grade-batch),
the harness's pytest options (parsed by pytest itself), report.json's environment, and the worker's memory
limit, which is the student's worker's."""

import argparse
import ast
import dataclasses
import json
from pathlib import Path

import pytest

from grader.cli import build_parser, main
from grader.core import options as declared
from grader.core.options import (
    CALIBRATE,
    COURSE_COMMANDS,
    DECLARATIONS,
    DEFAULTS,
    EVERY_COMMAND,
    GIB,
    GRADE,
    GRADE_BATCH,
    HARNESS_ALLOWANCE_BYTES,
    HARNESS_MEMORY_BYTES,
    SANDBOX_DISK_PER_HARNESS_BYTES,
    STUDENT_COMMANDS,
    GradingOptions,
    add_arguments,
)
from grader.course import catalog, paths
from grader.grading import engine, process
from grader.sandbox import confinement

pytest_plugins = ["pytester"]

EX01 = catalog.get("ex01")

# Every option away from its default, so that a route that drops or mangles one is seen.
SAMPLE = GradingOptions(
    visible_only=True,
    timing="skip",
    test_timeout=7.5,
    time_limit=99.0,
    memory_limit=3.5,
    isolation="process",
    exercises=("ex01", "ex03"),
    cache=Path("/tmp/a cache"),
    no_compile_cache=True,
    cache_max_mb=12.0,
    parallel=3,
    hidden_visibility="visible",
    course=Path("/tmp/a course.toml"),
    assignment="Homework 2",
    part=2,
)
POSITIONAL = {
    GRADE: ["some-submission", "--out", "out"],
    GRADE_BATCH: ["some-class", "--out", "out"],
    CALIBRATE: [],
}


def parsed(command: str, arguments: list[str]) -> GradingOptions:
    return GradingOptions.from_args(
        build_parser().parse_args([command, *POSITIONAL[command], *arguments]), command
    )


def test_the_sample_moves_every_option_off_its_default():
    assert [name for name in DECLARATIONS if getattr(SAMPLE, name) == getattr(DEFAULTS, name)] == []


def test_every_field_is_declared_once_and_every_flag_is_its_own():
    assert list(DECLARATIONS) == [
        f.name for f in dataclasses.fields(GradingOptions) if f.name != "unset"
    ]
    flags = [d.flag for d in DECLARATIONS.values()]
    harness_flags = [d.harness.flag for d in DECLARATIONS.values() if d.harness is not None]
    assert len(set(flags)) == len(flags) and len(set(harness_flags)) == len(harness_flags)
    assert all(
        d.commands and d.commands <= EVERY_COMMAND | COURSE_COMMANDS | STUDENT_COMMANDS
        for d in DECLARATIONS.values()
    )


@pytest.mark.parametrize("command", [GRADE, GRADE_BATCH, CALIBRATE])
def test_the_cli_defaults_are_the_declared_ones(command):
    assert parsed(command, []) == DEFAULTS


@pytest.mark.parametrize("command", [GRADE, GRADE_BATCH, CALIBRATE])
def test_every_option_round_trips_through_the_cli(command):
    """What a command takes, written back as flags (grade-batch's route to `shardlab grade`) and parsed by
    the CLI, is what it was; what a command does not take keeps its default."""
    wanted = SAMPLE.for_command(command)
    assert parsed(command, wanted.arguments(command)) == wanted
    assert {name for name in DECLARATIONS if getattr(wanted, name) != getattr(DEFAULTS, name)} == {
        name for name, d in DECLARATIONS.items() if command in d.commands
    }


def test_a_flag_given_wins_over_the_course_file_and_the_course_file_over_the_default():
    course = {"timing": "report", "hidden_visibility": "hidden"}
    assert parsed(GRADE, []).with_course(course) == dataclasses.replace(
        DEFAULTS, timing="report", hidden_visibility="hidden"
    )
    given = parsed(GRADE, ["--timing", "enforce"]).with_course(course)
    assert (given.timing, given.hidden_visibility) == ("enforce", "hidden")
    assert parsed(GRADE, []).with_course({"timing": None}) == DEFAULTS


def test_calibrating_from_a_batch_keeps_only_what_calibrate_takes():
    """grade-batch calibrates before its first student: the exercises it grades that have no limits yet, timed
    as they will be graded."""
    calibrating = SAMPLE.for_command(CALIBRATE)
    assert calibrating.course == SAMPLE.course
    assert f"--course={SAMPLE.course}" in calibrating.arguments(CALIBRATE)
    assert calibrating.visible_only is False and calibrating.test_timeout is None
    # grade-batch gives it those it grades that have no limits yet
    assert calibrating.exercises == SAMPLE.exercises
    assert (calibrating.memory_limit, calibrating.isolation, calibrating.parallel) == (
        3.5,
        "process",
        3,
    )


def test_a_batch_grades_each_student_with_the_options_it_was_given():
    """grade-batch's arguments to `shardlab grade` are the options' own, as the grade command parses them."""
    batch = parsed(GRADE_BATCH, SAMPLE.arguments(GRADE_BATCH))
    # grade's own (--assignment) are not grade-batch's: a batch passes only what it took
    assert parsed(GRADE, batch.arguments(GRADE)) == SAMPLE.for_command(GRADE_BATCH)


def test_the_harness_takes_its_options_as_pytest_parses_them(pytester):
    """The harness's pytest options come from the same declarations: what the grading process passes
    (process.run_pytest_child) is what pytest reads back, the memory limit in bytes."""
    config = pytester.parseconfig("-p", "grader.harness.options", *SAMPLE.harness_arguments())
    assert config.getoption("--worker-memory") == int(3.5 * GIB)
    assert config.getoption("--test-timeout") == 7.5 and config.getoption("--timing") == "skip"
    back = GradingOptions.from_harness(config.getoption)
    shared = [name for name, d in DECLARATIONS.items() if d.harness is not None]
    assert shared == ["visible_only", "timing", "test_timeout", "memory_limit", "isolation"]
    assert back == dataclasses.replace(DEFAULTS, **{name: getattr(SAMPLE, name) for name in shared})


def test_a_plain_pytest_run_gets_the_harness_defaults(pytester, monkeypatch):
    monkeypatch.delenv("SHARDLAB_TIMING", raising=False)
    config = pytester.parseconfig("-p", "grader.harness.options")
    assert GradingOptions.from_harness(config.getoption) == DEFAULTS
    assert config.getoption("--worker-memory") is None  # the worker's own default: WorkerLimits
    assert confinement.WorkerLimits().memory_bytes == DEFAULTS.worker_memory_bytes == 6 * GIB


def test_no_memory_limit_reaches_the_harness_as_none():
    assert GradingOptions(memory_limit=0).worker_memory_bytes is None
    assert "--worker-memory=0" in GradingOptions(memory_limit=0).harness_arguments()


def test_report_json_records_the_options_under_todays_keys():
    assert SAMPLE.describe() == {
        "timing": "skip",
        "hidden_visibility": "visible",
        "limits": {"test_timeout": 7.5, "worker_memory_bytes": int(3.5 * GIB)},
    }
    env = engine.environment(
        SAMPLE,
        process.Limits(),
        {"level": "process"},
        worker_memory_bytes=12345,
        submission_memory_bytes=67890,
        worker_disk_bytes=4321,
        parallel=2,
    )
    assert (
        env.timing == "skip"
        and env.isolation.to_dict() == {"level": "process"}
        and env.parallel == 2
    )
    assert env.limits == {
        "test_timeout": 7.5,
        "worker_memory_bytes": 12345,  # as the worker read it
        "harness_memory_bytes": HARNESS_MEMORY_BYTES,
        "submission_memory_bytes": 67890,  # as the kernel holds it
        "worker_disk_bytes": 4321,  # as the worker found its folder
    }


def test_the_memory_limits_help_says_what_the_submissions_memory_group_holds():
    parser = argparse.ArgumentParser()
    add_arguments(parser, GRADE)
    text = " ".join(parser.format_help().split())
    per_harness = (HARNESS_ALLOWANCE_BYTES + SANDBOX_DISK_PER_HARNESS_BYTES) / GIB
    assert f"at most this plus {per_harness:g} GiB per harness (its own" in text
    assert "its sandboxes' disk: a tmpfs is memory; 0: no limit there either)" in text


# --- nothing spells an option by hand where it should be derived -------------------------------------------

# Where a flag may still be written out: its declaration, and reads of pytest's parsed options by name.
DECLARED_IN = Path(declared.__file__).resolve()


def hand_built(source: str, flags: set[str]) -> list[str]:
    """Strings in `source` that build one of `flags` as an argument: the flag alone, or "--flag=..."; a read
    of pytest's parsed option by its name (config.getoption("--flag")) builds nothing."""
    tree = ast.parse(source)
    read_by_name = {
        id(node.args[0])
        for node in ast.walk(tree)
        if isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr == "getoption"
        and node.args
    }
    parts = {
        id(part)
        for node in ast.walk(tree)
        if isinstance(node, ast.JoinedStr)
        for part in node.values
    }
    found = []
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.JoinedStr)
            and node.values
            and isinstance(node.values[0], ast.Constant)
        ):
            text = node.values[0].value
        elif (
            isinstance(node, ast.Constant)
            and isinstance(node.value, str)
            and id(node) not in read_by_name | parts
        ):
            text = node.value
        else:
            continue
        found += [flag for flag in flags if text == flag or text.startswith(flag + "=")]
    return found


KNOWN = {
    # `shardlab nbgrader build --exercise`: which exercises the course holds, an option of its own.
    "grader/cli.py": {"--exercise"},
}
FLAGS = {d.flag for d in DECLARATIONS.values()} | {
    d.harness.flag for d in DECLARATIONS.values() if d.harness
}


def test_no_grader_module_builds_an_option_argument_by_hand():
    found = {
        str(path.relative_to(paths.REPO_ROOT)): hits
        for path in sorted((paths.REPO_ROOT / "grader").rglob("*.py"))
        if path.resolve() != DECLARED_IN
        if (hits := set(hand_built(path.read_text(), FLAGS)))
    }
    assert found == KNOWN


def test_the_scan_sees_an_argument_built_by_hand():
    source = (
        'command = ["--isolate", f"--worker-memory={n}", "--visible-only", "--cache-max-mb"]\n'
        'print(f"--test-timeout {s:g} s for every test", config.getoption("--timing"))\n'
    )
    assert sorted(hand_built(source, FLAGS)) == [
        "--cache-max-mb",
        "--visible-only",
        "--worker-memory",
    ]


# --- the memory limit is the student's worker's ---------------------------------------------------------------

PROBING_MODULE = """

def make_mesh_2x4():
    import resource
    raise ValueError(f"worker RLIMIT_AS {resource.getrlimit(resource.RLIMIT_AS)}")
"""


def test_memory_limit_limits_the_students_worker_process(tmp_path):
    """--memory-limit, parsed by the CLI, reaches the harness as --worker-memory and the worker that runs the
    student's module applies it: the student's own code reads it. The harness's limit is not it (6 GiB)."""
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / EX01.module_file).write_text(
        EX01.solution_path().read_text() + PROBING_MODULE
    )
    assert (
        main(
            [
                "grade",
                str(tmp_path / "sub"),
                "--out",
                str(tmp_path / "out"),
                "--exercise",
                "ex01",
                "--memory-limit",
                "2.5",
                "--timing",
                "skip",
                "--quiet",
                "--no-compile-cache",
                "--parallel",
                "1",
            ]
        )
        == 0
    )
    report = json.loads((tmp_path / "out" / "report.json").read_text())
    [probe] = [
        t
        for t in report["exercises"][EX01.id]["tests"]
        if t["nodeid"].endswith("::test_make_mesh_2x4")
    ]
    applied = int(2.5 * GIB)
    assert f"ValueError: worker RLIMIT_AS ({applied}, {applied})" in probe["message"]
    assert applied != HARNESS_MEMORY_BYTES
    assert report["environment"]["limits"]["worker_memory_bytes"] == applied
