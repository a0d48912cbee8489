"""Markdown for Gradescope's results.json ("output_format": "md"): text from elsewhere kept as text, verbatim
blocks no text can close, tables no cell can break, and a test's verdict and facts written with them.

Gradescope renders the Markdown and sanitizes the HTML it makes; escaping here keeps what a student wrote
(a file name, an exception message, a mesh axis name) from becoming a link, an image, a heading or markup
at all. Text from elsewhere goes through `printable` before it is escaped.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence

from grader.core.results import CollectivesCheck, Layout, LayoutCheck, SpeedFigures, TestResult
from grader.reports import program_facts as pf
from grader.reports.executed_text import check_lines
from grader.reports.memory_facts import memory_lines
from grader.reports.program_text import picture_lines
from grader.reports.text import feedback, printable

# ASCII punctuation to which Markdown (CommonMark, GFM tables and strikethrough, math, autolinks, emoji)
# gives a meaning; a backslash makes each literal. < > & become entities: HTML, autolinks, entities.
_SPECIAL = re.compile(r"([\\`*_{}\[\]()#+\-.!|~:$^=])")
_LINE_BREAK = re.compile(r"\r\n?|\n")
_BACKTICKS = re.compile(r"`+")
_BARE_PIPE = re.compile(r"(?<!\\)((?:\\\\)*)\|")  # a | that the backslashes before it do not escape


# -- syntax ----------------------------------------------------------------------------------------


def text(value: str) -> str:
    """`value` as literal inline Markdown on one line: printable, and whatever would be syntax escaped."""
    value = _LINE_BREAK.sub(" ", printable(value))
    value = value.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    return _SPECIAL.sub(r"\\\1", value)


def code_block(value: str) -> str:
    """`value` verbatim in a fenced code block: monospace, nothing in it interpreted. The fence is longer
    than any run of backticks in `value`, so no line of it can close the block early."""
    value = _LINE_BREAK.sub("\n", printable(value)).strip("\n")
    longest = max((len(run) for run in _BACKTICKS.findall(value)), default=0)
    fence = "`" * max(3, longest + 1)
    return f"{fence}\n{value}\n{fence}"


def _cell(value: str) -> str:
    """On one line, and every | escaped: a cell can neither end early nor start a row."""
    return _BARE_PIPE.sub(r"\1\\|", _LINE_BREAK.sub(" ", value)).strip() or " "


def table(header: Sequence[str], rows: Iterable[Sequence[str]]) -> str:
    """A GFM table. Cells are Markdown: text from elsewhere goes through `text` first."""
    lines = ["| " + " | ".join(map(_cell, header)) + " |", "|" + "---|" * len(header)]
    for row in rows:
        if len(row) != len(header):
            raise ValueError(f"a row of {len(row)} cells in a table of {len(header)} columns")
        lines.append("| " + " | ".join(map(_cell, row)) + " |")
    return "\n".join(lines)


def bullet_list(items: Iterable[str]) -> str:
    """One item per line. Items are Markdown (see `text`), kept on one line."""
    return "\n".join(f"- {_LINE_BREAK.sub(' ', item)}" for item in items)


# -- a test's facts --------------------------------------------------------------------------------


def _layout(layout: Layout | None) -> str:
    return "not a jax.Array" if layout is None else layout.describe()


def layout_lines(checks: Iterable[LayoutCheck]) -> str:
    """One line per failed sharding check: what the grid in its message draws, as specs and meshes."""
    return bullet_list(
        f"{text(check.name)}: expected {text(_layout(check.expected))}, "
        f"actual {text(_layout(check.actual))}"
        for check in checks
        if not check.passed
    )


def _rule_asks(check: CollectivesCheck, op: str) -> str:
    asks = [f"exactly {check.exactly.get(op, 0)}"] if check.exactly is not None else []
    asks += ["at least 1"] * (op in check.present) + ["none"] * (op in check.absent)
    if check.only is not None:
        asks.append("allowed" if op in check.only else "not allowed")
    # a rule of the executed program is in words, in the block below the table
    return "; ".join(asks) or ("the rule below" if check.rule is not None else "any")


_HELD = {
    True: "the rule held",
    False: "the rule did not hold",
    None: "judged by the test (see above)",
}


def collectives_table(check: CollectivesCheck) -> str:
    """One row per kind of collective found or named by the rule: how many, along which groups, and what
    the rule asks of that kind. HLO lines stay out: too long for a table (report.json has them)."""
    rows = []
    for op in dict.fromkeys(
        [c.op for c in check.found] + [*(check.exactly or {}), *check.present, *check.absent]
    ):
        found = [c for c in check.found if c.op == op]
        sizes = dict.fromkeys(str(c.group_size) for c in found if c.group_size is not None)
        axes = dict.fromkeys(", ".join(map(text, c.mesh_axes)) for c in found if c.mesh_axes)
        rows.append(
            [
                text(op),
                str(len(found)),
                ", ".join(sizes) or "-",
                " / ".join(axes) or ("not recorded" if found else "-"),
                _rule_asks(check, op) if check.passed is not None else "-",
            ]
        )
    caption = f"**Collectives of {text(check.what)}**: {_HELD[check.passed]}"
    # the executed facts (a pipeline's grids, a permute's pairs, an exchange's bytes) as the terminal shows them
    drawn = "\n\n" + code_block("\n".join(lines)) if (lines := check_lines(check)) else ""
    if not rows:
        return f"{caption}; none found.{drawn}"
    return (
        caption
        + "\n\n"
        + table(["collective", "found", "group size", "mesh axes", "rule asks"], rows)
        + drawn
    )


MEMORY_WIDTH = 80  # columns of the memory bars in a code block


def program_table(program: pf.ProgramTable) -> str:
    """One program a test's checks read: a row per rule judged on it, its expected figure beside the executed
    one; then what each device executed (its collectives by kind and mesh axes, its multiply-adds, its
    memory); then the pictures its checks add, as the terminal draws them. Its HLO lines stay out: too long
    for a table (report.json and the page have them)."""
    parts = [f"**{text(program.what)}**: {text(program.caption())}"]
    if program.rules:
        parts.append(
            table(
                pf.RULES_HEADER,
                [
                    [text(row.measure), text(row.expected), text(row.executed), row.mark]
                    for row in program.rules
                ],
            )
        )
    else:
        parts.append("No rule was judged on its figures (the test's message says what it checked).")
    if program.account is not None:
        if program.traffic:
            parts.append(
                table(pf.TRAFFIC_HEADER, [list(map(text, row.cells())) for row in program.traffic])
            )
        else:
            parts.append("Collectives: none.")
        parts.append(
            f"{text('Multiply-adds')}: {text(program.work_words() or '')}\n\n"
            f"Memory: {text(program.memory_words() or '')}"
        )
    if lines := picture_lines(program):
        parts.append(code_block("\n".join(lines)))
    return "\n\n".join(parts)


def speed_table(fig: SpeedFigures) -> str:
    low, high = fig.spread
    met = ("yes" if fig.met else "no") + (f" ({text(fig.policy)})" if fig.policy else "")
    calibration = f"{fig.calibration:.2f}x" if fig.calibration is not None else "-"
    return f"**Speed: {text(fig.label)}**\n\n" + table(
        ["speedup", "IQR", "threshold", "met", "calibration", "repeats", "devices / cores"],
        [
            [
                f"{fig.speedup:.2f}x",
                f"{low:.2f}-{high:.2f}",
                f"{fig.threshold:.2f}x",
                met,
                calibration,
                str(fig.repeats),
                f"{fig.devices} devices on {fig.cores} cores ({text(fig.platform)})",
            ]
        ],
    )


def test_output(test: TestResult) -> str:
    """What a student reads about one test: its verdict (`feedback`) in a code block, so that the layout
    grids of sharding messages stay monospace, then what its checks recorded. A bare verdict ("passed")
    stays a word."""
    verdict = feedback(test)
    parts = [verdict if verdict == str(test.category) else code_block(verdict)]
    if any(not check.passed for check in test.layouts):
        parts.append(layout_lines(test.layouts))
    parts += [program_table(program) for program in pf.program_tables(test)]
    parts += [collectives_table(check) for check in pf.unplaced_checks(test)]
    parts += [code_block("\n".join(memory_lines(check, MEMORY_WIDTH))) for check in test.memory]
    if test.speedup:
        parts.append(speed_table(test.speedup))
    return "\n\n".join(parts)


test_output.__test__ = False  # not a pytest test, wherever it is imported
