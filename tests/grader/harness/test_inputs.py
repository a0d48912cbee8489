"""The tests' inputs: the seeds' own streams in a student's run; while grading, a stream of each test's own,
keyed by the secret, the test and the seed, and the same for that test on every route."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import textwrap
import time

import numpy as np
import pytest

from grader.checks import inputs
from grader.course import catalog, paths
from grader.grading import process
from grader.harness import runner
from grader.platforms import notebooks

SECRET = "ab" * 16
# What a visible test shows the worker in a direct call, and a hidden test that names the same seed with
# smaller shapes: before streams were per test, the second's arrays were prefixes of the first's.
VISIBLE = "ex04_sharded_layer/test_visible.py::test_layer_auto"
HIDDEN = [
    f"ex04_sharded_layer/test_hidden.py::test_layer_auto_has_no_collectives[{n}dev]"
    for n in (2, 4, 8)
]


def drawn(test: str, seed: int = 0, size: int = 1194) -> np.ndarray:
    with inputs.drawing_for(test):
        return inputs.rng(seed).standard_normal(size)


def test_without_a_secret_a_seed_gives_its_own_stream_in_every_test(monkeypatch):
    monkeypatch.delenv(inputs.SECRET_VARIABLE, raising=False)
    assert inputs.property_seed() is None
    for test in [VISIBLE, *HIDDEN]:
        assert np.array_equal(drawn(test, 3, 5), np.random.default_rng(3).standard_normal(5))


def test_a_secret_changes_every_stream_and_only_the_secret_reproduces_it(monkeypatch):
    monkeypatch.setenv(inputs.SECRET_VARIABLE, SECRET)
    by_seed = {seed: drawn(VISIBLE, seed, 8) for seed in range(10)}
    assert np.array_equal(by_seed[4], drawn(VISIBLE, 4, 8))  # the same test draws the same again
    for seed in range(10):  # nothing a student can compute from the seeds alone
        assert not any(
            np.allclose(by_seed[seed], np.random.default_rng(s).standard_normal(8))
            for s in range(100)
        )
    monkeypatch.setenv(inputs.SECRET_VARIABLE, "cd" * 16)
    assert not np.allclose(by_seed[4], drawn(VISIBLE, 4, 8))


def test_no_two_tests_share_a_stream(monkeypatch):
    """Not even as a prefix or a window: no value a test draws is among another test's, nor among the
    same test's draws for another seed."""
    monkeypatch.setenv(inputs.SECRET_VARIABLE, SECRET)
    streams = {(test, seed): drawn(test, seed) for test in [VISIBLE, *HIDDEN] for seed in (0, 1)}
    for key, values in streams.items():
        others = np.concatenate([v for k, v in streams.items() if k != key])
        assert not np.isin(values, others).any(), key


def test_drawing_while_grading_outside_any_test_is_an_error(monkeypatch):
    monkeypatch.setenv(inputs.SECRET_VARIABLE, SECRET)
    monkeypatch.setattr(inputs, "_running", None)
    with pytest.raises(RuntimeError, match="outside any test"):
        inputs.rng(0)
    monkeypatch.delenv(inputs.SECRET_VARIABLE)
    assert np.array_equal(
        inputs.rng(0).standard_normal(3), np.random.default_rng(0).standard_normal(3)
    )


def test_the_harness_draws_for_the_running_test(monkeypatch, request):
    monkeypatch.setenv(inputs.SECRET_VARIABLE, SECRET)
    here = inputs.rng(0).standard_normal(4)
    assert np.array_equal(
        here, drawn(inputs.identity_of(request.node.path, request.node.name), 0, 4)
    )
    assert not np.array_equal(here, drawn(VISIBLE, 0, 4))


def test_a_tests_identity_is_the_same_wherever_its_folder_lies(tmp_path):
    in_the_repository = inputs.identity_of(
        paths.EXERCISE_TESTS_DIR / "ex04_sharded_layer" / "test_hidden.py", "test_x[2dev]"
    )
    in_a_notebook_cell = inputs.identity_of(
        tmp_path / "shardlab-cell-1" / "ex04_sharded_layer" / "test_hidden.py", "test_x[2dev]"
    )
    assert (
        in_the_repository == in_a_notebook_cell == "ex04_sharded_layer/test_hidden.py::test_x[2dev]"
    )


def test_property_tests_are_seeded_per_test_from_the_secret(monkeypatch):
    monkeypatch.setenv(inputs.SECRET_VARIABLE, SECRET)
    seeds = {}
    for test in [VISIBLE, *HIDDEN]:
        with inputs.drawing_for(test):
            seeds[test] = inputs.property_seed()
            assert inputs.property_seed() == seeds[test]
    assert len(set(seeds.values())) == len(seeds)
    monkeypatch.setenv(inputs.SECRET_VARIABLE, "cd" * 16)
    with inputs.drawing_for(VISIBLE):
        assert inputs.property_seed() != seeds[VISIBLE]


def test_use_secret_draws_a_fresh_one_and_refuses_a_malformed_one(monkeypatch):
    monkeypatch.delenv(inputs.SECRET_VARIABLE, raising=False)
    first = inputs.use_secret()
    assert len(first) == 32 and os.environ[inputs.SECRET_VARIABLE] == first
    assert len(bytes.fromhex(first)) == 16
    monkeypatch.delenv(inputs.SECRET_VARIABLE)
    assert inputs.use_secret() != first
    with pytest.raises(ValueError, match="32 hex digits"):
        inputs.use_secret("abc")


# ex04's visible tests of the four functions' values all draw seed 0 through the same generator; this module
# fails each with the first values of the x it was given, so that each route's results carry what each test
# drew. (Its other visible tests call the functions inside a compiled program, where x has no values.)
CALLING_EAGERLY = (
    "test_layer_auto",
    "test_layer_explicit",
    "test_layer_shard_map",
    "test_layer_feature_sharded",
)
SHOWS_WHAT_IT_DREW = textwrap.dedent("""
    import numpy as np

    def _shown(x, *args):
        raise ValueError("drawn " + repr([round(float(v), 6) for v in np.asarray(x).ravel()[:4]]))

    layer_auto = layer_explicit = layer_shard_map = layer_feature_sharded = _shown
""")


def draws_by_test(results, names=None) -> dict[str, list[float]]:
    """{test: what it drew}, of the tests named (default: all)."""
    found = {
        r.name: re.search(r"drawn (\[[^\]]*\])", r.message)
        for r in results
        if names is None or r.name in names
    }
    assert all(found.values()), {r.name: r.message[:300] for r in results}
    return {name: json.loads(match.group(1)) for name, match in found.items()}


def test_every_route_gives_a_test_the_same_stream_and_no_two_tests_the_same(tmp_path, monkeypatch):
    """A student's check, the isolated grading harness (the module in a confined worker) and a notebook's
    test cell (its files in a folder of its own), all under one secret."""
    monkeypatch.setenv(inputs.SECRET_VARIABLE, SECRET)
    exercise = catalog.get("ex04")
    modules = tmp_path / "modules"
    modules.mkdir()
    (modules / exercise.module_file).write_text(SHOWS_WHAT_IT_DREW)
    visible = exercise.tests_dir() / "test_visible.py"
    checked = runner.run_tests(modules, tests=[visible])
    graded = process.run_pytest_child(
        targets=[str(visible)],
        modules_dir=modules,
        workdir=tmp_path / "grading",
        deadline=time.monotonic() + 300,
        env={inputs.SECRET_VARIABLE: SECRET},
    )
    namespace = {}
    exec(SHOWS_WHAT_IT_DREW, namespace)
    files = {path.name: path.read_text() for path in exercise.support_files()} | {
        visible.name: visible.read_text()
    }
    cell = notebooks.run_tests(exercise.id, files, namespace, points=1.0)
    routes = {
        "check": draws_by_test(checked.results, CALLING_EAGERLY),
        "grading": draws_by_test(graded.results.values(), CALLING_EAGERLY),
        "notebook": draws_by_test(cell.tests, CALLING_EAGERLY),
    }
    expected = routes["check"]
    assert len(expected) == 4, expected
    for route, draws in routes.items():
        assert draws == expected, route
    assert len({tuple(values) for values in expected.values()}) == 4, expected
    # Without the secret, a student's own run draws seed 0's own stream in every test.
    monkeypatch.delenv(inputs.SECRET_VARIABLE)
    own = draws_by_test(runner.run_tests(modules, tests=[visible]).results, CALLING_EAGERLY)
    seed_zero = [
        round(float(v), 6) for v in np.random.default_rng(0).standard_normal(4, dtype=np.float32)
    ]
    assert all(values == seed_zero for values in own.values()), own


# A property test's first examples, reported (no shrinking, which would move them), in two cases of one
# function. (Hypothesis starts from the simplest example; the next ones come from its seed.)
PROPERTY = textwrap.dedent("""
    import pytest
    from hypothesis import Phase, given, settings, strategies as st

    from grader.checks.properties import GRADING

    seen = {}


    @pytest.mark.parametrize("case", ["a", "b"])
    @settings(GRADING, max_examples=5, phases=[Phase.generate])
    @given(n=st.integers(0, 2**62))
    def test_property(case, n):
        seen.setdefault(case, []).append(n)
        if len(seen[case]) >= 5:   # and again when hypothesis replays the failing example
            pytest.fail(f"drawn {seen[case][:5]}")
""")


def test_each_case_of_a_property_test_draws_its_own_examples(tmp_path, monkeypatch):
    def examples():
        return draws_by_test(
            notebooks.run_tests(
                "ex13_comm_costs", {"test_hidden.py": PROPERTY}, {}, points=1.0
            ).tests
        )

    without = examples()
    # a student's own run: hypothesis's derandomized examples, every time
    assert without == examples()
    monkeypatch.setenv(inputs.SECRET_VARIABLE, SECRET)
    graded = examples()
    assert graded == examples() and graded["test_property[a]"] != graded["test_property[b]"], graded
    assert not {tuple(v) for v in without.values()} & {tuple(v) for v in graded.values()}, (
        without,
        graded,
    )
    monkeypatch.setenv(inputs.SECRET_VARIABLE, "cd" * 16)
    assert examples()["test_property[a]"] != graded["test_property[a]"]


def test_grading_runs_the_visible_tests_before_any_hidden_one():
    """A worker that served a hidden test never serves a visible one (its messages reach students early)."""
    listed = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "tests/exercises/ex01_meshes",
            "tests/exercises/ex02_sharding_properties",
            "--impl=reference",
            "--isolate",
            "--collect-only",
            "-q",
            "-p",
            "no:randomly",
        ],
        cwd=paths.REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    ).stdout.splitlines()
    files = [line.split("::")[0].rsplit("/", 1)[-1] for line in listed if "::" in line]
    assert "test_hidden.py" in files and "test_visible.py" in files, listed[-5:]
    assert files.index("test_hidden.py") > max(
        i for i, f in enumerate(files) if f == "test_visible.py"
    )
