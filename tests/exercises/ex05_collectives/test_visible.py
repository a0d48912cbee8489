"""ex05_collectives, visible tests: the worked example of the module docstring, on 4 devices, and
device_ranks on 8. Run them with `shardlab check ex05`.

Each function's compiled program is run on the worked example and on an input of the same shape drawn
for the test (small integers, so that every sum is exact): a program that returns the docstring's
answers without computing them earns nothing."""

import jax
import numpy as np
import pytest
from jax.sharding import PartitionSpec as P

from grader.checks import assert_sharded_like, inputs

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
def test_worked_example(impl, ring, example, expected, name, want, spec):
    mesh, place = ring(4)
    program = jax.jit(lambda x: getattr(impl, name)(x, mesh))   # traced once, for both inputs
    assert_sharded_like(program(place(example)), mesh, spec, np.array(want), **EXACT,
                        name=f"{name} of the worked example")
    x = inputs.rng(0).integers(-9, 10, example.shape).astype(np.float32)
    assert_sharded_like(program(place(x)), mesh, spec, getattr(expected, name)(x, 4), **EXACT,
                        name=f"{name} of x = {x.astype(int).tolist()}")
