"""compare/assert_close report how far off a result is and where."""

import numpy as np
import pytest

from grader.checks import assert_close, assert_computes, compare


def test_within_tolerance_passes():
    want = np.linspace(0, 1, 12).reshape(3, 4)
    assert compare(want + 1e-7, want, rtol=1e-5, atol=1e-6) is None


def test_report_names_the_worst_elements():
    want = np.zeros((3, 4))
    got = want.copy()
    got[2, 1] = 0.5
    got[0, 3] = 1e-3
    report = compare(got, want, rtol=1e-5, atol=1e-6, name="out")
    assert "out differs from the reference in 2 of 12 elements" in report
    assert "max abs error 0.5 at index (2, 1): got 0.5, expected 0" in report


def test_relative_error_is_reported_separately():
    want = np.array([1000.0, 1e-3])
    got = np.array([1001.0, 2e-3])
    report = compare(got, want, rtol=1e-6, atol=0.0)
    assert "max abs error 1 at index (0,)" in report
    assert "max rel error 1 at index (1,)" in report


def test_shape_mismatch_is_named():
    with pytest.raises(AssertionError, match=r"result has shape \(4,\), expected \(2, 2\)"):
        assert_close(np.zeros(4), np.zeros((2, 2)))


def test_nan_where_a_number_is_expected_fails():
    assert compare(np.array([np.nan, 1.0]), np.array([0.0, 1.0]), rtol=1e-5, atol=1e-6) is not None
    assert compare(np.array([np.nan, 1.0]), np.array([np.nan, 1.0]), rtol=1e-5, atol=1e-6) is None


def test_an_answer_of_nan_only_is_reported_not_an_error():
    """Every element NaN (a causal attention whose fully masked blocks give NaN): a failure naming a NaN,
    not numpy's "All-NaN slice" ValueError, which grading would count as an error of the grader's."""
    report = compare(np.full((2, 3), np.nan), np.ones((2, 3)), rtol=1e-5, atol=1e-6)
    assert "in 6 of 6 elements" in report and "got nan, expected 1" in report


def test_a_non_array_answer_is_named():
    with pytest.raises(AssertionError, match="expected numbers"):
        assert_close(np.array(["a", "b"]), np.zeros(2))


def test_a_tolerance_per_element_holds_each_element_to_its_own():
    """An ill-conditioned element (an Adam update where the gradient is near zero) gets its own tolerance,
    and only it: the same error elsewhere still fails, and the report says the tolerance is by element."""
    want = np.array([1.0, 2.0, 3.0])
    atol = np.array([1e-6, 1e-2, 1e-6])
    assert compare(want + [0, 5e-3, 0], want, rtol=0, atol=atol) is None
    report = compare(want + [5e-3, 0, 0], want, rtol=0, atol=atol)
    assert "1 of 3 elements" in report and "atol=1e-06 to 0.01 by element" in report
    with pytest.raises(ValueError, match=r"atol has shape \(2,\), the reference \(3,\)"):
        compare(want, want, rtol=0, atol=np.ones(2))
    with pytest.raises(AssertionError, match="result 1 differs"):
        assert_computes([want, want + 1e-3], [want, want], rtol=0, atol=[1e-2, atol])
