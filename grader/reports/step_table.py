"""The collectives a training step runs, on the page: per program checked, a row per kind of collective a
rule names or that ran, its expected count per step beside the one counted, and the rule's verdict."""

from __future__ import annotations

from grader.core.results import CollectivesCheck
from grader.reports import executed_facts as ef
from grader.reports.html import Markup, element


def _row(row: ef.StepRow) -> Markup:
    verdict = {True: "verdict-pass", False: "verdict-fail", None: "note"}[row.passed]
    return element(
        "tr",
        element("td", row.kind),
        element("td", row.expected),
        element("td", row.actual_words, class_="num" if row.actual is not None else "note"),
        element("td", {True: "✓ held", False: "✗ not held", None: "-"}[row.passed], class_=verdict),
        class_="step-row" + {True: " held", False: " failed", None: ""}[row.passed],
        data_kind=row.kind,
        data_actual="unknown" if row.actual is None else row.actual,
    )


def step_figures(checks: list[CollectivesCheck]) -> list[Markup]:
    """A table per program whose checks carry executed rules; none for the others."""
    head = element(
        "tr",
        element("th", "collective"),
        element("th", "expected"),
        element("th", "executed", class_="num"),
        element("th", "rule"),
    )
    return [
        element(
            "figure",
            element("figcaption", f"collectives per {table.per}: one run of {table.what}"),
            element(
                "div",
                element(
                    "table",
                    element("thead", head),
                    element("tbody", [_row(row) for row in table.rows]),
                    class_="steps",
                ),
                class_="wide",
            ),
            class_="step-check",
            data_what=table.what,
            data_per=table.per,
        )
        for table in ef.step_tables(checks)
    ]
