"""Student stubs, generated from the reference: every `### BEGIN SOLUTION` ... `### END SOLUTION`
block becomes a `raise NotImplementedError("exNN: function")` that names its exercise."""

from __future__ import annotations

import re
from pathlib import Path

from grader.core.errors import ShardlabError
from grader.course import catalog, paths

BEGIN, END = "### BEGIN SOLUTION", "### END SOLUTION"
_DEF = re.compile(r"^(\s*)(?:async\s+)?def\s+(\w+)")


class StubError(ShardlabError, ValueError):
    pass


def make_stub(source: str, exercise: catalog.Exercise, filename: str = "<solution>") -> str:
    out: list[str] = []
    functions: list[tuple[int, str]] = []  # (indent, name) of the defs enclosing the current line
    inside: int | None = None  # line number of the open BEGIN marker
    for number, line in enumerate(source.splitlines(), start=1):
        stripped = line.strip()
        indent = len(line) - len(line.lstrip())
        if inside is not None:
            if stripped == END:
                inside = None
            elif stripped == BEGIN:
                raise StubError(f"{filename}:{number}: {BEGIN} inside another solution block")
            continue
        if stripped == END:
            raise StubError(f"{filename}:{number}: {END} without {BEGIN}")
        if stripped == BEGIN:
            while functions and functions[-1][0] >= indent:
                functions.pop()
            if not functions:
                raise StubError(f"{filename}:{number}: a solution block must sit inside a function")
            pad = " " * indent
            out += [
                f"{pad}# YOUR CODE HERE",
                f'{pad}raise NotImplementedError("{exercise.number}: {functions[-1][1]}")',
            ]
            inside = number
            continue
        if stripped and not stripped.startswith("#"):
            while functions and functions[-1][0] >= indent:
                functions.pop()
        if m := _DEF.match(line):
            functions.append((len(m.group(1)), m.group(2)))
        out.append(line)
    if inside is not None:
        raise StubError(f"{filename}:{inside}: {BEGIN} is never closed")
    stub = "\n".join(out) + "\n"
    # a stub that does not even parse would fail every test as an error
    compile(stub, filename, "exec")
    return stub


def solution_lines(source: str) -> list[tuple[int, str]]:
    """(line number, stripped text) of every non-blank line inside a solution block: what must never
    reach a student (the handout and the Gradescope zip are checked against these)."""
    found, inside = [], False
    for number, line in enumerate(source.splitlines(), start=1):
        stripped = line.strip()
        if stripped in (BEGIN, END):
            inside = stripped == BEGIN
        elif inside and stripped:
            found.append((number, stripped))
    return found


def expected_stubs() -> dict[Path, str]:
    """What exercises/ must contain: one stub per catalog exercise."""
    return {
        e.stub_path(): make_stub(e.solution_path().read_text(), e, str(e.solution_path()))
        for e in catalog.EXERCISES
    }


def write_stubs() -> list[Path]:
    """Regenerate exercises/ from solutions/; returns the files that changed."""
    paths.EXERCISES_DIR.mkdir(exist_ok=True)
    changed = []
    for path, text in expected_stubs().items():
        if not path.exists() or path.read_text() != text:
            path.write_text(text)
            changed.append(path)
    return changed
