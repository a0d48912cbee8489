"""What the similarity check costs a class of two against the red team's attacks: the seconds and the peak
memory (the process's maximum resident set) of grader.grading.similarity.compare_class over ex05 when both
students' modules hold the reference's answer and

- nothing else ("honest");
- a dead function repeating one line --repeats times, the line ending in a character the stub's masked lines
  are made of, so that the module does not parse and every copy of the line is a shared stretch of its own
  (the red team's attack: matching stretches pair by pair took time and memory quadratic in the copies)
  ("dead repeats");
- the same line as in "dead repeats" --repeats times at the module's top level ("top-level repeats"): the
  module does not parse, and the cut to 64 KiB of code falls among the copies, so they are compared;
- a line repeated --repeats times inside a graded function, the module parsing ("live repeats");
- a docstring of 800 lines (57 KB, within what is compared) in a graded function ("long docstring"):
  blanked, a run of blank lines, which pygments' lexer reads in time quadratic in the run.

Each case runs in a fresh process of its own (its peak memory is its own; the imports are counted in every
case alike), --runs times, and the median seconds and the largest peak are printed.

Then a resumed batch: a class of --students, each with the reference module of every exercise under its own
variable names (every pair a near-copy, the check's worst case), compared with a cache folder three times in
one process: the first run (nothing kept yet), the same class again (everything kept), and after one
student's every module changed.

    python bench/similarity_bounds.py [--repeats 2000] [--runs 3] [--students 20]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

EXERCISE = "ex05_collectives"
LINE = "total = total + jax.lax.ppermute(block, 'i', pairs) * weights[step] + bias[step]"
SPLIT = LINE + " + jax.lax.psum(block, 'i') * scale[step] \u00a4"
CASES = ("honest", "dead repeats", "top-level repeats", "live repeats", "long docstring")


def module(case: str, repeats: int) -> str:
    from grader.course import catalog

    text = catalog.get(EXERCISE).solution_path().read_text(encoding="utf-8")
    if case == "dead repeats":
        body = "".join(f"    {SPLIT}\n" for _ in range(repeats))
        return (
            text + f"\n\ndef _unused(block, pairs, weights, bias, step):\n    total = block\n{body}"
        )
    if case == "top-level repeats":
        return text + "\n" + "".join(f"{SPLIT}\n" for _ in range(repeats))
    hole = "def all_reduce(x, mesh):\n"
    assert hole in text
    if case == "long docstring":
        doc = "A line of the docstring, long enough to matter here, written out.\n    " * 800
        return text.replace(hole, hole + f'    """{doc}"""\n')
    body = "".join(f"    {LINE}\n" for _ in range(repeats))
    if case == "live repeats":
        return text.replace(hole, hole + "    if x is None:\n" + body.replace("    ", "        "))
    return text


def child(case: str, repeats: int) -> None:
    import resource
    import time

    from grader.grading import similarity

    with tempfile.TemporaryDirectory() as root:
        submissions = {}
        for student in ("ann", "bob"):
            (Path(root) / student).mkdir()
            (Path(root) / student / f"{EXERCISE}.py").write_text(module(case, repeats))
            submissions[student] = Path(root) / student
        begun = time.perf_counter()
        result = similarity.compare_class(submissions, [EXERCISE])
        seconds = time.perf_counter() - begun
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # kB on Linux
    flagged = result.exercises[0].flagged
    print(json.dumps({"seconds": seconds, "peak_mb": peak, "flagged": flagged}))


def resumed(students: int) -> None:
    import re
    import time

    from grader.course import catalog
    from grader.grading import similarity

    with tempfile.TemporaryDirectory() as root:
        submissions = {}
        for i in range(students):
            folder = Path(root) / f"s{i:03d}"
            folder.mkdir()
            for exercise in catalog.EXERCISES:
                text = exercise.solution_path().read_text(encoding="utf-8")
                (folder / exercise.module_file).write_text(re.sub(r"\bx\b", f"x{i}", text))
            submissions[folder.name] = folder
        cache = Path(root) / "cache"
        seconds = []
        for step in ("first", "again", "one changed"):
            if step == "one changed":
                for module in submissions["s000"].iterdir():
                    module.write_text(module.read_text() + "\n\nCHANGED = 1\n")
            begun = time.perf_counter()
            similarity.compare_class(submissions, cache=cache)
            seconds.append(f"{step} {time.perf_counter() - begun:.2f} s")
    print(f"a class of {students}, every exercise, with a cache: " + ", ".join(seconds))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=2000)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--students", type=int, default=20)
    parser.add_argument("--child", choices=CASES, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args.child, args.repeats)
        return
    print(f"two students, ex05, the line repeated {args.repeats} times; median of {args.runs} runs")
    for case in CASES:
        runs = [
            json.loads(
                subprocess.run(
                    [sys.executable, __file__, "--child", case, "--repeats", str(args.repeats)],
                    capture_output=True,
                    text=True,
                    check=True,
                ).stdout
            )
            for _ in range(args.runs)
        ]
        print(
            f"{case:>17}: {statistics.median(r['seconds'] for r in runs):6.2f} s, "
            f"peak {max(r['peak_mb'] for r in runs):6.0f} MB, flagged pairs {runs[0]['flagged']}"
        )
    resumed(args.students)


if __name__ == "__main__":
    main()
