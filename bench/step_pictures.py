"""What a training step's pictures cost: one test's feedback.html (bytes, milliseconds to render in memory)
and its results.json Markdown (characters), the facts built by hand as grader.checks.executed records them.

honest: ZeRO-1's two once-per-leaf rules (a reduce-scatter and an all-gather of 3 leaves, one leaf short)
and a remat memory check beside the reference without remat.
hostile: 40 rules on one program whose 240 collectives are every kind, and the test's memory checks at
their caps (bounds.MAX_FIGURES checks of MAX_FIGURES labels of NAME_CHARS characters).
Run with a checkout's grader on PYTHONPATH to measure that checkout: one without the figures
(ExecutedRule, MemoryCheck) renders the same checks without them, as it would have. The checkout
before them: `git archive f606988 grader | tar -x -C /tmp/before`, then PYTHONPATH=/tmp/before.

    python bench/step_pictures.py
"""

from __future__ import annotations

import time

from grader.core import results as r
from grader.course import catalog
from grader.grading.results import GradingResults, score_exercise
from grader.reports import feedback_page, markdown

KINDS = ("all-reduce", "all-gather", "reduce-scatter", "collective-permute", "all-to-all")
FIGURES = getattr(r, "ExecutedRule", None) is not None


def op(kind: str, operands: int) -> r.Collective:
    return r.Collective(kind, 4, ("data",), f"{kind}(x)", 1, False, (), ((16,),) * operands, 64)


def rule_check(found, kind: str, actual: int, leaves: int) -> r.CollectivesCheck:
    figures = (
        {"executed_rule": r.ExecutedRule(kind, leaves, leaves, True, actual, per="step")}
        if FIGURES
        else {}
    )
    return r.CollectivesCheck(
        "your train step", found, actual == leaves, rule=f"{kind} runs", **figures
    )


def one_test(checks, memory) -> r.TestResult:
    return r.TestResult(
        nodeid="tests/exercises/ex10/test_visible.py::test_x",
        exercise="ex10",
        hidden=False,
        weight=1.0,
        category="failed",
        message="m",
        duration=0.5,
        collectives=list(checks),
        **({"memory": list(memory)} if FIGURES else {}),
    )


def memory(labels: dict[str, int]):
    return r.MemoryCheck("your block", 12_288, 4_096, 40_000, False, 16_384, 32_768, labels)


def cases() -> dict[str, r.TestResult]:
    zero = (op("reduce-scatter", 3), op("all-gather", 2), op("all-reduce", 1))
    many = tuple(op(KINDS[i % 5], 16) for i in range(240))
    big = {f"{i}" + "x" * 198: 10**9 * i for i in range(8)}
    return {
        "honest": one_test(
            [rule_check(zero, "reduce-scatter", 3, 3), rule_check(zero, "all-gather", 2, 3)],
            [memory({"the reference without remat": 90_000})] if FIGURES else [],
        ),
        "hostile": one_test(
            [rule_check(many, KINDS[i % 5], i, 7) for i in range(40)],
            [memory(big)] * 8 if FIGURES else [],
        ),
    }


def main() -> None:
    exercise = catalog.get("ex10")
    for name, test in cases().items():
        results = GradingResults("alice", {exercise.id: score_exercise(exercise, [test])})
        start = time.perf_counter()
        page = feedback_page.feedback_page(results)
        took = time.perf_counter() - start
        print(
            f"{name}: feedback.html {len(page.encode())} bytes in {took * 1e3:.0f} ms; "
            f"Markdown {len(markdown.test_output(test))} characters; "
            f"report.json test {len(str(test.to_dict()))} characters"
        )


if __name__ == "__main__":
    main()
