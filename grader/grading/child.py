"""The grading child's entry point: apply the limits to this process, then run pytest.

    python -I -m grader.grading.child MEMORY_BYTES FILE_BYTES -- PYTEST_ARGS...

Setting the limits here, rather than in a preexec_fn between fork and exec, keeps the parent free to
spawn children safely while it has threads of its own.
"""

import resource
import signal
import sys


def main(argv: list[str]) -> int:
    memory, file_bytes, separator, *pytest_args = argv
    assert separator == "--", "usage: python -m grader.grading.child MEMORY_BYTES FILE_BYTES -- PYTEST_ARGS..."
    if int(memory):
        resource.setrlimit(resource.RLIMIT_AS, (int(memory), int(memory)))
    resource.setrlimit(resource.RLIMIT_FSIZE, (int(file_bytes), int(file_bytes)))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)   # a too-large write fails instead of killing

    import pytest

    return pytest.main(pytest_args)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
