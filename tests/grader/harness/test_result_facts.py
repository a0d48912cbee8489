"""Each test's result carries the facts its checks established, from the harness to report.json: the
layouts of its sharding checks, the collectives of its HLO checks, the figures of its speed test. ex04
has all three kinds; the kinds of rule each test declares (@pytest.mark.rules) say which it grades."""

from __future__ import annotations

import json
from pathlib import Path

import jax
import numpy as np
import pytest
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from grader.core.results import Layout, MalformedResult, TestResult
from grader.core.rules import Rule
from grader.course import catalog, paths
from grader.grading.engine import grade_submission
from grader.reports.writers import write_report_json

# Two gradings (about a minute): slow. One xdist group: the module-scoped gradings run once.
pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("test_result_facts")]

EX04 = catalog.get("ex04_sharded_layer")
SUBMISSIONS = Path(__file__).parents[1] / "submissions"


def blocks_on_this_host(layout: Layout) -> dict[tuple, tuple[int, ...]]:
    """The layout computed again here, by jax, from the mesh and spec the fact names."""
    by_id = {d.id: d for d in jax.devices()}
    mesh = Mesh(
        np.array([by_id[i] for i in layout.mesh_devices]).reshape(layout.mesh_sizes),
        layout.mesh_axes,
    )
    spec = eval(layout.spec, {"P": PartitionSpec})  # noqa: S307  (the grader's own str(PartitionSpec))
    blocks: dict[tuple, list[int]] = {}
    for device, index in NamedSharding(mesh, spec).devices_indices_map(layout.global_shape).items():
        span = tuple(
            (s.start or 0, n if s.stop is None else s.stop)
            for s, n in zip(index, layout.global_shape)
        )
        blocks.setdefault(span, []).append(device.id)
    return {span: tuple(sorted(ids)) for span, ids in blocks.items()}


@pytest.fixture(scope="module")
def reference():
    # Timing reported, not enforced: the figures are what is checked, not this machine's speed.
    return grade_submission(paths.SOLUTIONS_DIR, exercises=[EX04.id], timing="report")


@pytest.fixture(scope="module")
def wrong_sharding():
    return grade_submission(SUBMISSIONS / "wrong_sharding", exercises=[EX04.id], timing="skip")


def test_every_sharding_check_records_the_layouts_it_compared(reference):
    tests = reference.exercises[EX04.id].tests
    checked = [t for t in tests if Rule.LAYOUTS in t.rules]
    assert len(checked) >= 8
    for test in checked:
        assert test.passed and test.layouts, test.nodeid
        for check in test.layouts:
            assert check.passed and check.actual is not None, test.nodeid
            assert check.expected.spec is not None and check.expected.sharding == "NamedSharding"
            here = blocks_on_this_host(check.expected)
            assert check.expected.device_ids() == here, test.nodeid
            # the reference is laid out as asked
            assert check.actual.device_ids() == here, test.nodeid
            # every device of the mesh, once
            assert sorted(d for block in check.actual.blocks for d in block.devices) == sorted(
                check.expected.mesh_devices
            ), test.nodeid
    for test in tests:
        if Rule.LAYOUTS not in test.rules:
            assert test.layouts == [], test.nodeid


def test_every_collectives_check_records_what_it_found(reference):
    tests = reference.exercises[EX04.id].tests
    checked = [t for t in tests if Rule.COLLECTIVES in t.rules]
    assert len(checked) >= 9
    for test in checked:
        assert test.passed and len(test.collectives) == 1, test.nodeid
        check = test.collectives[0]
        assert check.passed and check.what, test.nodeid
        if "no_collectives" in test.name:
            assert check.found == () and check.exactly == {}, test.nodeid
        if "one_all_reduce" in test.name:
            # visible: 8 devices
            n = int(test.name.split("[", 1)[1].split("dev")[0]) if "[" in test.name else 8
            [found] = check.found
            assert (found.op, found.group_size, found.mesh_axes) == ("all-reduce", n, ("data",)), (
                test.nodeid
            )
            assert "all-reduce(" in found.line and "metadata=" not in found.line
    for test in tests:
        if Rule.COLLECTIVES not in test.rules:
            assert test.collectives == [], test.nodeid


def test_every_speed_test_records_its_figures(reference):
    tests = reference.exercises[EX04.id].tests
    timed = [t for t in tests if Rule.SPEEDUP in t.rules]
    # the hidden and the visible speed rule, and the report-only figure against one device
    assert len(timed) == 3
    for test in timed:
        figures = test.speedup
        assert figures is not None and figures.policy == "report", test.nodeid
        assert (
            figures.repeats >= 7
            and figures.threshold > 0
            and figures.devices >= 2
            and figures.cores >= 1
        )
        low, high = figures.spread
        assert (
            low <= high
            and figures.speedup > 0
            and figures.baseline_s > 0
            and figures.candidate_s > 0
        )
        assert figures.met == (figures.speedup >= figures.threshold)
    against_one = next(t for t in timed if "one_device" in t.name)
    # its threshold is scaled by the calibration kernel
    assert against_one.speedup.calibration is not None
    assert all(t.speedup is None for t in tests if t not in timed)


def test_a_wrong_layout_records_expected_and_actual(wrong_sharding):
    tests = {t.name: t for t in wrong_sharding.exercises[EX04.id].tests}
    test = tests["test_layer_auto"]
    # the message as ever
    assert test.category == "failed" and "output: wrong sharding" in test.message
    [check] = test.layouts
    assert not check.passed
    assert (check.expected.spec, check.actual.spec) == ("P('data', None)", "P()")
    assert check.expected.device_ids() != check.actual.device_ids()
    assert [block.devices for block in check.actual.blocks] == [
        tuple(sorted(check.actual.mesh_devices))
    ]
    # one row block per device
    assert len(check.expected.blocks) == len(check.expected.mesh_devices)


def test_facts_reach_report_json_and_read_back(reference, tmp_path):
    path = write_report_json(reference, tmp_path / "report.json")
    data = json.loads(path.read_text())
    written = data["exercises"][EX04.id]["tests"]
    assert any(t["layouts"] for t in written) and any(t["collectives"] for t in written)
    assert any(t["speedup"] for t in written) and all(t["strike"] is False for t in written)
    again = [TestResult.from_dict(t, ignore=("name",)) for t in written]
    assert again == reference.exercises[EX04.id].tests


def test_a_result_with_an_unknown_key_is_refused(reference):
    test = next(
        t for t in reference.exercises[EX04.id].tests if t.collectives and t.collectives[0].found
    )
    data = test.to_dict()
    assert TestResult.from_dict(data) == test
    data["collectives"][0]["found"][0]["hlo"] = "a key no version wrote"
    with pytest.raises(MalformedResult, match="Collective: unknown key.*hlo"):
        TestResult.from_dict(data)
    with pytest.raises(MalformedResult, match="TestResult: unknown key.*name"):
        # only a reader that expects it may skip it
        TestResult.from_dict(test.to_dict() | {"name": test.name})
