"""What a training step's pictures cost: one test's feedback.html (bytes, milliseconds to render in memory), its
results.json Markdown (characters) and its terminal text (lines, at 100 columns), the facts built by hand as
grader.checks.executed records them: the program's account, a figure per rule judged on it (the program's one
table) and the collectives checks beside them.

honest: ZeRO-1's two once-per-leaf rules (a reduce-scatter and an all-gather of 3 leaves, one leaf short) on
one program, and a remat memory check beside the reference without remat.
hostile: every cap at once: MAX_PROGRAMS accounts of MAX_TRAFFIC_ROWS rows, MAX_RULE_FIGURES rules of the
longest words a check writes, 240 collectives of every kind, and the test's memory checks at their caps
(bounds.MAX_FIGURES checks of MAX_FIGURES labels of NAME_CHARS characters); the test keeps what fits in its
share. Run with a checkout's grader on PYTHONPATH to measure that checkout: one without the accounts
(ProgramAccount, RuleFigure) renders the same checks without them, as it would have.

    python bench/step_pictures.py
"""

from __future__ import annotations

import io
import time

from rich.console import Console

from grader.commands import student
from grader.core import bounds, results as r
from grader.course import catalog
from grader.grading.results import GradingResults, score_exercise
from grader.reports import feedback_page, markdown

KINDS = ("all-reduce", "all-gather", "reduce-scatter", "collective-permute", "all-to-all")
ACCOUNTS = getattr(r, "ProgramAccount", None) is not None
KEY = "5e7ab1c2d3e4f506"


def op(kind: str, operands: int) -> r.Collective:
    return r.Collective(kind, 4, ("data",), f"{kind}(x)", 1, False, (), ((16,),) * operands, 64)


def rule_check(found, kind: str, actual: int, leaves: int, key: str = KEY) -> r.CollectivesCheck:
    figures = {"executed_rule": r.ExecutedRule(kind, leaves, leaves, True, actual, per="step")}
    return r.CollectivesCheck(
        "your train step",
        found,
        actual == leaves,
        rule=f"{kind} runs",
        **figures,
        **({"program": key} if ACCOUNTS else {}),
    )


def account(key: str, rows) -> r.ProgramAccount:
    return r.ProgramAccount(
        "your train step", key, 4, tuple(rows), 12_288, 256, 12_288, 40_000, 4_096
    )


def figure(key: str, kind: str, actual: int, leaves: int, words: str) -> r.RuleFigure:
    return r.RuleFigure(
        key, "collectives", f"{kind} operands run", words, actual, actual == leaves, leaves
    )


def one_test(checks, memory, programs=(), figures=()) -> r.TestResult:
    return r.TestResult(
        nodeid="tests/exercises/ex10/test_visible.py::test_x",
        exercise="ex10",
        hidden=False,
        weight=1.0,
        category="failed",
        message="m",
        duration=0.5,
        collectives=list(checks),
        memory=list(memory),
        **({"programs": list(programs), "figures": list(figures)} if ACCOUNTS else {}),
    )


def memory(labels: dict[str, int]):
    return r.MemoryCheck("your block", 12_288, 4_096, 40_000, False, 16_384, 32_768, labels)


def cases() -> dict[str, r.TestResult]:
    zero = (op("reduce-scatter", 3), op("all-gather", 2), op("all-reduce", 1))
    many = tuple(op(KINDS[i % 5], 16) for i in range(240))
    big = {f"{i}" + "x" * 198: 10**9 * i for i in range(8)}
    honest = [("reduce-scatter", 3), ("all-gather", 2)]
    if ACCOUNTS:
        rows = [r.Traffic(kind, ("data",), 4, 1, 1, n, 64 * n, 48 * n) for kind, n in honest]
        keys = [f"{i:016x}" for i in range(bounds.MAX_PROGRAMS)]
        wide = [
            r.Traffic(KINDS[i % 5], ("x" * bounds.NAME_CHARS,), 4, 1, i, i, i, i)
            for i in range(bounds.MAX_TRAFFIC_ROWS)
        ]
        programs = {
            "honest": (
                [account(KEY, rows)],
                [figure(KEY, k, n, 3, "exactly 3 per step") for k, n in honest],
            ),
            "hostile": (
                [account(key, wide) for key in keys],
                [
                    figure(keys[i % len(keys)], KINDS[i % 5], i, 7, "w" * bounds.LINE_CHARS)
                    for i in range(bounds.MAX_RULE_FIGURES)
                ],
            ),
        }
    else:
        programs = {"honest": ((), ()), "hostile": ((), ())}
    return {
        "honest": one_test(
            [rule_check(zero, kind, n, 3) for kind, n in honest],
            [memory({"the reference without remat": 90_000})],
            *programs["honest"],
        ),
        "hostile": one_test(
            [rule_check(many, KINDS[i % 5], i, 7) for i in range(40)],
            [memory(big)] * 8,
            *programs["hostile"],
        ),
    }


def main() -> None:
    exercise = catalog.get("ex10")
    for name, test in cases().items():
        results = GradingResults("alice", {exercise.id: score_exercise(exercise, [test])})
        start = time.perf_counter()
        page = feedback_page.feedback_page(results)
        took = time.perf_counter() - start
        console = Console(record=True, width=100, file=io.StringIO())
        student.render_test(test, console)
        lines = console.export_text().count("\n")
        print(
            f"{name}: feedback.html {len(page.encode())} bytes in {took * 1e3:.0f} ms; "
            f"Markdown {len(markdown.test_output(test))} characters; terminal {lines} lines; "
            f"report.json test {len(str(test.to_dict()))} characters"
        )


if __name__ == "__main__":
    main()
