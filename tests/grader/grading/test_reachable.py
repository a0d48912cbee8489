"""What of a module the similarity check judges (grader.grading.reachable): the top-level definitions the
graded functions reach by name, and everything that runs on import or could reach a definition unnamed."""

from __future__ import annotations

import ast

from grader.grading.reachable import dead_definitions, dead_nested, dead_spans, defined_names

MODULE = """
import functools
from jax import jit

CONST = helper_const()


def helper_const():
    return 1


def graded(x, scale=default_scale()):
    return used(x) * scale


def default_scale():
    return 2


def used(x):
    return deeper(x)


def deeper(x):
    return x


@register
def registered():
    return 3


def register(f):
    return f


@functools.cache
def cached_dead():
    return 4


@jit
def jitted_dead():
    return 5


class Base:
    pass


class Child(Base):
    pass


class Plain(Exception):
    def __init__(self):
        super().__init__(used(1))

    def unreached(self):
        return deeper(2)

    def reached(self):
        return 6


KEPT = Plain.reached


def dead(x):
    return deeper(x)


def dead_too():
    return dead(1)


def named_by_string():
    pass


def dead_user():
    return "named_by_string"
"""


def dead(source: str, graded: set[str]) -> list[str]:
    return [node.name for node in dead_definitions(ast.parse(source), frozenset(graded))]


def test_reachable_by_name_from_the_graded_functions_and_the_module_statements():
    """Called (transitively), called by a module-level statement, a default value, a decorator of the
    module's own (it may register what it decorates), a dunder method and a method named by reachable code
    stay; what only dead code names, decorators imported or built in, a method nothing names and a name in a
    dead function's string do not. A class is never dead: its body runs on import."""
    assert dead(MODULE, {"graded"}) == [
        "cached_dead",
        "jitted_dead",
        "unreached",
        "dead",
        "dead_too",
        "named_by_string",
        "dead_user",
    ]


def test_a_name_in_a_string_of_reachable_code_keeps_its_definition():
    source = MODULE + "\n\ndef graded_two():\n    return call_by_name('dead_too')\n"
    assert "dead_too" not in dead(source, {"graded", "graded_two"})
    assert "dead" not in dead(source, {"graded", "graded_two"})  # dead_too calls it


def test_reaching_definitions_without_naming_them_keeps_everything():
    """globals(), getattr and their kind reach any definition: nothing is dead, wherever reachable code uses
    them; in dead code they count for nothing."""
    for dynamic in ("globals()[name]", "getattr(sys.modules[__name__], name)", "eval(name)"):
        source = MODULE + f"\n\ndef graded_two(name):\n    return {dynamic}\n"
        assert dead(source, {"graded", "graded_two"}) == []
        assert "graded_two" in dead(source, {"graded"})


def test_spans_are_whole_lines_from_the_first_decorator():
    source = "import jax\n\n\n@jax.jit\n@jax.vmap\ndef dead(x):\n    return x\n\n\ndef graded(x):\n    return x\n"
    ((start, end),) = dead_spans(source, frozenset({"graded"}))
    assert source[start:end] == "@jax.jit\n@jax.vmap\ndef dead(x):\n    return x"


def test_nothing_is_dead_without_graded_names_or_a_parse():
    source = "def a():\n    pass\n\n\ndef b():\n    pass\n"
    assert dead_spans(source, frozenset()) == []
    assert dead_spans(source + "def (\n", frozenset({"a"})) == []
    assert len(dead_spans(source, frozenset({"a"}))) == 1
    assert defined_names(source) == {"a", "b"} and defined_names("def (") == frozenset()


def test_a_long_chain_of_calls_is_followed_to_its_end():
    """Thousands of functions, each calling the next: all reachable from the first, none but the last from
    the last."""
    count = 5000
    source = "".join(f"def f{i}():\n    return f{i + 1}()\n\n\n" for i in range(count))
    source += f"def f{count}():\n    return 0\n"
    assert dead(source, {"f0"}) == []
    assert len(dead(source, {f"f{count}"})) == count


def test_a_definition_replaced_before_anything_runs_is_dead():
    """Three `def graded` in a row: the tests call the last; the two before it, and what only they call, are
    dead. A statement between, or a decorator of the module's own, could have used or kept the earlier one:
    then it stays."""
    first = "def graded(x):\n    return helper(x)\n\n\ndef helper(x):\n    return x\n\n\n"
    second = "@jit\ndef graded(x):\n    return x + 1\n\n\n"
    last = "def graded(x):\n    return x * 2\n"
    source = "from jax import jit\n\n\n" + first + second + last
    tree = ast.parse(source)
    assert [(n.name, n.lineno) for n in dead_definitions(tree, frozenset({"graded"}))] == [
        ("graded", 4),
        ("helper", 8),
        ("graded", 13),
    ]
    for between in ("EARLIER = graded\n\n\n", "@register\ndef other():\n    pass\n\n\n"):
        kept = "from jax import jit\n\n\n" + first + between + second + last
        assert "helper" not in dead(kept + "\n\ndef register(f):\n    return f\n", {"graded"})


def test_a_nested_definition_nothing_in_its_function_names_is_dead():
    source = """
def graded(x):
    def used(y):
        return y

    def unused(y):
        def inner(z):
            return z

        return inner(y)

    def recursive(y):
        return recursive(y)

    @jax.jit
    def decorated(y):
        return y

    class Runs:
        def unreached(self):
            return 1

        def __call__(self):
            return 2

        value = used(2)

    return used(x) + call("by_string")

    def by_string():
        pass
"""
    (function,) = ast.parse(source).body
    assert [n.name for n in dead_nested(function)] == ["unused", "recursive", "unreached"]
    dynamic = source.replace('call("by_string")', "locals()['unused'](x)")
    assert dead_nested(ast.parse(dynamic).body[0]) == []
    spans = dead_spans(source, frozenset({"graded"}))
    assert [source[start:end].split("\n")[0].strip() for start, end in spans] == [
        "def unused(y):",
        "def recursive(y):",
        "def unreached(self):",
    ]


# Evasions of an earlier round (issue 51): a copy hidden in class bodies, which Python runs on import or on
# every call, was blanked as a class nothing names.
SCRATCH = """
import jax


class _Scratch:
    global graded, helper

    def helper(x):
        return x * 2

    def graded(x):
        return helper(x) + 1

    def never(x):
        return x


def other():
    return 0
"""


def test_a_class_body_is_live_code_and_its_global_functions_are_reached_by_name():
    """The module's graded function defined in a class body that declares it global: the class stays, the
    graded function and what it calls are reached; a function of the class nothing names, and a top-level
    one, are dead."""
    assert dead(SCRATCH, {"graded"}) == ["never", "other"]
    spans = dead_spans(SCRATCH, frozenset({"graded"}))
    assert [SCRATCH[start:end].split("\n")[0].strip() for start, end in spans] == [
        "def never(x):",
        "def other():",
    ]
    namespace: dict = {}
    exec(compile(SCRATCH.replace("import jax\n", ""), "scratch", "exec"), namespace)
    assert namespace["graded"](3) == 7  # it is the module's graded function that runs


BODY = """
def graded(x):
    out = None

    class _Body:
        nonlocal out

        def original(y):
            return y + 1

        out = original(x)

    return out
"""


def test_a_class_inside_a_graded_function_runs_with_it():
    """The graded function's body moved into a nested class that defines and calls it: nothing of it is
    dead, though nothing names the class."""
    (function,) = ast.parse(BODY).body
    assert dead_nested(function) == [] and dead_spans(BODY, frozenset({"graded"})) == []
    namespace: dict = {}
    exec(compile(BODY, "body", "exec"), namespace)
    assert namespace["graded"](1) == 2
