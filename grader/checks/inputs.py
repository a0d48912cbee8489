"""The tests' random inputs, unforeseeable while grading, and each test's own.

Every test draws its arrays from `rng(seed)`. In a student's own run (plain pytest, `shardlab check`) the
streams are the seeds' own, so a failure shows the same numbers every time (and `np.random.default_rng(seed)`
gives them again). While grading, the harness holds a secret drawn for that grading (`SECRET_VARIABLE`, set
by `use_secret` in the harness process only: the worker's environment is built from nothing and never names
it), and a stream's entropy is the SHA-256 of the secret, the running test's identity and the seed. So:

- a student who has read the tests, their generators and their seeds still cannot rebuild the arrays a
  traced program of theirs will be run on: a program that looks answers up for predicted inputs, or whose
  output does not depend on its inputs, computes the wrong values and earns nothing for its structure or
  speed;
- no two tests share a stream: what one test shows the worker in a direct call (the worker sees those
  arrays) tells nothing of another test's inputs, not even of one that names the same seed with smaller
  shapes (whose arrays would otherwise be prefixes of the first's);
- streams are independent as hashes are: recovering one stream's generator state tells nothing of another.

A test's identity is `<exercise folder>/<test file>::<test name with its parameters>` (`identity_of`),
the same on every route: pytest in the repository, `shardlab check`, the isolated grading harness and a
notebook's test cells (whose files are laid out in a folder named by the exercise). The harness sets it
around each test (`drawing_for`, from grader.harness.selection); drawing while grading outside any test is
an error, so that no draw can be shared by accident. Property tests (hypothesis) take each test's seed from
the same secret and identity (`property_seed`). A test whose answer depends only on a layout (a shard
table, a description, a shard shape) draws one too (`layout`), beside its fixed cases.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import secrets
from collections.abc import Iterator
from pathlib import Path
from typing import NamedTuple

import numpy as np
from jax.sharding import PartitionSpec as P

SECRET_VARIABLE = "SHARDLAB_INPUT_SECRET"
_SECRET_BYTES = 16  # 128 bits, written as 32 hex digits

_running: str | None = None  # the identity of the test the harness is running, if any


def use_secret(secret: str | None = None) -> str:
    """Set this process's secret (a fresh one unless given, as 32 hex digits) and return it. Called by the
    harness before any test module is imported, so hypothesis settings made at import see it too."""
    secret = secret or os.environ.get(SECRET_VARIABLE) or secrets.token_hex(_SECRET_BYTES)
    _secret_bytes(secret)  # refuse a malformed one now, not in the middle of a test
    os.environ[SECRET_VARIABLE] = secret
    return secret


def _secret_bytes(secret: str) -> bytes:
    try:
        raw = bytes.fromhex(secret)
    except ValueError:
        raw = b""
    if len(raw) != _SECRET_BYTES:
        raise ValueError(f"{SECRET_VARIABLE} must be {2 * _SECRET_BYTES} hex digits")
    return raw


def identity_of(path: str | Path, name: str) -> str:
    """A test's identity from its file and its name with parameters ("test_values[4dev-all_gather]"):
    the same wherever the tests' folder lies."""
    path = Path(path)
    return f"{path.parent.name}/{path.name}::{name}"


@contextlib.contextmanager
def drawing_for(identity: str) -> Iterator[None]:
    """Streams drawn meanwhile are the test `identity`'s own (the harness wraps each test in it)."""
    global _running
    previous, _running = _running, identity
    try:
        yield
    finally:
        _running = previous


def _digest(purpose: str, *parts: object) -> bytes | None:
    """SHA-256 of the secret, the running test's identity and `parts`; None without a secret."""
    secret = os.environ.get(SECRET_VARIABLE)
    if not secret:
        return None
    if _running is None:
        raise RuntimeError(
            f"{purpose} was drawn while grading outside any test: every test's inputs must be "
            "its own (draw them inside the test or a function-scoped fixture)"
        )
    fields = [
        _secret_bytes(secret),
        purpose.encode(),
        _running.encode(),
        *(str(p).encode() for p in parts),
    ]
    # Each field's length first, so that no two different tuples of fields hash the same bytes.
    return hashlib.sha256(b"".join(len(f).to_bytes(4, "big") + f for f in fields)).digest()


def rng(seed: int = 0) -> np.random.Generator:
    """A NumPy generator for a test's inputs: the seed's own stream in a student's run; while grading, a
    stream of the running test's own, keyed by the secret, the test and the seed."""
    digest = _digest("an input stream", int(seed))
    return np.random.default_rng(int(seed) if digest is None else int.from_bytes(digest, "big"))


def property_seed() -> int | None:
    """The running property test's hypothesis seed while grading (None in a student's run: hypothesis's
    own derandomized examples)."""
    digest = _digest("a property test's examples")
    return None if digest is None else int.from_bytes(digest[:16], "big")


class DrawnLayout(NamedTuple):
    """A mesh's axes and their sizes (in order), a spec that uses each axis at most once, and an array
    shape the spec divides."""

    sizes: dict[str, int]
    spec: P
    shape: tuple[int, ...]


_MESH_SHAPES = {8: ((8,), (2, 4), (4, 2), (2, 2, 2)), 4: ((4,), (2, 2)), 2: ((2,),)}
_AXIS_NAMES = ("x", "y", "z", "data", "model")


def layout(generator: np.random.Generator, devices: int = 8, *, max_rank: int = 3) -> DrawnLayout:
    """A layout drawn from `generator` (a test's `rng`): a mesh over `devices` (8, 4 or 2) devices, of 1 to
    3 axes with names from _AXIS_NAMES, and an array of 1 to max_rank dimensions, each split by no axis,
    one or two (at least one axis used somewhere), each dimension's blocks 1 to 3 elements long."""
    shapes = _MESH_SHAPES[devices]
    mesh_shape = shapes[int(generator.integers(len(shapes)))]
    names = [str(name) for name in generator.permutation(_AXIS_NAMES)[: len(mesh_shape)]]
    sizes = {name: size for name, size in zip(names, mesh_shape)}
    free = [str(name) for name in generator.permutation(names)]
    entries: list = []
    for _ in range(int(generator.integers(1, max_rank + 1))):
        take = min(int(generator.integers(3)), len(free))  # how many axes split this dimension
        entries.append(None if take == 0 else free.pop() if take == 1 else (free.pop(), free.pop()))
    if all(entry is None for entry in entries):
        entries[int(generator.integers(len(entries)))] = free.pop()
    blocks = [
        int(np.prod([sizes[a] for a in ((e,) if isinstance(e, str) else e or ())])) for e in entries
    ]
    return DrawnLayout(sizes, P(*entries), tuple(b * int(generator.integers(1, 4)) for b in blocks))
