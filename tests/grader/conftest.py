"""The grader's own tests run the exercise tests many times over in subprocesses (the reference, both
routes of every corpus submission, dev-check, the flake tests): they share one XLA compilation cache,
fresh for each session, so that a program compiled once is not compiled again by the next run.

Only this test suite's plain pytest subprocesses see it (they inherit the environment). `shardlab
grade` builds the harness's and the worker's environments from scratch: the graders the suite starts
use their own compile cache (grader.grading.compile_cache), here a session folder too (SHARDLAB_CACHE),
never the user's."""

import atexit
import os
import shutil
import tempfile

import jax
from jax._src import compilation_cache

_CACHE = tempfile.mkdtemp(prefix="shardlab-tests-xla-cache-")
atexit.register(shutil.rmtree, _CACHE, ignore_errors=True)
if "SHARDLAB_CACHE" not in os.environ:   # one per pytest process (each xdist worker has its own)
    os.environ["SHARDLAB_CACHE"] = tempfile.mkdtemp(prefix="shardlab-tests-grading-cache-")
    atexit.register(shutil.rmtree, os.environ["SHARDLAB_CACHE"], ignore_errors=True)
os.environ.update({
    "JAX_COMPILATION_CACHE_DIR": _CACHE,
    # Cache every program: the tests' programs are small and each compiles in well under a second.
    "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS": "0",
    "JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES": "0",
})

# This process too (the in-process exercise tests, collected before this file is read): its entries
# are what dev-check's and the corpus's reference runs find already compiled.
jax.config.update("jax_compilation_cache_dir", _CACHE)
jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
jax.config.update("jax_persistent_cache_min_entry_size_bytes", 0)
compilation_cache.reset_cache()   # forget a "no cache" decision taken by an earlier compile


def pytest_configure(config):
    # `-n 2 --dist loadgroup` (how CI runs the suite): a file whose module-scoped fixture does heavy work
    # (a graded class, a built course) keeps its tests on one worker, so the work is done once.
    config.addinivalue_line("markers", "xdist_group(name): run these tests on one pytest-xdist worker")
