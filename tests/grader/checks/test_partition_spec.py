"""What solutions/ex11's docstring tells students about PartitionSpec in this JAX, and that the checks
do not take a spec for a tuple."""

import jax
from jax.sharding import PartitionSpec as P


def test_a_partition_spec_is_not_a_tuple():
    assert not isinstance(P("d"), tuple)
    assert P() != ()
    assert tuple(P()) == () and tuple(P("d", None)) == ("d", None)


def test_jax_tree_takes_a_partition_spec_as_one_leaf():
    assert jax.tree.leaves(P("d", None)) == [P("d", None)]
    assert jax.tree.leaves((P("d"), P())) == [P("d"), P()]
