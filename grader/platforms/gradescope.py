"""The Gradescope autograder: `shardlab gradescope build autograder.zip`.

What Gradescope does with it (gradescope-autograders.readthedocs.io, "Autograder Specifications" and
"Base Images"): it builds a Docker image, Ubuntu 22.04 by default, from a zip with `setup.sh` and
`run_autograder` at its root. The zip is unpacked in /autograder/source, and setup.sh runs once, as
root, while the image is built. For each submission, run_autograder (copied to
/autograder/run_autograder) runs with /autograder as its working folder and the student's files in
/autograder/submission. It must write /autograder/results/results.json, or Gradescope shows only "The
autograder failed to execute correctly". Whatever it prints goes to /autograder/results/stdout, which
only instructors see.

The zip holds the course as grading uses it: the grader package, every exercise's tests (visible and
hidden, with their conftests), the root conftest.py, and pyproject.toml with the README it names, so
that setup.sh can `pip install -e` the project with its pinned dependencies. It holds neither solutions/
nor exercises/. Grading reads neither, since submissions bring their own modules, and the stubs belong
to the student handout. verify_autograder_zip checks all this, and the build refuses any zip it finds
fault with.

On Gradescope, give the assignment more than the default resources (Autograder Settings): 2 CPUs for 8
forced host devices, and 2 GB of memory, since a grading child peaked at 480 MB here, close to the
default 768 MB. Grading a fully correct submission took 26 s here on 2 cores. run_autograder stops
the tests after 420 s and the grader after 510 s, under Gradescope's default 10-minute timeout (its
header says how to raise them).
"""

from __future__ import annotations

import os
import stat
import zipfile
from pathlib import Path, PurePosixPath

from grader.course import catalog, paths, stubs

TEMPLATES = Path(__file__).with_name("gradescope_templates")
SCRIPTS = ("setup.sh", "run_autograder")              # at the zip's root, executable: Gradescope's entry points
ROOT_FILES = ("pyproject.toml", "README.md", "conftest.py")   # pyproject names the README: pip needs both
REQUIRED_GRADER_FILES = ("grader/__init__.py", "grader/cli.py", "grader/course/paths.py")
MIN_SECRET_CHARS = 20   # shorter solution lines ("return out", "}") also occur in code that reveals nothing
_FIXED_TIME = (1980, 1, 1, 0, 0, 0)   # the earliest a zip can hold: the same course gives the same bytes


class GradescopeBuildError(RuntimeError):
    """The autograder zip failed its verification; the problems are in `.problems`."""

    def __init__(self, path: Path, problems: list[str]):
        self.problems = problems
        super().__init__(f"{path} was not written: " + "; ".join(problems))


# -- what goes in -------------------------------------------------------------------------------------

def _shipped(path: Path) -> bool:
    """Source files only: no caches, no compiled files (a .pyc of a solution would escape the line check)."""
    return path.is_file() and "__pycache__" not in path.parts and path.suffix not in (".pyc", ".pyo") \
        and not path.name.startswith(".")


def _tree(folder: Path, root: Path) -> dict[str, Path]:
    return {path.relative_to(root).as_posix(): path for path in sorted(folder.rglob("*")) if _shipped(path)}


def course_files(root: Path = paths.REPO_ROOT) -> dict[str, Path]:
    """Every file of the course the zip holds, by its name in the zip (the scripts aside)."""
    files = {name: root / name for name in ROOT_FILES}
    files |= _tree(root / "grader", root)
    for exercise in catalog.EXERCISES:
        files |= _tree(exercise.tests_dir(root / "tests" / "exercises"), root)
    return files


def _zip_info(name: str, executable: bool) -> zipfile.ZipInfo:
    info = zipfile.ZipInfo(name, date_time=_FIXED_TIME)
    info.create_system = 3   # Unix: unzip then honours the mode bits below
    info.external_attr = (stat.S_IFREG | (0o755 if executable else 0o644)) << 16
    info.compress_type = zipfile.ZIP_DEFLATED
    return info


def _write_zip(path: Path, files: dict[str, Path]) -> None:
    with zipfile.ZipFile(path, "w") as zf:
        for name in SCRIPTS:
            zf.writestr(_zip_info(name, executable=True), (TEMPLATES / name).read_bytes())
        for name, source in sorted(files.items()):
            zf.writestr(_zip_info(name, executable=os.access(source, os.X_OK)), source.read_bytes())


def build_gradescope_zip(out_zip: str | Path, *, solutions_dir: Path = paths.SOLUTIONS_DIR) -> Path:
    """Write the autograder zip to `out_zip` and verify it. If verification finds a problem, nothing is
    left at `out_zip` and GradescopeBuildError lists what is wrong."""
    out_zip = Path(out_zip)
    out_zip.parent.mkdir(parents=True, exist_ok=True)
    partial = out_zip.with_name(f".{out_zip.name}.part")
    try:
        _write_zip(partial, course_files())
        problems = verify_autograder_zip(partial, solutions_dir=solutions_dir)
        if problems:
            raise GradescopeBuildError(out_zip, problems)
        os.replace(partial, out_zip)
    finally:
        partial.unlink(missing_ok=True)
    return out_zip


# -- what must not go in: the reference solutions ----------------------------------------------------------

def solution_lines(solutions_dir: Path = paths.SOLUTIONS_DIR) -> dict[str, str]:
    """Every line between `### BEGIN SOLUTION` and `### END SOLUTION` of the references, stripped, with
    where it is written ("ex01_meshes.py:77")."""
    found: dict[str, str] = {}
    for exercise in catalog.EXERCISES:
        for number, line in stubs.solution_lines(exercise.solution_path(solutions_dir).read_text()):
            found.setdefault(line, f"{exercise.module_file}:{number}")
    return found


def _lines_of_the_tests(root: Path = paths.REPO_ROOT) -> set[str]:
    lines: set[str] = set()
    for exercise in catalog.EXERCISES:
        for path in _tree(exercise.tests_dir(root / "tests" / "exercises"), root).values():
            lines |= {line.strip() for line in path.read_text(errors="replace").splitlines()}
    return lines


def secret_lines(solutions_dir: Path = paths.SOLUTIONS_DIR) -> dict[str, str]:
    """The solution lines no file of the zip may contain (their comments included: they explain the
    answer). Left out: short ones, and lines the course's own tests contain (a reference computation or
    a visible test's set-up), which the zip ships by design and so cannot leak any further."""
    public = _lines_of_the_tests()
    return {line: where for line, where in solution_lines(solutions_dir).items()
            if len(line) >= MIN_SECRET_CHARS and line not in public}


# -- verification -------------------------------------------------------------------------------------------

def _required_entries() -> list[str]:
    required = [*SCRIPTS, *ROOT_FILES, *REQUIRED_GRADER_FILES]
    for exercise in catalog.EXERCISES:
        tests = f"tests/exercises/{exercise.id}"
        required += [f"{tests}/test_visible.py", f"{tests}/test_hidden.py"]
        required += list(_tree(exercise.tests_dir(), paths.REPO_ROOT))   # conftests too
    return list(dict.fromkeys(required))


def _missing(names: set[str]) -> list[str]:
    return [f"missing {name}" + (" (hidden tests)" if name.endswith("/test_hidden.py") else "")
            for name in _required_entries() if name not in names]


def _forbidden(names: set[str]) -> list[str]:
    problems = []
    for name in sorted(names):
        parts = PurePosixPath(name).parts
        if parts[0] == "solutions":
            problems.append(f"{name}: the reference solutions must not be shipped")
        elif "__pycache__" in parts or name.endswith((".pyc", ".pyo")):
            problems.append(f"{name}: compiled files must not be shipped")
        elif name.startswith("/") or ".." in parts:
            problems.append(f"{name}: unsafe path")
    return problems


def _script_problems(zf: zipfile.ZipFile, names: set[str]) -> list[str]:
    problems = []
    for name in SCRIPTS:
        if name not in names:
            continue   # reported as missing
        mode = zf.getinfo(name).external_attr >> 16
        if mode & 0o111 != 0o111:
            problems.append(f"{name} is not executable (mode {oct(mode & 0o777)}): Gradescope runs it directly")
        text = zf.read(name)
        if not text.startswith(b"#!"):
            problems.append(f"{name} does not start with a #! line")
        if b"\r" in text:
            problems.append(f"{name} has CR line endings: the #! line would name a program that does not exist")
    return problems


def _solution_text(zf: zipfile.ZipFile, secrets: dict[str, str]) -> list[str]:
    problems = []
    for info in zf.infolist():
        if info.is_dir():
            continue
        lines = zf.read(info).decode("utf-8", errors="replace").splitlines()
        leaked = [(number, line.strip()) for number, line in enumerate(lines, start=1) if line.strip() in secrets]
        if leaked:
            number, line = leaked[0]
            problems.append(f"{info.filename}:{number} holds solution text {line!r} (solutions/{secrets[line]})"
                            + (f" and {len(leaked) - 1} more line(s) of it" if len(leaked) > 1 else ""))
    return problems


def verify_autograder_zip(path: str | Path, *, solutions_dir: Path = paths.SOLUTIONS_DIR) -> list[str]:
    """What is wrong with an autograder zip, or [] when nothing is: required entries (Gradescope's two
    scripts, executable, and every catalog exercise's visible and hidden tests), no solutions/, no
    compiled files, and no line of a reference solution (see secret_lines) in any file."""
    try:
        with zipfile.ZipFile(path) as zf:
            names = {info.filename for info in zf.infolist() if not info.is_dir()}
            return (_missing(names) + _forbidden(names) + _script_problems(zf, names)
                    + _solution_text(zf, secret_lines(solutions_dir)))
    except (OSError, zipfile.BadZipFile) as exc:
        return [f"{path} cannot be read as a zip: {exc}"]


__all__ = ["GradescopeBuildError", "build_gradescope_zip", "course_files", "secret_lines", "solution_lines",
           "verify_autograder_zip"]
