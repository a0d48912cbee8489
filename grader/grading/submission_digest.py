"""A submission's digest: what grading reads of it, hashed, so that grade-batch can tell a resubmission (files
changed since the student's grading) from a submission it graded already.

Plain bounded reads, as intake's (docs/trust-model.md, "What the trusted side reads of a submission"): a
folder's exercise modules and notebooks, each read as intake reads it (a module up to 1 MiB + 1 byte, a
notebook within 16 MiB), with its path; a zip's bytes, up to intake's 64 MiB (a larger zip by its size and
modification time); a lone module's first 1 MiB + 1 byte. Nothing in it is run or parsed. Each exercise
graded records the digest of what grading read for it, so that a resubmission regrades what it changed.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

from grader.course import catalog
from grader.grading.submission import (
    MAX_MODULE_BYTES,
    MAX_NOTEBOOK_BYTES,
    MAX_ZIP_BYTES,
    folder_reads,
    head,
)

_CHUNK = 1 << 20


def digest(source: str | Path) -> str:
    """sha256 of what grading reads of `source` (a folder, a .zip or one module); "" for nothing readable."""
    return _digests(Path(source), [None])[None]


def exercise_digests(source: str | Path, exercises: list[catalog.Exercise]) -> dict[str, str]:
    """Each exercise's digest, by id, from one read of `source`: of a folder, what grading reads for that
    exercise (its module and notebook only: a resubmission of another exercise leaves it as graded); of a
    .zip or a module, the whole's."""
    found = _digests(Path(source), [e.module_file.removesuffix(".py") for e in exercises])
    return {e.id: found[e.module_file.removesuffix(".py")] for e in exercises}


def _digests(source: Path, stems: list[str | None]) -> dict[str | None, str]:
    """The digest of `source` for each module stem (None: the whole), each file read once."""
    if source.is_dir():
        modules, notebooks, _ = folder_reads(source)
        shas = {stem: hashlib.sha256() for stem in stems}
        for parts, path in sorted({**modules, **notebooks}.items()):
            mine = [shas[stem] for stem in (None, parts[-1].rsplit(".", 1)[0]) if stem in shas]
            if not mine:
                continue
            limit = MAX_MODULE_BYTES if parts in modules else MAX_NOTEBOOK_BYTES
            data = head(path, limit)
            for sha in mine:
                sha.update(f"{'/'.join(parts)}\0{len(data)}\0".encode())
                sha.update(data)
        return {stem: sha.hexdigest() for stem, sha in shas.items()}
    if not source.is_file():
        return dict.fromkeys(stems, "")
    sha = hashlib.sha256()
    status = source.stat()
    if status.st_size > MAX_ZIP_BYTES:
        # beyond what intake would take whole: its size and time say a new one came
        sha.update(f"{status.st_size}\0{status.st_mtime_ns}".encode())
    else:
        left = MAX_ZIP_BYTES + 1  # a file that grows while read is still read within the bound
        with source.open("rb") as file:
            while left > 0 and (chunk := file.read(min(_CHUNK, left))):
                sha.update(chunk)
                left -= len(chunk)
    return dict.fromkeys(stems, sha.hexdigest())
