"""The grading child's entry point: apply the limits to this process, then run pytest.

    python -I -m grader.grading.child HARNESS_MEMORY WORKER_MEMORY FILE_BYTES -- PYTEST_ARGS...

PYTEST_ARGS are the runner's (grader.harness.runner.pytest_arguments), as grader.grading.process builds them.

HARNESS_MEMORY is this process's address space (its soft limit); the hard limit stays at WORKER_MEMORY
when that is larger (0: no limit), so that the worker this harness starts can be given its own limit
(--memory-limit), larger or smaller than the harness's. Only the grader's code runs here, and the
student's exported programs, which cannot call setrlimit.

Setting the limits here, rather than in a preexec_fn between fork and exec, keeps the parent free to
spawn children safely while it has threads of its own.
"""

import resource
import signal
import sys

USAGE = "usage: python -m grader.grading.child HARNESS_MEMORY WORKER_MEMORY FILE_BYTES -- PYTEST_ARGS..."


def main(argv: list[str]) -> int:
    harness_memory, worker_memory, file_bytes, separator, *pytest_args = argv
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

    import pytest

    return pytest.main(pytest_args)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
