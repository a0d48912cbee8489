"""What a memory check (grader.checks.executed.assert_memory) shows: XLA's bytes per device of the compiled
program as bars, each bound as a marker, the figures the test set beside them as bars of their own; and
the same as text bars for the terminal and the Markdown of results.json.

Every bar is scaled to the largest figure shown (a bound included), so no bar or marker passes the end of
its box, and a figure of 0 bytes draws an empty bar, never a division by zero."""

from __future__ import annotations

import textwrap
from dataclasses import dataclass

from grader.core.results import MemoryCheck
from grader.reports.text import printable

_UNITS = ("KiB", "MiB", "GiB", "TiB")
FILLED, EMPTY, MARKER = "█", "░", "┃"
MIN_BAR = 10  # text cells of a bar, however narrow the terminal


@dataclass(frozen=True)
class Bar:
    label: str
    bytes: int
    role: str  # "arguments", "outputs", "temporaries" (the program's) or "against" (the test's figure)
    bound: int | None = None  # the figure must stay below it

    @property
    def over(self) -> bool:
        return self.bound is not None and self.bytes >= self.bound


def bars(check: MemoryCheck) -> list[Bar]:
    """The program's figures (arguments, temporaries, outputs), then the test's comparison figures."""
    return [
        Bar("arguments", check.argument_bytes, "arguments", check.argument_below),
        Bar("temporaries", check.temp_bytes, "temporaries", check.temp_below),
        Bar("outputs", check.output_bytes, "outputs"),
        *(Bar(label, value, "against") for label, value in check.shown_against.items()),
    ]


def top(shown: list[Bar]) -> int:
    """The figure a full bar stands for: the largest shown, bounds included (at least 1 byte)."""
    return max([1, *(b.bytes for b in shown), *(b.bound for b in shown if b.bound is not None)])


def fraction(value: int, scale: int) -> float:
    return min(max(value / scale, 0.0), 1.0)


def human_bytes(value: int) -> str:
    """1536 -> "1.5 KiB"; below 1 KiB, the bytes themselves."""
    if value < 1024:
        return f"{value} B"
    amount = float(value)
    for unit in _UNITS:
        amount /= 1024
        if amount < 1024 or unit == _UNITS[-1]:
            return f"{amount:.1f} {unit}"
    raise AssertionError("unreachable")


def verdict_words(check: MemoryCheck) -> str:
    bounds = [
        f"arguments below {human_bytes(check.argument_below)}"
        if check.argument_below is not None
        else "",
        f"temporaries below {human_bytes(check.temp_below)}"
        if check.temp_below is not None
        else "",
    ]
    asked = " and ".join(b for b in bounds if b) or "no bound"
    return f"memory per device of {check.what}: the rule asks {asked}"


def bar_text(bar: Bar, scale: int, cells: int) -> str:
    """`cells` characters: filled to the bar's share of `scale`, the bound a marker at its own share."""
    filled = round(fraction(bar.bytes, scale) * cells)
    line = [FILLED] * filled + [EMPTY] * (cells - filled)
    if bar.bound is not None:
        line[min(round(fraction(bar.bound, scale) * cells), cells - 1)] = MARKER
    return "".join(line)


def memory_lines(check: MemoryCheck, width: int = 80) -> list[str]:
    """The check as a heading and a text bar per figure, each bar's line within `width` columns from 72 up
    (the label column a quarter of them, a longer label on lines of its own above its bar; below 72, a bar
    keeps MIN_BAR cells)."""
    shown = bars(check)
    scale = top(shown)
    label_width = min(max(len(printable(b.label)) for b in shown), max(width // 4, 11))
    tail = max(len(_tail(b)) for b in shown)
    cells = max(width - label_width - tail - 4, MIN_BAR)
    lines = [printable(verdict_words(check)) + (" (held)" if check.passed else " (NOT held)")]
    for bar in shown:
        label = printable(bar.label)
        if len(label) > label_width:  # whole, on a line of its own above its bar: never cut
            lines += textwrap.wrap(
                label, max(width - 2, 20), initial_indent="  ", subsequent_indent="  "
            )
            label = ""
        lines.append(f"  {label:<{label_width}}  {bar_text(bar, scale, cells)}{_tail(bar)}")
    return lines


def _tail(bar: Bar) -> str:
    bound = "" if bar.bound is None else f"  (bound {human_bytes(bar.bound)})"
    return f"  {human_bytes(bar.bytes):>9}{bound}" + ("  OVER" if bar.over else "")
