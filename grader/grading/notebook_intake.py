"""Rebuilding a student's exercise module from a notebook of the course (nbgrader's submitted/ folder):
the code cells the builder marked as given or solution (grade_id `<exercise id>--given-<k>` and
`<exercise id>--solution-<function>`), in order. Test cells and the device-forcing setup cell are
left out: the grader runs its own tests."""

from __future__ import annotations

import json

from grader.core.errors import ShardlabError
from grader.course import catalog

MODULE_ROLES = ("given-", "solution-")


class NotebookError(ShardlabError, ValueError):
    """The notebook cannot be read, or holds no cell of the course's notebook."""


def module_from_notebook(data: bytes, exercise: catalog.Exercise, where: str) -> str:
    try:
        notebook = json.loads(data.decode("utf-8"))
        cells = notebook["cells"]
    except (UnicodeDecodeError, json.JSONDecodeError, KeyError, TypeError) as exc:
        raise NotebookError(
            f"{where} is not a readable notebook ({type(exc).__name__}: {exc})"
        ) from None
    chunks = []
    for cell in cells if isinstance(cells, list) else []:
        if not isinstance(cell, dict) or cell.get("cell_type") != "code":
            continue
        grade_id = str(cell.get("metadata", {}).get("nbgrader", {}).get("grade_id", ""))
        role = grade_id.removeprefix(f"{exercise.id}--")
        if role != grade_id and role.startswith(MODULE_ROLES):
            source = cell.get("source", "")
            chunks.append("".join(source) if isinstance(source, list) else str(source))
    if not chunks:
        raise NotebookError(
            f"{where} has no solution cell of {exercise.id} (is it the course's notebook, "
            "with its cells' metadata intact?)"
        )
    return "\n\n".join(chunk.rstrip() for chunk in chunks) + "\n"
