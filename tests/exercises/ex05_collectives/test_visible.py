"""ex05_collectives, visible tests: the worked example of the module docstring, on 4 devices, the
collectives of each function's compiled program (with the work and traffic of each device) on 8 devices,
and device_ranks on 8. Run them with `shardlab check ex05`. Points: device_ranks 1, the worked example 2,
collectives 2 (of 15: the hidden tests grade the same rules on 2, 4 and 8 devices and other inputs).

Each function's compiled program is run on the worked example and on an input of the same shape drawn
for the test (small integers, so that every sum is exact): a program that returns the docstring's
answers without computing them earns nothing. Values are compared at the module docstring's tolerance,
as the hidden tests compare them."""

import jax
import numpy as np
import pytest
from jax.sharding import PartitionSpec as P

from grader.checks import assert_sharded_like, inputs


@pytest.mark.rules("values", "layouts", functions=("device_ranks",))
@pytest.mark.points(1)
def test_device_ranks(ranks_rule):
    ranks_rule(8)


@pytest.mark.rules("values", "layouts")
@pytest.mark.points(2)
@pytest.mark.parametrize(
    "name, want, spec",
    [
        ("all_gather", [3, 1, 4, 1, 5, 9, 2, 6, 5, 3, 5, 8, 9, 7, 1, 2], P()),
        ("all_reduce", [22, 20, 12, 17], P()),
        ("reduce_scatter", [22, 20, 12, 17], P("i")),
        ("all_reduce_via_scatter_gather", [22, 20, 12, 17], P()),
        ("all_to_all", [3, 5, 5, 9, 1, 9, 3, 7, 4, 2, 5, 1, 1, 6, 8, 2], P("i")),
        ("ring_shift", [9, 7, 1, 2, 3, 1, 4, 1, 5, 9, 2, 6, 5, 3, 5, 8], P("i")),
        ("ring_all_reduce", [22, 20, 12, 17], P()),
    ],
)
def test_worked_example(impl, ring, example, expected, tol, name, want, spec):
    mesh, place = ring(4)
    program = jax.jit(lambda x: getattr(impl, name)(x, mesh))  # traced once, for both inputs
    assert_sharded_like(
        program(place(example)),
        mesh,
        spec,
        np.array(want),
        **tol,
        name=f"{name} of the worked example",
    )
    x = inputs.rng(0).integers(-9, 10, example.shape).astype(np.float32)
    assert_sharded_like(
        program(place(x)),
        mesh,
        spec,
        getattr(expected, name)(x, 4),
        **tol,
        name=f"{name} of x = {x.astype(int).tolist()}",
    )


@pytest.mark.rules("collectives", "values", "work", "traffic", functions=("{name}",))
@pytest.mark.points(2)
@pytest.mark.parametrize(
    "name",
    [
        "all_gather",
        "all_reduce",
        "reduce_scatter",
        "all_reduce_via_scatter_gather",
        "all_to_all",
        "ring_shift",
        "ring_all_reduce",
    ],
)
def test_collectives_on_8_devices(collectives_rule, name):
    """The kinds of collective each docstring names (HLO: ...), and no other, in the program compiled for a
    2-D x of 128 rows (8 blocks of 16) drawn for the test; that program must compute the right values too,
    multiply nothing, and send no more than its collective needs."""
    collectives_rule(name, 8, inputs.rng(1).integers(-9, 10, (128, 2)).astype(np.float32))
