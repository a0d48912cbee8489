"""Taking in what a student hands in: a folder or a .zip holding exercise modules (`exNN_name.py`),
at its top level, under `exercises/`, or inside one wrapping folder (the first of these that holds
a module is the one graded). Only the catalog's module files are copied into a private folder;
everything else the submission ships (conftest.py, pytest.ini, sitecustomize.py, .pth files, a
solutions package) is listed and never loaded, except the handout's own files beside the exercises/
that is graded (its README, tests, grader package: grader.course.handout_layout), which every student
hands back and none wrote. An exercise may also come as the course's notebook (`exNN_name.ipynb`, as
nbgrader collects them), from which the module is rebuilt."""

from __future__ import annotations

import shutil
import stat
import zipfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

from grader.core.errors import ShardlabError
from grader.course import catalog, handout_layout
from grader.grading.notebook_intake import NotebookError, module_from_notebook

MAX_MODULE_BYTES = 1 << 20  # a module larger than 1 MiB is not source anyone wrote
MAX_ZIP_BYTES = 64 << 20  # unpacked size at most, against zip bombs
MAX_NOTEBOOK_BYTES = 16 << 20  # notebooks carry outputs, so they may be larger than modules
MODULE_NAMES = {e.module_file for e in catalog.EXERCISES}


class SubmissionError(ShardlabError, ValueError):
    """The submission cannot be read at all (not a folder or a zip, a corrupt zip)."""


@dataclass
class PreparedSubmission:
    modules_dir: Path
    found: list[str] = field(default_factory=list)  # exercise ids present
    ignored: list[str] = field(default_factory=list)  # files shipped but never loaded
    # what the student should know about the hand-in
    problems: list[str] = field(default_factory=list)
    # the problems that are a file handed in and not graded (an unreadable notebook, a symbolic link): the
    # class page and grades.csv name them, not only the student's own page
    refused: list[str] = field(default_factory=list)

    def refuse(self, problem: str) -> None:
        self.problems.append(problem)
        self.refused.append(problem)


def _base_rank(parents: tuple[str, ...]) -> int | None:
    """Where modules may sit, best first: the top level, exercises/, one wrapping folder, and
    exercises/ inside it. None elsewhere."""
    if parents == ():
        return 0
    if parents == ("exercises",):
        return 1
    if len(parents) == 1:
        return 2
    if len(parents) == 2 and parents[1] == "exercises":
        return 3
    return None


def _notebook_exercise(parts: tuple[str, ...]) -> catalog.Exercise | None:
    """An `exNN_name.ipynb` at the top level or one folder down (nbgrader: <assignment>/<id>.ipynb)."""
    if len(parts) <= 2 and parts[-1].endswith(".ipynb") and parts[-1][:-6] + ".py" in MODULE_NAMES:
        return catalog.get(parts[-1][:-6])
    return None


def _take_notebooks(notebooks: dict[tuple[str, ...], bytes], prepared: PreparedSubmission) -> None:
    """Exercises handed in as notebooks, unless a module of the same exercise was found."""
    for parts, data in notebooks.items():
        exercise, where = _notebook_exercise(parts), "/".join(parts)
        if exercise.id in prepared.found:
            prepared.ignored.append(where)
            continue
        try:
            source = module_from_notebook(data, exercise, where)
        except NotebookError as exc:
            prepared.refuse(f"{exc}: not graded")
            continue
        _copy_module(exercise.module_file, source.encode(), prepared, where)


def _choose_base(paths: list[tuple[str, ...]]) -> tuple[str, ...] | None:
    """The best-ranked folder holding an exercise module: only modules there are graded."""
    ranked = [(_base_rank(p[:-1]), p[:-1]) for p in paths if p[-1] in MODULE_NAMES]
    ranked = [(rank, base) for rank, base in ranked if rank is not None]
    return min(ranked)[1] if ranked else None


def _handout_root(base: tuple[str, ...] | None) -> tuple[str, ...] | None:
    """Where a handout's own files sit: the folder holding the exercises/ that is graded. None when the
    modules are graded from elsewhere (the top level, a wrapping folder): that is no handout's layout."""
    return base[:-1] if base and base[-1] == "exercises" else None


def _handouts_own(parts: tuple[str, ...], base: tuple[str, ...] | None) -> bool:
    """A file the handout holds, where the handout holds it: never the student's addition, so never listed.
    An exercise module is the student's work wherever it sits, so it is listed when it is not graded."""
    root = _handout_root(base)
    if root is None or parts[: len(root)] != root or parts[-1] in MODULE_NAMES:
        return False
    return "/".join(parts[len(root) :]) in handout_layout.handout_paths()


def _unsafe(name: str) -> bool:
    path = PurePosixPath(name.replace("\\", "/"))
    return path.is_absolute() or ".." in path.parts or name.startswith("/") or ":" in path.parts[0]


def prepare_submission(source: str | Path, workdir: Path) -> PreparedSubmission:
    """Copy the submission's exercise modules into `workdir`/modules and describe what was left out."""
    source = Path(source)
    prepared = PreparedSubmission(workdir / "modules")
    prepared.modules_dir.mkdir(parents=True)
    if source.is_dir():
        _from_folder(source, prepared)
    elif source.is_file() and zipfile.is_zipfile(source):
        _from_zip(source, prepared)
    elif source.is_file() and source.suffix == ".zip":
        raise SubmissionError(f"{source.name} is not a valid zip file")
    elif source.is_file() and source.name in MODULE_NAMES:
        _copy_module(source.name, source.read_bytes(), prepared, str(source))
    else:
        raise SubmissionError(f"{source} is neither a folder nor a .zip file")
    prepared.found.sort()
    if not prepared.found:
        expected = ", ".join(sorted(MODULE_NAMES))
        prepared.problems.append(f"no exercise module found (expected files named like {expected})")
    return prepared


def _copy_module(name: str, data: bytes, prepared: PreparedSubmission, where: str) -> None:
    exercise = catalog.get(name)
    if exercise.id in prepared.found:
        prepared.refuse(f"{where}: a second {name}; the first one found is graded")
        return
    if len(data) > MAX_MODULE_BYTES:
        prepared.refuse(f"{where} is larger than {MAX_MODULE_BYTES >> 20} MiB: not graded")
        return
    (prepared.modules_dir / name).write_bytes(data)
    prepared.found.append(exercise.id)


def _hidden(parts: tuple[str, ...]) -> bool:
    return (
        any(part.startswith(".") and part != ".." for part in parts)
        or "__pycache__" in parts
        or parts[0] == "__MACOSX"
    )


def head(path: Path, limit: int) -> bytes:
    """At most limit + 1 bytes of `path`: enough to tell it is too large without reading a huge file whole."""
    with path.open("rb") as file:
        return file.read(limit + 1)


def folder_reads(
    folder: Path, refuse: Callable[[str], None] | None = None
) -> tuple[dict, dict, list[str]]:
    """What intake reads of a folder: its modules (relative parts -> path, each read up to MAX_MODULE_BYTES
    + 1 bytes) and notebooks (within MAX_NOTEBOOK_BYTES, read whole), and the names it leaves out but the
    handout's own. A symbolic link is never followed (said to `refuse`)."""
    files = {}
    for path in sorted(folder.rglob("*")):
        relative = path.relative_to(folder).parts
        if _hidden(relative):
            continue
        if path.is_symlink():
            if refuse is not None:
                refuse(f"{'/'.join(relative)} is a symbolic link: ignored")
        elif path.is_file():
            files[relative] = path
    base = _choose_base(list(files))
    modules, notebooks, ignored = {}, {}, []
    for parts, path in files.items():
        if parts[:-1] == base and parts[-1] in MODULE_NAMES:
            modules[parts] = path
        elif _notebook_exercise(parts) and path.stat().st_size <= MAX_NOTEBOOK_BYTES:
            notebooks[parts] = path
        elif not _handouts_own(parts, base):
            ignored.append("/".join(parts))
    return modules, notebooks, ignored


def _from_folder(folder: Path, prepared: PreparedSubmission) -> None:
    modules, notebooks, ignored = folder_reads(folder, prepared.refuse)
    for parts, path in modules.items():
        _copy_module(parts[-1], head(path, MAX_MODULE_BYTES), prepared, "/".join(parts))
    prepared.ignored += ignored
    _take_notebooks({parts: path.read_bytes() for parts, path in notebooks.items()}, prepared)


def _from_zip(archive: Path, prepared: PreparedSubmission) -> None:
    try:
        with zipfile.ZipFile(archive) as zf:
            members = zf.infolist()
            if sum(m.file_size for m in members) > MAX_ZIP_BYTES:
                raise SubmissionError(
                    f"{archive.name} unpacks to more than {MAX_ZIP_BYTES >> 20} MiB"
                )
            files = {}
            for member in members:
                name = member.filename
                if _unsafe(name):
                    prepared.refuse(f"zip entry {name!r} has an unsafe path: ignored")
                elif member.is_dir() or _hidden(PurePosixPath(name).parts):
                    continue
                elif stat.S_ISLNK(member.external_attr >> 16):
                    prepared.refuse(f"zip entry {name!r} is a symbolic link: ignored")
                else:
                    files.setdefault(PurePosixPath(name).parts, []).append(member)
            base = _choose_base(list(files))
            notebooks = {}
            for parts, entries in files.items():
                if _notebook_exercise(parts) and entries[0].file_size <= MAX_NOTEBOOK_BYTES:
                    notebooks[parts] = zf.read(entries[0])
                    continue
                if parts[:-1] != base or parts[-1] not in MODULE_NAMES:
                    if not _handouts_own(parts, base):
                        prepared.ignored.append("/".join(parts))
                    continue
                for member in entries:  # a zip may hold one name twice
                    if member.file_size > MAX_MODULE_BYTES:
                        prepared.refuse(
                            f"{member.filename} is larger than {MAX_MODULE_BYTES >> 20} MiB: "
                            "not graded"
                        )
                    else:
                        _copy_module(parts[-1], zf.read(member), prepared, member.filename)
            _take_notebooks(notebooks, prepared)
    except (zipfile.BadZipFile, zipfile.LargeZipFile, OSError, EOFError) as exc:
        raise SubmissionError(f"{archive.name} could not be read as a zip file: {exc}") from None


def cleanup(prepared: PreparedSubmission) -> None:
    shutil.rmtree(prepared.modules_dir.parent, ignore_errors=True)
