"""The base of every error the grader raises on purpose, so a caller can tell the grader's refusals (a bad
submission, an unusable machine, a failed check of the course) from a bug: `except ShardlabError`."""

from __future__ import annotations

from pathlib import Path


class ShardlabError(Exception):
    """An error the grader raises on purpose, with a message naming the problem."""


class FileProblems(ShardlabError, ValueError):
    """A file an instructor writes (a course file, a roster, an adjustments file) cannot be used: every problem
    found at once, each naming its line."""

    def __init__(self, path: Path | str, problems: list[str]):
        self.path, self.problems = Path(path), problems
        super().__init__(
            f"{path}: " + ("\n  ".join(["", *problems]) if len(problems) > 1 else problems[0])
        )
