"""What the executed facts' pictures cost: one test's feedback.html (bytes, milliseconds to render in memory)
and its results.json Markdown (characters), for an honest test and a hostile one, the facts built by hand as
grader.checks.executed records them: each program's account and rules' figures (its one table, under which
its checks' pictures are drawn once) beside the checks.

honest: a pipeline check (4 stages, 6 microbatches, 11 sends) and a ring check (3 of 4 pairs, one extra) of
one program.
hostile: a pipeline of a billion sends whose permute has 1,024 pairs (bounds.MAX_PAIRS), none of them the
1,024 expected, and 240 all-to-alls with a buffer to be set beside, two programs. Run with a checkout's
grader on PYTHONPATH to measure that checkout (before/after: one without the accounts draws each check as
it did).

    python bench/executed_pictures.py
"""

from __future__ import annotations

import dataclasses
import time

from grader.core import results as r
from grader.core.results import (
    Collective,
    CollectivesCheck,
    PipelineSchedule,
    TestResult,
)
from grader.course import catalog
from grader.grading.results import GradingResults, score_exercise
from grader.reports import feedback_page, markdown

PERMUTE = "collective-permute"
CHAIN = ((0, 1), (1, 2), (2, 3))
CYCLE = (*CHAIN, (3, 0))
BIG_RING = tuple((i, (i + 1) % 1024) for i in range(1024))
ACCOUNTS = getattr(r, "ProgramAccount", None) is not None
PIPE, EXCHANGE = "0badc0de0badc0de", "e5c4a46e00000000"


def permute(pairs, executed: int) -> Collective:
    return Collective(
        PERMUTE, 2, ("stage",), "cp = f32[8] collective-permute(x)", executed, False, pairs
    )


def keyed(check: CollectivesCheck, key: str) -> CollectivesCheck:
    return dataclasses.replace(check, program=key) if ACCOUNTS else check


def accounted(test: TestResult, programs: dict[str, tuple]) -> TestResult:
    """The test with an account per program (key: (kind, runs, instructions)) and a rule on each."""
    if not ACCOUNTS:
        return test
    accounts = [
        r.ProgramAccount(
            "your function",
            key,
            4,
            (r.Traffic(kind, ("stage",), 2, instructions, runs, runs, 2048 * runs, 2048 * runs),),
            8192,
            0,
        )
        for key, (kind, runs, instructions) in programs.items()
    ]
    figures = [
        r.RuleFigure(key, "collectives", f"{kind} runs", "exactly 8", runs, runs == 8, 8)
        for key, (kind, runs, _) in programs.items()
    ]
    return dataclasses.replace(test, programs=accounts, figures=figures)


def one_test(*checks: CollectivesCheck) -> TestResult:
    return TestResult(
        nodeid="tests/exercises/ex10/test_visible.py::test_x",
        exercise="ex10",
        hidden=False,
        weight=1.0,
        category="failed",
        message="m",
        duration=0.5,
        collectives=list(checks),
    )


CASES = {
    "honest": accounted(
        one_test(
            keyed(
                CollectivesCheck(
                    "p", (permute(CHAIN, 11),), False, rule="r", schedule=PipelineSchedule(4, 6)
                ),
                PIPE,
            ),
            keyed(
                CollectivesCheck(
                    "r", (permute((*CHAIN, (1, 3)), 3),), False, rule="r", expected_pairs=CYCLE
                ),
                PIPE,
            ),
        ),
        {PIPE: (PERMUTE, 11, 1)},
    ),
    "hostile": accounted(
        one_test(
            keyed(
                CollectivesCheck(
                    "p",
                    (permute(BIG_RING, 10**9),),
                    False,
                    rule="r",
                    schedule=PipelineSchedule(4, 6),
                    expected_pairs=tuple((b, a) for a, b in BIG_RING),
                ),
                PIPE,
            ),
            keyed(
                CollectivesCheck(
                    "a",
                    tuple(
                        Collective(
                            "all-to-all", 4, ("e",), "a", 1, False, (), ((4, 8, 16),) * 16, 2048
                        )
                        for _ in range(240)
                    ),
                    False,
                    rule="r",
                    buffer_bytes=1024,
                ),
                EXCHANGE,
            ),
        ),
        {PIPE: (PERMUTE, 10**9, 1), EXCHANGE: ("all-to-all", 240, 240)},
    ),
}


def main() -> None:
    exercise = catalog.get("ex10")
    for name, test in CASES.items():
        results = GradingResults("alice", {exercise.id: score_exercise(exercise, [test])})
        start = time.perf_counter()
        page = feedback_page.feedback_page(results)
        took = time.perf_counter() - start
        print(
            f"{name}: feedback.html {len(page.encode())} bytes in {took * 1e3:.0f} ms; "
            f"Markdown {len(markdown.test_output(test))} characters"
        )


if __name__ == "__main__":
    main()
