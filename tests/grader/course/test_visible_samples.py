"""Visible tests that sample a graded branch catch the function that lacks it (docs/rules.md): run in
this process on a wrong implementation, without a grading."""

import importlib.util
import types

import pytest
from jax.sharding import PartitionSpec as P

from grader.course import catalog


def _load(path, name):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


EX03 = catalog.get("ex03_computation_follows_data").tests_dir()
conftest = _load(EX03 / "conftest.py", "ex03_conftest_for_samples")
visible = _load(EX03 / "test_visible.py", "ex03_visible_for_samples")
hidden = _load(EX03 / "test_hidden.py", "ex03_hidden_for_samples")


def _axes(entry):
    return () if entry is None else (entry,) if isinstance(entry, str) else tuple(entry)


def predict_add_without_the_axis_rule(spec_b, spec_c):
    """The student's predict_add of issue 43: per dimension right, but it never refuses a result that
    splits two of its dimensions over one mesh axis."""
    out = []
    for b, c in zip(tuple(spec_b) + (None, None), tuple(spec_c) + (None, None)):
        if _axes(b) and _axes(c) and _axes(b) != _axes(c):
            return None
        out.append(b if _axes(b) else c)
    return conftest.normalized(P(*out[:2]))


WRONG = types.SimpleNamespace(predict_add=predict_add_without_the_axis_rule)


def test_the_wrong_predict_add_fails_a_visible_test():
    # The examples (different splits refused, drawn pairs) do not catch it ...
    visible.test_predict_add_examples(WRONG, conftest.check_predictions, conftest.SPECS)
    # ... the pairs JAX refuses for an axis used twice do, naming a pair and JAX's refusal.
    with pytest.raises(
        AssertionError, match=r"wrong on 3 of 3 cases:\n  predict_add\(.*JAX refuses"
    ):
        visible.test_predict_add_refuses_an_axis_used_twice(WRONG, conftest.check_predictions)
    # The hidden test it would lose its points on is the one that declares the same branch.
    with pytest.raises(AssertionError, match="wrong on 28 of 53 cases"):
        hidden.test_predict_add_each_dimension_split_by_one_at_most(
            WRONG, conftest.check_predictions, conftest.SPECS
        )


def predict_matmul_without_the_axis_rule(spec_a, spec_b):
    """Refuses a contracting dimension split on both sides, but not a mesh axis splitting both
    dimensions of the result."""
    (rows, a_contract), (b_contract, cols) = (
        (tuple(s) + (None, None))[:2] for s in (spec_a, spec_b)
    )
    if _axes(a_contract) and _axes(b_contract):
        return None
    return conftest.normalized(P(rows, cols))


def test_each_branch_a_visible_prediction_test_declares_is_sampled():
    """The branches the visible examples declare are there: a prediction without one fails them."""
    wrong = types.SimpleNamespace(predict_matmul=predict_matmul_without_the_axis_rule)
    with pytest.raises(
        AssertionError,
        match=r"wrong on 1 of 8 cases:\n  predict_matmul\(P\('x', None\), P\(None, 'x'\)\)",
    ):
        visible.test_predict_matmul_examples(wrong, conftest.check_predictions, conftest.SPECS)

    def never_refuses_different_splits(spec_b, spec_c):
        return predict_add_without_the_axis_rule(spec_b, spec_b) if spec_b else spec_c

    wrong = types.SimpleNamespace(predict_add=never_refuses_different_splits)
    with pytest.raises(AssertionError, match="JAX refuses"):
        visible.test_predict_add_examples(wrong, conftest.check_predictions, conftest.SPECS)
