"""pytest as the whole of a process: the runs of grader.harness.runner.run_tests (a student's check, dev-check,
the suite's routes) and the grading harness (grader.grading.child).

    python -m grader.harness.pytest_main PYTEST_ARGS...

Once pytest has written everything, such a process only ends, and the interpreter's teardown would walk
every object that jax, the tests and the programs they compiled left behind: about a quarter of a second
of every run on 2 cores. Those objects are frozen out of the collector's sight instead, and the operating
system frees them with the process. Exit handlers still run, and files still close, as in any exit.
"""

from __future__ import annotations

import gc
import sys


def main(args: list[str]) -> int:
    import pytest

    code = pytest.main(args)
    gc.freeze()
    return code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
