"""ex04_sharded_layer, visible tests: run them with `shardlab check ex04` (or pytest on this file)."""

import numpy as np
from jax.sharding import PartitionSpec as P

from grader.checks import assert_close, assert_sharding, test_mesh


def inputs(n_data=64, n_features=16, n_out=10, seed=0):
    rng = np.random.default_rng(seed)
    return (rng.standard_normal((n_data, n_features), dtype=np.float32),
            rng.standard_normal((n_features, n_out), dtype=np.float32),
            rng.standard_normal(n_out, dtype=np.float32))


def reference(x, W, b):
    z = x.astype(np.float64) @ W + b
    e = np.exp(z - z.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


def test_layer_auto_values_and_sharding(impl):
    mesh = test_mesh((8,), ("data",), "auto")
    x, W, b = inputs()
    out = impl.layer_auto(x, W, b, mesh)
    assert_sharding(out, mesh, P("data", None))
    assert_close(out, reference(x, W, b), rtol=1e-5, atol=1e-6)
