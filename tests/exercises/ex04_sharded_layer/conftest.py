"""What ex04's visible and hidden tests share: the inputs and the float64 NumPy reference layer."""

import numpy as np
import pytest

from grader.checks import inputs


def _inputs(n_data=64, n_features=16, n_out=10, seed=0):
    rng = inputs.rng(seed)
    return (rng.standard_normal((n_data, n_features), dtype=np.float32),
            (rng.standard_normal((n_features, n_out), dtype=np.float32) / np.sqrt(n_features)),
            rng.standard_normal(n_out, dtype=np.float32))


def _reference(x, W, b):
    x, W, b = (np.asarray(v, dtype=np.float64) for v in (x, W, b))
    z = x @ W + b
    e = np.exp(z - z.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


@pytest.fixture
def layer_inputs():
    """layer_inputs(n_data, n_features, n_out, seed) -> (x, W, b) as float32 NumPy arrays."""
    return _inputs


@pytest.fixture
def reference_layer():
    """softmax(x @ W + b) in float64 NumPy, on one device."""
    return _reference
