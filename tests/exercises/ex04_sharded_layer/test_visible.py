"""ex04_sharded_layer, visible tests (8 devices). Run them with `shardlab check ex04`."""

import jax
from jax.sharding import NamedSharding, PartitionSpec as P

from grader.checks import assert_close, assert_sharding, test_mesh

TOL = dict(rtol=1e-5, atol=1e-6)


def test_layer_auto(impl, layer_inputs, reference_layer):
    mesh = test_mesh((8,), ("data",), "auto")
    x, W, b = layer_inputs()
    out = impl.layer_auto(x, W, b, mesh)
    assert_sharding(out, mesh, P("data", None))
    assert_close(out, reference_layer(x, W, b), **TOL)


def test_layer_explicit(impl, layer_inputs, reference_layer):
    mesh = test_mesh((8,), ("data",), "explicit")
    x, W, b = layer_inputs()
    out, types = impl.layer_explicit(x, W, b, mesh)
    assert_sharding(out, mesh, P("data", None))
    assert_close(out, reference_layer(x, W, b), **TOL)
    assert types.get("x") == "float32[64@data,16]", f"types['x'] is {types.get('x')!r}"


def test_layer_shard_map(impl, layer_inputs, reference_layer):
    mesh = test_mesh((8,), ("data",), "explicit")
    x, W, b = layer_inputs()
    x = jax.device_put(x, NamedSharding(mesh, P("data", None)))
    W, b = (jax.device_put(v, NamedSharding(mesh, P())) for v in (W, b))
    out = impl.layer_shard_map(x, W, b, mesh)
    assert_sharding(out, mesh, P("data", None))
    assert_close(out, reference_layer(x, W, b), **TOL)


def test_layer_feature_sharded(impl, layer_inputs, reference_layer):
    mesh = test_mesh((8,), ("data",), "explicit")
    x, W, b = layer_inputs()
    x = jax.device_put(x, NamedSharding(mesh, P(None, "data")))
    W = jax.device_put(W, NamedSharding(mesh, P("data", None)))
    b = jax.device_put(b, NamedSharding(mesh, P()))
    out = impl.layer_feature_sharded(x, W, b, mesh)
    assert_sharding(out, mesh, P(None, None))
    assert_close(out, reference_layer(x, W, b), **TOL)
