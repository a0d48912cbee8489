"""ex16_context_parallel: long sequences over devices.

Attention for one head is `softmax(q @ k.T / sqrt(D) + mask) @ v`, q, k and v of shape (T, D); with the
causal mask, position i sees only positions j <= i (the others get -inf before the softmax). When the
sequence T is long, no device can hold all of it: the 1-D Explicit mesh "sp" (n devices) splits the
sequence into n contiguous blocks, block b (rows b*T/n ... (b+1)*T/n - 1) on device b, and the devices
must share keys and values without ever holding all of them at once.

Ring attention. Each device keeps its own block of queries; the K and V blocks travel round a ring of
devices with `jax.lax.ppermute` (every device sends to the same neighbour at each step), so that after
n - 1 moves every query block has met every key block. A device cannot hold a whole row of scores,
so it accumulates the softmax online, block by block: a running maximum m of each row's scores, the
running sum l of exp(score - m), and the running output o (the sum of exp(score - m) * v); when a new
block raises the maximum, what was summed so far is rescaled by exp(m_old - m_new). After the last
block, out = o / l.

Ulysses attention (DeepSpeed-Ulysses). With H heads, q, k, v are (T, H, D), still split by sequence.
One all_to_all turns "every device has T/n positions of all H heads" into "every device has all T
positions of H/n heads"; each device then runs ordinary attention on its heads, and a second all_to_all
turns the result back into sequence blocks.

Zigzag order. With the causal mask, the last block's queries see every key and the first block's see
only their own: a contiguous split gives the last device n times the work of the first. Splitting the
sequence into 2n chunks and giving device d chunks d and 2n-1-d balances it.

Results are compared with a float64 NumPy reference at rtol=1e-5, atol=1e-5 (float32 softmax sums
accumulated in another order; the tests' scores are of order 1), and ring attention's gradients (of
sum(out * r) for a fixed random r, with respect to q, k and v) at rtol=1e-4, atol=1e-4. The visible tests
run on 8 devices; the hidden ones on 2, 4 and 8 with other sequence lengths, causal and not.

Each device's share. Besides the values and the collectives, the compiled programs are held to what one
device does: the multiply-adds it executes (its dots, and products written out elementwise), at most
twice its share of the attention's, and the bytes it sends through collectives, at most what the method
moves. Each function's docstring gives both as formulas of the shapes. A program in which every device
computes the whole attention and keeps its own rows computes the right values, and fails both.

Grading: 20 points. Ring attention: values and shardings 4 (1 visible, 3 hidden: causal and not),
gradients with no NaN anywhere 2 (0.5 visible, 1.5 hidden), the compiled program 4 (1 visible, 3
hidden: collective-permute only, pairs forming one cycle, run at least n - 1 times; its work and
traffic), the temporary memory per device 2 (0.5 visible, 1.5 hidden, on 4 and 8 devices). Ulysses
attention: values and shardings 3 (1 visible, 2 hidden), the compiled program 2 (0.5 visible, 1.5
hidden: all-to-all only; its work and traffic). zigzag_order 3 (1 visible, 2 hidden).
"""

import math

import jax
import jax.numpy as jnp
from jax.sharding import PartitionSpec as P


def ring_attention(q, k, v, mesh, causal: bool):
    """Attention over a sequence split in n blocks, K and V travelling round the ring.

    q, k, v (T, D) arrive P("sp") (device b holds rows b*T/n ... (b+1)*T/n - 1 of each); returns
    `softmax(q @ k.T / sqrt(D) + mask) @ v` as (T, D), P("sp"). With `causal=True`, position i sees
    positions j <= i only.
    Inside `jax.shard_map`, each device keeps its query block and, for n steps, attends to the K and V
    block it holds, then passes both on to its neighbour with `jax.lax.ppermute` (n - 1 moves in all).
    Accumulate the softmax online: a running row maximum, a running sum of exponentials and a running
    output, rescaled whenever the maximum grows; divide at the end. Never gather K or V.
    Write the steps as a `jax.lax.fori_loop` (or `jax.lax.scan`) with static bounds (Python ints):
    the tests count how many times the compiled ppermutes run from the loop's trip count. A ring
    unrolled in a Python loop computes the right values, but XLA:CPU then keeps every step's blocks
    alive at once: on the memory tests' shapes it needs more than the whole K and V and fails that
    rule (measured on 8 devices, T=192, D=16: 29700 bytes per device, K and V 24576, a fori_loop ring
    9224).
    The tests compile your function and check: collective-permute and no other collective, its pairs
    forming one cycle through all n devices, run at least n - 1 times; each device executing at most
    2 x its share of the attention's multiply-adds, 2 T^2 D / n (the scores and the weighted values of
    its T/n queries against all T keys, causal or not: a block skipped under `lax.cond` is counted as
    if it ran), and sending at most its block of K and V once per ring step, n steps at most (2 T D x 4
    bytes in all); from 4 devices up, the compiled temporary bytes per device below the size of the
    whole K and V (2 * T * D * 4 bytes), with T/n larger than D. Each of these tests also checks the
    values the compiled program computes.
    The causal trap: a key block that lies entirely after a device's queries is fully masked. A ring
    that starts with the device's own block has a finite running maximum before it meets one, and
    then such a block adds exp(-inf) = 0. A ring that meets a fully masked block first, with a running
    maximum still -inf, computes exp(-inf + inf) = NaN, and one NaN spoils the whole row. Whatever
    order your ring takes, no output, and no gradient of q, k or v, may be NaN.
    Hint: `jax.lax.axis_index("sp")` and the step number say which block you hold, so which positions
    its keys have. A carry that starts the same on every device (zeros, -inf) and becomes
    device-varying needs `jax.lax.pcast(..., "sp", to="varying")` where it starts.
    """
    # YOUR CODE HERE
    raise NotImplementedError("ex16: ring_attention")


def ulysses_attention(q, k, v, mesh):
    """Multi-head attention over a sequence split in n blocks, by trading the sequence split for a head split.

    q, k, v (T, H, D) arrive P("sp") (sequence blocks, all H heads; H is divisible by n); returns, for
    every head h, `softmax(q[:, h] @ k[:, h].T / sqrt(D)) @ v[:, h]` (no mask) as (T, H, D), P("sp").
    Inside `jax.shard_map`: `jax.lax.all_to_all` from (T/n, H, D) per device to (T, H/n, D) (all
    positions, H/n heads), ordinary attention per local head, and `all_to_all` back.
    The tests compile your function: all-to-all and no other collective, run 2 to 4 times (q, k and v
    may travel in one all_to_all, stacked, or in separate ones; the result travels back in one); each
    device executing at most 2 x its share of the heads' multiply-adds, 2 T^2 H D / n (its H/n heads
    over the whole sequence), and sending at most its blocks of q, k, v and of the output once each,
    4 x (n - 1)/n x (T/n) H D x 4 bytes (an all_to_all keeps 1/n of what it splits).
    Hint: with `tiled=True`, `all_to_all(x, "sp", split_axis, concat_axis)` splits `split_axis` into n
    pieces, sends piece j to device j and concatenates what it receives along `concat_axis`.
    """
    # YOUR CODE HERE
    raise NotImplementedError("ex16: ulysses_attention")


def zigzag_order(seq_len: int, n: int) -> list[int]:
    """The token order that balances causal attention over n devices.

    Split positions 0 ... seq_len - 1 into 2n equal chunks (seq_len is divisible by 2n); device d gets
    chunk d, then chunk 2n-1-d. Return the original positions in device order: device 0's two chunks,
    then device 1's, ... (a list of seq_len Python ints, each position exactly once). Pure Python.
    For example, zigzag_order(8, 2) is [0, 1, 6, 7, 2, 3, 4, 5].
    """
    # YOUR CODE HERE
    raise NotImplementedError("ex16: zigzag_order")
