"""Submissions written from the exercise contract alone (the docstrings): a correct one unlike the
reference gets every test; each wrong one fails exactly the tests of the rule it breaks
(tests/grader/submissions/expectations).

Each is run both ways: in-process (a student's `shardlab check`) and isolated (the module in a confined
worker, as grading runs it); honest code must get the same verdict both ways. A student's check runs the
visible tests only, so the in-process route runs those (every visible verdict must be grading's); the
isolated route runs every test, where each must fail exactly what its expectations name. (The hidden
tests in-process are the suite's own tests/exercises, run on the reference.)

The two routes run side by side with the timing checks off (`--timing=skip`: a speed test still checks
its values, then skips), so that neither measures under the other's load. Whether the speed thresholds
pass the reference and fail replicated work is shown alone, and repeatedly, by test_speedup_flakes."""

import ast
import json
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import pytest

from grader.core.results import TestResult
from grader.course import catalog
from grader.grading.compile_cache import CompileCache, default_folder
from grader.harness.runner import run_tests

SUBMISSIONS = Path(__file__).parents[1] / "submissions"
# mistakes/<exercise id>.json: {folder: {"mistake": what the submission does wrong, "says": words its first
# visible failure says}}. What a student's check shows first must name the mistake and how to mend it.
MISTAKES = SUBMISSIONS / "mistakes"
AUTHORING = Path(__file__).parents[3] / "docs" / "authoring.md"


def expectations() -> dict[str, dict[str, set[str]]]:
    """{folder: {exercise id: names of the tests that must fail}}"""
    found: dict[str, dict[str, set[str]]] = {}
    for path in sorted((SUBMISSIONS / "expectations").glob("*.json")):
        exercise = catalog.get(path.stem)
        for folder, failing in json.loads(path.read_text()).items():
            found.setdefault(folder, {})[exercise.id] = set(failing)
    return found


def test_every_submission_module_has_expectations():
    listed = {(folder, ex) for folder, by_ex in expectations().items() for ex in by_ex}
    on_disk = {(p.parent.name, p.stem) for p in SUBMISSIONS.glob("*/ex*.py")}
    assert on_disk == listed


def visible_functions(exercise: catalog.Exercise) -> set[str]:
    tree = ast.parse((exercise.tests_dir() / "test_visible.py").read_text())
    return {
        node.name
        for node in tree.body
        if isinstance(node, ast.FunctionDef) and node.name.startswith("test_")
    }


def test_every_wrong_submission_fails_a_visible_test():
    """A student's own check tells them: every design the corpus holds that breaks a rule fails a visible test
    (test_submission_scores_as_expected_both_ways shows it does, with grading's message)."""
    unseen = [
        f"{folder}/{exercise}: fails only {sorted(failing)}"
        for folder, by_exercise in expectations().items()
        for exercise, failing in by_exercise.items()
        if failing and not failing & visible_functions(catalog.get(exercise))
    ]
    assert not unseen, "\n".join(unseen)


@dataclass(frozen=True)
class Mistake:
    exercise: str
    folder: str
    mistake: str  # what the submission does wrong, for the table
    says: str  # words its first visible failure says (case aside)


def mistakes() -> list[Mistake]:
    found = []
    for path in sorted(MISTAKES.glob("*.json")):
        exercise = catalog.get(path.stem)
        for folder, entry in json.loads(path.read_text()).items():
            found.append(Mistake(exercise.id, folder, entry["mistake"], entry["says"]))
    return found


def test_every_wrong_submission_says_how_its_mistake_is_named():
    """Each wrong submission in the corpus lists the words that name its mistake; no list names a module
    the corpus does not hold, or one that fails nothing."""
    wrong = {(f, ex) for f, by_ex in expectations().items() for ex, names in by_ex.items() if names}
    named = {(m.folder, m.exercise) for m in mistakes()}
    assert not wrong - named, f"no words listed in {MISTAKES} for: {sorted(wrong - named)}"
    assert not named - wrong, f"words listed for no wrong submission: {sorted(named - wrong)}"


def mistakes_table() -> str:
    """docs/authoring.md's table: each mistake the corpus holds, and what the student's check says first."""
    rows = [
        "| exercise | mistake (corpus folder) | the check's first failure says |",
        "|---|---|---|",
    ]
    for m in sorted(mistakes(), key=lambda m: (m.exercise, m.folder)):
        said = m.says.replace("|", "\\|")
        rows.append(f'| {m.exercise} | {m.mistake} (`{m.folder}`) | "{said}" |')
    return "\n".join(rows) + "\n"


def test_authoring_shows_the_mistakes_table():
    """The table of mistakes and messages in docs/authoring.md is the one the corpus's lists make."""
    assert mistakes_table() in AUTHORING.read_text(), (
        f"{AUTHORING} does not hold the corpus's table of mistakes; paste in "
        "tests/grader/grading/test_submissions.py's mistakes_table()"
    )


def first_failures(run) -> dict[str, TestResult]:
    """Each exercise's first failing test, in the order the check shows them."""
    first: dict[str, TestResult] = {}
    for result in run.results:
        if not result.earns:
            first.setdefault(result.exercise, result)
    return first


def check_named(folder: str, run, words: dict[str, str]) -> list[str]:
    """The first visible failure of each exercise says the words that name the folder's mistake."""
    first = first_failures(run)
    return [
        f"{exercise}: its first failure, {first[exercise].function if exercise in first else None}, "
        f"does not say {said!r}: {first[exercise].message[:600] if exercise in first else ''}"
        for exercise, said in words.items()
        if exercise not in first or said.lower() not in first[exercise].message.lower()
    ]


# A wrong folder's later visible failures, not only its first: each failing visible test of these functions
# says the mistake by name (in the in-process route, a student's check). {folder: (exercise, functions, words)}
LATER = {
    "grad_then_pmean": (
        "ex08_data_parallel_training",
        ("test_compiled_step", "test_train_step_shard_map_speedup"),
        'the "grad then pmean" trap',
    ),
    "no_grad_average": (
        "ex08_data_parallel_training",
        ("test_compiled_step", "test_train_step_shard_map_speedup"),
        "the gradients were never averaged over the devices",
    ),
}


def check_later_failures(folder: str, run) -> list[str]:
    """Every failing visible test of LATER's functions says the words, and at least two fail."""
    exercise, functions, says = LATER[folder]
    failed = [
        r for r in run.results if r.exercise == exercise and r.function in functions and not r.earns
    ]
    if len(failed) < 2:
        return [f"expected at least two of {functions} to fail, {len(failed)} did"]
    return [
        f"{r.nodeid}: does not say {says!r}: {r.message[:400]}"
        for r in failed
        if says not in r.message
    ]


ROUTES = {"in-process": (), "isolated": ("--isolate",)}
# Every function on a mesh computing the right values while each device does the whole job: the visible
# tests' meshes are chosen so that it breaks a bound of its share at least twice over.
REPLICATES = "replicates_work"


def check_twice_over(run) -> list[str]:
    """Each work or traffic rule the replicating programs break in the visible tests, they break at least
    twice over: the bound is not a hair's breadth from honest work, on the mesh the student's check uses."""
    broken = [
        (r, f)
        for r in run.results
        for f in r.figures
        if f.rule in ("work", "traffic") and not f.passed and f.actual is not None
    ]
    near = [
        f"{r.nodeid}: {f.measure} {f.actual:,} against {f.expected}"
        for r, f in broken
        if f.bound and f.actual < 2 * f.bound
    ]
    return near if broken else ["no visible test recorded a broken work or traffic rule"]


def check_expectations(folder: str, run, expected: dict[str, set[str]]) -> list[str]:
    """The run's failures are exactly the expected ones among the tests it ran."""
    ran = {(r.exercise, r.function) for r in run.results}
    expected = {ex: {n for n in names if (ex, n) in ran} for ex, names in expected.items()}
    failed_names: dict[str, set[str]] = {ex: set() for ex in expected}
    problems = []
    for result in run.results:
        must_fail = result.function in expected[result.exercise]
        if not result.earns:  # skipped earns: a speed test, values right
            failed_names[result.exercise].add(result.function)
            if not must_fail or result.category != "failed":
                problems.append(f"{result.nodeid}: {result.category}: {result.message[:400]}")
    for exercise, names in expected.items():
        missed = names - failed_names[exercise]
        problems += [
            f"{exercise}: {name} should have failed for {folder}" for name in sorted(missed)
        ]
    return problems


@pytest.mark.slow
@pytest.mark.parametrize("folder", ["reference", *sorted(expectations())])
def test_submission_scores_as_expected_both_ways(folder):
    expected = expectations().get(folder) or {e.id: set() for e in catalog.EXERCISES}
    source = "reference" if folder == "reference" else SUBMISSIONS / folder
    tests = [catalog.get(ex).tests_dir() for ex in expected]
    # The reference's in-process verdicts are this session's own tests/exercises run (and dev-check's):
    # all passed. So here it runs isolated only, where it must pass everything too.
    routes = {"isolated": ROUTES["isolated"]} if folder == "reference" else ROUTES
    with ThreadPoolExecutor(len(routes)) as pool:
        futures = {
            route: pool.submit(
                run_tests,
                source,
                tests=tests,
                timing="skip",
                visible_only=route == "in-process",
                extra_args=args,
                # the isolated route's harness compiles into the session's cache, as grading's does
                env=CompileCache(default_folder()).environment() if args else None,
            )
            for route, args in routes.items()
        }
    runs = {route: future.result() for route, future in futures.items()}
    problems = []
    for route, run in runs.items():
        assert run.results, f"{route}: {run.output[-2000:]}"
        problems += [f"{route}: {p}" for p in check_expectations(folder, run, expected)]
    if "in-process" in runs and folder != "alt_correct":
        words = {m.exercise: m.says for m in mistakes() if m.folder == folder}
        problems += [f"named: {p}" for p in check_named(folder, runs["in-process"], words)]
    if folder in LATER:
        problems += [f"later: {p}" for p in check_later_failures(folder, runs["in-process"])]
    if folder == REPLICATES:
        problems += [f"share: {p}" for p in check_twice_over(runs["in-process"])]
    if len(runs) == 2:
        verdicts = {
            route: {r.nodeid: r.category for r in run.results} for route, run in runs.items()
        }
        inside, isolated = verdicts["in-process"], verdicts["isolated"]
        assert inside and set(inside) <= set(isolated)
        problems += [
            f"{nodeid}: {inside[nodeid]} in-process, {isolated[nodeid]} isolated"
            for nodeid in inside
            if inside[nodeid] != isolated[nodeid]
        ]
    assert not problems, "\n".join(problems)
