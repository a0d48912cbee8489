"""Which functions a test grades (grader.harness.graded): inferred where safe, declared otherwise."""

import types

import pytest

from grader.core.results import TestMeta
from grader.grading.collection import collect_tests
from grader.harness import graded, selection


@pytest.fixture(scope="module")
def collected():
    return {test.nodeid: test for test in collect_tests()}


def functions_of(collected, nodeid):
    return collected[f"tests/exercises/{nodeid}"].functions


def test_functions_are_inferred_through_bodies_helpers_and_parameters(collected):
    ex03 = "ex03_computation_follows_data/test_visible.py::"
    assert functions_of(collected, ex03 + "test_predict_add_examples") == ("predict_add",)
    # check_all_reduce(impl, ...): the function the fixture returns reads impl.column_sum
    assert functions_of(collected, ex03 + "test_column_sum_uses_all_reduce_example") == (
        "column_sum",
    )
    # _nondecreasing(impl, ..., name, ...): getattr(impl, name) with the case's parameter
    monotonic = [
        test
        for nodeid, test in collected.items()
        if "ex13_comm_costs/test_hidden.py::test_monotonic_in_nbytes[" in nodeid
    ]
    assert {test.functions for test in monotonic} == {
        ("allgather_time",),
        ("reducescatter_time",),
        ("allreduce_time",),
        ("alltoall_time",),
    }


def test_declared_functions_name_the_case(collected):
    ex05 = "ex05_collectives/test_visible.py::test_collectives_on_8_devices"
    assert functions_of(collected, ex05 + "[ring_shift]") == ("ring_shift",)


def _reads(function):
    return graded._uses(function, "impl", {}, [{}], 0)


def test_impl_handed_where_it_cannot_be_read_infers_nothing():
    def body(impl):
        return impl.place(1)

    def handed_to_an_unknown(impl, check):
        check(impl)

    def kept(impl):
        keep = impl
        return keep.place(1)

    assert _reads(body) == (["place"], False)
    assert _reads(handed_to_an_unknown)[1] is True
    assert _reads(kept)[1] is True


def _item(marker):
    return types.SimpleNamespace(
        nodeid="t.py::test_x",
        get_closest_marker=lambda name: marker,
        function=None,
        _fixtureinfo=types.SimpleNamespace(name2fixturedefs={}),
        module=types,
    )


def test_a_marker_keyword_other_than_functions_and_branches_is_refused():
    marker = pytest.mark.rules("values", function=("place",)).mark
    with pytest.raises(pytest.UsageError, match="takes functions=.* and branches=.*, not function"):
        selection._graded(_item(marker))


def test_a_single_name_not_in_a_tuple_is_refused():
    marker = pytest.mark.rules("values", branches="axis-twice").mark
    with pytest.raises(
        pytest.UsageError, match=r"branches= takes a tuple of names, such as branches=\("
    ):
        selection._graded(_item(marker))


def test_functions_and_branches_reach_the_grading_process():
    meta = TestMeta("t::a", "ex03", False, False, 1.0, 10.0, (), ("predict_add",), ("axis-twice",))
    assert TestMeta.from_dict(meta.to_dict()) == meta
