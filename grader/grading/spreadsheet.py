"""Every CSV the project writes (grades.csv, on one machine and in the Slurm collect job), written so that a
spreadsheet reads its cells as data, never as formulas.

Student names come from LMS exports, so from students: a folder named `=HYPERLINK(...)` or `@SUM(1+9)*cmd|x`
would become a formula when an instructor opens grades.csv. A text cell that starts like a formula gets a leading
single quote (grader.core.cells), and every text cell is quoted. Numbers (the scores) are written as numbers,
never changed: a number cell cannot hold a formula, and a negative number is data, not an expression.
"""

from __future__ import annotations

import csv
import os
import tempfile
from collections.abc import Iterable, Mapping
from pathlib import Path

from grader.core.cells import as_text


def write_csv(path: Path, columns: list[str], rows: Iterable[Mapping[str, object]]) -> Path:
    """`rows` under a header of `columns` (a missing cell is empty), every text cell quoted and neutralized,
    written beside `path` and then renamed over it: a reader never sees half a file."""
    path = Path(path)
    fd, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".part")
    try:
        with os.fdopen(fd, "w", newline="", encoding="utf-8") as handle:
            writer = csv.DictWriter(handle, columns, restval="", quoting=csv.QUOTE_NONNUMERIC)
            writer.writerow({column: as_text(column) for column in columns})
            writer.writerows({key: as_text(value) for key, value in row.items()} for row in rows)
        os.chmod(temporary, 0o644)  # mkstemp makes 0600; grades are for others to read
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise
    return path
