"""Which tests run, in what order, and what the grader knows of each before it runs: the catalog's
markers and device counts, slow and hidden tests, the points weights, and each test's time limit."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

from grader.core.results import TestMeta, function_id
from grader.core.rules import UnknownRule, rules_of
from grader.course import catalog
from grader.harness.graded import graded_functions
from grader.harness.session import META, session_of


def exercise_of(path: Path) -> catalog.Exercise | None:
    """Exercise tests live in a folder named by the exercise's id."""
    try:
        return catalog.get(path.parent.name)
    except KeyError:
        return None


def pytest_collection_modifyitems(config, items):
    run_slow = config.getoption("--slow")
    visible_only = config.getoption("--visible-only")
    kept, dropped = [], []
    for item in items:
        exercise = exercise_of(item.path)
        if exercise is not None:
            item.add_marker(exercise.id)
        if item.get_closest_marker("slow") and not run_slow:
            item.add_marker(pytest.mark.skip(reason="slow test: run with --slow"))
        (dropped if visible_only and item.get_closest_marker("hidden") else kept).append(item)
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = kept
    if config.getoption("--isolate"):
        # Visible tests first: no worker that served a hidden test (and could have noted its calls)
        # serves a visible one, whose messages a student sees before the due date.
        items.sort(key=lambda item: item.get_closest_marker("hidden") is not None)
    # A test function's points(weight) is shared equally by its parametrized cases.
    cases = Counter(function_id(item.nodeid) for item in items)
    limits = session_of(config).limits
    for item in items:
        marker = item.get_closest_marker("points")
        exercise = exercise_of(item.path)
        item.stash[META] = TestMeta(
            nodeid=item.nodeid,
            exercise=exercise.id if exercise else None,
            hidden=item.get_closest_marker("hidden") is not None,
            slow=item.get_closest_marker("slow") is not None,
            weight=(float(marker.args[0]) if marker else 1.0) / cases[function_id(item.nodeid)],
            limit=limits.limit(item.nodeid),
            rules=_rules(item),
            **_graded(item),
        )


def _rules(item) -> tuple:
    """The kinds of rule a test declares it grades: its closest `rules` marker's (dev-check requires one)."""
    marker = item.get_closest_marker("rules")
    try:
        return rules_of(marker.args) if marker else ()
    except UnknownRule as exc:
        raise pytest.UsageError(f"{item.nodeid}: {exc}") from None


def _graded(item) -> dict:
    """The functions and branches the test grades: its `rules` marker's, and the functions it names."""
    marker = item.get_closest_marker("rules")
    declared = marker.kwargs if marker else {}
    unknown = set(declared) - {"functions", "branches"}
    if unknown:
        raise pytest.UsageError(
            f"{item.nodeid}: the rules marker takes functions=(...) and branches=(...), "
            f"not {', '.join(sorted(unknown))}"
        )
    for key, names in declared.items():
        if isinstance(names, str) or not all(isinstance(name, str) for name in names):
            raise pytest.UsageError(
                f"{item.nodeid}: the rules marker's {key}= takes a tuple of names, "
                f'such as {key}=("{names}",), not {names!r}'
            )
    return {
        "functions": graded_functions(item, tuple(declared.get("functions", ()))),
        "branches": tuple(declared.get("branches", ())),
    }


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item, nextitem):
    """Each test draws its inputs from streams of its own (grader.checks.inputs), its fixtures' included;
    a property test's examples too, seeded per test (a parametrized function's cases share its object)."""
    from grader.checks import inputs

    with inputs.drawing_for(inputs.identity_of(item.path, item.name)):
        if hasattr(getattr(item, "obj", None), "hypothesis"):
            item.obj._hypothesis_internal_use_seed = inputs.property_seed()
        return (yield)


def pytest_generate_tests(metafunc):
    """`n_devices` takes every mesh size the catalog grades the exercise at; --repeat N runs N copies."""
    if "n_devices" in metafunc.fixturenames:
        exercise = exercise_of(Path(metafunc.definition.path))
        counts = exercise.devices if exercise else (2, 4, 8)
        metafunc.parametrize("n_devices", counts, ids=[f"{n}dev" for n in counts])
    repeat = metafunc.config.getoption("--repeat")
    if repeat > 1:
        metafunc.fixturenames.append("_shardlab_repeat")
        metafunc.parametrize(
            "_shardlab_repeat", range(repeat), ids=[f"repeat{i}" for i in range(repeat)]
        )
