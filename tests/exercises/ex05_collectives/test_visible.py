"""ex05_collectives, visible tests: the worked example of the module docstring, on 4 devices, and
device_ranks on 8. Run them with `shardlab check ex05`."""

import jax
import numpy as np
import pytest
from jax.sharding import PartitionSpec as P

from grader.checks import assert_sharded_like

EXACT = dict(rtol=0, atol=0)


def test_device_ranks(impl, ring):
    mesh, _ = ring(8)
    ranks = impl.device_ranks(mesh)
    assert_sharded_like(ranks, mesh, P("i"), np.arange(8), **EXACT, name="device_ranks")


@pytest.mark.parametrize("name, want, spec", [
    ("all_gather", [3, 1, 4, 1, 5, 9, 2, 6, 5, 3, 5, 8, 9, 7, 1, 2], P()),
    ("all_reduce", [22, 20, 12, 17], P()),
    ("reduce_scatter", [22, 20, 12, 17], P("i")),
    ("all_reduce_via_scatter_gather", [22, 20, 12, 17], P()),
    ("all_to_all", [3, 5, 5, 9, 1, 9, 3, 7, 4, 2, 5, 1, 1, 6, 8, 2], P("i")),
    ("ring_shift", [9, 7, 1, 2, 3, 1, 4, 1, 5, 9, 2, 6, 5, 3, 5, 8], P("i")),
    ("ring_all_reduce", [22, 20, 12, 17], P()),
])
def test_worked_example(impl, ring, example, name, want, spec):
    mesh, place = ring(4)
    out = jax.jit(lambda x: getattr(impl, name)(x, mesh))(place(example))
    assert_sharded_like(out, mesh, spec, np.array(want), **EXACT, name=f"{name} of the worked example")
