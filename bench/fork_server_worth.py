"""What the fork server (grader.worker.zygote) saves over a batch: 20 submissions, hostile ones included,
each graded on --exercises with --isolate in a harness of its own, once with the fork server and once
without (grader.worker.supervisor.FORK_SERVER off: every replaced worker starts in a fresh sandbox).
The two ways alternate submission by submission, so the machine's load falls on both alike.

The batch: copies of the reference, the corpus's submissions that hold the exercises
(tests/grader/submissions/), and attacks of tests/grader/hostile/test_corpus.py's kind that cost workers:
a crash in one call, in every call, at import; an endless loop; a protocol break; a daemon left behind.
Each harness counts the sandboxes it started and the workers it forked (a worker per sandbox without
the fork server), and the bench prints per submission and in all: seconds both ways, and the ratio.

    python bench/fork_server_worth.py [--exercises ex01,ex05] [--test-timeout 10]
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SOLUTIONS = ROOT / "solutions"
CORPUS = ROOT / "tests" / "grader" / "submissions"
MODULES = {
    "ex01": "ex01_meshes.py",
    "ex05": "ex05_collectives.py",
    "ex11": "ex11_padded_particles.py",
}
TESTS = {"ex01": "ex01_meshes", "ex05": "ex05_collectives", "ex11": "ex11_padded_particles"}

# The harness, with the switch set and its worker starts counted (printed as the last line).
HARNESS = textwrap.dedent("""
    import json, sys
    import pytest
    from grader.worker import supervisor

    supervisor.FORK_SERVER = sys.argv[1] == "on"
    counts = {"sandboxes": 0, "workers": 0}
    start_sandbox, fork_worker = supervisor.Worker._start_sandbox, supervisor.Worker._fork_worker

    def counted_sandbox(self):
        counts["sandboxes"] += 1
        return start_sandbox(self)

    def counted_fork(self, limit):
        counts["workers"] += 1
        return fork_worker(self, limit)

    supervisor.Worker._start_sandbox, supervisor.Worker._fork_worker = counted_sandbox, counted_fork
    code = pytest.main(sys.argv[2:])
    print("COUNTS " + json.dumps(counts))
    sys.exit(0 if code in (0, 1) else code)
""")


def _hostile_corpus():
    """tests/grader/hostile/test_corpus.py, for its way of writing an attack into a module (`wrap`)."""
    spec = importlib.util.spec_from_file_location(
        "shardlab_hostile_corpus", CORPUS.parent / "hostile" / "test_corpus.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def wrap(function: str, condition: str, action: str) -> str:
    """test_corpus's wrap (n: the function's first positional argument), with the modules the actions use."""
    return "\nimport os, sys\n" + _hostile_corpus().wrap(function, condition, action)


BREAK = textwrap.dedent("""
    def _break_the_protocol():
        import os
        for fd in range(3, 64):
            try:
                os.write(fd, b"garbage" * 100)
            except OSError:
                pass
""")


def attacks(exercise: str) -> dict[str, str]:
    """Hostile variants of the reference's module for `exercise`: what each appends to it. The attacks on
    one call are tests/grader/hostile/test_corpus.py's, on ex01's make_data_mesh (other exercises keep the
    reference)."""
    names = [
        line[4 : line.index("(")]
        for line in (SOLUTIONS / MODULES[exercise]).read_text().splitlines()
        if line.startswith("def ")
    ]
    daemon = (
        "import subprocess; subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(600)'], "
        "start_new_session=True)"
    )
    one_call = exercise == "ex01"
    return {
        "crashes_in_one_call": wrap("make_data_mesh", "n == 5", "os._exit(7)") if one_call else "",
        "loops_in_one_call": wrap("make_data_mesh", "n == 3", "while True: pass")
        if one_call
        else "",
        "crashes_in_every_call": "".join(wrap(name, "True", "os._exit(7)") for name in names),
        "crashes_at_import": "\nimport os\nos._exit(3)\n",
        "breaks_the_protocol": BREAK
        + "".join(wrap(name, "True", "_break_the_protocol()") for name in names),
        "leaves_daemons": "".join(wrap(name, "True", daemon) for name in names[:2]),
        "segfaults_in_every_call": "".join(
            wrap(name, "True", "import ctypes; ctypes.string_at(0)") for name in names
        ),
    }


def batch(exercises: list[str], scratch: Path) -> list[tuple[str, Path]]:
    """20 submission folders: 6 reference copies, 7 of the corpus's (or alt_correct copies), 7 attacks."""
    folders: list[tuple[str, Path]] = []

    def add(name: str, modules: dict[str, str]) -> None:
        folder = scratch / name
        folder.mkdir()
        for file, text in modules.items():
            (folder / file).write_text(text)
        folders.append((name, folder))

    reference = {MODULES[e]: (SOLUTIONS / MODULES[e]).read_text() for e in exercises}
    for i in range(6):
        add(f"reference_{i}", reference)
    corpus = [
        d
        for d in sorted(CORPUS.iterdir())
        if d.is_dir() and any((d / MODULES[e]).is_file() for e in exercises)
    ]
    for d in corpus[:7]:
        add(
            f"corpus_{d.name}",
            {
                MODULES[e]: (d / MODULES[e]).read_text()
                for e in exercises
                if (d / MODULES[e]).is_file()
            },
        )
    for i in range(7 - len(corpus[:7])):
        add(
            f"corpus_alt_correct_{i}",
            {MODULES[e]: (CORPUS / "alt_correct" / MODULES[e]).read_text() for e in exercises},
        )
    for name in attacks(exercises[0]):
        add(
            f"hostile_{name}",
            {MODULES[e]: reference[MODULES[e]] + attacks(e)[name] for e in exercises},
        )
    return folders


def grade(
    folder: Path, exercises: list[str], fork_server: bool, test_timeout: float
) -> tuple[float, dict]:
    tests = [str(ROOT / "tests" / "exercises" / TESTS[e]) for e in exercises]
    argv = [
        sys.executable,
        "-c",
        HARNESS,
        "on" if fork_server else "off",
        *tests,
        "--impl",
        str(folder),
        "--isolate",
        "--test-timeout",
        str(test_timeout),
        "--timing",
        "skip",
        "-q",
        "-p",
        "no:cacheprovider",
    ]
    begun = time.perf_counter()
    done = subprocess.run(
        argv,
        cwd=ROOT,
        capture_output=True,
        text=True,
        env=os.environ | {"PYTHONDONTWRITEBYTECODE": "1"},
    )
    seconds = time.perf_counter() - begun
    counts = next(
        (json.loads(line[7:]) for line in done.stdout.splitlines() if line.startswith("COUNTS ")),
        None,
    )
    if counts is None:
        sys.exit(
            f"{folder.name}: the harness failed ({done.returncode}):\n{done.stdout[-3000:]}\n"
            f"{done.stderr[-3000:]}"
        )
    summary = done.stdout.strip().splitlines()[-2] if done.stdout.strip() else ""
    return seconds, counts | {"summary": summary}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--exercises", default="ex01,ex05", help="comma-separated: ex01, ex05, ex11"
    )
    parser.add_argument("--test-timeout", type=float, default=10.0)
    args = parser.parse_args()
    exercises = args.exercises.split(",")
    scratch = Path(tempfile.mkdtemp(prefix="fork-server-worth-"))
    totals = {True: 0.0, False: 0.0}
    try:
        for index, (name, folder) in enumerate(batch(exercises, scratch)):
            seen = {}
            for fork_server in (True, False) if index % 2 == 0 else (False, True):
                seen[fork_server] = grade(folder, exercises, fork_server, args.test_timeout)
                totals[fork_server] += seen[fork_server][0]
            (on, on_counts), (off, off_counts) = seen[True], seen[False]
            print(
                f"{name:<36} with {on:6.1f} s ({on_counts['sandboxes']} sandbox, {on_counts['workers']} workers)"
                f"   without {off:6.1f} s ({off_counts['sandboxes']} sandboxes)   {on_counts['summary']}",
                flush=True,
            )
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    saved = totals[False] - totals[True]
    print(
        f"batch of 20 ({','.join(exercises)}): with the fork server {totals[True]:.1f} s, "
        f"without {totals[False]:.1f} s;"
        f" saved {saved:.1f} s = {saved / totals[False]:.1%} of the batch without it"
        f" (without / with = {totals[False] / totals[True]:.3f})"
    )


if __name__ == "__main__":
    main()
