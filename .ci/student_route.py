"""The student's route on every CPython this machine has, from 3.11 to 3.14: build the handout, install it into
a fresh venv of that Python, `shardlab check --all` with the reference copied in must pass, and
`shardlab grade` of the example submission must give the same score on every Python.

    .venv/bin/python .ci/student_route.py [WORK_FOLDER]

Interpreters are found, never downloaded: python3.X on PATH and pyenv's builds (`pyenv root`/versions). One
per minor version; a version this machine lacks is said and skipped. Exits 1 when any route fails.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
VERSIONS = ((3, 11), (3, 12), (3, 13), (3, 14))  # pyproject.toml's requires-python
EXAMPLE = REPO / "examples" / "submission"


def version_of(python: str) -> tuple[int, int] | None:
    try:
        done = subprocess.run(
            [python, "-c", "import sys; print(*sys.version_info[:2])"],
            capture_output=True,
            text=True,
            timeout=60,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    if done.returncode != 0:
        return None
    major, minor = map(int, done.stdout.split())
    return major, minor


def interpreters() -> dict[tuple[int, int], str]:
    """One CPython per minor version of VERSIONS: on PATH first, then pyenv's builds."""
    candidates = [
        found for major, minor in VERSIONS if (found := shutil.which(f"python{major}.{minor}"))
    ]
    pyenv = shutil.which("pyenv")
    if pyenv:
        root = subprocess.run([pyenv, "root"], capture_output=True, text=True).stdout.strip()
        candidates += sorted(str(p) for p in Path(root, "versions").glob("3.*/bin/python3"))
    found: dict[tuple[int, int], str] = {}
    for python in candidates:
        version = version_of(python)
        if version in VERSIONS and version not in found:
            found[version] = python
    return found


def run(command: list, cwd: Path, log: Path) -> int:
    with open(log, "ab") as out:
        out.write(f"$ {' '.join(map(str, command))}\n".encode())
        out.flush()
        # The venv's tools are found beside its Python: nothing of this checkout's venv on PATH.
        env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "PYTHONPATH")}
        env["PATH"] = os.pathsep.join(
            p
            for p in env.get("PATH", "").split(os.pathsep)
            if not p.startswith(str(REPO / ".venv"))
        )
        return subprocess.run(
            command, cwd=cwd, stdout=out, stderr=subprocess.STDOUT, env=env
        ).returncode


def route(
    version: tuple[int, int], python: str, handout: Path, work: Path
) -> tuple[str | None, float | None]:
    """(what failed or None, the example submission's score)."""
    name = f"{version[0]}.{version[1]}"
    folder = work / name
    copy = folder / "handout"
    shutil.copytree(handout, copy)
    log = folder / "log"
    venv = folder / "venv"
    bin_ = venv / "bin"
    if run([python, "-m", "venv", venv], folder, log) != 0:
        return "could not make a venv", None
    if run([bin_ / "python", "-m", "pip", "install", "--quiet", "-e", "."], copy, log) != 0:
        return "pip install -e . of the handout failed", None
    for reference in sorted((REPO / "solutions").glob("ex*.py")):
        shutil.copy(reference, copy / "exercises" / reference.name)
    if run([bin_ / "shardlab", "check", "--all"], copy, log) != 0:
        return "shardlab check --all did not pass the reference", None
    out = folder / "graded"
    if run([bin_ / "shardlab", "grade", EXAMPLE, "--out", out, "--quiet"], copy, log) != 0:
        return "shardlab grade of the example submission failed", None
    report = json.loads((out / "report.json").read_text())
    if not report[
        "visible_only"
    ]:  # a handout holds no hidden test: its grading says it checked the visible ones
        return (
            "the handout's grading of the example did not say it ran the visible tests only",
            None,
        )
    return None, report["score"]


def main(argv: list[str]) -> int:
    work = Path(argv[0]) if argv else Path(tempfile.mkdtemp(prefix="shardlab-student-route-"))
    work.mkdir(parents=True, exist_ok=True)
    found = interpreters()
    for version in VERSIONS:
        if version not in found:
            print(f"student route: no CPython {version[0]}.{version[1]} on this machine, not tried")
    handout = work / "handout"
    if (
        run(
            [Path(sys.executable).parent / "shardlab", "release", handout],
            REPO,
            work / "release.log",
        )
        != 0
    ):
        print(f"student route: shardlab release failed ({work / 'release.log'})")
        return 1
    scores: dict[str, float] = {}
    failed = False
    for version, python in sorted(found.items()):
        begun = time.monotonic()
        problem, score = route(version, python, handout, work)
        name = f"{version[0]}.{version[1]}"
        seconds = time.monotonic() - begun
        if problem:
            failed = True
            print(f"student route on {name} ({python}): {problem} ({work / name / 'log'})")
        else:
            scores[name] = score
            print(
                f"student route on {name} ({python}): check --all passes; the example scores {score:g} "
                f"({seconds:.0f} s)"
            )
    if len(set(scores.values())) > 1:
        failed = True
        print(f"student route: the example submission scores differently by Python: {scores}")
    return 1 if failed or not scores else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
