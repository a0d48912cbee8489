"""Noticing, and undoing, a submission that patches the tools it is graded with.

Student code runs in the grading process (DESIGN.md, trust model), so a casual `np.allclose = lambda
*a, **k: True` or a replaced `grader.checks.assert_close` would otherwise change its own grade. The
public attributes of the modules below are recorded before student code runs and compared after it;
anything changed is put back and reported, and the test that did it does not pass.
"""

from __future__ import annotations

import importlib
import sys

WATCHED_MODULES = (
    "builtins", "math", "time", "os", "json",
    "numpy", "numpy.testing", "numpy.linalg",
    "jax", "jax.numpy", "jax.lax", "jax.sharding", "jax.stages",
    "pytest", "_pytest.outcomes",
    "grader.checks", "grader.checks.numerics", "grader.checks.sharding", "grader.checks.hlo",
    "grader.checks.speedup", "grader.checks.meshes", "grader.outcomes", "grader.pytest_plugin",
)


class Snapshot:
    def __init__(self, modules=WATCHED_MODULES):
        self._values: dict[tuple[str, str], object] = {}
        for name in modules:
            module = sys.modules.get(name) or _try_import(name)
            if module is None:
                continue
            for attr, value in list(vars(module).items()):
                self._values[(name, attr)] = value

    def changes(self) -> list[str]:
        """Names of the attributes that were replaced, added or deleted since the snapshot."""
        changed = []
        current_by_module: dict[str, dict] = {}
        for (module, attr), value in self._values.items():
            current = current_by_module.setdefault(module, vars(sys.modules[module]))
            if attr not in current:
                changed.append(f"{module}.{attr} (deleted)")
            elif current[attr] is not value:
                changed.append(f"{module}.{attr}")
        return changed

    def restore(self) -> None:
        for (module, attr), value in self._values.items():
            setattr(sys.modules[module], attr, value)


def _try_import(name):
    try:
        return importlib.import_module(name)
    except ImportError:
        return None


def describe(changes: list[str], when: str) -> str:
    shown = ", ".join(changes[:8]) + (f" and {len(changes) - 8} more" if len(changes) > 8 else "")
    return (f"your code replaced {shown} {when}. Grading needs numpy, jax and the checks as they are: "
            "they have been put back, and this does not earn the test's points.")
