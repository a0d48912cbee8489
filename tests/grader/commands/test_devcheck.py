"""`shardlab dev-check` on this repository, and what it finds in a broken one."""

import dataclasses

import pytest

from grader.cli import main
from grader.commands import devcheck
from grader.core.results import Layout, LayoutCheck, TestMeta, TestResult
from grader.core.rules import Rule
from grader.course import catalog, paths
from grader.grading.collection import collect_tests


def test_layout_and_stubs_are_consistent():
    findings = devcheck.Findings()
    devcheck.check_layout(findings)
    devcheck.check_stubs_current(findings)
    assert findings.ok, findings.problems


def test_a_stale_stub_and_a_stray_module_are_reported(monkeypatch, tmp_path):
    for tree in ("solutions", "exercises"):
        (tmp_path / tree).mkdir()
        for path in getattr(paths, f"{tree.upper()}_DIR").glob("ex*.py"):
            (tmp_path / tree / path.name).write_text(path.read_text())
    (tmp_path / "exercises" / "ex04_sharded_layer.py").write_text("# edited by hand\n")
    (tmp_path / "solutions" / "ex99_extra.py").write_text("\n")
    monkeypatch.setattr(paths, "SOLUTIONS_DIR", tmp_path / "solutions")
    monkeypatch.setattr(paths, "EXERCISES_DIR", tmp_path / "exercises")
    findings = devcheck.dev_check(run_tests_too=False)
    text = "\n".join(findings.problems)
    assert "ex99_extra.py is not in the catalog" in text
    assert "ex04_sharded_layer.py differs from what solutions/ generates" in text


@pytest.mark.slow
def test_every_stub_fails_every_test_as_not_attempted():
    """dev-check's second run. Its first, the reference passing every test, is this session's own
    tests/exercises (which run against the reference, slow tests included in CI): run again here, it
    would only repeat them."""
    findings = devcheck.Findings()
    devcheck.check_stubs_not_attempted(findings)
    assert findings.ok, findings.problems[:10]
    (note,) = findings.notes
    # "stubs: N of N tests ..."
    assert note.startswith("stubs: ") and note.split()[1] == note.split()[3]
    assert int(note.split()[1]) >= 400


def test_dev_check_runs_the_reference_and_the_stubs(monkeypatch, capsys):
    """The command's glue: both runs, their findings in the report, the exit status."""
    ran = []
    monkeypatch.setattr(
        devcheck, "check_reference_passes", lambda findings: ran.append("reference")
    )
    monkeypatch.setattr(
        devcheck,
        "check_stubs_not_attempted",
        lambda findings: (ran.append("stubs"), findings.problems.append("a stub passed")),
    )
    assert main(["dev-check"]) == 1
    assert ran == ["reference", "stubs"]
    assert "PROBLEM a stub passed" in capsys.readouterr().out


def test_every_hidden_rule_kind_has_a_visible_sample_and_the_docs_table_is_current():
    tests = collect_tests()
    findings = devcheck.Findings()
    devcheck.check_rules_sampled(findings, tests)
    devcheck.check_rules_table(findings, tests)
    devcheck.check_names_apart(findings, tests)
    assert findings.ok, "\n".join(findings.problems)


def meta(
    name: str,
    *rules: Rule,
    hidden: bool = False,
    weight: float = 1.0,
    functions: tuple[str, ...] = ("all_gather",),
    branches: tuple[str, ...] = (),
    exercise: str = "ex05_collectives",
) -> TestMeta:
    file = "test_hidden" if hidden else "test_visible"
    return TestMeta(
        f"tests/exercises/{exercise}/{file}.py::{name}",
        exercise,
        hidden,
        False,
        weight,
        10.0,
        rules,
        functions,
        branches,
    )


def sampling_problems(tests: list[TestMeta], exercise: str = "ex05") -> list[str]:
    findings = devcheck.Findings()
    devcheck.check_rules_sampled(findings, tests)
    return [p for p in findings.problems if exercise in p and "its tests weigh" not in p]


def test_a_test_named_alike_in_the_visible_and_the_hidden_file_is_a_problem():
    """nbgrader's notebook holds both files' tests in one name space: `nbgrader build` refused part 2."""
    findings = devcheck.Findings()
    devcheck.check_names_apart(
        findings,
        [
            meta("test_values[2dev]", Rule.VALUES),
            meta("test_values[8dev]", Rule.VALUES, hidden=True),
            meta("test_values_sizes[8dev]", Rule.VALUES, hidden=True),
        ],
    )
    assert findings.problems == [
        "ex05_collectives: test_values is defined in both test_visible.py and test_hidden.py: give the "
        "hidden one a name of its own"
    ]


def test_a_rule_kind_only_hidden_tests_grade_is_a_problem():
    ex05 = [
        meta("test_values", Rule.VALUES, weight=5),
        meta("test_collectives", Rule.COLLECTIVES, hidden=True, weight=9),
        meta("test_report", Rule.MEMORY, hidden=True, weight=0),  # report-only: nothing to sample
        meta("test_bare", weight=1),
    ]
    assert sampling_problems(ex05) == [
        "tests/exercises/ex05_collectives/test_visible.py::test_bare declares no kind of rule: mark it "
        "@pytest.mark.rules(...) with some of " + ", ".join(Rule),
        "ex05_collectives: its hidden tests grade all_gather's collectives (collectives of the compiled "
        "program) but no visible test with points samples it: a student would learn the rule from the grade",
    ]


def test_a_kind_sampled_for_another_function_only_is_a_problem():
    """Per function, not per exercise: all_gather's visible collectives test does not sample
    all_reduce's."""
    ex05 = [
        meta("test_gather", Rule.VALUES, Rule.COLLECTIVES, weight=5),
        meta("test_reduce", Rule.VALUES, weight=5, functions=("all_reduce",)),
        meta("test_hidden", Rule.COLLECTIVES, hidden=True, functions=("all_gather", "all_reduce")),
    ]
    assert sampling_problems(ex05) == [
        "ex05_collectives: its hidden tests grade all_reduce's collectives (collectives of the compiled "
        "program) but no visible test with points samples it: a student would learn the rule from the grade"
    ]


def test_a_graded_branch_without_a_visible_sample_fails_the_course():
    """The course as collected, doctored: ex03's visible test of the pairs JAX refuses for an axis used
    twice loses its branch (as before it existed): dev-check names predict_add's branch."""
    tests = [
        dataclasses.replace(t, branches=())
        if t.nodeid.endswith("test_visible.py::test_predict_add_refuses_an_axis_used_twice")
        else t
        for t in collect_tests()
    ]
    assert sampling_problems(tests, "ex03") == [
        "ex03_computation_follows_data: its hidden tests grade predict_add's branch 'axis-twice' (a "
        "refusal, None or error it must give) but no visible test with points samples it: a student "
        "would learn the rule from the grade"
    ]


def test_a_visible_sample_without_points_does_not_count():
    ex05 = [
        meta("test_values", Rule.VALUES, weight=0, branches=("none",)),
        meta("test_hidden", Rule.VALUES, hidden=True, weight=15, branches=("none",)),
    ]
    assert [p.split(" (")[0] for p in sampling_problems(ex05)] == [
        "ex05_collectives: its hidden tests grade all_gather's branch 'none'",
        "ex05_collectives: its hidden tests grade all_gather's values",
    ]


def test_a_test_that_declares_no_function_or_an_unknown_one_is_refused():
    ex05 = [
        meta("test_values", Rule.VALUES, weight=5, functions=()),
        meta("test_typo", Rule.VALUES, weight=10, functions=("all_gahter",)),
    ]
    assert sampling_problems(ex05) == [
        "tests/exercises/ex05_collectives/test_visible.py::test_values declares nothing dev-check can "
        "check: it names no impl.<function> and hands impl on; declare functions=(...) on its rules marker",
        "tests/exercises/ex05_collectives/test_visible.py::test_typo grades 'all_gahter', which "
        "solutions/ex05_collectives.py does not define",
    ]


def test_tests_that_do_not_weigh_their_exercise_are_a_problem():
    findings = devcheck.Findings()
    devcheck.check_rules_sampled(findings, [meta("test_values", Rule.VALUES, weight=10)])
    assert (
        "ex05_collectives: its tests weigh 10 points, the catalog gives it 15: a test's points are its weight"
        in findings.problems
    )


def test_a_fact_recorded_must_be_declared_and_a_declared_one_recorded():
    layout = LayoutCheck("out", Layout((8,), "NamedSharding"), None, True)
    results = [
        TestResult(
            "a.py::test_undeclared",
            "ex05_collectives",
            False,
            1.0,
            "passed",
            layouts=[layout],
            rules=(Rule.VALUES,),
        ),
        TestResult(
            "a.py::test_claims",
            "ex05_collectives",
            False,
            1.0,
            "passed",
            rules=(Rule.VALUES, Rule.COLLECTIVES),
        ),
    ]
    findings = devcheck.Findings()
    devcheck.check_facts_declared(findings, results)
    assert findings.problems == [
        "a.py::test_undeclared records layouts facts but does not declare layouts",
        "a.py::test_claims declares collectives but records no collectives fact on the reference",
    ]


def share_problems(tests: list[TestMeta], exercise: str = "ex05") -> list[str]:
    findings = devcheck.Findings()
    devcheck.check_shares_held(findings, tests)
    return [p for p in findings.problems if exercise in p]


def test_a_function_on_a_mesh_held_to_no_share_is_named():
    """ex05 runs on a mesh (catalog: shares): all_gather is held to its work but not its traffic, all_reduce
    to neither by a test with points (a test without points holds nothing)."""
    ex05 = [
        meta("test_gather", Rule.VALUES, Rule.WORK, weight=5),
        meta("test_reduce", Rule.VALUES, weight=5, functions=("all_reduce",)),
        meta("test_free", Rule.WORK, Rule.TRAFFIC, weight=0, functions=("all_reduce",)),
    ]
    assert [p.split(":")[1].strip() for p in share_problems(ex05)] == [
        "all_gather runs on a mesh, but no test with points holds it to its share of traffic (the bytes "
        "each device sends through collectives)",
        "all_reduce runs on a mesh, but no test with points holds it to its share of work (the "
        "multiply-adds each device executes)",
        "all_reduce runs on a mesh, but no test with points holds it to its share of traffic (the bytes "
        "each device sends through collectives)",
    ]
    held = [meta("test_both", Rule.VALUES, Rule.WORK, Rule.TRAFFIC, weight=5)]
    assert share_problems(held) == []


def test_the_catalogs_unshared_functions_need_no_share_but_must_exist(monkeypatch):
    """ex01 holds no function to a share (it runs nothing on a mesh); ex08's placements are excused by the
    catalog, with the reason; an excuse for a function the reference does not define is a problem."""
    ex01 = [meta("test_mesh", Rule.VALUES, exercise="ex01_meshes", functions=("make_mesh_2x4",))]
    assert share_problems(ex01, "ex01") == []
    ex08 = [
        meta(
            "test_place",
            Rule.VALUES,
            exercise="ex08_data_parallel_training",
            functions=("shard_batch",),
        )
    ]
    assert share_problems(ex08, "ex08") == []
    ex08_entry = catalog.get("ex08")
    doctored = dataclasses.replace(
        ex08_entry, unshared=(*ex08_entry.unshared, ("shard_batsh", "typo"))
    )
    monkeypatch.setattr(
        catalog, "EXERCISES", tuple(doctored if e is ex08_entry else e for e in catalog.EXERCISES)
    )
    assert share_problems(ex08, "ex08") == [
        "ex08_data_parallel_training: the catalog holds 'shard_batsh' to no share, but "
        "solutions/ex08_data_parallel_training.py does not define it"
    ]
