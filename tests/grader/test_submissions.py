"""Submissions written from CURRICULUM.md alone: a correct one unlike the reference gets every test;
each wrong one fails exactly the tests of the rule it breaks (tests/grader/submissions/expectations)."""

import json
from pathlib import Path

import pytest

from grader import catalog
from grader.runner import run_tests

SUBMISSIONS = Path(__file__).parent / "submissions"


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


@pytest.mark.slow
@pytest.mark.parametrize("folder", sorted(expectations()))
def test_submission_scores_as_expected(folder):
    expected = expectations()[folder]
    run = run_tests(SUBMISSIONS / folder, tests=[catalog.get(ex).tests_dir() for ex in expected])
    failed_names: dict[str, set[str]] = {ex: set() for ex in expected}
    problems = []
    for entry in run.tests:
        name = entry["nodeid"].split("::")[-1].split("[")[0]
        must_fail = name in expected[entry["exercise"]]
        if entry["category"] != "passed":
            failed_names[entry["exercise"]].add(name)
            if not must_fail or entry["category"] != "failed":
                problems.append(f"{entry['nodeid']}: {entry['category']}: {entry['message'][:400]}")
    for exercise, names in expected.items():
        missed = names - failed_names[exercise]
        problems += [f"{exercise}: {name} should have failed for {folder}" for name in sorted(missed)]
    assert run.tests, run.output[-2000:]
    assert not problems, "\n".join(problems)
