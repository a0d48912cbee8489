"""A test's programs as tables: one per compiled program its checks read, built from the program's one account
(grader.core.results.ProgramAccount) and the rules judged on it (RuleFigure), for the terminal, the Markdown of
results.json and the page to draw alike (program_text.py, markdown.py, program_page.py).

A table holds, once: a row per rule (what it measures, the figure it expects in words beside the one the
program executed, a work rule's ratio to its share, the verdict); what one device executed in one run (per kind
of collective and mesh axes its instructions, runs, operands and bytes sent; the multiply-adds of its dots and
of the products written out; XLA's argument, temporary and output bytes); the program's collective instructions
(from a collectives check of it), which only the page lists; and the pictures of its checks that say more than
the table (a pipeline's grid, a permute's pairs, an exchange's buffer), each drawn once.

An older report.json has no accounts and no rules' figures: `program_tables` makes none for it, and its
collectives checks are drawn as they always were (`unplaced_checks`). Text a submission can choose (a
program's name, mesh axes) is already cut where its fact is built; the words made here are cut here."""

from __future__ import annotations

from dataclasses import dataclass

from grader.core.bounds import NAME_CHARS, clipped
from grader.core.results import (
    Collective,
    CollectivesCheck,
    ProgramAccount,
    RuleFigure,
    TestResult,
    Traffic,
)
from grader.reports import executed_facts as ef
from grader.reports.memory_facts import human_bytes

UNKNOWN = "unknown: in a loop with no static trip count"
# a figure of a kind the program does not run (the bytes of its largest all-to-all)
NONE_FOUND = "none in the program"
NOT_REPORTED = "not reported"  # memory the compiler did not report
WORDS_CHARS = 300  # a rule's expected figure in words, at most (an honest one is under 160)
OVER_CHARS = 2 * NAME_CHARS  # the mesh axes a collective runs over, as one cell


def number(value: int | None) -> str:
    return "unknown" if value is None else f"{value:,}"


def byte_words(value: int | None) -> str:
    """8704 -> "8,704 B (8.5 KiB)": exact, and in units a reader takes in at once."""
    if value is None:
        return NOT_REPORTED
    if value < 1024:
        return f"{value:,} B"
    return f"{value:,} B ({human_bytes(value)})"


# -- the rows -------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class RuleRow:
    """One rule judged on the program: its figures as the table writes them."""

    rule: str  # its kind: work, traffic, collectives, memory
    measure: str  # what is counted: "multiply-adds per device"
    expected: str  # the bound in words
    actual: int | None  # what the program executed; None: see `missing`
    passed: bool
    ratio: float | None = None  # a work rule's: the executed figure over the device's share
    missing: str = UNKNOWN  # what a figure of None means for this program

    @property
    def actual_words(self) -> str:
        return self.missing if self.actual is None else f"{self.actual:,}"

    @property
    def ratio_words(self) -> str:
        """ "8.0 x its share", or "" for a rule without a share."""
        return "" if self.ratio is None else f"{self.ratio:.1f} x its share"

    @property
    def executed(self) -> str:
        """The executed figure and, for a work rule, its ratio to the share: "32,769 (4.0 x its share)"."""
        return self.actual_words + (f" ({self.ratio_words})" if self.ratio_words else "")

    @property
    def mark(self) -> str:
        return "pass" if self.passed else "FAIL"


def rule_row(figure: RuleFigure, account: ProgramAccount | None) -> RuleRow:
    return RuleRow(
        figure.rule,
        figure.measure,
        clipped(figure.expected, WORDS_CHARS),
        figure.actual,
        figure.passed,
        figure.ratio,
        _missing(account),
    )


def _missing(account: ProgramAccount | None) -> str:
    """What a rule's figure of None means. Every count that runs in a loop with no static trip count is None;
    so is a figure of a kind the program has none of (the bytes of its largest all-to-all). A program whose
    every figure is known has no such loop: its None is the latter."""
    if account is None or _has_unknown(account):
        return UNKNOWN
    return NONE_FOUND


def _has_unknown(account: ProgramAccount) -> bool:
    figures = [account.dot_work, account.product_work]
    figures += [f for row in account.traffic for f in (row.runs, row.operands, row.sent_bytes)]
    return None in figures


@dataclass(frozen=True)
class TrafficRow:
    """One kind of collective over one set of mesh axes, as one device runs it in one run."""

    kind: str
    over: str  # the mesh axes, in words
    group: str  # devices per group: "4", "pairs" for a permute
    instructions: int
    runs: int | None
    operands: int | None
    sent: int | None  # bytes one device sends

    def cells(self) -> list[str]:
        return [
            self.kind,
            self.over,
            self.group,
            str(self.instructions),
            number(self.runs),
            number(self.operands),
            number(self.sent),
        ]


TRAFFIC_HEADER = ["collective", "over", "group", "instructions", "runs", "operands", "bytes sent"]
RULES_HEADER = ["rule", "expected", "executed", "verdict"]


def over_words(axes: tuple[str, ...] | None) -> str:
    if axes is None:
        return "no mesh axes found"
    return clipped(", ".join(axes), OVER_CHARS, keep_end=True) if axes else "each device alone"


def traffic_row(row: Traffic) -> TrafficRow:
    group = (
        "pairs"
        if row.kind == ef.PERMUTE
        else "?"
        if row.group_size is None
        else str(row.group_size)
    )
    return TrafficRow(
        row.kind,
        over_words(row.axes),
        group,
        row.instructions,
        row.runs,
        row.operands,
        row.sent_bytes,
    )


# -- the table ------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ProgramTable:
    """One program a test's checks read: the rules judged on it and what it executed."""

    what: str  # the program, as the checks name it (and which of several of that name)
    key: str  # its account's key
    rules: tuple[RuleRow, ...]
    account: ProgramAccount | None  # None: the test's report kept the rules but not the account
    checks: tuple[CollectivesCheck, ...]  # the collectives checks of this program, for its pictures

    @property
    def passed(self) -> bool | None:
        """Every rule held; None: no rule judged on it."""
        return all(row.passed for row in self.rules) if self.rules else None

    @property
    def devices(self) -> int | None:
        return self.account.devices if self.account is not None else None

    @property
    def traffic(self) -> list[TrafficRow]:
        return [traffic_row(row) for row in self.account.traffic] if self.account else []

    def caption(self) -> str:
        """What the table holds, after the program's name: "the rules judged on one run of it, and what each
        of its 4 devices executed"."""
        if self.account is None:
            return "the rules judged on one run of it (what it executed was not recorded)"
        devices = self.account.devices
        each = "the one device" if devices == 1 else f"each of its {devices} devices"
        return f"the rules judged on one run of it, and what {each} executed"

    def heading(self) -> str:
        return f"{self.what}: {self.caption()}"

    def work_words(self) -> str | None:
        """ "32,769 (dots and convolutions 32,768, products written out 1)"."""
        if self.account is None:
            return None
        account = self.account
        if account.work is None:
            return UNKNOWN
        return (
            f"{account.work:,} (dots and convolutions {account.dot_work:,}, "
            f"products written out {account.product_work:,})"
        )

    def memory_words(self) -> str | None:
        """ "arguments 8,704 B (8.5 KiB), temporaries 6,148 B (6.0 KiB), outputs 1,024 B (1.0 KiB)"."""
        account = self.account
        if account is None:
            return None
        figures = (account.argument_bytes, account.temp_bytes, account.output_bytes)
        if figures == (None, None, None):
            return NOT_REPORTED
        return ", ".join(
            f"{name} {byte_words(value)}"
            for name, value in zip(("arguments", "temporaries", "outputs"), figures)
        )

    def instructions(self) -> tuple[Collective, ...]:
        """The program's collective instructions, as the check of it that kept the most recorded them."""
        return max((check.found for check in self.checks), key=len, default=())

    def instruction_count(self) -> int | None:
        """How many collective instructions the program has (None: its account was not kept)."""
        if self.account is None:
            return None
        return sum(row.instructions for row in self.account.traffic)


def program_tables(test: TestResult) -> list[ProgramTable]:
    """A table per program the test's checks read, in the order they were first read: each recorded account,
    then any program whose rules were kept but whose account was not (a report cut to fit its share)."""
    accounts = {account.key: account for account in test.programs}
    keys = list(dict.fromkeys([*accounts, *(figure.program for figure in test.figures)]))
    names = {key: accounts[key].what if key in accounts else "a program" for key in keys}
    seen: dict[str, int] = {}
    tables = []
    for key in keys:
        name = names[key]
        seen[name] = seen.get(name, 0) + 1
        same = sum(other == name for other in names.values())
        shown = f"{name} (program {seen[name]} of {same} of that name)" if same > 1 else name
        account = accounts.get(key)
        tables.append(
            ProgramTable(
                shown,
                key,
                tuple(rule_row(f, account) for f in test.figures if f.program == key),
                account,
                tuple(check for check in test.collectives if check.program == key),
            )
        )
    return tables


def unplaced_checks(test: TestResult) -> list[CollectivesCheck]:
    """The collectives checks no table holds: every check of an older report.json (no accounts), drawn as
    such checks always were."""
    keys = {table.key for table in program_tables(test)}
    return [check for check in test.collectives if check.program not in keys]


# -- the pictures a table's checks add ------------------------------------------------------------------------


@dataclass(frozen=True)
class Pictures:
    """What a program's checks add to its table, each once: the pipelines they expect, the pairs they expect
    (or, when none does, the pairs found), and the exchanges beside their buffers."""

    pipelines: tuple[ef.PipelineFigures, ...]
    pairs: tuple[ef.PairFigures, ...]
    exchanges: tuple[tuple[ef.ExchangeRow, ...], ...]


def pictures(table: ProgramTable) -> Pictures:
    pipelines = [ef.pipeline_figures(check, table.account) for check in table.checks]
    expecting = [check for check in table.checks if check.expected_pairs is not None]
    widest = [max(table.checks, key=lambda check: len(check.found))] if table.checks else []
    pairs = [ef.pair_figures(check) for check in expecting or widest]
    exchanges = [ef.exchange_rows(check) for check in table.checks]
    return Pictures(
        tuple(dict.fromkeys(p for p in pipelines if p is not None)),
        tuple(dict.fromkeys(p for p in pairs if p is not None)),
        tuple(dict.fromkeys(tuple(rows) for rows in exchanges if rows is not None)),
    )
