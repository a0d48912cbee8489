"""Turning a test's exception into a grading category and a message a student should see."""

from __future__ import annotations

import re
import traceback
from dataclasses import dataclass
from pathlib import Path

from grader.core.bounds import MESSAGE_CHARS, clipped
from grader.core.results import Category
from grader.course.implementations import ImplementationImportError
from grader.harness import jax_errors


def _chain(exc: BaseException):
    """The exception, its causes and contexts, and the members of exception groups (hypothesis)."""
    seen, todo = set(), [exc]
    while todo:
        e = todo.pop()
        if e is None or id(e) in seen:
            continue
        seen.add(id(e))
        yield e
        todo.extend([e.__cause__, e.__context__])
        todo.extend(getattr(e, "exceptions", ()))


def categorize(exc: BaseException, source: Path | None = None) -> Category:
    """source: the implementation's folder, where an exception raised in-process is the student's."""
    from grader.worker.failures import WorkerCrashed, WorkerTimeout

    chain = list(_chain(exc))
    if any(isinstance(e, WorkerTimeout) for e in chain):
        return Category.TIMEOUT
    if any(isinstance(e, WorkerCrashed) for e in chain):
        return Category.CRASHED
    if any(isinstance(e, NotImplementedError) for e in chain):
        return Category.NOT_ATTEMPTED
    if isinstance(exc, ImplementationImportError):
        return Category.ERROR
    if (
        isinstance(exc, AssertionError)
        and not _raised_by_student(exc, source)
        or type(exc).__name__ in ("Failed", "Exit")
    ):
        return Category.FAILED  # the tests' own verdict on a result
    return Category.ERROR


def _raised_by_student(exc: BaseException, source: Path | None) -> bool:
    """The student's code raised `exc` (an `assert` of theirs, say): it came back from their worker, or,
    in-process, its innermost frame is in their folder."""
    from grader.worker.error_reports import RemoteError

    if isinstance(exc, RemoteError):
        return True
    frames = traceback.extract_tb(exc.__traceback__) if source is not None else []
    if not frames:
        return False
    # A module of the student's own (exNN_name.py): a notebook's test cells may run from the same folder.
    innermost = Path(frames[-1].filename).resolve()
    ours = re.fullmatch(r"ex\d\d_\w+\.py", innermost.name) is not None
    return ours and innermost.is_relative_to(Path(source).resolve())


# pytest's assertion rewriting appends its introspection to an assert's own message: a line "assert ..."
# and its "+  where ..." lines, with hints for pytest's options (-v, -vv) that `shardlab check` has not.
_INTROSPECTION = re.compile(r"^assert ", re.MULTILINE)
_PYTEST_HINT = re.compile(r"[^\n]*\buse '?-vv?'? to (?:get|show)\b[^\n]*\n?", re.IGNORECASE)


def assertion_text(exc: BaseException) -> str:
    """A failed assert's message alone (`assert ok, message`); a bare assert keeps pytest's introspection,
    without its hints for pytest's options."""
    text = str(exc)
    if not isinstance(exc, AssertionError):
        return text
    first = _INTROSPECTION.search(text)
    if first is not None and first.start() > 0:  # pytest indented the message's later lines by two
        return re.sub(r"\n  ", "\n", text[: first.start()].rstrip())
    return _PYTEST_HINT.sub("", text).rstrip()


def student_message(exc: BaseException, source: Path | None = None) -> str:
    """What went wrong, in the student's terms: the assertion text, or the error and the student's line. A
    known JAX error keeps JAX's first lines; what it means is student_explanation's, kept beside it."""
    category = categorize(exc, source)
    if category is Category.NOT_ATTEMPTED:
        stub = next(e for e in _chain(exc) if isinstance(e, NotImplementedError))
        text = f"not attempted: {stub}" if str(stub) else "not attempted (NotImplementedError)"
    elif not _raised_by_the_code(exc, category):
        text = assertion_text(exc)
    else:
        where, known = _known_error(exc, source)
        message = jax_errors.jax_text(exc) if known else str(exc)
        # a bare `assert` has no text
        text = f"{type(exc).__name__}: {message}" if message else type(exc).__name__
        if where:
            text += f"\n  raised at {where}"
    return clipped(text, MESSAGE_CHARS)


def student_explanation(exc: BaseException, source: Path | None = None) -> str:
    """What a known JAX error means, its usual cause and what to do, in the course's words
    (grader.harness.jax_errors); "" for any other outcome. It is kept apart from the message so that a
    report says it once for the tests that met the same error."""
    if not _raised_by_the_code(exc, categorize(exc, source)):
        return ""
    _, known = _known_error(exc, source)
    return known.explanation() if known else ""


def _known_error(
    exc: BaseException, source: Path | None
) -> tuple[StudentLine | None, jax_errors.KnownError | None]:
    """The student's line that raised `exc`, and the known JAX error it is (grader.harness.jax_errors)."""
    where = _student_line(exc, source)
    return where, jax_errors.known_error(exc, where.code if where else None)


def _raised_by_the_code(exc: BaseException, category: Category) -> bool:
    """An error raised while the student's code ran: not a stub, a failed assertion of the test's, a
    timeout, a crash or an import the harness reports itself."""
    return category not in (
        Category.NOT_ATTEMPTED,
        Category.FAILED,
        Category.TIMEOUT,
        Category.CRASHED,
    ) and not isinstance(exc, ImplementationImportError)


@dataclass(frozen=True)
class StudentLine:
    """The line of the student's module that raised an exception."""

    file: object  # the worker's report is read as it came
    line: object
    function: object
    code: str

    def __str__(self) -> str:
        return f"{self.file}:{self.line} in {self.function}: {self.code}"


def _student_line(exc: BaseException, source: Path | None) -> StudentLine | None:
    remote = next(
        (e.student_frames for e in _chain(exc) if getattr(e, "student_frames", None)), None
    )
    if remote:  # raised in a worker: where, as the worker reported it
        last = remote[-1]
        return StudentLine(
            last.get("file"), last.get("line"), last.get("function"), str(last.get("code", ""))
        )
    if source is None:
        return None
    frames = [
        f
        for f in traceback.extract_tb(exc.__traceback__)
        if Path(f.filename).resolve().is_relative_to(source)
    ]
    if not frames:
        return None
    last = frames[-1]
    return StudentLine(Path(last.filename).name, last.lineno, last.name, (last.line or "").strip())
