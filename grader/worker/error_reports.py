"""A student's exception as it crosses: reported by the worker as its type name, nearest builtin base,
message and frames (`encode_error`), and raised again in the harness as a class of that name deriving from
that builtin (`remote_exception`), so that `pytest.raises(ValueError)` works and a stub's
NotImplementedError is still "not attempted"."""

from __future__ import annotations

# The builtins a rebuilt exception may derive from.
BUILTIN_ERRORS = {
    cls.__name__: cls
    for cls in (
        ArithmeticError,
        AssertionError,
        AttributeError,
        BufferError,
        EOFError,
        FloatingPointError,
        ImportError,
        IndexError,
        KeyError,
        LookupError,
        MemoryError,
        ModuleNotFoundError,
        NameError,
        NotImplementedError,
        OSError,
        OverflowError,
        RecursionError,
        RuntimeError,
        StopIteration,
        SyntaxError,
        SystemError,
        TypeError,
        UnboundLocalError,
        ValueError,
        ZeroDivisionError,
        Exception,
    )
}


def encode_error(exc: BaseException, frames: list[dict]) -> dict:
    """The report of `exc` (raised by the student's code; `frames`: where, in their module)."""
    base = next(
        (
            c.__name__
            for c in type(exc).__mro__
            if c.__name__ in BUILTIN_ERRORS and BUILTIN_ERRORS[c.__name__] is c
        ),
        "Exception",
    )
    try:
        message = str(exc)
    except Exception:  # a student's __str__ may raise
        message = "(the exception's message could not be read)"
    return {
        "type": type(exc).__name__[:100],
        "base": base,
        "message": message[:4000],
        "frames": frames[-5:],
    }


class RemoteError:
    """Mixed into every exception raised again from a worker's error report (beside its builtin base)."""

    student_frames: list[dict] = []


_ERROR_CLASSES: dict[tuple[str, str], type] = {}


def remote_exception(report: dict) -> BaseException:
    """The student's exception, rebuilt: a class named like theirs, deriving from the nearest builtin. The
    report is the worker's word: whatever it holds, this raises nothing but a student's exception."""
    # classes are kept
    name = report.get("type")[:100] if isinstance(report.get("type"), str) else "Exception"
    base = BUILTIN_ERRORS.get(report.get("base"), Exception)
    if not name.isidentifier():
        name = base.__name__
    key = (name, base.__name__)
    if key not in _ERROR_CLASSES:
        _ERROR_CLASSES[key] = type(name, (base, RemoteError), {"__module__": "student"})
    message = report.get("message") if isinstance(report.get("message"), str) else ""
    exc = _ERROR_CLASSES[key](message)
    frames = report.get("frames")
    exc.student_frames = (
        [f for f in frames if isinstance(f, dict)][-5:] if isinstance(frames, list) else []
    )
    return exc
