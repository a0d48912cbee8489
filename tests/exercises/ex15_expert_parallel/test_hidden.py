"""ex15_expert_parallel, hidden tests on 2, 4 and 8 devices with 1 and 2 experts per device: dispatch_combine's
values, drops and shardings with capacities where nothing drops and tight ones, its gradients, the compiled
program's two all-to-alls, memory and shares of the work and the bytes; moe_layer's capacity (cases where
Python's float rounding shows in the drops), routing with ties, values and shares.

Points (the module docstring of ex15_expert_parallel.py): the weights are points out of 20; these tests carry
14 of them. The compiled program's rules are checked by the conftest's helpers, which the visible tests
sample on 8 devices."""

import pytest

from grader.checks import test_mesh

pytestmark = pytest.mark.hidden

# As the visible tests: a device's tokens far fewer than H.
SIZES = dict(d=16, h=64)
# moe_layer: per E, a capacity factor whose formula, in Python floats, lands one above exact arithmetic with
# 50 tokens per device (1.12 * 50 / 8 = 7.000000000000001 -> 8), so that int(), round() or exact fractions
# keep one token fewer per crowded expert.
ROUNDING = {2: 0.56, 4: 1.12, 8: 1.12, 16: 2.24}


def _mesh(n):
    return test_mesh((n,), ("ep",), "explicit")


@pytest.mark.points(2)
@pytest.mark.rules("values", "layouts")
@pytest.mark.parametrize("k", [1, 2])
def test_dispatch_combine_no_drops(impl, n_devices, k, case, check_dispatch):
    """Capacity = the device's tokens: nothing can drop, and num_dropped is 0."""
    tokens = 8
    check_dispatch(
        impl, _mesh(n_devices), case(n_devices, k, tokens, **SIZES, capacity=tokens, seed=10 + k)
    )


@pytest.mark.points(2.5)
@pytest.mark.rules("values", "layouts")
@pytest.mark.parametrize("k, capacity", [(1, 2), (2, 1)])
def test_dispatch_combine_tight(impl, n_devices, k, capacity, case, check_dispatch):
    """Popular low experts and few slots: many tokens drop, on every device."""
    check_dispatch(
        impl,
        _mesh(n_devices),
        case(n_devices, k, 12, **SIZES, capacity=capacity, seed=20 + k, skew=2.0),
    )


@pytest.mark.points(2)
@pytest.mark.rules("values")
def test_gradients_on_every_mesh(impl, n_devices, case, check_gradients):
    check_gradients(
        impl, _mesh(n_devices), case(n_devices, 2, 8, **SIZES, capacity=2, seed=30), seed=31
    )


@pytest.mark.points(2)
@pytest.mark.rules("collectives", "values", "traffic")
def test_two_all_to_alls_of_capacity_buffers(impl, n_devices, case, check_exchange):
    """Two experts per device, each getting T/n / E tokens from every device: a buffer of all T/n tokens per
    expert is E = 2n times larger."""
    n = n_devices
    check_exchange(
        impl, _mesh(n), case(n, 2, 16, **SIZES, capacity=16 // (2 * n), seed=40, balanced=True)
    )


@pytest.mark.points(1.5)
@pytest.mark.rules("memory", "work", "values")
def test_weights_stay_and_work_of_capacity_buffers(impl, n_devices, case, check_memory_and_work):
    n = n_devices
    check_memory_and_work(
        impl, _mesh(n), case(n, 2, 16, **SIZES, capacity=16 // (2 * n), seed=50, balanced=True)
    )


@pytest.mark.points(3)
@pytest.mark.rules("values", "layouts", "work", "traffic")
@pytest.mark.parametrize("k", [1, 2])
def test_moe_layer_capacity(impl, n_devices, k, moe_case, check_moe):
    """The capacity formula in Python floats, shown by the drops; three tokens per device tie (expert 0).
    H = 256 as in the visible test: the dispatch's own work stays small beside the experts'."""
    experts = n_devices * k
    check_moe(impl, moe_case(n_devices, k, 50, 16, 256, ROUNDING[experts], seed=60 + k, ties=3))


@pytest.mark.points(1)
@pytest.mark.rules("values", "layouts", "work", "traffic")
def test_moe_layer_no_drops(impl, n_devices, moe_case, check_moe):
    """capacity_factor E: every expert has room for all of a device's tokens."""
    check_moe(impl, moe_case(n_devices, 1, 24, 16, 256, float(n_devices), seed=70))
