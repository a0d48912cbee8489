"""What the similarity check (grader.grading.similarity) keeps between runs of a batch, in a folder of the
batch's own (OUT/.cache/similarity): each module's filtered code (copydetect's lexing, most of a module's
cost) and each pair's figures, every entry named by the SHA-256 of what it was computed from, so that a
resumed batch lexes and compares only the modules that changed.

Nothing a student chose names a file here: keys are hashes of content. Neither kind of entry holds
copydetect's k-gram hashes, which are Python's salted hash() and differ from one process to the next; the
figures do not depend on them (every k-gram is kept). An entry that cannot be read, or does not hold what it
should, is computed again and rewritten; an entry is written whole (a temporary file renamed) or not at all.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from collections.abc import Callable
from pathlib import Path

FORMAT = (
    "1"  # part of every key: a change to what is cached or how, and the old entries are never read
)


def key(*parts: str) -> str:
    digest = hashlib.sha256(FORMAT.encode())
    for part in parts:
        data = part.encode("utf-8", "surrogatepass")
        digest.update(len(data).to_bytes(8, "big") + data)
    return digest.hexdigest()


class SimilarityCache:
    """Entries under `folder`, or none kept at all when folder is None."""

    def __init__(self, folder: Path | None):
        self.folder = None if folder is None else Path(folder)

    def _read(self, name: str):
        if self.folder is None:
            return None
        try:
            return json.loads((self.folder / name[:2] / f"{name}.json").read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return None

    def _write(self, name: str, value) -> None:
        if self.folder is None:
            return
        where = self.folder / name[:2]
        try:
            where.mkdir(parents=True, exist_ok=True)
            fd, temporary = tempfile.mkstemp(dir=where, suffix=".tmp")
            with os.fdopen(fd, "w", encoding="utf-8") as out:
                json.dump(value, out)
            os.replace(temporary, where / f"{name}.json")
        except OSError:
            pass  # a cache that cannot be written only costs time

    def filtered(
        self, text: str, compute: Callable[[str], tuple[str, list[list[int]]]]
    ) -> tuple[str, list[list[int]]]:
        """copydetect's filtered code of `text` and its offsets, as `compute(text)` gives them."""
        name = key("filtered", text)
        entry = self._read(name)
        if (
            isinstance(entry, list)
            and len(entry) == 2
            and isinstance(entry[0], str)
            and isinstance(entry[1], list)
            and all(
                isinstance(pair, list) and len(pair) == 2 and all(type(n) is int for n in pair)
                for pair in entry[1]
            )
        ):
            return entry[0], entry[1]
        code, offsets = compute(text)
        self._write(name, [code, offsets])
        return code, offsets

    def figures(
        self, name: str, compute: Callable[[], tuple[float, float, int]]
    ) -> tuple[float, float, int]:
        """A pair's (similarity_a, similarity_b, shared), as `compute()` gives them, under `name` (a key of
        everything they depend on)."""
        entry = self._read(name)
        if (
            isinstance(entry, list)
            and len(entry) == 3
            and all(type(x) is float for x in entry[:2])
            and type(entry[2]) is int
        ):
            return entry[0], entry[1], entry[2]
        figures = compute()
        self._write(name, list(figures))
        return figures
