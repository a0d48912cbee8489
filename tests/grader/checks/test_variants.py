"""A wrong result is told the story of the known mistake it matches, and only when it matches one."""

import numpy as np
import pytest

from grader.checks import Variant, assert_close_or_named, named_mistake

RIGHT = np.arange(1.0, 7.0)
VARIANTS = [
    Variant(lambda: RIGHT * 2, "matches twice the answer: halve it."),
    Variant(lambda: RIGHT[::-1], "matches the answer reversed: read it the other way."),
]


def test_a_result_matching_a_variant_is_told_its_story():
    with pytest.raises(AssertionError) as failure:
        assert_close_or_named(RIGHT[::-1], RIGHT, VARIANTS, name="out")
    said = str(failure.value)
    assert said.startswith("out matches the answer reversed: read it the other way.\n")
    assert "out differs from the reference in 6 of 6 elements" in said  # the difference still shown


def test_a_result_matching_no_variant_gets_the_difference_only():
    with pytest.raises(AssertionError) as failure:
        assert_close_or_named(RIGHT + 1, RIGHT, VARIANTS, name="out")
    assert str(failure.value).startswith("out differs from the reference")
    assert named_mistake(RIGHT + 1, VARIANTS, rtol=1e-5, atol=1e-6) is None


def test_a_right_result_computes_no_variant():
    def never():
        raise AssertionError("a right result must not compute the variants")

    assert_close_or_named(RIGHT, RIGHT, [Variant(never, "unused")])
