"""The sharding assertions catch a wrong spec, a wrong shard and a wrong value, and say so readably."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import NamedSharding, PartitionSpec as P

from grader.checks import (
    assert_shard_values,
    assert_sharded_like,
    assert_sharding,
    layout_text,
    test_mesh,
)


@pytest.fixture
def mesh():
    return test_mesh((2, 4), ("x", "y"))


@pytest.fixture
def values():
    return np.arange(8 * 8, dtype=np.float32).reshape(8, 8)


def test_right_sharding_passes_all_three_ways(mesh, values):
    arr = jax.device_put(values, NamedSharding(mesh, P("x", "y")))
    assert_sharded_like(arr, mesh, P("x", "y"), values)


def test_equivalent_specs_are_accepted(mesh, values):
    arr = jax.device_put(values, NamedSharding(mesh, P("x", None)))
    assert_sharding(arr, mesh, P("x"))  # trailing None means the same layout


def test_wrong_spec_shows_both_layouts(mesh, values):
    arr = jax.device_put(values, NamedSharding(mesh, P("y", "x")))
    with pytest.raises(AssertionError) as failure:
        assert_sharding(arr, mesh, P("x", "y"), name="result")
    message = str(failure.value)
    assert "result: wrong sharding" in message
    assert "expected P('x', 'y') on mesh (x=2, y=4)" in message
    assert "actual   P('y', 'x') on mesh (x=2, y=4)" in message
    assert "expected" in message.splitlines()[4] and "actual" in message.splitlines()[4]


def test_a_wrong_sharding_says_what_each_layout_means_and_the_fix(mesh, values):
    """Columns split where rows should be: the headline says it in words, and the fix names the spec."""
    arr = jax.device_put(values, NamedSharding(mesh, P(None, "x")))
    with pytest.raises(AssertionError) as failure:
        assert_sharding(arr, mesh, P("x", None), name="result")
    message = str(failure.value)
    assert message.splitlines()[0] == (
        "result: wrong sharding: yours has its columns split over 'x'; each block copied across "
        "'y', where it should have its rows split over 'x'; each block copied across 'y'"
    )
    assert "Give it the layout P('x', None)" in message
    replicated = jax.device_put(values, NamedSharding(mesh, P()))
    with pytest.raises(AssertionError, match="yours has the whole array on every device"):
        assert_sharding(replicated, mesh, P("x", "y"))


def test_replicated_instead_of_split_is_caught(mesh, values):
    arr = jax.device_put(values, NamedSharding(mesh, P()))
    with pytest.raises(AssertionError, match="wrong sharding"):
        assert_sharding(arr, mesh, P("x"))


def test_array_on_another_mesh_is_caught(values):
    small = test_mesh((4,), ("x",))
    arr = jax.device_put(values, NamedSharding(small, P("x")))
    with pytest.raises(AssertionError, match="wrong sharding"):
        assert_sharding(arr, test_mesh((8,), ("x",)), P("x"))


def test_wrong_shard_value_names_the_device(mesh, values):
    arr = jax.device_put(values, NamedSharding(mesh, P("x", "y")))
    wrong = values.copy()
    wrong[5, 3] += 1.0  # row block 1, column block 1: device 5 on the 2x4 mesh
    with pytest.raises(AssertionError) as failure:
        assert_shard_values(arr, wrong)
    assert "shard on device 5 (global [4:8, 2:4]) differs" in str(failure.value)
    assert "1 of 8 elements" in str(failure.value)


def test_wrong_global_shape_is_caught(mesh, values):
    arr = jax.device_put(values, NamedSharding(mesh, P("x", "y")))
    with pytest.raises(AssertionError, match=r"shape \(8, 8\), expected \(8, 4\)"):
        assert_shard_values(arr, values[:, :4])


def test_not_an_array_is_caught(mesh, values):
    with pytest.raises(AssertionError, match="should be a jax.Array"):
        assert_sharding(values, mesh, P("x"))


def test_shape_the_spec_cannot_split(mesh):
    arr = jnp.zeros((3, 8))
    with pytest.raises(AssertionError, match="cannot split"):
        assert_sharding(arr, mesh, P("x", "y"))


def test_layout_text_draws_the_device_grid(mesh):
    lines = layout_text((8, 8), NamedSharding(mesh, P("x", "y")))
    assert lines == [
        "+---+---+---+---+",
        "| 0 | 1 | 2 | 3 |",
        "+---+---+---+---+",
        "| 4 | 5 | 6 | 7 |",
        "+---+---+---+---+",
    ]


def test_layout_text_lists_replicas_together(mesh):
    lines = layout_text((8,), NamedSharding(mesh, P("y")))
    assert lines[1] == "| 0,4 | 1,5 | 2,6 | 3,7 |"
    assert layout_text((), NamedSharding(mesh, P())) == ["scalar on devices 0,1,2,3,4,5,6,7"]
