"""ex18_transformer_block, hidden tests: every rule on 1x8, 2x4 and 4x2 meshes, with other sizes, head
counts (H*Dh not always D) and inputs.

Points (the module docstring of ex18_transformer_block.py): the weights are points out of 20, the visible
tests' included. Each rule is checked by the conftest's helpers, which the visible tests sample on 2x4."""

import pytest

pytestmark = pytest.mark.hidden

# T divisible by |model|, B and D by |data|, H by |model|, H*Dh and F by both
BLOCKS = {
    (1, 8): dict(B=2, T=24, D=24, H=8, Dh=3, F=40),
    # the visible sizes (one compile), other inputs
    (2, 4): dict(B=4, T=16, D=64, H=8, Dh=8, F=192),
    (4, 2): dict(B=4, T=10, D=16, H=6, Dh=4, F=40),
}
MESHES = pytest.mark.parametrize("shape", list(BLOCKS), ids=["1x8", "2x4", "4x2"])
# the remat rule's stack on every mesh (measured: the reference with remat at 0.28, 0.25 and 0.25 of the
# course's stack without remat on 1x8, 2x4 and 4x2; the bound is 0.5)
STACK = dict(B=4, T=32, D=64, H=8, Dh=8, F=128, L=4)


@pytest.mark.points(1.5)
@pytest.mark.rules("values", "layouts")
@MESHES
def test_shard_block_params_meshes(impl, shape, check_shard_params):
    check_shard_params(impl, shape, BLOCKS[shape], seed=10)


@pytest.mark.points(2)
@pytest.mark.rules("values", "layouts", functions=("block_forward",))
@MESHES
def test_block_forward_values(impl, shape, check_forward_values):
    check_forward_values(impl, shape, BLOCKS[shape], seed=11)


@pytest.mark.points(4)
@pytest.mark.rules("collectives", "work", "traffic", "values", functions=("block_forward",))
@MESHES
def test_block_forward_collectives(impl, shape, check_forward_program):
    check_forward_program(impl, shape, BLOCKS[shape], seed=11)


@pytest.mark.points(2)
@pytest.mark.rules("values", "layouts", functions=("block_train_step",))
@MESHES
def test_block_train_step_values(impl, shape, check_step_values):
    check_step_values(impl, shape, BLOCKS[shape], seed=12)


@pytest.mark.points(2)
@pytest.mark.rules("collectives", "work", "traffic", "values", functions=("block_train_step",))
@MESHES
def test_block_train_step_gradient_reduce_scatters(impl, shape, check_step_program):
    check_step_program(impl, shape, BLOCKS[shape], seed=12)


@pytest.mark.points(1.5)
@pytest.mark.rules("values", functions=("stack_loss",))
@MESHES
def test_stack_loss_values(impl, shape, check_stack_values):
    check_stack_values(impl, shape, STACK, seed=13)


@pytest.mark.points(1.5)
@pytest.mark.rules("memory", "work", "traffic", "values", functions=("stack_loss",))
@MESHES
def test_stack_loss_remat_temp_memory(impl, shape, check_stack_memory):
    check_stack_memory(impl, shape, STACK, seed=14)
