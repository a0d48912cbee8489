"""Which tests an exercise has, with each test's points weight and visibility, without running any:
pytest's collection in a child process (collection imports the tests, never a submission's code)."""

from __future__ import annotations

import tempfile
import time
from pathlib import Path

from grader.core.errors import ShardlabError
from grader.core.results import TestMeta
from grader.course import catalog
from grader.grading import process

COLLECT_SECONDS = 120.0


class GradingError(ShardlabError, RuntimeError):
    """Grading itself failed (not the submission): the tests could not even be collected."""


def collect_tests(
    exercises: list[catalog.Exercise] | None = None, *, visible_only: bool = False
) -> list[TestMeta]:
    """Every test's metadata (nodeid, exercise, hidden, slow, weight, limit), in collection order."""
    exercises = exercises or list(catalog.EXERCISES)
    with tempfile.TemporaryDirectory(prefix="shardlab-collect-") as tmp:
        modules = Path(tmp) / "modules"
        modules.mkdir()
        outcome = process.run_pytest_child(
            targets=[str(e.tests_dir()) for e in exercises],
            modules_dir=modules,
            workdir=Path(tmp),
            collect_only=True,
            visible_only=visible_only,
            deadline=time.monotonic() + COLLECT_SECONDS,
        )
    if outcome.collected is None:
        raise GradingError("the exercise tests could not be collected:\n" + outcome.output[-3000:])
    return outcome.collected
