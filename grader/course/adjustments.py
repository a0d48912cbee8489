"""The instructor's adjustments: scores set or points added by hand, on top of grading, each with its reason
and who made it. They live in their own CSV file beside the course file (course.toml's `adjustments`), never
in a grading's results: a regrade keeps them, and report.json always holds what the tests gave.

    student,exercise,test,set,add,reason,by
    carol,ex04,,,2,"speedup test flaky on the lab machines",Ann
    dave,ex06,test_case2_values[4dev],1.5,,"regraded by hand: correct up to rounding",Ann

`test` empty: the adjustment is the exercise's (its score after the late penalty); a test's name: that test's
points (before the late penalty). `set` gives a new score, `add` points added (negative to take some off).
"""

from __future__ import annotations

import csv
import io
import math
from dataclasses import dataclass
from pathlib import Path

from grader.core.cells import as_data
from grader.core.errors import FileProblems
from grader.course import catalog

COLUMNS = ("student", "exercise", "test", "set", "add", "reason", "by")


class AdjustmentsError(FileProblems):
    """The adjustments file cannot be used."""


@dataclass(frozen=True)
class Adjustment:
    student: str
    exercise: str  # exercise id
    test: str | None  # a test's name ("test_x[4dev]"); None: the exercise's score
    set: float | None  # a new score ...
    add: float | None  # ... or points added
    reason: str
    by: str
    line: int = 0  # in the adjustments file

    def describe(self) -> str:
        what = f"set to {self.set:g}" if self.set is not None else f"{self.add:+g} points"
        on = f"{self.test}: " if self.test else ""
        return f"{on}{what} by {self.by}: {self.reason}"


def _number(text: str, column: str, line: int, problems: list[str]) -> float | None:
    text = text.strip()
    if not text:
        return None
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not math.isfinite(value):
        problems.append(f"line {line}: {column} = {text!r} is not a number")
        return None
    return value


def parse(text: str, path: Path | str = "adjustments.csv") -> list[Adjustment]:
    """The adjustments `text` holds; every problem at once, each with its line."""
    reader = csv.DictReader(io.StringIO(text))
    header = [name.strip() for name in reader.fieldnames or ()]
    missing = [column for column in COLUMNS if column not in header]
    if missing:
        raise AdjustmentsError(
            path, [f"line 1: the header lacks {', '.join(missing)} (it needs: {','.join(COLUMNS)})"]
        )
    problems: list[str] = []
    found = []
    for row in reader:
        line = reader.line_num
        row = {
            (key or "").strip(): as_data(value.strip()) if isinstance(value, str) else ""
            for key, value in row.items()
        }
        if not any(row.values()):
            continue
        try:
            exercise = catalog.get(row["exercise"]).id
        except catalog.UnknownExercise as exc:
            problems.append(f"line {line}: {exc}")
            continue
        set_to = _number(row["set"], "set", line, problems)
        add = _number(row["add"], "add", line, problems)
        if set_to is None and add is None:
            if not (row["set"] or row["add"]):  # (a value that is not a number is reported already)
                problems.append(f"line {line}: give one of set (a new score) or add (points added)")
            continue
        if set_to is not None and add is not None:
            problems.append(f"line {line}: give one of set and add, not both")
            continue
        if set_to is not None and set_to < 0:
            problems.append(f"line {line}: set = {set_to:g} is below 0")
            continue
        for column in ("student", "reason", "by"):
            if not row[column]:
                problems.append(
                    f"line {line}: {column} is empty (an adjustment names the student, says why and who)"
                )
        if not (row["student"] and row["reason"] and row["by"]):
            continue
        found.append(
            Adjustment(
                row["student"],
                exercise,
                row["test"] or None,
                set_to,
                add,
                row["reason"],
                row["by"],
                line,
            )
        )
    if problems:
        raise AdjustmentsError(path, problems)
    return found


def load(path: Path | None) -> list[Adjustment]:
    """The adjustments in `path`; none when there is no such file yet."""
    if path is None or not Path(path).is_file():
        return []
    try:
        return parse(Path(path).read_text(encoding="utf-8-sig"), path)
    except UnicodeDecodeError:
        raise AdjustmentsError(path, ["it is not UTF-8 text"]) from None
