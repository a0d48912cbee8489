"""Every program the grader starts and every piece of code it loads is one docs/trust-model.md lists and
justifies ("What the trusted side reads of a submission"): found in the code by its calls, so that a new
`subprocess.run(["git", ...])` over a submission fails here until it is written down and argued for
(tests/grader/hostile/test_intake.py watches the readers themselves run over a hostile submission).
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

from grader.course import paths

GRADER = paths.REPO_ROOT / "grader"
TRUST_MODEL = paths.REPO_ROOT / "docs" / "trust-model.md"
# What starts a program or loads code, by the name a call resolves to through the module's imports.
OS_EXECS = ("execl", "execle", "execlp", "execlpe", "execv", "execve", "execvp", "execvpe")
OS_SPAWNS = ("spawnl", "spawnle", "spawnlp", "spawnlpe", "spawnv", "spawnve", "spawnvp", "spawnvpe")
STARTS_OR_LOADS = frozenset(
    {
        *(f"subprocess.{n}" for n in ("run", "Popen", "call", "check_call", "check_output")),
        "subprocess.getoutput",
        "subprocess.getstatusoutput",
        *(f"os.{n}" for n in (*OS_EXECS, *OS_SPAWNS)),
        *(f"os.{n}" for n in ("system", "popen", "fork", "forkpty", "posix_spawn", "posix_spawnp")),
        "pty.spawn",
        "pty.fork",
        "asyncio.create_subprocess_exec",
        "asyncio.create_subprocess_shell",
        "multiprocessing.Process",
        "multiprocessing.Pool",
        "concurrent.futures.ProcessPoolExecutor",
        "exec",
        "eval",
        "__import__",
        "importlib.import_module",
        "importlib.util.spec_from_file_location",
        "importlib.machinery.SourceFileLoader",
        "runpy.run_path",
        "runpy.run_module",
        "ctypes.CDLL",
        "ctypes.cdll.LoadLibrary",
    }
)
ROW = re.compile(r"^\| (grader/[\w/]+\.py) \| ([\w.<>]+) \| ([\w.]+) \| .+ \|$")


def imported_names(tree: ast.Module) -> dict[str, str]:
    names = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                top = alias.name.split(".")[0]
                names[alias.asname or top] = alias.name if alias.asname else top
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            for alias in node.names:
                names[alias.asname or alias.name] = f"{node.module}.{alias.name}"
    return names


def call_sites(path: Path, root: Path = paths.REPO_ROOT) -> set[tuple[str, str, str]]:
    """(module, enclosing function, what it calls) for each call in `path` that starts or loads code."""
    tree = ast.parse(path.read_text(), str(path))
    names = imported_names(tree)
    module = str(path.relative_to(root))

    def resolved(func: ast.expr) -> str | None:
        parts = []
        while isinstance(func, ast.Attribute):
            parts.append(func.attr)
            func = func.value
        if not isinstance(func, ast.Name):
            return None
        return ".".join([names.get(func.id, func.id), *reversed(parts)])

    found = set()

    def walk(node: ast.AST, scope: tuple[str, ...]) -> None:
        for child in ast.iter_child_nodes(node):
            inner = scope
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                inner = (*scope, child.name)
            elif isinstance(child, ast.Call) and resolved(child.func) in STARTS_OR_LOADS:
                found.add((module, ".".join(scope) or "<module>", resolved(child.func)))
            walk(child, inner)

    walk(tree, ())
    return found


def documented() -> set[tuple[str, str, str]]:
    rows = (ROW.match(line) for line in TRUST_MODEL.read_text().splitlines())
    return {row.groups() for row in rows if row}


def test_every_program_started_and_code_loaded_is_listed_in_the_trust_model():
    found = set().union(*(call_sites(p) for p in sorted(GRADER.rglob("*.py"))))
    listed = documented()
    assert found - listed == set(), (
        "starts a program or loads code without a row in docs/trust-model.md's list (say over what it "
        "runs and why that runs none of a student's code)"
    )
    assert listed - found == set(), "listed in docs/trust-model.md but no longer in the code"


def test_the_finder_sees_every_way_of_starting_a_program(tmp_path):
    """The finder itself: aliases, from-imports and nesting are resolved, so that no row can be dodged."""
    probe = tmp_path / "probe.py"
    probe.write_text(
        "import subprocess as sp\nfrom os import system\nimport importlib\n"
        "class A:\n    def f(self):\n        def g():\n            sp.check_output(['git'])\n"
        "        system('x')\n"
        "importlib.import_module('m')\n"
        "run = print\nrun('not a program')\n"
    )
    assert call_sites(probe, tmp_path) == {
        ("probe.py", "A.f.g", "subprocess.check_output"),
        ("probe.py", "A.f", "os.system"),
        ("probe.py", "<module>", "importlib.import_module"),
    }
