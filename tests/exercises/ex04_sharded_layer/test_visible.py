"""ex04_sharded_layer, visible tests (8 devices). Run them with `shardlab check ex04`.

Points: values and shardings 4, collectives 1.5, work 0.5, speedup 1 (of 20: the hidden tests grade the
same rules on 2, 4 and 8 devices, with other inputs and sizes). Each rule on a compiled program (its
collectives, the multiply-adds each device executes and the bytes it sends, its speed) is earned only by a
program that also computes the layer."""

import jax
import pytest
from jax.sharding import NamedSharding, PartitionSpec as P

from grader.checks import assert_close_or_named, assert_sharding, test_mesh, written_per_device

SPEED_SHAPES = dict(n_data=8192, n_features=512, n_out=128)


@pytest.mark.rules("values", "layouts")
@pytest.mark.points(1)
def test_layer_auto(impl, layer_inputs, reference_layer, tol, wrong_layers):
    mesh = test_mesh((8,), ("data",), "auto")
    x, W, b = layer_inputs()
    out = impl.layer_auto(x, W, b, mesh)
    assert_sharding(out, mesh, P("data", None))
    assert_close_or_named(out, reference_layer(x, W, b), wrong_layers(x, W, b, 8), **tol)


@pytest.mark.rules("values", "layouts")
@pytest.mark.points(1)
def test_layer_explicit(impl, layer_inputs, reference_layer, tol, wrong_layers):
    mesh = test_mesh((8,), ("data",), "explicit")
    x, W, b = layer_inputs()
    out, types = impl.layer_explicit(x, W, b, mesh)
    assert_sharding(out, mesh, P("data", None))
    assert_close_or_named(out, reference_layer(x, W, b), wrong_layers(x, W, b, 8), **tol)
    assert types.get("x") == "float32[64@data,16]", f"types['x'] is {types.get('x')!r}"


@pytest.mark.rules("values", "layouts")
@pytest.mark.points(1)
def test_layer_shard_map(impl, layer_inputs, reference_layer, tol, wrong_layers):
    mesh = test_mesh((8,), ("data",), "explicit")
    x, W, b = layer_inputs()
    x = jax.device_put(x, NamedSharding(mesh, P("data", None)))
    W, b = (jax.device_put(v, NamedSharding(mesh, P())) for v in (W, b))
    with written_per_device("layer_shard_map"):
        out = impl.layer_shard_map(x, W, b, mesh)
    assert_sharding(out, mesh, P("data", None))
    assert_close_or_named(out, reference_layer(x, W, b), wrong_layers(x, W, b, 8), **tol)


@pytest.mark.rules("values", "layouts")
@pytest.mark.points(1)
def test_layer_feature_sharded(impl, layer_inputs, reference_layer, tol, wrong_layers):
    mesh = test_mesh((8,), ("data",), "explicit")
    x, W, b = layer_inputs()
    x = jax.device_put(x, NamedSharding(mesh, P(None, "data")))
    W = jax.device_put(W, NamedSharding(mesh, P("data", None)))
    b = jax.device_put(b, NamedSharding(mesh, P()))
    with written_per_device("layer_feature_sharded"):
        out = impl.layer_feature_sharded(x, W, b, mesh)
    assert_sharding(out, mesh, P(None, None))
    assert_close_or_named(out, reference_layer(x, W, b), wrong_layers(x, W, b, 8), **tol)


@pytest.mark.rules("collectives", "layouts", "values", "work", "traffic", functions=("layer_auto",))
@pytest.mark.points(0.5)
def test_layer_auto_has_no_collectives_on_8_devices(layer_inputs, collectives_rule):
    """layer_auto's compiled program: no collective at all, so no byte sent, and each device's share of the
    work."""
    collectives_rule("layer_auto", 8, layer_inputs(n_data=32, seed=1))


@pytest.mark.rules(
    "collectives", "layouts", "values", "work", "traffic", functions=("layer_shard_map",)
)
@pytest.mark.points(0.5)
def test_layer_shard_map_has_no_collectives_on_8_devices(layer_inputs, collectives_rule):
    """layer_shard_map's compiled program: no collective at all, so no byte sent, and each device's share
    of the work."""
    collectives_rule("layer_shard_map", 8, layer_inputs(n_data=32, seed=1))


@pytest.mark.rules(
    "collectives", "layouts", "values", "work", "traffic", functions=("layer_feature_sharded",)
)
@pytest.mark.points(0.5)
def test_layer_feature_sharded_uses_one_all_reduce_on_8_devices(layer_inputs, collectives_rule):
    """layer_feature_sharded's compiled program: exactly one all-reduce, and no other collective; each
    device's share of the work, and the bytes of one all-reduce of the partial products."""
    collectives_rule("layer_feature_sharded", 8, layer_inputs(n_data=32, seed=1))


@pytest.mark.rules("work", "values", functions=("layer_shard_map",))
@pytest.mark.points(0.5)
def test_layer_shard_map_divides_the_work_on_8_devices(layer_inputs, work_rule):
    """The multiply-adds each device executes: at most 2 x its 1/8 share of the layer."""
    work_rule(8, layer_inputs(n_data=256, n_features=32, n_out=16, seed=1))


@pytest.mark.rules("speedup", "values", functions=("layer_shard_map",))
@pytest.mark.points(1)
def test_layer_shard_map_speedup_over_replicated_on_8_devices(layer_inputs, speedup_rule):
    """layer_shard_map (under jax.jit) on a batch of 8192 rows, timed against every device computing the
    whole batch: at least 0.5 x 8 = 4 times as fast."""
    speedup_rule(8, layer_inputs(**SPEED_SHAPES, seed=1))
