"""How much text a result may hold. A submission decides much of the text its results carry: a test's
message, what its code printed, and the names, specs and HLO lines its checks record as facts (a mesh axis
is named by the student's code). Every such string is cut here, to a bound, where its result is built
(grader.core.results), and the cut says so where it is made: three files draw a result (report.json,
results.json, feedback.html, the last one every name twice per grid), and unbounded, one 256 KiB axis name
made an ex01 grading 33 MB of report.json and 66 MB of feedback.html.

Honest text is inside every bound, so it is never cut. Measured over a full reference grading (475 tests), as
text_size counts: names and specs at most 92 characters, HLO lines 413, a test's facts 31,188 (ex11's 24
sharding checks), the whole grading 797,284."""

from __future__ import annotations

import json

MESSAGE_CHARS = 4_000  # a test's message: what its failure says
OUTPUT_CHARS = 2_000  # what a test's code printed
NAME_CHARS = 200  # one name in a fact: a mesh axis, a check, an op, a spec as written, a label
LINE_CHARS = 2_000  # one HLO instruction
# a collective's source -> target pairs (a compiled program has at most one per device) and its operands
MAX_PAIRS = 1_024
MAX_OPERANDS = 16
# a test's memory checks, and the labelled figures one sets beside its own (a test's code writes a few)
MAX_FIGURES = 8
# the programs a test accounts for (each compiled program a check reads), the rows of one account (a kind of
# collective over a set of mesh axes: five kinds over the few sets a 3-D mesh has), and the rules judged on
# them (a test checks a handful per program)
MAX_PROGRAMS = 8
MAX_TRAFFIC_ROWS = 40
MAX_RULE_FIGURES = 48
# all one test's facts (as text_size counts them), each name already cut ...
TEST_FACTS_CHARS = 48_000
# ... and this much for each (a check, a collective found): the markup and the indentation reports put
# around it, as much again as a collective's own text
AROUND_A_FACT = 200
# a grading's tests in all: their messages, outputs and facts, counted alike
GRADING_CHARS = 4_000_000
# one line about the submission as a whole (it may name a file of the student's)
PROBLEM_CHARS = 1_000
PROBLEMS = 50  # ... and how many of them (a zip of many bad entries)


def clipped(text: str, limit: int, *, keep_end: bool = False) -> str:
    """`text`, or when it is longer than `limit` characters, its first `limit` characters with a note of
    how many were cut in place of the last ones (keep_end: its first and last characters, the note
    between, so that names that differ at their end still differ). The note takes a line of its own in a
    text of several lines. The result never has more than `limit` characters: a cut text is not cut again."""
    if len(text) <= limit:
        return text
    kept, note = limit, ""
    # the note takes room, so more is cut, which may lengthen the note by a digit
    for _ in range(3):
        note = _cut_note(len(text) - kept, keep_end, "\n" if "\n" in text else " ")
        if kept == max(limit - len(note), 0):
            break
        kept = max(limit - len(note), 0)
    if kept == 0:  # no room for a note
        return text[:limit]
    if keep_end:
        return text[: kept - kept // 2] + note + text[len(text) - kept // 2 :]
    return text[:kept] + note


def last_lines(text: str, count: int, heading: str, *, skip: str | None = None) -> str:
    """The last `count` non-blank lines of `text` (none that starts with `skip`), indented under
    "  heading:" on a line of its own; "" when there are none."""
    lines = [
        line
        for line in text.strip().splitlines()
        if line.strip() and not (skip and line.lstrip().startswith(skip))
    ][-count:]
    return f"\n  {heading}:\n    " + "\n    ".join(lines) if lines else ""


def at_most(items: list[str], count: int, more: str = "") -> list[str]:
    """`items`, or when there are more than `count`, the first count - 1 and "... and N more{more}"."""
    if len(items) <= count:
        return items
    return [*items[: count - 1], f"... and {len(items) - count + 1} more{more}"]


def _cut_note(cut: int, keep_end: bool, space: str) -> str:
    if keep_end:
        return f"{space}... ({cut:,} characters cut) ...{space}"
    return f"{space}... ({cut:,} more characters cut)"


def text_size(value) -> int:
    """What `value` (a string, or a fact's to_dict()) may take in a report: the length of its JSON with each
    character that HTML escapes counted as its entity, which bounds what report.json writes (\\uXXXX for
    what is not ASCII) and, each time the page or results.json draws it, what they write (&lt;, &#x27;...)."""
    text = json.dumps(value)
    return len(text) + sum(text.count(char) * more for char, more in _ENTITIES_ADD.items())


# What HTML escaping adds to a character beyond its JSON: < is &lt;, ' is &#x27;, and " (\" in JSON) &quot;.
_ENTITIES_ADD = {"<": 3, ">": 3, "&": 4, "'": 5, '\\"': 4}
