"""A test's id, cut one way everywhere (grader.core.results): its function, its name, its function's name."""

import pytest

from grader.core import results
from grader.core.results import TestResult, function_id, function_name

CASES = [
    (
        "tests/exercises/ex04_sharded_layer/test_hidden.py::test_layer_values[4dev]",
        "tests/exercises/ex04_sharded_layer/test_hidden.py::test_layer_values",
        "test_layer_values[4dev]",
        "test_layer_values",
    ),
    ("t.py::test_plain", "t.py::test_plain", "test_plain", "test_plain"),
    # a parameter id may hold "::" or "[": only the first "[" starts the parameters
    ("t.py::test_x[a::b-[c]]", "t.py::test_x", "test_x[a::b-[c]]", "test_x"),
]


@pytest.mark.parametrize(("nodeid", "function", "name", "short"), CASES)
def test_a_test_id_is_cut_into_its_parts(nodeid, function, name, short):
    assert (function_id(nodeid), results.test_name(nodeid), function_name(nodeid)) == (
        function,
        name,
        short,
    )
    result = TestResult(nodeid, "ex04_sharded_layer", False, 1.0, "passed")
    assert (result.name, result.function) == (name, short)
