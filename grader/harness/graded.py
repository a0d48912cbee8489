"""The student functions a test grades and the branches of them it rewards (dev-check's per-function
sampling rule, docs/rules.md).

Functions are inferred where that is safe: each `impl.<name>`, or `getattr(impl, "<name>")` (the name a
string, the case's parameter, or a string the caller hands on), in the test's body, and in the body of
a function of the test's module, or one a fixture returns (`return _check`), that the test hands
`impl` to, followed the same way. A test that hands `impl` anywhere else cannot be read: its marker
must declare `functions=(...)` (an entry "{name}" is the case's parameter `name`), or it declares
nothing dev-check can check. Branches (a refusal that returns None, an error raised) cannot be
inferred: the marker declares them, `branches=(...)`, with names a function's visible and hidden tests
share."""

from __future__ import annotations

import ast
import functools
import inspect
import textwrap

DEPTH = 3  # helpers handing impl on to helpers


@functools.cache
def _parsed(function):
    try:
        return ast.parse(textwrap.dedent(inspect.getsource(function)))
    except (OSError, TypeError, SyntaxError):
        return None


def _callee(name: str, scopes):
    for scope in scopes:
        found = scope.get(name)
        if inspect.isfunction(found):
            return found
    return None


def _uses(function, param: str, params: dict, scopes, depth: int) -> tuple[list[str], bool]:
    """The functions reached through `param` in `function`, and whether some use could not be read."""
    tree = _parsed(function)
    if tree is None or depth > DEPTH:
        return [], True
    named, read, unsafe = [], set(), False
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and _is(node.value, param):
            named.append(node.attr)
            read.add(id(node.value))
        elif isinstance(node, ast.Call) and any(_is(arg, param) for arg in node.args):
            handed = [i for i, arg in enumerate(node.args) if _is(arg, param)]
            read.update(id(node.args[i]) for i in handed)
            if isinstance(node.func, ast.Name) and node.func.id == "getattr" and handed == [0]:
                name = node.args[1] if len(node.args) > 1 else None
                if isinstance(name, ast.Constant) and isinstance(name.value, str):
                    named.append(name.value)
                elif isinstance(name, ast.Name) and isinstance(params.get(name.id), str):
                    named.append(params[name.id])
                else:
                    unsafe = True
                continue
            callee = _callee(node.func.id, scopes) if isinstance(node.func, ast.Name) else None
            if callee is None or len(handed) != 1:
                unsafe = True
                continue
            parameters = list(inspect.signature(callee).parameters)
            if handed[0] >= len(parameters):
                unsafe = True
                continue
            inner = [scopes[0], vars(inspect.getmodule(callee) or object())]
            handed_on = list(zip(parameters, node.args)) + [(k.arg, k.value) for k in node.keywords]
            constants = {
                name: arg.value if isinstance(arg, ast.Constant) else params[arg.id]
                for name, arg in handed_on
                if isinstance(arg, ast.Constant) or (isinstance(arg, ast.Name) and arg.id in params)
            }
            more, unread = _uses(callee, parameters[handed[0]], constants, inner, depth + 1)
            named += more
            unsafe |= unread
    bare = any(_is(node, param) and id(node) not in read for node in ast.walk(tree))
    return named, unsafe or bare


def _is(node, param: str) -> bool:
    return isinstance(node, ast.Name) and node.id == param


@functools.cache
def _returned(fixture):
    """The function of its module a fixture returns (`return _check`), or None."""
    tree = _parsed(fixture)
    body = tree.body[0].body if tree and isinstance(tree.body[0], ast.FunctionDef) else []
    if body and isinstance(body[-1], ast.Return) and isinstance(body[-1].value, ast.Name):
        returned = fixture.__globals__.get(body[-1].value.id)
        if inspect.isfunction(returned):
            return returned
    return None


def _fixtures(item) -> dict:
    """The test's fixtures that return a function of their module: those functions."""
    info = getattr(item, "_fixtureinfo", None)
    found = {}
    for name, definitions in (info.name2fixturedefs if info else {}).items():
        returned = _returned(getattr(definitions[-1].func, "__wrapped__", definitions[-1].func))
        if returned is not None:
            found[name] = returned
    return found


_READ: dict = {}  # (test function, its string parameters, its fixtures' functions): what _uses found


def graded_functions(item, declared) -> tuple[str, ...]:
    """The declared functions and those the test reaches; none when it hands `impl` on undeclared."""
    function = getattr(item, "function", None)
    params = getattr(getattr(item, "callspec", None), "params", {})
    if function is None:  # not a test function (nothing to read)
        named, unsafe = [], True
    else:
        fixtures = _fixtures(item)
        strings = {k: v for k, v in params.items() if isinstance(v, str)}
        key = (function, tuple(sorted(strings.items())), tuple(sorted(fixtures.items())))
        if key not in _READ:  # a parametrized function's cases mostly read alike
            _READ[key] = _uses(function, "impl", strings, [fixtures, vars(item.module)], 0)
        named, unsafe = _READ[key]
    if unsafe and not declared:
        return ()
    # "{name}": the function a parametrized case names in its parameter `name`
    return tuple(dict.fromkeys([*(entry.format(**params) for entry in declared), *named]))
