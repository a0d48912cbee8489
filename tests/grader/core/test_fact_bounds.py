"""Every string a submission can make a result carry is bounded where the result is built (grader.core.bounds):
each fact type cuts its names and lines, a test keeps the facts that fit in its share and says what it left
out, and a grading cuts its largest tests when all of them would take too much. Honest results, whose names
are short, are never touched, and bounding a bounded result changes nothing.

The same, graded by the real grader with hostile submissions: tests/grader/hostile/test_facts.py."""

from __future__ import annotations

import dataclasses
import json
import re

import jax
import numpy as np
import pytest
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

from grader.checks import assert_collectives, assert_sharding, test_mesh
from grader.checks.sharding import layout_of
from grader.core import facts
from grader.core.bounds import (
    GRADING_CHARS,
    LINE_CHARS,
    MESSAGE_CHARS,
    NAME_CHARS,
    OUTPUT_CHARS,
    PROBLEM_CHARS,
    PROBLEMS,
    TEST_FACTS_CHARS,
    clipped,
    text_size,
)
from grader.core.results import (
    Block,
    Collective,
    CollectivesCheck,
    Layout,
    LayoutCheck,
    SpeedFigures,
    TestFacts,
    TestResult,
)
from grader.grading.results import ExerciseResult, GradingResults
from grader.reports import feedback_page, markdown

HUGE = 256 * 1024
CUT = re.compile(r"\(([\d,]+) (?:more )?characters cut\)")


def huge(tail: str = "") -> str:
    return "a" * HUGE + tail


def cut_count(text: str) -> int:
    return int(CUT.search(text)[1].replace(",", ""))


# -- clipped: the one cut every bound uses -------------------------------------------------------------------


@pytest.mark.parametrize("text", ["", "short", "x" * 100])
def test_text_within_the_limit_is_kept_whole(text):
    assert clipped(text, 100) == text
    assert clipped(text, 100, keep_end=True) == text


@pytest.mark.parametrize("length", [101, 1_000, 10_000, HUGE])
@pytest.mark.parametrize("keep_end", [False, True])
def test_a_cut_text_fits_its_limit_and_counts_what_was_cut(length, keep_end):
    text = "".join(chr(ord("a") + i % 26) for i in range(length))
    cut = clipped(text, 100, keep_end=keep_end)
    assert len(cut) <= 100
    head, tail = (
        cut[: cut.index(" ... (")],
        cut[cut.index(")") + 1 :].removeprefix(" ...").removeprefix(" "),
    )
    assert text.startswith(head) and len(head) >= 30
    assert cut_count(cut) == length - len(head) - len(tail)
    if keep_end:
        assert tail and text.endswith(tail)
    else:
        assert tail == ""
    assert clipped(cut, 100, keep_end=keep_end) == cut  # cut once: not cut again


def test_the_note_takes_a_line_of_its_own_in_a_text_of_lines():
    cut = clipped("line\n" * 1000, 100)
    assert cut.endswith(f"\n... ({5000 - cut.index(chr(10) + '...'):,} more characters cut)")


# -- each fact type cuts its text where it is built ----------------------------------------------------------


def _layout(axes=("data",), spec="P('data',)", sharding="NamedSharding") -> Layout:
    return Layout(
        (8, 4),
        sharding,
        spec,
        tuple(axes),
        (8,) * len(axes),
        tuple(range(8)),
        (Block(((0, 8), (0, 4)), (0,)),),
    )


def test_a_layout_cuts_its_names_keeping_both_ends():
    layout = _layout(axes=(huge("x"), huge("y")), spec=f"P({huge()!r},)", sharding=huge())
    assert all(
        len(text) <= NAME_CHARS for text in (layout.sharding, layout.spec, *layout.mesh_axes)
    )
    assert [axis[-1] for axis in layout.mesh_axes] == ["x", "y"]  # still two names
    assert all(cut_count(axis) > HUGE - NAME_CHARS for axis in layout.mesh_axes)
    assert len(layout.describe()) < 4 * NAME_CHARS


def test_a_layout_check_cuts_its_name():
    check = LayoutCheck(huge(), _layout(), None, False)
    assert len(check.name) <= NAME_CHARS and "characters cut" in check.name


def test_a_collective_cuts_its_op_axes_and_line():
    collective = Collective(huge(), 8, (huge("d"),), "%x = f32[8] all-reduce(%p), note=" + huge())
    assert len(collective.op) <= NAME_CHARS and len(collective.mesh_axes[0]) <= NAME_CHARS
    assert len(collective.line) <= LINE_CHARS and collective.line.startswith(
        "%x = f32[8] all-reduce("
    )
    assert "characters cut" in collective.line


def test_a_collectives_check_cuts_what_and_its_rule():
    check = CollectivesCheck(
        huge(), (), False, exactly={huge(): 1}, present=(huge(),), absent=(huge(),), only=(huge(),)
    )
    texts = [check.what, *check.exactly, *check.present, *check.absent, *check.only]
    assert all(len(text) <= NAME_CHARS and "characters cut" in text for text in texts)


def test_speed_figures_cut_their_label_platform_and_policy():
    figures = SpeedFigures(
        label=huge(),
        speedup=2.0,
        spread=(1.9, 2.1),
        baseline_s=1.0,
        candidate_s=0.5,
        repeats=9,
        threshold=1.5,
        devices=8,
        cores=2,
        platform=huge(),
        policy=huge(),
    )
    assert all(
        len(text) <= NAME_CHARS for text in (figures.label, figures.platform, figures.policy)
    )


def test_a_test_result_cuts_its_message_and_output():
    result = TestResult(
        "t.py::test_x", "ex01_meshes", False, 1.0, "failed", message=huge(), output=huge()
    )
    assert len(result.message) <= MESSAGE_CHARS and "characters cut" in result.message
    assert len(result.output) <= OUTPUT_CHARS and "characters cut" in result.output


HONEST_LAYOUT = {
    "global_shape": [8, 4],
    "sharding": "NamedSharding",
    "spec": "P(('data', 'model'), None)",
    "mesh_axes": ["data", "model"],
    "mesh_sizes": [4, 2],
    "mesh_devices": list(range(8)),
    "blocks": [{"index": [[0, 8], [0, 4]], "devices": list(range(8))}],
}
HONEST = [
    (Layout, HONEST_LAYOUT),
    (
        LayoutCheck,
        {
            "name": "the new params: W of layer 0",
            "expected": HONEST_LAYOUT,
            "actual": HONEST_LAYOUT,
            "passed": True,
        },
    ),
    (
        Collective,
        {
            "op": "all-reduce",
            "group_size": 8,
            "mesh_axes": ["data"],
            "line": "%all-reduce.1 = f32[8,4]{1,0} all-reduce(f32[8,4]{1,0} %p), channel_id=1, "
            "replica_groups=[1,8]<=[8], use_global_device_ids=true, to_apply=%add",
        },
    ),
    (
        CollectivesCheck,
        {
            "what": "layer_feature_sharded",
            "found": [],
            "passed": True,
            "exactly": {"all-reduce": 1},
            "present": ["all-reduce"],
            "absent": ["all-gather"],
            "only": None,
        },
    ),
]


@pytest.mark.parametrize(("kind", "data"), HONEST, ids=lambda value: getattr(value, "__name__", ""))
def test_honest_facts_are_kept_whole(kind, data):
    assert kind.from_dict(data).to_dict() == data


@pytest.mark.parametrize(
    "fact",
    [
        _layout(axes=(huge("x"),)),
        LayoutCheck(huge(), _layout(axes=(huge(),)), _layout(axes=(huge(),)), False),
        Collective(huge(), None, (huge(),), huge()),
        CollectivesCheck(
            huge(), (Collective(huge(), None, None, huge()),), None, exactly={huge(): 2}
        ),
    ],
    ids=lambda fact: type(fact).__name__,
)
def test_a_bounded_fact_reads_back_the_same(fact):
    assert type(fact).from_dict(json.loads(json.dumps(fact.to_dict()))) == fact


# -- the checks build bounded facts --------------------------------------------------------------------------


def test_a_layout_on_a_mesh_with_a_huge_axis_name_is_recorded_cut():
    """What ex01's red-team submission returned: an array on a mesh whose one axis is named by 256 KiB."""
    mesh = Mesh(np.array(jax.devices()[:8]), (huge("z"),))
    arr = jax.device_put(np.zeros((8, 8), np.float32), NamedSharding(mesh, P(huge("z"))))
    layout = layout_of(arr.shape, arr.sharding)
    assert len(layout.spec) <= NAME_CHARS and layout.mesh_axes[0].endswith("az")
    facts.start()
    with pytest.raises(AssertionError) as failure:  # rows split, columns asked for
        assert_sharding(arr, test_mesh((8,), ("data",)), P(None, "data"))
    (check,) = facts.take().layouts
    assert check.actual.mesh_axes == layout.mesh_axes
    assert len(json.dumps(check.to_dict())) < 4 * NAME_CHARS + 1000
    assert len(str(failure.value)) > HUGE  # the message is cut where the test's result is built
    assert (
        len(
            TestResult(
                "t.py::test_x", "ex01_meshes", False, 1.0, "failed", str(failure.value)
            ).message
        )
        <= MESSAGE_CHARS
    )


def _hlo(collectives: int, attribute: str = "") -> str:
    lines = [
        f"  %all-reduce.{i} = f32[8]{{0}} all-reduce(f32[8]{{0}} %p), channel_id={i}, "
        f"replica_groups={{{{0,1,2,3,4,5,6,7}}}}, to_apply=%add{attribute}"
        for i in range(collectives)
    ]
    return "HloModule m\n\nENTRY %main (p: f32[8]) -> f32[8] {\n" + "\n".join(lines) + "\n}\n"


def test_an_hlo_line_with_a_huge_attribute_is_recorded_cut():
    facts.start()
    assert_collectives(
        _hlo(1, f', frontend_attributes={{note="{huge()}"}}'), exactly={"all-reduce": 1}
    )
    (check,) = facts.take().collectives
    (reduce,) = check.found
    assert len(reduce.line) <= LINE_CHARS and reduce.line.startswith(
        "%all-reduce.0 = f32[8]{0} all-reduce("
    )


# -- a test keeps the facts that fit in its share ------------------------------------------------------------


def _result(
    category: str = "failed",
    message: str = "the compiled program uses all-reduce x5000",
    **facts_of,
):
    meta = TestResult("t.py::test_x[8dev]", "ex04_sharded_layer", True, 1.0, category, message)
    return meta.with_facts(TestFacts(**facts_of))


def _facts_size(result: TestResult) -> int:
    return result.text_size() - text_size(result.message) - text_size(result.output)


def test_a_program_of_many_collectives_keeps_those_that_fit_and_says_so():
    facts.start()
    with pytest.raises(AssertionError):
        assert_collectives(_hlo(5000), exactly={"all-reduce": 1}, what="layer_feature_sharded")
    result = _result(collectives=facts.take().collectives)
    (check,) = result.collectives
    kept = len(check.found)
    assert 0 < kept < 5000 and all(c.op == "all-reduce" for c in check.found)
    assert _facts_size(result) <= TEST_FACTS_CHARS
    assert result.message.startswith(
        "the compiled program uses all-reduce x5000\n[the grader recorded only part"
    )
    assert f"{kept} of 5000 collectives found" in result.message
    assert len(result.message) <= MESSAGE_CHARS


def test_many_large_sharding_checks_keep_those_that_fit_and_say_so():
    checks = [
        LayoutCheck(f"params[{i}]", _layout(), _layout(axes=(huge(str(i)),), spec=huge()), True)
        for i in range(200)
    ]
    result = _result("passed", "", layouts=checks)
    assert 0 < len(result.layouts) < 200 and result.layouts == checks[: len(result.layouts)]
    assert _facts_size(result) <= TEST_FACTS_CHARS
    assert result.message.startswith(
        f"[the grader recorded only part of what this test's checks found "
        f"({len(result.layouts)} of 200 sharding checks"
    )


def test_facts_left_out_after_the_layouts_are_counted_too():
    checks = [
        LayoutCheck(f"params[{i}]", _layout(), _layout(axes=(huge(str(i)),), spec=huge()), True)
        for i in range(200)
    ]
    found = tuple(
        Collective("all-gather", 8, ("data",), "%all-gather.1 = f32[8] all-gather(%p)")
        for _ in range(3)
    )
    result = _result(
        layouts=checks,
        collectives=[CollectivesCheck("f", found, True), CollectivesCheck("g", (), True)],
    )
    assert result.collectives == []
    assert "0 of 2 collectives checks, 0 of 3 collectives found" in result.message


def test_a_result_bounded_once_is_not_bounded_again():
    facts.start()
    with pytest.raises(AssertionError):
        assert_collectives(_hlo(5000), exactly={"all-reduce": 1})
    result = _result(message=huge(), collectives=facts.take().collectives)
    again = TestResult.from_dict(json.loads(json.dumps(result.to_dict())))
    assert again == result and dataclasses.replace(result) == result
    assert result.message.count("[the grader recorded only part") == 1


def test_the_largest_honest_test_keeps_every_fact():
    """ex11's 24 sharding checks of 8 blocks each, the most facts a reference test records."""
    mesh = test_mesh((8,), ("d",))
    sharding = NamedSharding(mesh, P("d"))
    checks = [
        LayoutCheck(
            f"the returned pos of step {i}",
            layout_of((192, 3), sharding),
            layout_of((192, 3), sharding),
            True,
        )
        for i in range(24)
    ]
    result = _result("passed", "", layouts=checks)
    assert result.layouts == checks and result.message == ""


def test_the_page_and_gradescope_show_what_a_passed_test_left_out():
    checks = [
        LayoutCheck(f"params[{i}]", _layout(), _layout(axes=(huge(str(i)),), spec=huge()), True)
        for i in range(200)
    ]
    test = dataclasses.replace(_result("passed", "", layouts=checks), score=1.0, max_score=1.0)
    page = feedback_page.feedback_page(
        GradingResults(
            "s", {"ex04_sharded_layer": ExerciseResult("ex04_sharded_layer", "layer", 1.0, [test])}
        )
    )
    assert "the grader recorded only part of what this test" in page
    assert "the grader recorded only part of what this test" in markdown.test_output(test)


# -- a grading cuts its largest tests when all of them would take too much -----------------------------------


def _grading(messages: list[str], problems: list[str] = ()) -> GradingResults:
    tests = [
        TestResult(
            f"t.py::test_{i}",
            "ex01_meshes",
            False,
            1.0,
            "failed",
            message,
            output="printed",
            score=0.0,
            max_score=1.0,
        )
        for i, message in enumerate(messages)
    ]
    return GradingResults(
        "s",
        {"ex01_meshes": ExerciseResult("ex01_meshes", "meshes", 10.0, tests)},
        problems=list(problems),
    )


def test_a_grading_of_too_much_text_cuts_its_largest_tests_and_says_so():
    # 1,200 messages of 4,000 "<" count 24,000 characters each (escaped): 29 MB, 7 times the bound.
    messages = ["<" * MESSAGE_CHARS] * 1200 + ["small"] * 50
    results = _grading(messages)
    tests = results.tests()
    assert sum(t.text_size() for t in tests) <= GRADING_CHARS
    assert [t.message for t in tests[1200:]] == ["small"] * 50  # the small ones are untouched
    assert all(
        t.message.startswith("<<<")
        and t.message.endswith(f"the {GRADING_CHARS:,} characters a grading may take]")
        for t in tests[:1200]
    )
    assert results.problems[0].startswith("the results of 1200 test(s) were cut to ")
    assert [t.category for t in tests] == ["failed"] * 1250 and results.max_score == 10.0
    again = GradingResults.from_dict(json.loads(json.dumps(results.to_dict())))
    assert again.to_dict() == results.to_dict()


def test_an_honest_grading_is_not_cut():
    results = _grading(
        ["expected exactly all-reduce x1"] * 500, ["not graded and never loaded: notes.txt"]
    )
    assert results.problems == ["not graded and never loaded: notes.txt"]
    assert all(
        t.message == "expected exactly all-reduce x1" and t.output == "printed"
        for t in results.tests()
    )


def test_problems_are_bounded_in_length_and_number():
    results = _grading([], [huge(str(i)) for i in range(500)])
    assert len(results.problems) == PROBLEMS and all(
        len(p) <= PROBLEM_CHARS for p in results.problems
    )
    assert results.problems[-1] == f"... and {500 - PROBLEMS + 1} more problems, not listed"
    assert GradingResults.from_dict(results.to_dict()).problems == results.problems
