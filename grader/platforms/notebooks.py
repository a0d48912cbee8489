"""Exercise notebooks for nbgrader: one notebook per exercise, built from its reference and its tests,
and the runner its test cells use in the kernel.

Every cell has nbgrader metadata and the grade id `<exercise id>--<role>[-<name>]`, in the module's order:

    setup           locked code: force the 8 host devices before jax is imported, load the test magics
    text            markdown: the module docstring, the exercise's text
    given-<k>       locked code: the reference's code outside solution functions (imports, given functions)
    solution-<fn>   solution: the function, its answer between ### BEGIN SOLUTION / ### END SOLUTION
    tests-setup     locked code: the exercise's conftest.py and the visible tests' module code
    test-<fn>       graded, locked: one visible test function, in the clear
    hidden-<fn>     graded, locked: one hidden test function with the hidden file's module code, all between
                    ### BEGIN HIDDEN TESTS / ### END HIDDEN TESTS

The given and solution cells, concatenated in order, are the reference module again (less its docstring).
The test cells carry the very code pytest runs from tests/exercises/<id>/: in the kernel, a test cell
writes it back into files and runs real pytest with shardlab's plugin on the notebook's namespace, so
parametrization, fixtures, markers and hypothesis work as in any other grading. A test cell's value is
the points it earned (nbgrader reads a number as partial credit); a cell where nothing passed raises.

The setup cell's `%load_ext grader.platforms.notebooks` registers two cell magics. The tests-setup cell is
`%%shardlab_tests_setup <id>` followed by files, each starting at a `# ---- <file name> ----` line; a
test cell is `%%shardlab_test <id>/<test file>::<function> --points <points>` followed by the function
(a hidden one, as released, by nothing: its code comes back when nbgrader grades it).
"""

from __future__ import annotations

import ast
import contextlib
import hashlib
import io
import re
import shlex
import sys
import tempfile
import types
import warnings
from dataclasses import dataclass
from pathlib import Path

import nbformat

from grader.core.errors import ShardlabError
from grader.core.results import TestMeta, TestResult, function_name
from grader.course import catalog, devices, stubs
from grader.harness import runner
from grader.reports.text import explained_once

SCHEMA_VERSION = 3
HIDDEN_BEGIN, HIDDEN_END = "### BEGIN HIDDEN TESTS", "### END HIDDEN TESTS"
TEST_FILES = ("test_visible.py", "test_hidden.py")
SETUP_MAGIC, TEST_MAGIC = "shardlab_tests_setup", "shardlab_test"
_SECTION = re.compile(r"^# ---- (?P<file>[\w.]+) ----$", re.MULTILINE)

NOTEBOOK = (
    "this notebook"  # where a device-count request is to be removed from, in a notebook's kernel
)
KERNELSPEC = {"name": "python3", "display_name": "Python 3 (ipykernel)", "language": "python"}


# ---- cutting sources into top-level chunks ---------------------------------------------------------


@dataclass(frozen=True)
class Chunk:
    """One top-level statement with the comments above it, and how many blank lines preceded it."""

    node: ast.stmt
    text: str
    blank_lines_before: int

    @property
    def name(self) -> str:
        return getattr(self.node, "name", "")

    @property
    def is_definition(self) -> bool:
        return isinstance(self.node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef)

    @property
    def is_docstring(self) -> bool:
        return (
            isinstance(self.node, ast.Expr)
            and isinstance(self.node.value, ast.Constant)
            and isinstance(self.node.value.value, str)
        )

    @property
    def is_test(self) -> bool:
        return isinstance(
            self.node, ast.FunctionDef | ast.AsyncFunctionDef
        ) and self.name.startswith("test")


def top_level_chunks(source: str) -> list[Chunk]:
    """Each chunk runs from the end of the previous statement to the end of its own, so comments travel
    with the statement below them and the chunks together hold every line of the file."""
    lines = source.splitlines()
    chunks, end = [], 0
    for node in ast.parse(source).body:
        stop = node.end_lineno
        # Indented comments after a block's last statement (### END SOLUTION) still belong to the block.
        for number in range(stop, len(lines)):
            if lines[number].strip() and not (
                lines[number][:1].isspace() and lines[number].lstrip()[:1] == "#"
            ):
                break
            if lines[number].strip():
                stop = number + 1
        segment = lines[end:stop]
        blank = 0
        while segment and not segment[0].strip():
            segment.pop(0)
            blank += 1
        chunks.append(Chunk(node, "\n".join(segment), blank))
        end = stop
    return chunks


def joined(chunks: list[Chunk]) -> str:
    """Chunks back into source, with the blank lines they had (at most two)."""
    parts = []
    for chunk in chunks:
        if parts:
            parts.append("\n" * (min(chunk.blank_lines_before, 2) + 1))
        parts.append(chunk.text)
    return "".join(parts)


@dataclass(frozen=True)
class ModuleParts:
    """A reference module as notebook cells: its docstring, then given code and solution functions in order."""

    docstring: str
    # (role, name, source): ("given", "1", ...) or ("solution", fn, ...)
    cells: list[tuple[str, str, str]]


def solution_parts(source: str) -> ModuleParts:
    """Given code runs into one cell until a definition, which gets a cell of its own; a function holding
    a solution block is a solution cell."""
    docstring, cells, given, count = "", [], [], 0

    def flush():
        nonlocal count
        if given:
            count += 1
            cells.append(("given", str(count), joined(given)))
            given.clear()

    for index, chunk in enumerate(top_level_chunks(source)):
        if index == 0 and chunk.is_docstring:
            docstring = ast.get_docstring(ast.Module([chunk.node], []), clean=True) or ""
        elif stubs.BEGIN in chunk.text:
            if not isinstance(chunk.node, ast.FunctionDef):
                raise ValueError(
                    f"a solution block must sit inside a top-level function, not in:\n{chunk.text}"
                )
            flush()
            cells.append(("solution", chunk.name, chunk.text))
        else:
            if chunk.is_definition or (given and given[-1].is_definition):
                flush()
            given.append(chunk)
    flush()
    return ModuleParts(docstring, cells)


@dataclass(frozen=True)
class TestFileParts:
    module_code: str  # everything but the docstring and the test functions
    functions: dict[str, str]  # test function name -> its source with decorators and comments


def test_file_parts(source: str) -> TestFileParts:
    chunks = top_level_chunks(source)
    if chunks and chunks[0].is_docstring:
        chunks = chunks[1:]
    for chunk in chunks:
        if isinstance(chunk.node, ast.ClassDef) and chunk.name.startswith("Test"):
            raise ValueError(f"test class {chunk.name}: notebooks take test functions only")
    return TestFileParts(
        joined([c for c in chunks if not c.is_test]), {c.name: c.text for c in chunks if c.is_test}
    )


# ---- points ----------------------------------------------------------------------------------------


def function_points(
    exercise: catalog.Exercise, tests: list[TestMeta]
) -> dict[tuple[str, str], float]:
    """(test file, function) -> its share of the exercise's catalog points: a function weighs the sum
    of its cases' weights (from collection, grader.grading.collection.collect_tests)."""
    weights: dict[tuple[str, str], float] = {}
    for test in tests:
        if test.exercise == exercise.id:
            key = (Path(test.nodeid.partition("::")[0]).name, function_name(test.nodeid))
            weights[key] = weights.get(key, 0.0) + test.weight
    # sums of cases' float shares
    weights = {key: round(weight, 9) for key, weight in weights.items()}
    total = sum(weights.values())
    if not total:
        raise ValueError(f"{exercise.id}: no tests were collected")
    return {key: exercise.points * weight / total for key, weight in weights.items()}


# ---- building a notebook ---------------------------------------------------------------------------


def grade_id(exercise: catalog.Exercise, role: str, name: str = "") -> str:
    return f"{exercise.id}--{role}-{name}" if name else f"{exercise.id}--{role}"


def _cell(
    exercise: catalog.Exercise,
    role: str,
    name: str,
    source: str,
    *,
    markdown=False,
    grade=False,
    solution=False,
    points=None,
):
    """A cell with nbgrader metadata; every cell but a solution is locked."""
    gid = grade_id(exercise, role, name)
    meta = {
        "grade": grade,
        "solution": solution,
        "locked": not solution,
        "grade_id": gid,
        "schema_version": SCHEMA_VERSION,
    }
    if points is not None:
        meta["points"] = points
    make = nbformat.v4.new_markdown_cell if markdown else nbformat.v4.new_code_cell
    cell = make(source, metadata={"nbgrader": meta})
    # Cell ids are at most 64 characters; deriving them from the grade id keeps builds deterministic.
    cell.id = gid if len(gid) <= 64 else f"{gid[:55]}-{hashlib.sha1(gid.encode()).hexdigest()[:8]}"
    return cell


SETUP_SOURCE = """\
# The course grades on 8 host CPU devices: they must be forced before anything imports jax.
from grader.course.devices import force_host_devices, verify_host_devices

force_host_devices()
verify_host_devices()   # fails here if jax had already started with another device count
%load_ext grader.platforms.notebooks"""


def tests_setup_source(
    exercise: catalog.Exercise, support: dict[str, str], visible_module_code: str
) -> str:
    """support: the files the tests run beside (conftest.py, driver.py), by name."""
    sections = [
        f"%%{SETUP_MAGIC} {exercise.id}",
        "# What the tests below need besides their own code: the files they run beside.",
        *(f"# ---- {name} ----\n{text.strip()}" for name, text in support.items()),
        f"# ---- test_visible.py ----\n{visible_module_code}",
    ]
    return "\n".join(sections)


def test_cell_source(
    exercise: catalog.Exercise, file: str, function: str, code: str, points: float
) -> str:
    return f"%%{TEST_MAGIC} {exercise.id}/{file}::{function} --points {points!r}\n{code}"


def exercise_notebook(exercise: catalog.Exercise, tests: list[TestMeta]) -> nbformat.NotebookNode:
    """The exercise's notebook; `tests` is collect_tests()'s metadata (for each test function's points)."""
    parts = solution_parts(exercise.solution_path().read_text())
    files = {
        name: test_file_parts((exercise.tests_dir() / name).read_text()) for name in TEST_FILES
    }
    support = {path.name: path.read_text() for path in exercise.support_files()}
    points = function_points(exercise, tests)
    hidden = {
        function_name(test.nodeid) for test in tests if test.exercise == exercise.id and test.hidden
    }

    cells = [
        _cell(exercise, "setup", "", SETUP_SOURCE),
        _cell(exercise, "text", "", parts.docstring, markdown=True),
    ]
    for role, name, source in parts.cells:
        cells.append(_cell(exercise, role, name, source, solution=role == "solution"))
    cells.append(
        _cell(
            exercise,
            "tests-setup",
            "",
            tests_setup_source(exercise, support, files["test_visible.py"].module_code),
        )
    )
    for file, role in (("test_visible.py", "test"), ("test_hidden.py", "hidden")):
        for function, code in files[file].functions.items():
            if (function in hidden) != (role == "hidden"):
                raise ValueError(
                    f"{exercise.id}: {function} is in {file} but is "
                    f"{'' if function in hidden else 'not '}marked hidden"
                )
            if (file, function) not in points:
                raise ValueError(f"{exercise.id}: {file}::{function} was not collected")
            if role == "hidden":  # hidden helpers travel inside the hidden block, never to students
                code = f"{HIDDEN_BEGIN}\n{files[file].module_code}\n\n\n{code}\n{HIDDEN_END}"
            share = points[(file, function)]
            cells.append(
                _cell(
                    exercise,
                    role,
                    function,
                    test_cell_source(exercise, file, function, code, share),
                    grade=True,
                    points=share,
                )
            )
    notebook = nbformat.v4.new_notebook(cells=cells)
    notebook.metadata.update(
        kernelspec=KERNELSPEC,
        language_info={"name": "python"},
        shardlab={"exercise": exercise.id, "points": exercise.points},
    )
    return notebook


def role_of(cell) -> tuple[str, str]:
    """("hidden", "test_layer_auto_values") from a cell's grade id; ("", "") for a cell of no exercise."""
    found = cell.get("metadata", {}).get("nbgrader", {}).get("grade_id", "")
    _, sep, role = found.partition("--")
    if not sep:
        return "", ""
    if role in ("setup", "text", "tests-setup"):
        return role, ""
    kind, _, name = role.partition("-")
    return kind, name


# ---- running test cells in the kernel --------------------------------------------------------------

# exercise id -> {file name: source}, from the tests-setup cell
_setups: dict[str, dict[str, str]] = {}
_namespace: types.SimpleNamespace | None = None  # what the `impl` fixture returns during a run

IMPL_CONFTEST = '''"""The implementation under test is the notebook itself."""
import pytest

from grader.platforms import notebooks


@pytest.fixture
def impl():
    return notebooks.namespace_under_test()
'''

PYTEST_INI = "[pytest]\naddopts = --import-mode=importlib\nxfail_strict = true\n"


def namespace_under_test() -> types.SimpleNamespace:
    if _namespace is None:
        raise RuntimeError("no notebook is under test: run the test cells of the notebook")
    return _namespace


class TestCellFailed(ShardlabError, AssertionError):
    """No test case of the cell passed. The message is the report; IPython shows it without a traceback."""

    __test__ = False  # not a pytest test class

    def _render_traceback_(self) -> list[str]:
        return [f"{type(self).__name__}: no test case of this cell passed", str(self)]


@dataclass(frozen=True)
class CellResult:
    tests: list[TestResult]  # as the plugin records them (grader.harness.runner.read_results)
    points: float  # the cell's maximum

    @property
    def earned(self) -> float:
        total = sum(t.weight for t in self.tests)
        passed = sum(t.weight for t in self.tests if t.passed)
        if total and passed == total:
            return self.points
        return min(self.points, self.points * passed / total) if total else 0.0

    @property
    def any_passed(self) -> bool:
        return any(t.passed for t in self.tests)

    def report(self) -> str:
        lines = []
        explained = explained_once(self.tests)
        for test in self.tests:
            lines.append(f"{test.name}: {test.category}")
            if not test.passed and test.message:
                lines += ["    " + line for line in test.message.splitlines()]
            if not test.passed and test.nodeid in explained:
                lines += ["    " + line for line in explained[test.nodeid].splitlines()]
            if fig := test.speedup:
                lines.append(
                    f"    speedup {fig.speedup:.2f}x (IQR {fig.spread[0]:.2f}-{fig.spread[1]:.2f}), "
                    f"threshold {fig.threshold:.2f}x, {fig.devices} devices on {fig.cores} cores "
                    f"[{fig.policy}: {'met' if fig.met else 'not met'}]"
                )
        passed = sum(t.passed for t in self.tests)
        lines.append(
            f"{passed} of {len(self.tests)} passed: {self.earned:.4g} of {self.points:.4g} points"
        )
        return "\n".join(lines)


def run_tests(
    exercise_id: str,
    files: dict[str, str],
    namespace: dict,
    *,
    points: float,
    module_source: str | None = None,
) -> CellResult:
    """Run real pytest with shardlab's plugin on `files` (name -> source, laid out in a folder named by the
    exercise id) against `namespace`. Safe to call again and again in one process: the modules pytest
    imported from the files are forgotten afterwards. `module_source`, the notebook's code as a module,
    is what tests that start processes of their own run (ex12); the others test `namespace`."""
    global _namespace
    import pytest

    catalog.get(exercise_id)  # an unknown id would silently lose the exercise's markers and devices
    with tempfile.TemporaryDirectory(prefix="shardlab-cell-") as tmp:
        root = Path(tmp)
        folder = root / exercise_id
        folder.mkdir()
        for name, source in files.items():
            (folder / name).write_text(source)
        (root / "conftest.py").write_text(IMPL_CONFTEST)
        if module_source is not None:
            (root / f"{exercise_id}.py").write_text(module_source)
        (root / "pytest.ini").write_text(PYTEST_INI)
        results = root / "results.json"
        # No faulthandler: the kernel keeps its own.
        args = runner.pytest_arguments(
            [folder],
            impl=root,
            results=results,
            rootdir=root,
            config=root / "pytest.ini",
            plugins=("grader.harness.pytest_plugin", "no:faulthandler"),
        )
        before = set(sys.modules)
        output = io.StringIO()
        _namespace = types.SimpleNamespace(**namespace)
        try:
            with (
                contextlib.redirect_stdout(output),
                contextlib.redirect_stderr(output),
                warnings.catch_warnings(),
            ):
                warnings.simplefilter("ignore")
                code = pytest.main(args)
        finally:
            _namespace = None
            _forget_modules(root, exercise_id, sys.modules.keys() - before)
        if code == pytest.ExitCode.INTERRUPTED:
            raise KeyboardInterrupt("the tests were interrupted")
        if not results.is_file() or code not in (pytest.ExitCode.OK, pytest.ExitCode.TESTS_FAILED):
            raise RuntimeError(
                f"the tests could not run (pytest exit code {code}):\n{output.getvalue()[-3000:]}"
            )
        tests = runner.read_results(results)
    if not tests:
        raise RuntimeError(f"no test ran:\n{output.getvalue()[-3000:]}")
    return CellResult(tests, points)


def _forget_modules(root: Path, exercise_id: str, names) -> None:
    """Test modules live in sys.modules under names that the next cell's files would reuse."""
    for name in names:
        module = sys.modules.get(name)
        origin = getattr(module, "__file__", None) or ""
        if name.split(".")[0] in (exercise_id, "conftest", "test_visible", "test_hidden") or Path(
            origin
        ).is_relative_to(root):
            del sys.modules[name]


def split_sections(body: str) -> dict[str, str]:
    """The tests-setup cell's body: `# ---- conftest.py ----` starts a file."""
    marks = list(_SECTION.finditer(body))
    return {
        m["file"]: body[m.end() : marks[i + 1].start() if i + 1 < len(marks) else None].strip()
        + "\n"
        for i, m in enumerate(marks)
    }


def tests_setup_magic(line: str, cell: str) -> None:
    """%%shardlab_tests_setup EXERCISE_ID: remember the files the exercise's test cells run beside."""
    exercise_id = line.strip()
    catalog.get(exercise_id)
    _setups[exercise_id] = split_sections(cell)


def test_magic(line: str, cell: str, namespace: dict) -> float | None:
    """%%shardlab_test EXERCISE_ID/FILE::FUNCTION --points P: run the test function in the cell's body."""
    words = shlex.split(line)
    target, points = words[0], float(words[words.index("--points") + 1])
    path, function = target.partition("::")[0], function_name(target)
    exercise_id, file = path.split("/")
    if function not in cell:  # a hidden test cell as released: its code is added when it is graded
        print(f"{function}: hidden test, run when your notebook is graded")
        return None
    setup = _setups.get(exercise_id)
    if setup is None:
        raise RuntimeError(
            f"run the tests-setup cell of {exercise_id} first (the cell above the tests)"
        )
    files = {name: setup[name] for name in catalog.SUPPORT_FILES if name in setup}
    files[file] = f"{setup['test_visible.py']}\n\n{cell}" if file == "test_visible.py" else cell
    result = run_tests(
        exercise_id, files, namespace, points=points, module_source=notebook_module(namespace)
    )
    if not result.any_passed:
        raise TestCellFailed(result.report())
    print(result.report())
    return result.earned


def notebook_module(namespace: dict) -> str:
    """The code this kernel has run, less IPython's own (the setup and test cells, which are magics): the
    notebook as a module, in the order its cells ran, for the tests that run it in other processes."""
    ran = namespace.get("In", [])
    return (
        "\n\n".join(
            c for c in ran[1:] if isinstance(c, str) and c.strip() and "get_ipython()" not in c
        )
        + "\n"
    )


def load_ipython_extension(ipython) -> None:
    """`%load_ext grader.platforms.notebooks` (the setup cell) registers the cell magics of the test cells,
    and gives the kernel the device-count rule every route applies to a student's module."""
    devices.refuse_other_requests(NOTEBOOK)
    ipython.register_magic_function(tests_setup_magic, "cell", SETUP_MAGIC)
    ipython.register_magic_function(
        lambda line, cell: test_magic(line, cell, ipython.user_ns), "cell", TEST_MAGIC
    )
