"""The one check that nothing secret ships, used by every builder before its output is handed over.

    leaks = find_leaks({"grader/cli.py": text, ...}, HANDOUT)    # [] when nothing leaks
    refuse_leaks(files, GRADESCOPE)                               # raises LeaksFound naming file and line

What is secret comes from the course tree (course_secrets): the lines between ### BEGIN SOLUTION and
### END SOLUTION in solutions/, and the hidden tests: their lines, the test functions and classes only
they define, and the marker that makes a test hidden. Not secret: lines every student holds anyway (the
stubs, the visible tests, the conftest files), lines a builder ships by design (Gradescope's hidden
tests), and lines too common to say where they come from: shorter than MIN_DISTINCTIVE, one that only opens a
call (the formatter's head of a statement), or, in a hidden test, an import or a bare name (the grader's
public API, which the grader's own code writes too).

Every builder's policy is declared here, once:

- HANDOUT (`shardlab release`): no solution line and no hidden test (no test_hidden.py, none of its
  distinctive lines, no definition of a test only it defines, no hidden marker).
- GRADESCOPE (the autograder zip): no solution line. Its hidden tests ship: it grades with them.
- NBGRADER_RELEASE (each notebook as `nbgrader generate_assignment` releases it): as the handout.

Whatever the policy: no solutions/ folder and no compiled file (.pyc, __pycache__), whose solution
text the line check could not see.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from grader.core.errors import ShardlabError
from grader.course import catalog, paths, stubs

# Lines this short ("return out", "entries = []") are what anyone writes; longer ones identify their source.
MIN_DISTINCTIVE = 20
# Imports and bare names ("assert_sharded_like,") of hidden tests are the grader's public API, not a test.
NOT_DISTINCTIVE = re.compile(r"(import|from)\s.*|[\w.]+,?\)?")
# A line that only opens a call, a list or a dict ("return jax.make_mesh(", "out = dict("): the
# formatter's head of a longer statement, whose content (the lines below it) is what is distinctive.
OPENING_ONLY = re.compile(r"(return\s+)?([\w.\[\]]+\s*=\s*)?[\w.]+\s*[(\[{]")
# Written as a pattern so that this module, shipped in the handout's grader/, does not hold the marker.
HIDDEN_MARKER = re.compile(r"pytest\s*\.\s*mark\s*\.\s*hidden\b")
HIDDEN_TEST_FILE = "test_hidden.py"
COMPILED_SUFFIXES = (".pyc", ".pyo")


@dataclass(frozen=True)
class Policy:
    """What one builder's output may hold beyond what every student holds."""

    output: str  # what the builder writes, for messages
    hidden_tests: bool  # the hidden tests ship (their files, lines, definitions and marker)


HANDOUT = Policy("the student handout", hidden_tests=False)
GRADESCOPE = Policy("the Gradescope autograder", hidden_tests=True)
NBGRADER_RELEASE = Policy("a released nbgrader notebook", hidden_tests=False)


@dataclass(frozen=True)
class CourseSecrets:
    """What must not ship, as found in one course tree; each line stripped, with where it is written."""

    # line -> "solutions/ex01_meshes.py:77", distinctive and not public
    solution_lines: dict[str, str]
    hidden_lines: dict[str, str]  # line -> "tests/exercises/<id>/test_hidden.py:12", likewise
    hidden_names: frozenset[str]  # test functions and classes only the hidden tests define
    # every line of the exercises' test folders (Gradescope ships them)
    test_folder_lines: frozenset[str]

    def lines(self, policy: Policy) -> dict[str, str]:
        """The lines no file may hold under `policy`, with where each is written."""
        if policy.hidden_tests:
            return {
                line: where
                for line, where in self.solution_lines.items()
                if line not in self.test_folder_lines
            }
        return self.hidden_lines | self.solution_lines

    def definitions(self, policy: Policy) -> re.Pattern | None:
        """A hidden test defined again. Its name alone is no secret: students see it in their feedback."""
        if policy.hidden_tests or not self.hidden_names:
            return None
        names = sorted(self.hidden_names, key=len, reverse=True)
        return re.compile(r"\b(?:def|class)\s+(" + "|".join(map(re.escape, names)) + r")\b")


@dataclass(frozen=True)
class Leak:
    """One thing a builder's output must not hold: where ("file:line" or a file or folder), and what."""

    where: str
    what: str

    def __str__(self) -> str:
        return f"{self.where}: {self.what}"


class LeaksFound(ShardlabError, ValueError):
    """A builder's output would hold a secret; the leaks are in `.leaks`, one per line of the message.
    A ValueError, so that `shardlab nbgrader build` reports it as it reports its other refusals."""

    def __init__(self, policy: Policy, leaks: list[Leak]):
        self.leaks = leaks
        super().__init__(
            f"{policy.output} would reveal what students must not see, so nothing was written:\n  "
            f"{listing(leaks)}"
        )


def listing(leaks: list[Leak], limit: int = 40) -> str:
    """The leaks one per line (indented after the first), at most `limit` of them."""
    more = f"\n  ... and {len(leaks) - limit} more" if len(leaks) > limit else ""
    return "\n  ".join(map(str, leaks[:limit])) + more


# ------------------------------------------------------------------------------ the course's secrets


def course_secrets(root: Path = paths.REPO_ROOT) -> CourseSecrets:
    """The secrets of the course tree at `root` (its solutions/ and tests/exercises/)."""
    tests = root / "tests" / "exercises"
    solutions = [exercise.solution_path(root / "solutions") for exercise in catalog.EXERCISES]
    hidden = [exercise.tests_dir(tests) / HIDDEN_TEST_FILE for exercise in catalog.EXERCISES]
    if not all(path.is_file() for path in solutions + hidden):
        raise FileNotFoundError(
            f"finding what must not ship needs every exercise's reference solution and "
            f"hidden tests: some are missing under {root}"
        )
    public = public_files(root)
    public_lines = {line.strip() for path in public for line in path.read_text().splitlines()}
    solution_lines: dict[str, str] = {}
    for path in solutions:
        for number, line in stubs.solution_lines(path.read_text()):
            if (
                len(line) >= MIN_DISTINCTIVE
                and not OPENING_ONLY.fullmatch(line)
                and line not in public_lines
            ):
                solution_lines.setdefault(line, f"{path.relative_to(root).as_posix()}:{number}")
    hidden_lines: dict[str, str] = {}
    for path in hidden:
        for number, line in enumerate(path.read_text().splitlines(), start=1):
            line = line.strip()
            if _distinctive(line) and line not in public_lines:
                hidden_lines.setdefault(line, f"{path.relative_to(root).as_posix()}:{number}")
    visible_names = {name for path in public for name in _test_names(path)}
    hidden_names = {name for path in hidden for name in _test_names(path)} - visible_names
    folder_lines = {
        line.strip()
        for exercise in catalog.EXERCISES
        for path in exercise.tests_dir(tests).glob("*.py")
        for line in path.read_text().splitlines()
    }
    return CourseSecrets(
        solution_lines, hidden_lines, frozenset(hidden_names), frozenset(folder_lines)
    )


def _distinctive(line: str) -> bool:
    return (
        len(line) >= MIN_DISTINCTIVE
        and not NOT_DISTINCTIVE.fullmatch(line)
        and not OPENING_ONLY.fullmatch(line)
    )


def public_files(root: Path) -> list[Path]:
    """What every student holds: the root conftest.py, the stubs, the visible tests and the files they run beside."""
    tests = root / "tests" / "exercises"
    files = [root / "conftest.py"]
    for exercise in catalog.EXERCISES:
        files += [
            exercise.stub_path(root / "exercises"),
            exercise.tests_dir(tests) / "test_visible.py",
        ]
        files += exercise.support_files(tests)
    return files


def _test_names(path: Path) -> set[str]:
    """Test functions and classes a file defines, at any depth."""
    tree = ast.parse(path.read_text(), str(path))
    return {
        node.name
        for node in ast.walk(tree)
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
        and node.name.startswith("test")
        or isinstance(node, ast.ClassDef)
        and node.name.startswith("Test")
    }


# ------------------------------------------------------------------------------------------ the check


def find_leaks(
    files: Mapping[str, str | bytes], policy: Policy, secrets: CourseSecrets | None = None
) -> list[Leak]:
    """Every leak in `files` (each name, a "/"-separated path in the output, with its contents; a name
    ending in "/" is a folder) under `policy`, against `secrets` (default: this course's)."""
    secrets = secrets or course_secrets()
    lines = secrets.lines(policy)
    definitions = secrets.definitions(policy)
    leaks = _folder_leaks(files)
    for name, contents in files.items():
        if name.endswith("/"):
            continue
        path = PurePosixPath(name)
        if path.suffix in COMPILED_SUFFIXES or "__pycache__" in path.parts:
            leaks.append(Leak(name, "a compiled file, whose text the line check cannot read"))
        if path.name == HIDDEN_TEST_FILE and not policy.hidden_tests:
            leaks.append(Leak(name, "a hidden test file"))
        text = (
            contents.decode("utf-8", errors="replace") if isinstance(contents, bytes) else contents
        )
        for number, line in enumerate(text.splitlines(), start=1):
            leaks += _line_leaks(f"{name}:{number}", line, lines, definitions, policy)
    return leaks


def _folder_leaks(files: Mapping[str, str | bytes]) -> list[Leak]:
    folders = {PurePosixPath(name.rstrip("/")) for name in files if name.endswith("/")}
    folders |= {parent for name in files for parent in PurePosixPath(name.rstrip("/")).parents}
    return [
        Leak(f"{folder}/", "a solutions folder")
        for folder in sorted(folders)
        if folder.name == "solutions"
    ]


def _line_leaks(
    where: str, line: str, lines: dict[str, str], definitions: re.Pattern | None, policy: Policy
) -> list[Leak]:
    found = []
    stripped = line.strip()
    if stripped in lines:
        found.append(Leak(where, f"a line of {lines[stripped]}: {stripped[:80]}"))
    if not policy.hidden_tests and HIDDEN_MARKER.search(line):
        found.append(Leak(where, "marks a test as hidden"))
    if definitions and (match := definitions.search(line)):
        found.append(Leak(where, f"defines the hidden test {match.group(1)}"))
    return found


def refuse_leaks(
    files: Mapping[str, str | bytes], policy: Policy, secrets: CourseSecrets | None = None
) -> None:
    """Raise LeaksFound when `files` hold anything `policy` forbids."""
    if leaks := find_leaks(files, policy, secrets):
        raise LeaksFound(policy, leaks)


__all__ = [
    "GRADESCOPE",
    "HANDOUT",
    "NBGRADER_RELEASE",
    "CourseSecrets",
    "Leak",
    "LeaksFound",
    "Policy",
    "course_secrets",
    "find_leaks",
    "listing",
    "refuse_leaks",
]
