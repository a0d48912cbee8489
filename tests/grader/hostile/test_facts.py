"""Text a submission decides, graded by the real grader (`grade_batch`, every student module in a confined
worker): the names of the mesh axes its arrays live on, the HLO instructions of its programs and how many
collectives they hold. Each reaches a test's facts (grader.core.results), which three files draw (report.json,
results.json, feedback.html, the last one every name twice per grid); unbounded, a 256 KiB axis name made one
ex01 grading 33 MB of report.json and 66 MB of feedback.html. Now each string is cut where its fact is built
(grader.core.bounds), a test keeps the facts that fit in its share, and the cut is said where it is made.

Each test's share of each file is measured as that file written from the grading's results without the test,
subtracted from the file written with it, by the grader's own writers. Measured (bytes of report.json /
results.json / feedback.html; ex01 and ex04 graded, speed not measured), before the bounds and after:

    the largest test's share          before                          after
      renames_the_axes                1,051,204 / 734 / 2,101,085     3,209 / 733 / 5,071
      one_huge_axis (the red team's)  530,778 / 529,069 / 1,056,528   6,860 / 5,184 / 8,716
      many_long_axes                  232,981 / 734 / 464,029         9,111 / 733 / 15,739
      huge_programs: the line         263,448 / 834 / 263,337         3,114 / 834 / 3,003
      huge_programs: 240 collectives  81,082 / 1,101 / 79,344         38,641 / 1,289 / 37,808 (112 kept)
    the whole grading
      renames_the_axes                33.4 MB / 60 KB / 66.7 MB       139 KB / 60 KB / 175 KB
      one_huge_axis                   14.9 MB / 7.5 MB / 29.6 MB      213 KB / 164 KB / 234 KB
      many_long_axes                  8.9 MB / 60 KB / 17.6 MB        366 KB / 60 KB / 585 KB
      huge_programs                   1.1 MB / 65 KB / 1.1 MB         214 KB / 66 KB / 210 KB
"""

from __future__ import annotations

import json
import re
import textwrap
from pathlib import Path
from typing import NamedTuple

import pytest

from grader.core.bounds import LINE_CHARS, MESSAGE_CHARS, NAME_CHARS
from grader.course import catalog
from grader.grading.batch import grade_batch
from grader.grading.results import GradingResults
from grader.reports.writers import write_all, write_report_json

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("test_hostile_facts")]

EX01, EX04 = catalog.get("ex01"), catalog.get("ex04")
PER_TEST = 64 << 10  # what one test may add to each file, in bytes
PER_GRADING = 2 << 20  # what a whole grading's file may take here (before: 33 MB and 66 MB)
FILES = ("report.json", "results.json", "feedback.html")


def source(exercise) -> str:
    return "".join(
        line
        for line in exercise.solution_path().read_text().splitlines(keepends=True)
        if "### " not in line
    )


def code(text: str) -> str:
    return "\n" + textwrap.dedent(text).strip("\n") + "\n"


HUGE_NAMES = code("""
    import jax as _jax
    from jax.sharding import Mesh as _Mesh, NamedSharding as _Named, PartitionSpec as _P
    _HUGE = 256 * 1024

    def _entry(entry, names):
        if entry is None:
            return None
        return tuple(names[n] for n in entry) if isinstance(entry, tuple) else names[entry]
""")

# The right layout, on the test's devices, but every axis renamed to 256 KiB of "a" and its old name: a layout
# is judged by which device holds which block, never by names, so every test passes.
RENAMES_THE_AXES = HUGE_NAMES + code("""
    def place(x, mesh, spec):
        names = {n: "a" * _HUGE + n for n in mesh.axis_names}
        renamed = _Mesh(mesh.devices, tuple(names.values()), axis_types=mesh.axis_types)
        return _jax.device_put(x, _Named(renamed, _P(*(_entry(e, names) for e in spec))))
""")

# The red team's: rows split over one axis named by 256 KiB, whatever was asked (tests fail, with messages).
ONE_HUGE_AXIS = HUGE_NAMES + code("""
    def place(x, mesh, spec):
        flat = _Mesh(mesh.devices.reshape(-1), ("a" * _HUGE,), axis_types=mesh.axis_types[:1])
        return _jax.device_put(x, _Named(flat, _P("a" * _HUGE)))
""")

# 28 more axes of size 1 (jax takes meshes of up to 32 dimensions), each named by 4 KiB, all in the spec's
# first entry: the same blocks on the same devices, with a spec 112 KiB long and 30 names per mesh.
MANY_LONG_AXES = HUGE_NAMES + code("""
    def place(x, mesh, spec):
        extra = tuple(f"e{i:02d}" + "b" * 4096 for i in range(28))
        names = {n: n for n in mesh.axis_names}
        big = _Mesh(mesh.devices.reshape(mesh.devices.shape + (1,) * len(extra)), mesh.axis_names + extra,
                    axis_types=mesh.axis_types + mesh.axis_types[:1] * len(extra))
        entries = [_entry(e, names) for e in spec] + [None] * (x.ndim - len(spec))
        first = entries[0]
        entries[0] = (() if first is None else first if isinstance(first, tuple) else (first,)) + extra
        return _jax.device_put(x, _Named(big, _P(*entries)))
""")

# ex04, right values everywhere: layer_feature_sharded's one all-reduce carries a 256 KiB attribute in its
# HLO instruction; layer_shard_map sends every block 240 times around the devices (whole turns: each block
# ends where it started), 240 collective-permutes where none is allowed.
HUGE_PROGRAMS = code("""
    from jax.experimental.xla_metadata import set_xla_metadata as _xla_metadata

    def layer_feature_sharded(x, W, b, mesh):
        def per_device(x_cols, W_rows, b):
            partial = x_cols @ W_rows
            with _xla_metadata(note="q" * (256 * 1024)):
                total = jax.lax.psum(partial, "data")
            return jax.nn.softmax(total + b)
        return jax.shard_map(per_device, mesh=mesh, in_specs=(P(None, "data"), P("data", None), P()),
                             out_specs=P(None, None))(x, W, b)

    def layer_shard_map(x, W, b, mesh):
        n = mesh.devices.size
        def per_device(x, W, b):
            out = layer(x, W, b)
            for _ in range(240 // n * n):
                out = jax.lax.ppermute(out, "data", [(i, (i + 1) % n) for i in range(n)])
            return out
        return jax.shard_map(per_device, mesh=mesh, in_specs=(P("data", None), P(), P()),
                             out_specs=P("data", None))(x, W, b)
""")
PERMUTES = 240


class Case(NamedTuple):
    exercise: catalog.Exercise
    text: str


CASES = {
    "renames_the_axes": Case(EX01, source(EX01) + RENAMES_THE_AXES),
    "one_huge_axis": Case(EX01, source(EX01) + ONE_HUGE_AXIS),
    "many_long_axes": Case(EX01, source(EX01) + MANY_LONG_AXES),
    "huge_programs": Case(EX04, source(EX04) + HUGE_PROGRAMS),
}


def grade(cases: dict[str, Case], folder: Path) -> tuple[object, dict[str, Path]]:
    """The cases graded as one class, as an instructor would; speed is not measured (not what is tested here),
    and a test may take a minute (240 collectives take a while to trace and compile). Returns the batch summary
    and each student's folder of reports."""
    class_dir = folder / "class"
    for name, case in cases.items():
        (class_dir / name).mkdir(parents=True)
        (class_dir / name / case.exercise.module_file).write_text(case.text)
    out = folder / "graded"
    summary = grade_batch(
        class_dir,
        out,
        jobs=2,
        exercises=sorted({c.exercise.id for c in cases.values()}),
        timing="skip",
        test_timeout=60,
    )
    return summary, {
        name: next(out.rglob(f"{name}/report.json")).parent
        for name in cases
        if any(out.rglob(f"{name}/report.json"))
    }


def file_sizes(results: GradingResults, folder: Path) -> dict[str, int]:
    return {path.name: path.stat().st_size for path in write_all(results, folder).values()}


def shares(results: GradingResults, scratch: Path) -> dict[str, dict[str, int]]:
    """{nodeid: {file name: bytes}}: what each test adds to each file the grader writes."""
    whole = file_sizes(results, scratch / "whole")
    found = {}
    for ex_id, exercise in results.exercises.items():
        for i, test in enumerate(exercise.tests):
            others = dict(results.exercises) | {
                ex_id: type(exercise)(
                    exercise.id,
                    exercise.title,
                    exercise.max_score,
                    exercise.tests[:i] + exercise.tests[i + 1 :],
                    exercise.note,
                    exercise.bonus,
                )
            }
            without = file_sizes(
                GradingResults(
                    results.submission,
                    others,
                    results.environment,
                    results.problems,
                    results.output,
                    results.duration,
                    results.visible_only,
                ),
                scratch / "without",
            )
            found[test.nodeid] = {name: whole[name] - without[name] for name in FILES}
    return found


class Graded(NamedTuple):
    summary: object
    folders: dict[str, Path]
    results: dict[str, GradingResults]


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    summary, folders = grade(CASES, tmp_path_factory.mktemp("hostile-facts"))
    results = {
        name: GradingResults.from_dict(json.loads((folder / "report.json").read_text()))
        for name, folder in folders.items()
    }
    for name, folder in folders.items():
        print(f"{name}: " + ", ".join(f"{f} {(folder / f).stat().st_size:,} bytes" for f in FILES))
    return Graded(summary, folders, results)


def graded_tests(results: GradingResults, prefix: str):
    return [t for t in results.tests() if t.name.startswith(prefix)]


def test_every_submission_was_graded(graded):
    assert sorted((o.student, o.status, o.detail[:300]) for o in graded.summary.outcomes) == [
        (name, "graded", "") for name in sorted(CASES)
    ]


@pytest.mark.parametrize("name", CASES)
def test_each_test_adds_at_most_64_kib_to_each_file(graded, name, tmp_path):
    found = shares(graded.results[name], tmp_path)
    largest = {f: max(found.items(), key=lambda item: item[1][f]) for f in FILES}
    print({f: (nodeid.split("::")[-1], sizes[f]) for f, (nodeid, sizes) in largest.items()})
    assert all(sizes[f] <= PER_TEST for f, (_, sizes) in largest.items()), largest


@pytest.mark.parametrize("name", CASES)
def test_each_grading_is_bounded_in_all(graded, name):
    sizes = {f: (graded.folders[name] / f).stat().st_size for f in FILES}
    assert all(size <= PER_GRADING for size in sizes.values()), sizes


def test_long_names_are_cut_and_say_so_keeping_both_ends(graded):
    """The axes renamed: every place test still passes (names do not make a layout), and each name is cut
    to NAME_CHARS with its end, the old name, kept: x and y still differ."""
    results = graded.results["renames_the_axes"]
    assert results.exercises[EX01.id].score == EX01.points
    checks = [check for t in graded_tests(results, "test_place") for check in t.layouts]
    assert checks and all(check.actual is not None for check in checks)
    for check in checks:
        axes = check.actual.mesh_axes
        assert all(len(axis) <= NAME_CHARS and "characters cut" in axis for axis in axes)
        assert len(axes) == len(check.expected.mesh_axes)
        assert all(axis.endswith("a" + name) for axis, name in zip(axes, check.expected.mesh_axes))
        assert len(check.actual.spec) <= NAME_CHARS


def test_a_message_naming_a_huge_axis_is_cut_and_says_so(graded):
    failed = [
        t for t in graded_tests(graded.results["one_huge_axis"], "test_place") if not t.passed
    ]
    assert failed
    for test in failed:
        assert len(test.message) <= MESSAGE_CHARS
    assert any("more characters cut" in t.message for t in failed)


def test_a_spec_of_many_long_axes_is_cut(graded):
    tests = graded_tests(graded.results["many_long_axes"], "test_place")
    layouts = [check.actual for t in tests for check in t.layouts]
    assert layouts and all(layout is not None for layout in layouts)
    for layout in layouts:
        assert len(layout.mesh_axes) == len(layout.mesh_sizes) >= 29
        assert len(layout.spec) <= NAME_CHARS and "characters cut" in layout.spec
        assert all(len(axis) <= NAME_CHARS for axis in layout.mesh_axes)


def test_an_hlo_line_is_cut_and_says_so(graded):
    tests = graded_tests(
        graded.results["huge_programs"], "test_layer_feature_sharded_uses_one_all_reduce"
    )
    assert tests
    for test in tests:
        # one all-reduce, the right values: the attribute changes neither
        assert test.passed, test.message
        (check,) = test.collectives
        (reduce,) = check.found
        assert (
            reduce.op == "all-reduce"
            and len(reduce.line) <= LINE_CHARS
            and "characters cut" in reduce.line
        )


def test_a_program_of_many_collectives_keeps_those_that_fit_and_says_so(graded):
    results = graded.results["huge_programs"]
    tests = graded_tests(results, "test_layer_shard_map_has_no_collectives")
    assert tests and all(t.category == "failed" for t in tests)
    for test in tests:
        (check,) = test.collectives
        assert 0 < len(check.found) < PERMUTES
        assert all(c.op == "collective-permute" for c in check.found)
        assert f"{len(check.found)} of {PERMUTES} collectives found" in test.message
        assert "a test's facts may take" in test.message
    # ... and the student reads it on the page and on Gradescope.
    folder = graded.folders["huge_programs"]
    page = (folder / "feedback.html").read_text()
    gradescope = {
        t["extra_data"]["nodeid"]: t["output"]
        for t in json.loads((folder / "results.json").read_text())["tests"]
    }
    for test in tests:
        (card,) = re.findall(
            rf'<article [^>]*data-nodeid="{re.escape(test.nodeid)}".*?</article>', page, re.S
        )
        assert "the grader recorded only part of what this test" in card
        assert "the grader recorded only part of what this test" in gradescope[test.nodeid]


@pytest.mark.parametrize("name", CASES)
def test_a_bounded_report_reads_back_the_same(graded, name, tmp_path):
    """Bounding is done once: report.json read back and written again is the same file."""
    written = write_report_json(graded.results[name], tmp_path / "report.json")
    assert written.read_text() == (graded.folders[name] / "report.json").read_text()
