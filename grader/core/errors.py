"""The base of every error the grader raises on purpose, so a caller can tell the grader's refusals (a bad
submission, an unusable machine, a failed check of the course) from a bug: `except ShardlabError`."""


class ShardlabError(Exception):
    """An error the grader raises on purpose, with a message naming the problem."""
