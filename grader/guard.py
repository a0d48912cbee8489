"""Inside a grading child: the reference solutions cannot be read.

An audit hook (which, once added, cannot be removed from the process) refuses to open any file under
solutions/ and to start a program that names it. The Gradescope and handout builds ship no
solutions at all; this covers grading from a checkout of the course itself.
"""

from __future__ import annotations

import os
import sys

from grader import paths


def forbid_solutions() -> None:
    forbidden = os.path.realpath(paths.SOLUTIONS_DIR)

    def is_forbidden(candidate) -> bool:
        if isinstance(candidate, int) or candidate is None:
            return False
        try:
            real = os.path.realpath(os.fsdecode(candidate))
        except (TypeError, ValueError):
            return False
        return real == forbidden or real.startswith(forbidden + os.sep)

    def hook(event: str, args: tuple) -> None:
        if event == "open" and args and is_forbidden(args[0]):
            raise PermissionError(f"the reference solutions are not available while grading: {args[0]}")
        if event in ("subprocess.Popen", "os.system", "os.exec", "os.posix_spawn") and forbidden in repr(args):
            raise PermissionError("the reference solutions are not available while grading")

    sys.addaudithook(hook)
