"""The stub generator: solution blocks become NotImplementedError naming the exercise and function."""

import pytest

from grader.course import catalog, stubs

EX04 = catalog.get("ex04_sharded_layer")

SOURCE = '''"""Module docstring stays."""
import jax


def given(x):
    return x


def to_write(x, mesh):
    """Docstring stays."""
    y = given(x)   # outside the block: given to the student
    ### BEGIN SOLUTION
    return jax.device_put(y, mesh)
    ### END SOLUTION


class Holder:
    def method(self):
        ### BEGIN SOLUTION
        return 42
        ### END SOLUTION
'''


def test_blocks_become_named_stubs():
    stub = stubs.make_stub(SOURCE, EX04)
    assert 'raise NotImplementedError("ex04: to_write")' in stub
    assert '        raise NotImplementedError("ex04: method")' in stub
    assert "device_put" not in stub and "42" not in stub and "SOLUTION" not in stub
    assert '"""Docstring stays."""' in stub and "y = given(x)" in stub


def test_the_stub_raises_when_called():
    namespace = {}
    exec(stubs.make_stub(SOURCE, EX04), namespace)
    assert namespace["given"](3) == 3
    with pytest.raises(NotImplementedError, match="ex04: to_write"):
        namespace["to_write"](1, None)


@pytest.mark.parametrize(
    "source, problem",
    [
        ("def f():\n    ### BEGIN SOLUTION\n    pass\n", "never closed"),
        ("def f():\n    pass\n    ### END SOLUTION\n", "without"),
        ("def f():\n    ### BEGIN SOLUTION\n    ### BEGIN SOLUTION\n", "inside another"),
        ("### BEGIN SOLUTION\nx = 1\n### END SOLUTION\n", "inside a function"),
    ],
)
def test_malformed_markers_are_refused(source, problem):
    with pytest.raises(stubs.StubError, match=problem):
        stubs.make_stub(source, EX04, "sol.py")


def test_block_after_a_function_ends_is_not_attributed_to_it():
    source = "def f():\n    return 1\n\n\nclass C:\n    ### BEGIN SOLUTION\n    x = 1\n    ### END SOLUTION\n"
    with pytest.raises(stubs.StubError, match="inside a function"):
        stubs.make_stub(source, EX04)


def test_committed_exercises_are_what_the_generator_makes():
    for path, text in stubs.expected_stubs().items():
        assert path.read_text() == text, f"{path} is stale: run `shardlab stubs`"


def test_solution_lines_are_the_block_contents_with_their_line_numbers():
    assert stubs.solution_lines(SOURCE) == [
        (13, "return jax.device_put(y, mesh)"),
        (20, "return 42"),
    ]
