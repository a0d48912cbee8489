"""How far each work and traffic rule sits from the programs it judges: the reference and the corpus's other
correct modules against its bound, and the corpus's programs that replicate the work against the same bound.

    python bench/share_margins.py [--json margins.json] [--exercise ID ...]

Grades, each as a whole `shardlab grade` process with timing skipped (a speedup is not what is measured
here), the mesh exercises of: the reference (solutions/), tests/grader/submissions/alt_correct and
tests/grader/submissions/replicates_work. Then, for every work and traffic figure the tests recorded
(grader.core.results.RuleFigure), prints the executed figure over the rule's bound for each: a correct
program must stay at or under 1.0, and the point of each rule is a replicating program well over it. A
figure a test never reached (an earlier assertion failed) is shown as "-".
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from grader.core.rules import Rule  # noqa: E402
from grader.course import catalog  # noqa: E402
from grader.grading.results import read_report  # noqa: E402

CORPUS = REPO / "tests" / "grader" / "submissions"
SUBMISSIONS = {
    "reference": REPO / "solutions",
    "alt_correct": CORPUS / "alt_correct",
    "replicates_work": CORPUS / "replicates_work",
}
RULES = (Rule.WORK.value, Rule.TRAFFIC.value)


def mesh_exercises() -> list[str]:
    """The exercises the catalog holds to a share: those with a work or traffic rule."""
    return [ex.id for ex in catalog.EXERCISES if ex.shares]


def grade(name: str, folder: Path, exercises: list[str], out: Path) -> dict:
    """{(test, rule, n): (actual, bound)}: the n-th figure of that rule in each test of one grading."""
    command = [
        str(Path(sys.executable).with_name("shardlab")),
        "grade",
        str(folder),
        "--out",
        str(out),
        "--quiet",
    ]
    command += ["--timing", "skip"]
    for ex in exercises:
        command += ["--exercise", ex]
    done = subprocess.run(command, cwd=REPO, capture_output=True, text=True)
    report = read_report(out / "report.json")
    if report is None:
        raise SystemExit(
            f"grading {name} wrote no report (exit {done.returncode}):\n{done.stderr[-2000:]}"
        )
    figures = {}
    for test in report.tests():
        seen: dict[str, int] = {}
        for figure in test.figures:
            if figure.rule not in RULES:
                continue
            n = seen[figure.rule] = seen.get(figure.rule, -1) + 1
            figures[(test.nodeid, figure.rule, n)] = (figure.actual, figure.bound, figure.measure)
    return figures


def ratio(entry) -> float | None:
    if entry is None:
        return None
    actual, bound, _ = entry
    if actual is None or not bound:
        return None
    return actual / bound


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--json", type=Path, help="also write the figures here")
    parser.add_argument(
        "--exercise", action="append", help="only these (default: every mesh exercise)"
    )
    args = parser.parse_args(argv)
    exercises = args.exercise or mesh_exercises()
    with tempfile.TemporaryDirectory(prefix="shardlab-margins-") as tmp:
        graded = {
            name: grade(name, folder, exercises, Path(tmp) / name)
            for name, folder in SUBMISSIONS.items()
        }
    keys = sorted({key for figures in graded.values() for key in figures})
    names = list(SUBMISSIONS)
    print("executed / bound, per figure (a correct program at most 1.0)")
    print(f"{'test':72s} {'rule':8s} " + " ".join(f"{n:>15s}" for n in names))
    rows = []
    for key in keys:
        test, rule, n = key
        cells = [ratio(graded[name].get(key)) for name in names]
        rows.append({"test": test, "rule": rule, "n": n} | dict(zip(names, cells)))
        shown = " ".join(f"{c:15.2f}" if c is not None else f"{'-':>15s}" for c in cells)
        label = test.split("tests/exercises/", 1)[-1] + (f" #{n + 1}" if n else "")
        print(f"{label[:72]:72s} {rule:8s} {shown}")
    correct = [r[n] for r in rows for n in ("reference", "alt_correct") if r[n] is not None]
    replicating = [r["replicates_work"] for r in rows if r["replicates_work"] is not None]
    print(
        f"\ncorrect programs: {len(correct)} figures, the largest {max(correct, default=0):.2f} of its bound; "
        f"replicating: {len(replicating)} figures, {sum(r > 1 for r in replicating)} over their bound, "
        f"{sum(r >= 2 for r in replicating)} at least twice over"
    )
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
