"""The result of one test, as every layer sees it: the harness records it, the grading process scores it,
the reports write it."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Any


class Category(StrEnum):
    PASSED = "passed"
    FAILED = "failed"              # an assertion about the student's result
    ERROR = "error"                # student code raised
    TIMEOUT = "timeout"
    CRASHED = "crashed"            # the process died: exit, segfault, out of memory
    NOT_ATTEMPTED = "not attempted"
    SKIPPED = "skipped"


@dataclass
class TestResult:
    nodeid: str
    exercise: str
    hidden: bool
    weight: float                 # the test's share of its exercise (see grader.harness.pytest_plugin)
    category: str                 # a grader.harness.outcomes.Category value
    message: str = ""             # what the student should see
    duration: float = 0.0
    speedup: dict[str, Any] | None = None   # the timing figures of a speedup test
    output: str = ""              # what the student's code printed during the test, truncated
    score: float = 0.0
    max_score: float = 0.0

    __test__ = False   # not a pytest test class

    @property
    def name(self) -> str:
        """"test_hidden.py::test_layer_auto_values[4dev]" -> "test_layer_auto_values[4dev]"."""
        return self.nodeid.rsplit("::", 1)[-1]

    @property
    def passed(self) -> bool:
        return self.category == Category.PASSED

    @property
    def earns(self) -> bool:
        """It earns its share: passed, or skipped by policy or platform (see score_exercise)."""
        return self.category in (Category.PASSED, Category.SKIPPED)
