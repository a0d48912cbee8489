"""Which implementation of the exercises is under test, and loading one exercise's module from it.

An implementation is a folder of exercise modules: the reference (solutions/), the student stubs
(exercises/), or a submission. Modules are loaded by path under a private name, so a submission's
`ex04_sharded_layer.py` never shadows or reaches another tree's.
"""

from __future__ import annotations

import importlib.util
import sys
import traceback
from pathlib import Path
from types import ModuleType

from grader.core.errors import ShardlabError
from grader.course import devices, paths
from grader.course.catalog import Exercise

NAMED_SOURCES = {"reference": paths.SOLUTIONS_DIR, "exercises": paths.EXERCISES_DIR}


class NotAttempted(ShardlabError, NotImplementedError):
    """The exercise's module is missing: graded like a stub that still raises NotImplementedError."""


class ImplementationImportError(ShardlabError):
    """The exercise's module exists but importing it failed; the message says where and why."""


def resolve_source(spec: str | Path) -> Path:
    """ "reference", "exercises" or a folder; a submission may keep its modules under exercises/."""
    if isinstance(spec, str) and spec in NAMED_SOURCES:
        return NAMED_SOURCES[spec]
    folder = Path(spec).expanduser().resolve()
    if not folder.is_dir():
        raise FileNotFoundError(f"implementation folder {folder} does not exist")
    nested = folder / "exercises"
    if nested.is_dir() and not any(folder.glob("ex[0-9][0-9]_*.py")):
        return nested
    return folder


def load_module(exercise: Exercise, source: Path) -> ModuleType:
    path = source / exercise.module_file
    if not path.is_file():
        raise NotAttempted(f"{exercise.number}: {exercise.module_file} is missing from {source}")
    return load_file(path)


def load_file(path: Path) -> ModuleType:
    """Import the module at `path` under a private name (an ImplementationImportError says why it failed)."""
    name = f"_shardlab_impl_{abs(hash(str(path.parent))):x}.{path.stem}"
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses and pickling look modules up by name
    try:
        with devices.import_time_requests_checked(path.name):
            spec.loader.exec_module(module)
    except BaseException as exc:
        del sys.modules[name]
        if isinstance(exc, KeyboardInterrupt):
            raise
        raise ImplementationImportError(_describe_import_failure(path, exc)) from exc
    return module


def _describe_import_failure(path: Path, exc: BaseException) -> str:
    if isinstance(exc, SyntaxError):
        return f"{path.name} has a syntax error at line {exc.lineno}: {exc.msg}"
    if isinstance(exc, SystemExit):
        return f"{path.name} called exit({exc.code}) while being imported"
    if isinstance(exc, devices.DeviceCountError):
        return str(exc)  # says what to remove and why, the same on every route
    lines = [f"{path.name} raised {type(exc).__name__} while being imported: {exc}"]
    frames = [f for f in traceback.extract_tb(exc.__traceback__) if f.filename == str(path)]
    if frames:
        lines.append(f"  at line {frames[-1].lineno}: {frames[-1].line}")
    return "\n".join(lines)
