"""What the course's tests say to a student, checked over their source.

- They print nothing. What a test's process prints is captured with what the student's code printed in the
  worker, and the pages show it under "what your code printed": a line a test printed would be shown as the
  student's. A figure a test wants the reader to see is a fact (assert_memory's shown_against, a rule's
  figure), which the pages draw where it belongs.
- Every hint a check is given is a sentence: the checks put it after their own sentence's full stop."""

from __future__ import annotations

import ast
from pathlib import Path

from grader.course import paths

COURSE_TESTS = paths.REPO_ROOT / "tests" / "exercises"


def print_calls(source: str) -> list[int]:
    """The lines of the calls to print in a module."""
    return [
        node.lineno
        for node in ast.walk(ast.parse(source))
        if isinstance(node, ast.Call)
        and isinstance(node.func, ast.Name)
        and node.func.id == "print"
    ]


def _opening(value: ast.expr) -> str | None:
    """The text a string literal or f-string starts with; None for any other expression."""
    if isinstance(value, ast.Constant) and isinstance(value.value, str):
        return value.value
    if isinstance(value, ast.JoinedStr) and value.values:
        first = value.values[0]
        return first.value if isinstance(first, ast.Constant) else ""
    return None


def lowercase_hints(source: str) -> list[int]:
    """The lines of the hints, given as text, that do not start as a sentence does."""
    return [
        node.value.lineno
        for node in ast.walk(ast.parse(source))
        if isinstance(node, ast.keyword)
        and node.arg == "hint"
        and (opening := _opening(node.value))
        and opening[0].islower()
    ]


def _found(finder) -> dict[str, list[int]]:
    return {
        str(path.relative_to(paths.REPO_ROOT)): lines
        for path in sorted(COURSE_TESTS.rglob("*.py"))
        if (lines := finder(Path(path).read_text(encoding="utf-8")))
    }


def test_the_finders_find():
    assert print_calls("x = 1\nprint(x)\ndef f():\n    print('a', x)\n") == [2, 4]
    assert print_calls("printed = 1\nlog.print(printed)\n") == []
    source = 'f(hint="check it.")\nf(hint=f"the {x}.")\nf(hint="Check it.")\nf(hint=HINT)\n'
    assert lowercase_hints(source) == [1, 2]


def test_no_course_test_prints():
    found = _found(print_calls)
    assert not found, f"course tests that print (the pages would show it as the student's): {found}"


def test_every_hint_starts_a_sentence():
    found = _found(lowercase_hints)
    assert not found, f"hints that start in lowercase, after a check's full stop: {found}"
