"""A test's program tables (program_facts.py) on the page: per program a figure holding a row per rule (its
expected figure beside the executed one, a work rule's ratio to its share, the verdict; a failing row tinted),
what each device executed (its collectives by kind and mesh axes, its multiply-adds, its memory), its collective
instructions folded away in a <details>, and the pictures its checks add (a pipeline's grid, a permute's
rings, an exchange's buffer). Every row carries its figures as data attributes, for the tests."""

from __future__ import annotations

from grader.reports import executed_facts as ef, program_facts as pf
from grader.reports.html import Markup, element
from grader.reports.ring_picture import ring_figure
from grader.reports.schedule_picture import schedule_figure


def _verdict(passed: bool) -> Markup:
    return element(
        "td",
        "✓ held" if passed else "✗ not held",
        class_="verdict-pass" if passed else "verdict-fail",
    )


def _rule_row(row: pf.RuleRow) -> Markup:
    return element(
        "tr",
        element("td", row.measure),
        element("td", row.expected, class_="words"),
        element(
            "td",
            row.actual_words,
            element("span", f" ({row.ratio_words})", class_="ratio") if row.ratio_words else None,
            class_="executed" if row.actual is not None else "executed note",
        ),
        _verdict(row.passed),
        class_="rule-row " + ("held" if row.passed else "failed"),
        data_rule=row.rule,
        data_measure=row.measure,
        data_actual="unknown" if row.actual is None else row.actual,
        data_ratio=None if row.ratio is None else f"{row.ratio:.2f}",
    )


def rules_table(program: pf.ProgramTable) -> Markup:
    if not program.rules:
        return element(
            "p",
            "No rule was judged on its figures (the test's message says what it checked).",
            class_="note",
        )
    head = element("tr", [element("th", name) for name in pf.RULES_HEADER])
    return element(
        "table",
        element("thead", head),
        element("tbody", [_rule_row(row) for row in program.rules]),
        class_="rules",
    )


def _traffic_row(row: pf.TrafficRow) -> Markup:
    cells = row.cells()
    return element(
        "tr",
        [
            element("td", cell, class_="num" if i >= 2 else "words" if i == 1 else None)
            for i, cell in enumerate(cells)
        ],
        class_="traffic-row",
        data_kind=row.kind,
        data_runs="unknown" if row.runs is None else row.runs,
        data_sent="unknown" if row.sent is None else row.sent,
    )


def executed_part(program: pf.ProgramTable) -> list[Markup]:
    """What each device executed in one run; nothing for a program whose account was not kept."""
    if program.account is None:
        return []
    if program.traffic:
        head = element(
            "tr",
            [
                element("th", name, class_="num" if i >= 2 else None)
                for i, name in enumerate(pf.TRAFFIC_HEADER)
            ],
        )
        collectives = element(
            "table",
            element("thead", head),
            element("tbody", [_traffic_row(row) for row in program.traffic]),
            class_="traffic",
        )
    else:
        collectives = element("p", "collectives: none", class_="note")
    account = program.account
    return [
        collectives,
        element(
            "dl",
            element("dt", "multiply-adds"),
            element(
                "dd",
                program.work_words(),
                data_work="unknown" if account.work is None else account.work,
            ),
            element("dt", "memory"),
            element("dd", program.memory_words()),
            class_="executed",
        ),
    ]


def instructions(program: pf.ProgramTable) -> Markup | None:
    """The program's collective instructions as compiled (its HLO lines), each with how many times it runs,
    folded away; None for a program without any."""
    found = program.instructions()
    total = program.instruction_count()
    if not found:
        return None
    cut = (
        f" (the first {len(found)} of {total}: the rest did not fit in the report)"
        if total is not None and total > len(found)
        else ""
    )
    lines = [
        f"{ef.executed_words(c.executed, c.unknown_trip_count)}: {c.line}"
        if c.executed is not None or c.unknown_trip_count
        else c.line
        for c in found
    ]
    return element(
        "details",
        element(
            "summary",
            f"its {len(found)} collective instruction{'' if len(found) == 1 else 's'}, as compiled "
            f"(HLO){cut}",
        ),
        element("pre", "\n".join(lines)),
        class_="instructions",
        data_count=len(found),
    )


def exchange_table(rows: tuple[ef.ExchangeRow, ...] | list[ef.ExchangeRow]) -> Markup:
    """Each all-to-all's operands beside the buffer the capacity gives (both per device)."""
    head = element(
        "tr",
        element("th", "all-to-all operand shapes"),
        element("th", "bytes", class_="num"),
        element("th", "buffer at the capacity", class_="num"),
        element("th", "ratio", class_="num"),
    )
    body = [
        element(
            "tr",
            element("td", row.shape_words or "?"),
            element("td", "?" if row.bytes is None else row.bytes, class_="num"),
            element("td", row.buffer, class_="num"),
            element("td", row.ratio, class_="num"),
            class_="exchange",
        )
        for row in rows
    ] or [element("tr", element("td", "no all-to-all in the compiled program", colspan=4))]
    return element(
        "figure",
        element("figcaption", "what each all-to-all moves per device, beside its buffer"),
        element("table", element("thead", head), element("tbody", body), class_="exchange"),
        class_="exchange-check",
    )


def picture_figures(program: pf.ProgramTable) -> list[Markup]:
    drawn = pf.pictures(program)
    return (
        [schedule_figure(pipeline) for pipeline in drawn.pipelines]
        + [ring_figure(pairs) for pairs in drawn.pairs]
        + [exchange_table(rows) for rows in drawn.exchanges]
    )


def program_figure(program: pf.ProgramTable) -> Markup:
    """One program's table, its instructions and its pictures."""
    passed = program.passed
    return element(
        "figure",
        element("figcaption", element("strong", program.what), f": {program.caption()}"),
        element("div", rules_table(program), executed_part(program), class_="wide"),
        instructions(program),
        picture_figures(program),
        class_="program-check",
        data_program=program.key,
        data_what=program.what,
        data_passed="null" if passed is None else str(passed).lower(),
    )
