"""`shardlab dev-check`: the course is consistent. Every catalog exercise has its reference, stub and
tests; exercises/ is exactly what the generator makes from solutions/; each exercise's tests weigh its
catalog points, declare the kinds of rule they grade and (inferred or declared) the functions and
branches, and every kind and branch hidden tests grade a function on is sampled by a visible test of it
(docs/rules.md shows the tables); every function that runs on a mesh is held to its share of the work
and of the traffic; every reference passes all its tests, recording the
facts of the kinds it declares; every stub fails every one of its tests as "not attempted"."""

from __future__ import annotations

import ast
import math
from dataclasses import dataclass, field

from grader.core.results import Category, TestMeta, TestResult, function_id
from grader.core.rules import DESCRIPTIONS, Rule
from grader.course import catalog, paths, stubs
from grader.grading.collection import GradingError, collect_tests
from grader.harness.runner import run_tests

TEST_FILES = ("test_visible.py", "test_hidden.py")
RULES_TABLE = paths.REPO_ROOT / "docs" / "rules.md"
# The kinds whose checks record a fact on the test's result (grader.core.results): a test recording one
# must declare it, and a test declaring one records it.
FACTS = {
    Rule.LAYOUTS: lambda r: bool(r.layouts),
    Rule.COLLECTIVES: lambda r: bool(r.collectives),
    Rule.SPEEDUP: lambda r: r.speedup is not None,
    Rule.WORK: lambda r: any(f.rule == Rule.WORK for f in r.figures),
    Rule.TRAFFIC: lambda r: any(f.rule == Rule.TRAFFIC for f in r.figures),
}
# What holds a function on a mesh to its share (catalog.Exercise.shares), and what each rule bounds.
SHARES = {
    Rule.WORK: "the multiply-adds each device executes",
    Rule.TRAFFIC: "the bytes each device sends through collectives",
}


@dataclass
class Findings:
    problems: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems


def _shown(path) -> str:
    return (
        str(path.relative_to(paths.REPO_ROOT))
        if path.is_relative_to(paths.REPO_ROOT)
        else str(path)
    )


def check_layout(findings: Findings) -> None:
    """Catalog <-> files, both ways."""
    known = {e.module_file for e in catalog.EXERCISES}
    for tree in (paths.SOLUTIONS_DIR, paths.EXERCISES_DIR):
        for path in sorted(tree.glob("ex*.py")):
            if path.name not in known:
                findings.problems.append(f"{_shown(path)} is not in the catalog")
    for path in sorted(
        p for p in paths.EXERCISE_TESTS_DIR.iterdir() if p.is_dir() and p.name.startswith("ex")
    ):
        if path.name + ".py" not in known:
            findings.problems.append(f"{_shown(path)}/ has no catalog exercise")
    for exercise in catalog.EXERCISES:
        if not exercise.solution_path().is_file():
            findings.problems.append(
                f"{exercise.id}: no reference solutions/{exercise.module_file}"
            )
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
            findings.problems.append(
                f"{where} differs from what solutions/ generates: run `shardlab stubs`"
            )


def _graded_kinds(tests: list[TestMeta], hidden: bool) -> set[Rule]:
    """The kinds of rule the (hidden or visible) tests that carry points grade."""
    return {
        rule for test in tests if test.hidden == hidden and test.weight > 0 for rule in test.rules
    }


def _graded(tests: list[TestMeta], hidden: bool) -> set[tuple[str, str]]:
    """(function, kind of rule or "branch NAME") that the (hidden or visible) tests with points grade."""
    return {
        (function, what)
        for test in tests
        if test.hidden == hidden and test.weight > 0
        for function in test.functions
        for what in (*map(str, test.rules), *(f"branch {b!r}" for b in test.branches))
    }


def _defined(exercise: catalog.Exercise) -> set[str]:
    """The functions the reference defines at its top level: what a test can grade."""
    path = exercise.solution_path()
    if not path.is_file():
        return set()
    tree = ast.parse(path.read_text())
    return {node.name for node in tree.body if isinstance(node, ast.FunctionDef)}


def check_rules_sampled(findings: Findings, tests: list[TestMeta]) -> None:
    """A test's points are its weight, so an exercise's tests weigh its catalog points; every test declares
    the kinds of rule it grades and the functions it grades (grader.harness.graded); for every function
    hidden tests with points grade, each kind of rule and each branch they grade it on, a visible test
    with points samples."""
    for exercise in catalog.EXERCISES:
        mine = [t for t in tests if t.exercise == exercise.id]
        weight = math.fsum(t.weight for t in mine)
        if mine and not math.isclose(weight, exercise.points, abs_tol=1e-9):
            findings.problems.append(
                f"{exercise.id}: its tests weigh {weight:g} points, the catalog gives it "
                f"{exercise.points}: a test's points are its weight"
            )
        for function in dict.fromkeys(function_id(t.nodeid) for t in mine if not t.rules):
            findings.problems.append(
                f"{function} declares no kind of rule: mark it "
                f"@pytest.mark.rules(...) with some of {', '.join(Rule)}"
            )
        for function in dict.fromkeys(function_id(t.nodeid) for t in mine if not t.functions):
            findings.problems.append(
                f"{function} declares nothing dev-check can check: it names no impl.<function> "
                "and hands impl on; declare functions=(...) on its rules marker"
            )
        defined = _defined(exercise)
        for test in mine:
            for name in test.functions:
                if name not in defined:
                    findings.problems.append(
                        f"{test.nodeid} grades {name!r}, which solutions/{exercise.module_file} "
                        "does not define"
                    )
        for function, what in sorted(_graded(mine, True) - _graded(mine, False)):
            about = DESCRIPTIONS.get(what, "a refusal, None or error it must give")
            findings.problems.append(
                f"{exercise.id}: its hidden tests grade {function}'s {what} ({about}) but no "
                "visible test with points samples it: a student would learn the rule from "
                "the grade"
            )


def check_names_apart(findings: Findings, tests: list[TestMeta]) -> None:
    """No test function of an exercise is named alike in its visible and hidden files: an nbgrader notebook
    holds both files' tests in one name space (the later would replace the earlier), and a student reading a
    result could not tell which of the two it is."""
    for exercise in catalog.EXERCISES:
        names = {
            hidden: {
                function_id(t.nodeid).rsplit("::", 1)[-1]
                for t in tests
                if t.exercise == exercise.id and t.hidden == hidden
            }
            for hidden in (False, True)
        }
        for name in sorted(names[False] & names[True]):
            findings.problems.append(
                f"{exercise.id}: {name} is defined in both test_visible.py and test_hidden.py: give "
                "the hidden one a name of its own"
            )


def check_shares_held(findings: Findings, tests: list[TestMeta]) -> None:
    """Every graded function of an exercise whose functions run on a mesh is held to its share by tests with
    points, on both counts (the work it executes, the bytes it sends), unless the catalog says why not; and
    the catalog's exceptions name functions the reference defines."""
    for exercise in catalog.EXERCISES:
        if not exercise.shares:
            continue
        unshared = dict(exercise.unshared)
        for name in sorted(set(unshared) - _defined(exercise)):
            findings.problems.append(
                f"{exercise.id}: the catalog holds {name!r} to no share, but "
                f"solutions/{exercise.module_file} does not define it"
            )
        graded = [t for t in tests if t.exercise == exercise.id and t.weight > 0]
        for function in dict.fromkeys(f for t in graded for f in t.functions):
            if function in unshared:
                continue
            kinds = {rule for t in graded if function in t.functions for rule in t.rules}
            for rule in (r for r in SHARES if r not in kinds):
                findings.problems.append(
                    f"{exercise.id}: {function} runs on a mesh, but no test with points holds it to "
                    f"its share of {rule} ({SHARES[rule]}): declare {str(rule)!r} on the rules "
                    "marker of a test that checks it, or give the catalog's reason in `unshared`"
                )


def rules_table(tests: list[TestMeta]) -> str:
    """docs/rules.md: per exercise, its points, what its visible tests carry, and the kinds of rule graded
    (x: by visible and hidden tests; v: by visible tests only); then per function, what it is graded on."""
    kinds = [rule for rule in Rule if any(rule in t.rules for t in tests)]
    lines = [
        "| exercise | points | visible | " + " | ".join(kinds) + " |",
        "| --- | ---: | ---: |" + " :---: |" * len(kinds),
    ]
    for exercise in catalog.EXERCISES:
        mine = [t for t in tests if t.exercise == exercise.id]
        hidden, visible = _graded_kinds(mine, True), _graded_kinds(mine, False)
        visible_points = math.fsum(t.weight for t in mine if not t.hidden)
        marks = [
            "x"
            if rule in hidden and rule in visible
            else "v"
            if rule in visible
            else "HIDDEN ONLY"
            if rule in hidden
            else ""
            for rule in kinds
        ]
        lines.append(
            f"| {exercise.id} | {exercise.points} | {visible_points:g} | "
            + " | ".join(marks)
            + " |"
        )
    return "\n".join(lines) + "\n\n" + _functions_table(tests)


def _functions_table(tests: list[TestMeta]) -> str:
    """Per function graded with points: the kinds of rule and branches its tests grade (each one also
    by a visible test: check_rules_sampled)."""
    lines = [
        "| exercise | function | kinds of rule | branches |",
        "| --- | --- | --- | --- |",
    ]
    for exercise in catalog.EXERCISES:
        graded = [t for t in tests if t.exercise == exercise.id and t.weight > 0]
        for function in dict.fromkeys(f for t in graded for f in t.functions):
            mine = [t for t in graded if function in t.functions]
            kinds = [str(rule) for rule in Rule if any(rule in t.rules for t in mine)]
            branches = dict.fromkeys(b for t in mine for b in t.branches)
            lines.append(
                f"| {exercise.id} | {function} | {', '.join(kinds)} | {', '.join(branches)} |"
            )
    return "\n".join(lines) + "\n"


def check_rules_table(findings: Findings, tests: list[TestMeta]) -> None:
    """docs/rules.md holds the table the tests make."""
    table = rules_table(tests)
    text = RULES_TABLE.read_text() if RULES_TABLE.is_file() else ""
    if table not in text:
        findings.problems.append(
            f"{_shown(RULES_TABLE)} does not hold the table of rule kinds the tests declare; "
            f"it is now:\n{table}"
        )


def check_facts_declared(findings: Findings, results: list[TestResult]) -> None:
    """On the reference, a test records the facts of the kinds it declares, and declares those it records."""
    for result in results:
        if not result.passed:
            continue
        for rule, recorded in FACTS.items():
            if recorded(result) and rule not in result.rules:
                findings.problems.append(
                    f"{result.nodeid} records {rule} facts but does not declare {rule!s}"
                )
            elif rule in result.rules and not recorded(result):
                findings.problems.append(
                    f"{result.nodeid} declares {rule!s} but records no {rule} fact on the reference"
                )


def check_reference_passes(findings: Findings) -> None:
    run = run_tests("reference")
    for result in run.results:
        if result.category != Category.PASSED:
            findings.problems.append(
                f"reference {result.category}: {result.nodeid}\n    "
                + result.message.replace("\n", "\n    ")
            )
    _check_split(findings, run.results)
    check_facts_declared(findings, run.results)
    findings.notes.append(
        f"reference: {sum(r.passed for r in run.results)} of {len(run.results)} tests passed"
    )


def check_stubs_not_attempted(findings: Findings) -> None:
    run = run_tests("exercises")
    for result in run.results:
        exercise = catalog.get(result.exercise) if result.exercise else None
        tag = f"{exercise.number}:" if exercise else "?"
        if result.category != Category.NOT_ATTEMPTED or tag not in result.message:
            findings.problems.append(
                f"stub gives {result.category!r} (expected 'not attempted' naming {tag}): "
                f"{result.nodeid}: {result.message[:300]}"
            )
    findings.notes.append(
        f"stubs: {sum(r.category == Category.NOT_ATTEMPTED for r in run.results)} of "
        f"{len(run.results)} tests not attempted"
    )


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
    if findings.ok:
        try:
            tests = collect_tests()
        except GradingError as exc:
            findings.problems.append(str(exc))
        else:
            check_rules_sampled(findings, tests)
            check_names_apart(findings, tests)
            check_shares_held(findings, tests)
            check_rules_table(findings, tests)
    if run_tests_too and findings.ok:
        check_reference_passes(findings)
        check_stubs_not_attempted(findings)
    return findings


def report(findings: Findings) -> str:
    lines = [f"  {note}" for note in findings.notes]
    lines += [f"  PROBLEM {p}" for p in findings.problems]
    lines.append(
        "dev-check: OK" if findings.ok else f"dev-check: {len(findings.problems)} problem(s)"
    )
    return "\n".join(lines)


def dev_check_command(args) -> int:
    findings = dev_check(run_tests_too=not args.no_tests)
    print(report(findings))
    return 0 if findings.ok else 1


__all__ = ["Findings", "dev_check", "dev_check_command", "report"]
