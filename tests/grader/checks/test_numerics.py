"""compare/assert_close report how far off a result is and where."""

import numpy as np
import pytest

from grader.checks import assert_close, compare


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
