"""The tests' inputs: the seeds' own streams in a student's run, unforeseeable while grading."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

from grader.checks import inputs
from grader.course import paths


def test_without_a_secret_a_seed_gives_its_own_stream(monkeypatch):
    monkeypatch.delenv(inputs.SECRET_VARIABLE, raising=False)
    assert inputs.grading_secret() is None
    assert np.array_equal(inputs.rng(3).standard_normal(5), np.random.default_rng(3).standard_normal(5))


def test_a_secret_changes_every_stream_and_only_the_secret_reproduces_it(monkeypatch):
    monkeypatch.setenv(inputs.SECRET_VARIABLE, "ab" * 16)
    drawn = {seed: inputs.rng(seed).standard_normal(8) for seed in range(10)}
    assert np.array_equal(drawn[4], inputs.rng(4).standard_normal(8))   # the same within one grading
    for seed in range(10):   # nothing a student can compute from the seeds alone
        assert not any(np.allclose(drawn[seed], np.random.default_rng(s).standard_normal(8)) for s in range(100))
    monkeypatch.setenv(inputs.SECRET_VARIABLE, "cd" * 16)
    assert not np.allclose(drawn[4], inputs.rng(4).standard_normal(8))


def test_use_secret_draws_a_fresh_one_and_refuses_a_malformed_one(monkeypatch):
    monkeypatch.delenv(inputs.SECRET_VARIABLE, raising=False)
    first = inputs.use_secret()
    assert len(first) == 32 and inputs.grading_secret() == int(first, 16)
    monkeypatch.delenv(inputs.SECRET_VARIABLE)
    assert inputs.use_secret() != first
    with pytest.raises(ValueError, match="32 hex digits"):
        inputs.use_secret("abc")


def test_grading_runs_the_visible_tests_before_any_hidden_one():
    """A worker that served a hidden test never serves a visible one (its messages reach students early)."""
    listed = subprocess.run(
        [sys.executable, "-m", "pytest", "tests/exercises/ex01_meshes", "tests/exercises/ex02_sharding_properties",
         "--impl=reference", "--isolate", "--collect-only", "-q", "-p", "no:randomly"],
        cwd=paths.REPO_ROOT, capture_output=True, text=True, timeout=300).stdout.splitlines()
    files = [line.split("::")[0].rsplit("/", 1)[-1] for line in listed if "::" in line]
    assert "test_hidden.py" in files and "test_visible.py" in files, listed[-5:]
    assert files.index("test_hidden.py") > max(i for i, f in enumerate(files) if f == "test_visible.py")
