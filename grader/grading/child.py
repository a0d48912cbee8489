"""The grading child's entry point: apply the limits to this process, then run pytest.

    python -I -m grader.grading.child HARNESS_MEMORY WORKER_MEMORY FILE_BYTES LEVEL FOLDER -- PYTEST_ARGS...

PYTEST_ARGS are the runner's (grader.harness.runner.pytest_arguments), as grader.grading.process builds them.

LEVEL and FOLDER (- and - for none) are the isolation level and the student's folder of the worker the
harness will start: its zygote is started here, first, so that it imports jax while the harness imports
jax, pytest and the tests (about a second each); the harness's session takes it over
(grader.worker.supervisor.Worker.take_early), or stops it and starts its own if it asks for another.

HARNESS_MEMORY is this process's address space (its soft limit); the hard limit stays at WORKER_MEMORY
when that is larger (0: no limit), so that the worker this harness starts can be given its own limit
(--memory-limit), larger or smaller than the harness's. Only the grader's code runs here, and the
student's exported programs, which cannot call setrlimit.

Setting the limits here, rather than in a preexec_fn between fork and exec, keeps the parent free to
spawn children safely while it has threads of its own.
"""

import os
import resource
import signal
import sys
from pathlib import Path

from grader.course.devices import force_host_devices
from grader.grading.compile_cache import BYTECODE_ENV

USAGE = (
    "usage: python -m grader.grading.child HARNESS_MEMORY WORKER_MEMORY FILE_BYTES LEVEL FOLDER -- "
    "PYTEST_ARGS..."
)
NO_WORKER = "-"  # LEVEL and FOLDER when the harness starts no worker
# grader.harness.runner.HYPOTHESIS_PLUGIN, which a run loads only for property tests; not imported from
# there, since this runs before the bytecode folder is set (the runner from source: 0.2 s)
HYPOTHESIS_PLUGIN = "_hypothesis_pytestplugin"


def main(argv: list[str]) -> int:
    harness_memory, worker_memory, file_bytes, level, folder, separator, *pytest_args = argv
    assert separator == "--", USAGE
    if int(harness_memory):
        ceiling = (
            resource.RLIM_INFINITY
            if not int(worker_memory)
            else max(int(harness_memory), int(worker_memory))
        )
        inherited = resource.getrlimit(resource.RLIMIT_AS)[1]
        if inherited != resource.RLIM_INFINITY:  # a hard limit is only ever lowered
            ceiling = inherited if ceiling == resource.RLIM_INFINITY else min(ceiling, inherited)
        soft = (
            int(harness_memory)
            if ceiling == resource.RLIM_INFINITY
            else min(int(harness_memory), ceiling)
        )
        resource.setrlimit(resource.RLIMIT_AS, (soft, ceiling))
    resource.setrlimit(resource.RLIMIT_FSIZE, (int(file_bytes), int(file_bytes)))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a too-large write fails instead of killing

    bytecode = os.environ.get(BYTECODE_ENV)
    if level != NO_WORKER:
        # Only time is lost if it fails: the harness starts its own, and reports what fails there.
        try:
            start_worker_early(level, Path(folder), int(worker_memory), bytecode)
        except Exception:
            pass
    try:
        keep_bytecode(bytecode, property_tests=HYPOTHESIS_PLUGIN in pytest_args)
        from grader.harness import pytest_main

        return pytest_main.main(pytest_args)
    finally:
        if level != NO_WORKER:
            from grader.worker import supervisor

            supervisor.stop_early()


def start_worker_early(level: str, folder: Path, worker_memory: int, bytecode: str | None) -> None:
    """The worker's zygote, started as the harness's plugin would at its configuration (the host devices
    forced, this process a subreaper), only sooner; nothing when the folder holds no exercise module.
    The grader's modules it takes are imported through the bytecode folder too (keep_bytecode), the
    installed packages they use first, from their own bytecode."""
    if not any(folder.glob("ex[0-9][0-9]_*.py")):
        return
    force_host_devices()
    import msgspec  # noqa: F401
    import numpy  # noqa: F401
    import psutil  # noqa: F401

    sys.pycache_prefix, sys.dont_write_bytecode = bytecode, not bytecode
    try:
        from grader.sandbox import confinement
        from grader.worker import supervisor
    finally:  # the installed packages the harness imports next keep their own bytecode
        sys.pycache_prefix, sys.dont_write_bytecode = None, True

    confinement.become_subreaper()
    supervisor.start_early(
        folder, isolation=confinement.Isolation(level), memory_bytes=worker_memory or None
    )


def keep_bytecode(folder: str | None, property_tests: bool = True) -> None:
    """The grader's and the tests' modules compiled once into `folder` (the compile cache's), not at every
    harness start (about half a second), and nothing written into the checkout. The packages installed
    beside Python keep their own bytecode: they are imported first, from it, and only what is imported
    later (the grader, the tests, what jax loads lazily) goes through `folder`."""
    if not folder:
        return
    force_host_devices()  # before jax is imported, as the root conftest would
    if property_tests:  # its plugin loads only then (grader.harness.runner.has_property_tests)
        import hypothesis  # noqa: F401
    import jax  # noqa: F401
    import numpy  # noqa: F401
    import pytest  # noqa: F401

    sys.pycache_prefix = folder
    sys.dont_write_bytecode = False


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
