"""ex16_context_parallel, visible tests (8 devices). Run them with `shardlab check ex16`.

Points (ex16_context_parallel.py's docstring): these tests carry 5.5 of the 20. The hidden ones check the
same rules on 2, 4 and 8 devices with other sequence lengths and inputs, causal and not."""

import pytest

N = 8
T, D = 64, 16  # 8 positions per device
H = 8  # ulysses: one head per device
# 24 positions per device for the memory rule: a block's scores outweigh its K and V, as in long sequences
MEMORY_T = 192


@pytest.mark.points(1)
@pytest.mark.rules("values", "layouts")
def test_ring_attention(impl, check_ring_values):
    check_ring_values(impl, N, T, D, causal=False, seed=0)
    check_ring_values(impl, N, T, D, causal=True, seed=1)


@pytest.mark.points(0.5)
@pytest.mark.rules("values")
def test_ring_attention_causal_grads_no_nan(impl, check_ring_grads):
    """Causal: the output and the gradients of q, k and v, with no NaN from the fully masked blocks."""
    check_ring_grads(impl, N, T, D, causal=True, seed=2)


@pytest.mark.points(1)
@pytest.mark.rules("collectives", "values", "work", "traffic")
def test_ring_attention_compiled_ring(impl, check_ring_program):
    """collective-permute only, its pairs one cycle through the 8 devices, run at least 7 times; each device
    executes at most 2 x its share of the attention's multiply-adds (2 T^2 D / 8) and sends at most its
    block of K and V once per ring step (8192 bytes here)."""
    check_ring_program(impl, N, T, D, causal=True, seed=3)


@pytest.mark.points(0.5)
@pytest.mark.rules("memory", "values")
def test_ring_attention_temp_memory(impl, check_ring_memory):
    """XLA's temporary bytes per device stay below the whole K and V (24576 bytes here; measured: the
    reference 9224, a ring unrolled in a Python loop 29700, K and V gathered 49152)."""
    check_ring_memory(impl, N, MEMORY_T, D, seed=4)


@pytest.mark.points(1)
@pytest.mark.rules("values", "layouts")
def test_ulysses_attention(impl, check_ulysses_values):
    check_ulysses_values(impl, N, T, H, D, seed=5)


@pytest.mark.points(0.5)
@pytest.mark.rules("collectives", "values", "work", "traffic")
def test_ulysses_attention_all_to_all_only(impl, check_ulysses_program):
    """all-to-all only, 2 to 4 of them; each device executes at most 2 x its share of the heads'
    multiply-adds (2 T^2 H D / 8) and sends its blocks of q, k, v and the output once each (14336 bytes)."""
    check_ulysses_program(impl, N, T, H, D, seed=6)


@pytest.mark.points(1)
@pytest.mark.rules("values")
def test_zigzag_order(impl, reference_zigzag):
    got = impl.zigzag_order(32, 4)
    want = reference_zigzag(32, 4)
    assert list(got) == want, (
        f"zigzag_order(32, 4) returned {got}; expected {want}: 8 chunks of 4 positions, device d holding "
        "chunk d and then chunk 7 - d. Check the order of the two chunks and that the second one counts "
        "back from the end."
    )
