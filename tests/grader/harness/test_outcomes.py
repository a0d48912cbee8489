"""Every failure gets a grading category and a message meant for the student."""

import re
from pathlib import Path

import pytest

from grader.core.results import Category
from grader.course.implementations import ImplementationImportError, NotAttempted
from grader.harness.outcomes import categorize, student_message


def raised(fn):
    try:
        fn()
    except BaseException as exc:  # noqa: BLE001 - the point is to catch anything
        return exc
    raise AssertionError("did not raise")


def test_stub_is_not_attempted_even_when_wrapped():
    def stub():
        raise NotImplementedError("ex04: layer_auto")

    def via_group():
        raise ExceptionGroup("hypothesis found 1 failure", [raised(stub)])

    def via_cause():
        try:
            stub()
        except NotImplementedError as exc:
            raise RuntimeError("jax re-raised it") from exc

    for exc in (raised(stub), raised(via_group), raised(via_cause), NotAttempted("ex04: missing")):
        assert categorize(exc) is Category.NOT_ATTEMPTED
    assert student_message(raised(stub)) == "not attempted: ex04: layer_auto"


def test_assertion_is_a_failure_with_its_message():
    exc = AssertionError("output: wrong sharding")
    assert categorize(exc) is Category.FAILED
    assert student_message(exc) == "output: wrong sharding"


def test_pytest_fail_is_a_failure():
    assert categorize(raised(lambda: pytest.fail("nope"))) is Category.FAILED


def test_student_exception_is_an_error_pointing_at_their_line(tmp_path: Path):
    module = tmp_path / "ex09_demo.py"
    module.write_text("def f():\n    return 1 / 0\n")
    namespace = {}
    exec(compile(module.read_text(), str(module), "exec"), namespace)
    exc = raised(namespace["f"])
    assert categorize(exc) is Category.ERROR
    message = student_message(exc, tmp_path)
    assert message.startswith("ZeroDivisionError: division by zero")
    assert "raised at ex09_demo.py:2 in f: return 1 / 0" in message


def test_import_failure_is_an_error_with_its_description():
    exc = ImplementationImportError(
        "ex04_sharded_layer.py has a syntax error at line 3: invalid syntax"
    )
    assert categorize(exc) is Category.ERROR
    assert student_message(exc) == str(exc)


def test_long_messages_are_truncated():
    assert len(student_message(AssertionError("x" * 10_000))) < 4100


def test_a_bare_assert_in_the_students_code_says_what_and_where(tmp_path: Path):
    """In-process (shardlab check): the innermost frame is in the student's folder."""
    module = tmp_path / "ex09_demo.py"
    module.write_text("def f(x):\n    assert x > 0\n")
    namespace = {}
    exec(compile(module.read_text(), str(module), "exec"), namespace)
    exc = raised(lambda: namespace["f"](-1))
    assert categorize(exc, tmp_path) is Category.ERROR
    assert (
        student_message(exc, tmp_path)
        == "AssertionError\n  raised at ex09_demo.py:2 in f: assert x > 0"
    )


def test_a_bare_assert_from_the_worker_says_what_and_where():
    """Graded (--isolate): the worker's report of the student's exception, as the harness rebuilds it."""
    from grader.worker.error_reports import remote_exception

    exc = remote_exception(
        {
            "type": "AssertionError",
            "base": "AssertionError",
            "message": "",
            "frames": [
                {
                    "file": "ex09_fsdp.py",
                    "line": 58,
                    "function": "fsdp_step",
                    "code": "assert grads.shape == params.shape",
                }
            ],
        }
    )
    assert categorize(exc) is Category.ERROR
    assert student_message(exc) == (
        "AssertionError\n  raised at ex09_fsdp.py:58 in fsdp_step: "
        "assert grads.shape == params.shape"
    )


def test_the_tests_own_assertion_stays_a_failure_with_its_message(tmp_path: Path):
    exc = raised(lambda: exec("assert 1 == 2, 'output: wrong values'", {}))
    assert categorize(exc, tmp_path) is Category.FAILED
    assert student_message(exc, tmp_path) == "output: wrong values"


def test_a_property_test_failing_two_ways_reports_one_failure():
    """grader.checks.properties.GRADING: the search stops at the first failure, shrunk, which is the test's
    verdict and message; a group of every distinct failure would read as an error and cost a second search."""
    from hypothesis import given, strategies as st

    from grader.checks.properties import GRADING

    @GRADING
    @given(st.integers(0, 1000))
    def prop(n):
        if n % 2:
            raise ValueError("odd")
        assert n < 10, "even and large"

    exc = raised(prop)
    assert not isinstance(exc, BaseExceptionGroup), exc
    assert isinstance(exc, (AssertionError, ValueError))


def test_a_failed_assert_with_a_message_shows_that_message_alone():
    """pytest's introspection ("assert False", "+ where False = <built-in function isclose>(...)") and its
    hints for options `shardlab check` has not ("Use -v to get more diff") never reach the student."""
    import math

    def isclose_with_message():
        loss = 0.418643
        assert math.isclose(loss, 0.485236), "the loss is the mean of per-device means\nsecond line"

    def equal_with_message():
        assert "a" * 100 == "a" * 99 + "b", "the strings differ at the end"

    exc = raised(isclose_with_message)
    assert "where False = <built-in function isclose>" in str(exc) and "assert False" in str(
        exc
    )  # what pytest appended
    text = student_message(exc)
    assert text == "the loss is the mean of per-device means\nsecond line", text
    exc = raised(equal_with_message)
    assert "use -v to show" in str(exc)
    assert student_message(exc) == "the strings differ at the end"


def test_a_bare_assert_keeps_its_introspection_without_pytests_hints():
    def bare():
        assert {"a": 1, "b": 2} == {"a": 1, "b": 3}

    exc = raised(bare)
    # pytest's hint depends on its verbosity: "Use -v to get more diff" quietly, "use -vv to show" in CI
    assert re.search(r"\buse -vv? to (get|show)\b", str(exc), re.IGNORECASE), str(exc)
    text = student_message(exc)
    assert text.startswith("assert {'a': 1, 'b': 2} == {'a': 1, 'b': 3}") and "-v" not in text, text
    assert "Differing items" in text  # the introspection itself stays


def test_every_assert_in_the_exercise_tests_carries_a_message_for_students():
    """A bare assert would show the student pytest's introspection instead of what to fix."""
    import ast

    bare, paths = [], sorted((Path(__file__).parents[2] / "exercises").rglob("test_*.py"))
    assert len(paths) > 10, paths  # the exercise tests were found
    for path in paths:
        tree = ast.parse(path.read_text(), str(path))
        bare += [
            f"{path.name}:{node.lineno}"
            for node in ast.walk(tree)
            if isinstance(node, ast.Assert) and node.msg is None
        ]
    assert not bare, f"asserts with no message for students: {bare}"
