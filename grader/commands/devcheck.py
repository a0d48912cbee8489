"""`shardlab dev-check`: the course is consistent. Every catalog exercise has its reference, stub and
tests; exercises/ is exactly what the generator makes from solutions/; every reference passes all its
tests; every stub fails every one of its tests as "not attempted"."""

from __future__ import annotations

from dataclasses import dataclass, field

from grader.core.results import Category, TestResult
from grader.course import catalog, paths, stubs
from grader.harness.runner import run_tests

TEST_FILES = ("test_visible.py", "test_hidden.py")


@dataclass
class Findings:
    problems: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems


def _shown(path) -> str:
    return str(path.relative_to(paths.REPO_ROOT)) if path.is_relative_to(paths.REPO_ROOT) else str(path)


def check_layout(findings: Findings) -> None:
    """Catalog <-> files, both ways."""
    known = {e.module_file for e in catalog.EXERCISES}
    for tree in (paths.SOLUTIONS_DIR, paths.EXERCISES_DIR):
        for path in sorted(tree.glob("ex*.py")):
            if path.name not in known:
                findings.problems.append(f"{_shown(path)} is not in the catalog")
    for path in sorted(p for p in paths.EXERCISE_TESTS_DIR.iterdir() if p.is_dir() and p.name.startswith("ex")):
        if path.name + ".py" not in known:
            findings.problems.append(f"{_shown(path)}/ has no catalog exercise")
    for exercise in catalog.EXERCISES:
        if not exercise.solution_path().is_file():
            findings.problems.append(f"{exercise.id}: no reference solutions/{exercise.module_file}")
        for name in TEST_FILES:
            if not (exercise.tests_dir() / name).is_file():
                findings.problems.append(f"{exercise.id}: no tests/exercises/{exercise.id}/{name}")


def check_stubs_current(findings: Findings) -> None:
    try:
        expected = stubs.expected_stubs()
    except (OSError, stubs.StubError) as exc:
        findings.problems.append(f"stubs cannot be generated: {exc}")
        return
    for path, text in expected.items():
        where = _shown(path)
        if not path.exists():
            findings.problems.append(f"{where} is missing: run `shardlab stubs`")
        elif path.read_text() != text:
            findings.problems.append(f"{where} differs from what solutions/ generates: run `shardlab stubs`")


def check_reference_passes(findings: Findings) -> None:
    run = run_tests("reference")
    for result in run.results:
        if result.category != Category.PASSED:
            findings.problems.append(f"reference {result.category}: {result.nodeid}\n    "
                                     + result.message.replace("\n", "\n    "))
    _check_split(findings, run.results)
    findings.notes.append(f"reference: {sum(r.passed for r in run.results)} of "
                          f"{len(run.results)} tests passed")


def check_stubs_not_attempted(findings: Findings) -> None:
    run = run_tests("exercises")
    for result in run.results:
        exercise = catalog.get(result.exercise) if result.exercise else None
        tag = f"{exercise.number}:" if exercise else "?"
        if result.category != Category.NOT_ATTEMPTED or tag not in result.message:
            findings.problems.append(
                f"stub gives {result.category!r} (expected 'not attempted' naming {tag}): "
                f"{result.nodeid}: {result.message[:300]}")
    findings.notes.append(f"stubs: {sum(r.category == Category.NOT_ATTEMPTED for r in run.results)} of "
                          f"{len(run.results)} tests not attempted")


def _check_split(findings: Findings, results: list[TestResult]) -> None:
    """Hidden tests live in test_hidden.py and carry the marker; visible ones do not."""
    for result in results:
        in_hidden_file = "/test_hidden.py::" in result.nodeid
        if result.exercise is None:
            findings.problems.append(f"{result.nodeid} belongs to no catalog exercise")
        elif in_hidden_file != result.hidden:
            findings.problems.append(f"{result.nodeid}: hidden marker does not match its file")
    for exercise in catalog.EXERCISES:
        count = sum(r.exercise == exercise.id for r in results)
        if count == 0:
            findings.problems.append(f"{exercise.id}: no tests collected")


def dev_check(*, run_tests_too: bool = True) -> Findings:
    findings = Findings()
    check_layout(findings)
    check_stubs_current(findings)
    if run_tests_too and findings.ok:
        check_reference_passes(findings)
        check_stubs_not_attempted(findings)
    return findings


def report(findings: Findings) -> str:
    lines = [f"  {note}" for note in findings.notes]
    lines += [f"  PROBLEM {p}" for p in findings.problems]
    lines.append("dev-check: OK" if findings.ok else f"dev-check: {len(findings.problems)} problem(s)")
    return "\n".join(lines)


__all__ = ["Findings", "dev_check", "report"]
