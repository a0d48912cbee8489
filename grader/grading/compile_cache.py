"""One XLA compilation cache per course run, used by the trusted side only.

A class compiles the same programs again and again: the tests' baselines and references, and the
students' traced programs, which are often alike. JAX's persistent compilation cache keeps each compiled
program on disk under a hash of the program, its compile options and the jax version, so an entry can
only ever be the compiled form of the very program that asks for it.

Who reads and writes it: the harness processes (pytest with --isolate), which run only the grader's
code and compile the programs workers export. Workers never see it: their environment does not name it,
and their sandbox does not mount it (bubblewrap) or allow it (Landlock); grading refuses a folder a worker
could read. A worker could otherwise write an entry another student's grading loads, or look up what a
classmate or the reference compiled.

The harness counts hits and misses (jax.monitoring events) and reports them with each test; report.json
gets the folder, its size and cap, and the counts.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

CACHE_ENV = "SHARDLAB_CACHE"  # where the course's cache lives, unless --cache says otherwise
# Where a harness keeps the bytecode of the grader and the tests (grader.grading.child), in the cache folder.
BYTECODE_ENV = "SHARDLAB_BYTECODE_DIR"
# a whole course's programs take a few MB; a class of odd ones stays far below
DEFAULT_MAX_BYTES = 1 << 30


def default_folder() -> Path:
    """$SHARDLAB_CACHE, else the user's cache folder: the same cache for every grading on this machine."""
    if os.environ.get(CACHE_ENV):
        return Path(os.environ[CACHE_ENV])
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "shardlab"


@dataclass(frozen=True)
class CompileCache:
    """`folder` None: off. The XLA entries go in folder/xla, beside the course's time limits."""

    folder: Path | None
    max_bytes: int = DEFAULT_MAX_BYTES

    @property
    def xla_folder(self) -> Path | None:
        return None if self.folder is None else self.folder / "xla"

    def environment(self) -> dict[str, str]:
        """What a harness process needs to use the cache (jax reads these at import)."""
        if self.folder is None:
            return {}
        self.xla_folder.mkdir(parents=True, exist_ok=True)
        os.chmod(self.folder, 0o700)  # a sandbox's uid (each worker's own) cannot even look in
        return {
            "JAX_COMPILATION_CACHE_DIR": str(self.xla_folder),
            # Every program, however small or quick to compile: the tests compile hundreds of small ones.
            "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS": "0",
            "JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES": "0",
            "JAX_COMPILATION_CACHE_MAX_SIZE": str(self.max_bytes),
            # Grading writes no bytecode into the checkout (its harnesses run python -B): the grader's and
            # the tests' modules, compiled once, are kept here instead, where no worker can look (the
            # hidden tests' bytecode is among them), and read by every later harness.
            BYTECODE_ENV: str(self.folder / "pycache"),
        }

    def describe(self, counts: dict) -> dict:
        """For report.json: where, how big, and this grading's hits and misses."""
        if self.folder is None:
            return {"enabled": False}
        entries = list(self.xla_folder.glob("*-cache")) if self.xla_folder.is_dir() else []
        return {
            "enabled": True,
            "folder": str(self.xla_folder),
            "max_bytes": self.max_bytes,
            "entries": len(entries),
            "bytes": sum(_size(p) for p in entries),
            "hits": counts.get("hits", 0),
            "misses": counts.get("misses", 0),
        }


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:  # evicted meanwhile by another grader
        return 0


def refuse_if_visible(folder: Path, readable: list[Path]) -> None:
    """The cache must not lie inside anything a worker reads (the grader package, Python, the system,
    the submission): raise ValueError naming the problem."""
    from grader.sandbox.confinement import SYSTEM_PATHS, python_paths

    real = Path(os.path.realpath(folder))
    for seen in [*map(Path, SYSTEM_PATHS), *map(Path, python_paths()), *readable]:
        seen = Path(os.path.realpath(seen))
        if real == seen or seen in real.parents:
            raise ValueError(
                f"the compile cache {folder} is inside {seen}, which the student's code can read: "
                "choose another folder (--cache)"
            )
