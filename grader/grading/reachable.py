"""Which of a module's functions (top-level ones and methods) the exercise's own functions can reach: the code
the similarity check judges (grader.grading.similarity). A function no graded function calls is never run by
the tests, so it is evidence of nothing, for its author or against a classmate.

Reachable, conservatively, by name within the module: the graded functions (the names the stub defines at its
top level), every module-level statement that is not a function definition (it runs on import), the
decorators, default values, bases and keywords of every definition (they run on import too), and then any
function whose name is referenced (as a name, an attribute or a string that is a whole identifier) from
code already reachable. Definitions nested inside other statements (`if`, `try`) are module-level statements
and stay in. Two more keep a function that no name reaches but the running module still could:

- a decorator whose root name the module binds itself (not an import, not a builtin): it may register what
  it decorates (`@register`);
- reachable code that reaches definitions without naming them (`globals`, `getattr`, `sys.modules`, `eval`,
  ... DYNAMIC): then nothing in the module is dead.

A class body runs when the class is defined, so a class is never dead: its statements are module-level
statements too, and the functions it defines (its methods, or module functions it declares `global`) are
definitions like the top-level ones, reached by name (a dunder method stays: Python calls it unnamed).

Everything else, a top-level function or a method that nothing reachable names, is dead; and so is a
top-level function that a later one of the same name replaces before any of the module's own code can run (a
module holding several `def all_reduce` keeps only the last: the tests call that one). Inside a live function,
a function it defines that nothing else in it names is dead too (`dead_nested`), unless decorated or the
function reaches names without naming them; a class it defines is not (its body runs with the function).
"""

from __future__ import annotations

import ast
import builtins
from collections import Counter
from collections.abc import Iterable

_DEFINITIONS = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)
_FUNCTIONS = (ast.FunctionDef, ast.AsyncFunctionDef)
# names through which running code reaches a module's definitions without naming them
DYNAMIC = frozenset(
    {
        "globals",
        "locals",
        "vars",
        "dir",
        "getattr",
        "__getattribute__",
        "attrgetter",
        "modules",
        "__dict__",
        "getmembers",
        "import_module",
        "__import__",
        "eval",
        "exec",
        "compile",
    }
)


def defined_names(source: str) -> frozenset[str]:
    """The names of `source`'s top-level functions and classes (none when it does not parse)."""
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return frozenset()
    return frozenset(node.name for node in tree.body if isinstance(node, _DEFINITIONS))


def _names(nodes: Iterable[ast.AST]) -> set[str]:
    """Every name `nodes` refer to: names, attributes, and strings that are identifiers (getattr,
    globals()[...])."""
    found: set[str] = set()
    for root in nodes:
        for node in ast.walk(root):
            if isinstance(node, ast.Name):
                found.add(node.id)
            elif isinstance(node, ast.Attribute):
                found.add(node.attr)
            elif (
                isinstance(node, ast.Constant)
                and isinstance(node.value, str)
                and node.value.isidentifier()
            ):
                found.add(node.value)
    return found


def _evaluated_on_definition(node: ast.AST) -> list[ast.AST]:
    """What runs when a definition is executed, before its body is ever called."""
    if isinstance(node, ast.ClassDef):
        return [*node.decorator_list, *node.bases, *node.keywords]
    arguments = node.args
    return [
        *node.decorator_list,
        *arguments.defaults,
        *(d for d in arguments.kw_defaults if d is not None),
    ]


def _roots(nodes: Iterable[ast.AST]) -> set[str]:
    """The plain names `nodes` use (`register` in `@register`, `jax` in `@jax.jit`)."""
    return {node.id for root in nodes for node in ast.walk(root) if isinstance(node, ast.Name)}


def _imported(tree: ast.Module) -> set[str]:
    names = set()
    for node in tree.body:
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            for alias in node.names:
                names.add(alias.asname or alias.name.split(".")[0])
    return names


def _shadowed(tree: ast.Module, foreign: set[str]) -> set[int]:
    """The ids of the top-level definitions that a later one of the same name replaces before anything of
    the module's own can run: no statement between, and no decorator, default, base or keyword of the
    module's own making on it or on any definition up to the one that replaces it. No code can ever call
    one: a name reaching it reaches its replacement."""
    body = tree.body
    # where the module's own code may run: a statement, or a definition whose evaluation calls its own
    runs = [
        not isinstance(node, _FUNCTIONS) or bool(_roots(_evaluated_on_definition(node)) - foreign)
        for node in body
    ]
    barriers = [0]  # barriers[i]: how many of body[:i] may run the module's own code
    for flag in runs:
        barriers.append(barriers[-1] + flag)
    shadowed, following = set(), {}
    for i in range(len(body) - 1, -1, -1):
        node = body[i]
        if not isinstance(node, _FUNCTIONS):
            continue
        later = following.get(node.name)
        if later is not None and barriers[later + 1] - barriers[i] == 0:
            shadowed.add(id(node))
        following[node.name] = i
    return shadowed


def _is_dunder(name: str) -> bool:
    return name.startswith("__") and name.endswith("__")


def _definitions(body: list[ast.stmt]) -> tuple[list[ast.AST], list[ast.stmt]]:
    """What of `body` (a module's or a class's) runs when it runs, and the functions it defines, in order:
    a class's body runs where it stands, so its statements run and its functions are defined (recursively)."""
    runs: list[ast.AST] = []
    functions: list[ast.stmt] = []
    for node in body:
        if isinstance(node, _FUNCTIONS):
            functions.append(node)
        elif isinstance(node, ast.ClassDef):
            runs += _evaluated_on_definition(node)
            inner_runs, inner_functions = _definitions(node.body)
            runs += inner_runs
            functions += inner_functions
        else:
            runs.append(node)
    return runs, functions


def dead_definitions(tree: ast.Module, graded: frozenset[str]) -> list[ast.stmt]:
    """The functions of `tree` defined at its top level or in a class body (methods) that nothing reachable
    from `graded` (or from the module's and its classes' own statements) names, or that a later top-level
    definition of the same name replaces unused (`_shadowed`), in the module's order."""
    foreign = _imported(tree) | set(dir(builtins))
    shadowed = _shadowed(tree, foreign)
    runs, functions = _definitions(tree.body)
    definitions = [node for node in functions if id(node) not in shadowed]
    frontier = _names(runs)
    frontier |= _names(part for node in definitions for part in _evaluated_on_definition(node))
    frontier |= graded
    # Python calls a dunder method without naming it; a decorator of the module's own making may register
    # what it decorates on import
    frontier |= {
        node.name
        for node in definitions
        if _is_dunder(node.name) or _roots(node.decorator_list) - foreign
    }
    # each definition's names read once: the walk is linear in the module, however many names it has
    referenced: dict[str, set[str]] = {}
    for node in definitions:
        referenced.setdefault(node.name, set()).update(_names([node]))
    reachable: set[str] = set()
    while frontier:
        name = frontier.pop()
        if name not in reachable:
            reachable.add(name)
            frontier |= referenced.get(name, set()) - reachable
    if reachable & DYNAMIC:
        return []
    return [node for node in functions if id(node) in shadowed or node.name not in reachable]


def _occurrences(node: ast.AST) -> Counter:
    """How often `node` references each name (names, attributes, strings that are identifiers)."""
    counts: Counter = Counter()
    for child in ast.walk(node):
        if isinstance(child, ast.Name):
            counts[child.id] += 1
        elif isinstance(child, ast.Attribute):
            counts[child.attr] += 1
        elif (
            isinstance(child, ast.Constant)
            and isinstance(child.value, str)
            and child.value.isidentifier()
        ):
            counts[child.value] += 1
    return counts


def dead_nested(function: ast.FunctionDef | ast.AsyncFunctionDef) -> list[ast.stmt]:
    """The functions defined inside `function` (at any depth) that nothing in it outside themselves names:
    never called, whatever runs. One with a decorator (it may register what it decorates) or a dunder name
    (Python calls it unnamed) stays, and so does everything when `function` reaches names without naming
    them (DYNAMIC). A class defined inside is never dead: its body runs whenever its definition is reached."""
    counts = _occurrences(function)
    if set(counts) & DYNAMIC:
        return []
    dead = []
    for node in ast.walk(function):
        if (
            node is function
            or not isinstance(node, _FUNCTIONS)
            or node.decorator_list
            or _is_dunder(node.name)
        ):
            continue
        inside = _occurrences(node)
        if counts[node.name] - inside[node.name] == 0:
            dead.append(node)
    return dead


def dead_spans(source: str, graded: frozenset[str]) -> list[tuple[int, int]]:
    """The character spans (start, end) of `source`'s dead definitions (top-level functions and methods, and
    those nested in the live ones: `dead_nested`), each whole lines from its first decorator to its last line;
    none when `source` does not parse or `graded` is empty (nothing to reach from: everything counts)."""
    if not graded:
        return []
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return []
    # as Python numbers lines (not str.splitlines, which splits on \f too)
    lines = source.split("\n")
    starts = [0]
    for line in lines:
        starts.append(starts[-1] + len(line) + 1)
    dead = dead_definitions(tree, graded)
    gone = {id(node) for node in dead}
    live = [node for node in _definitions(tree.body)[1] if id(node) not in gone]
    spans = []
    for node in [*dead, *(nested for function in live for nested in dead_nested(function))]:
        first = min([node.lineno, *(d.lineno for d in node.decorator_list)])
        spans.append((starts[first - 1], starts[node.end_lineno] - 1))
    return spans
