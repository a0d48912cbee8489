"""The tests' random inputs, unforeseeable while grading.

Every test draws its arrays from `rng(seed)`. In a student's own run (plain pytest, `shardlab check`) the
streams are the seeds' own, so a failure shows the same numbers every time. While grading, the harness
holds a secret drawn for that grading (`SECRET_VARIABLE`, set by `use_secret` in the harness process only:
the worker's environment is built from nothing and never names it) and mixes it into every seed. So a
student who has read the tests, their generators and their seeds still cannot rebuild the arrays a traced
program of theirs will be run on: a program that looks answers up for predicted inputs, or whose output
does not depend on its inputs, computes the wrong values and earns nothing for its structure or speed.
Property tests (hypothesis) take their examples from the same secret (grader.checks.properties).
"""

from __future__ import annotations

import os
import secrets

import numpy as np

SECRET_VARIABLE = "SHARDLAB_INPUT_SECRET"
_WORDS = 4   # 128 bits, as four 32-bit words of a SeedSequence's entropy


def use_secret(secret: str | None = None) -> str:
    """Set this process's secret (a fresh one unless given, as 32 hex digits) and return it. Called by the
    harness before any test module is imported, so hypothesis settings made at import see it too."""
    secret = secret or os.environ.get(SECRET_VARIABLE) or secrets.token_hex(4 * _WORDS)
    _words(secret)   # refuse a malformed one now, not in the middle of a test
    os.environ[SECRET_VARIABLE] = secret
    return secret


def grading_secret() -> int | None:
    """The secret as one integer while grading, None in a student's own run."""
    secret = os.environ.get(SECRET_VARIABLE)
    return int.from_bytes(bytes.fromhex(secret), "big") if secret else None


def _words(secret: str) -> list[int]:
    try:
        raw = bytes.fromhex(secret)
    except ValueError:
        raw = b""
    if len(raw) != 4 * _WORDS:
        raise ValueError(f"{SECRET_VARIABLE} must be {8 * _WORDS} hex digits")
    return [int.from_bytes(raw[i:i + 4], "big") for i in range(0, len(raw), 4)]


def rng(seed: int = 0) -> np.random.Generator:
    """A NumPy generator for a test's inputs: the seed's own stream, mixed with the grading secret when
    there is one."""
    secret = os.environ.get(SECRET_VARIABLE)
    return np.random.default_rng(seed if not secret else [*_words(secret), int(seed)])
