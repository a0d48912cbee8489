"""ex07_collective_matmul: overlapping communication with compute.

Every function computes `lhs @ rhs`, lhs (M, K) times rhs (K, N), on the 1-D Explicit mesh `mesh`
(axis "i", n devices; M, K and N are all divisible by n), with `jax.shard_map`, and returns the
product sharded by rows, P("i", None). They differ in how the pieces meet.

All-gather matmul. lhs arrives P("i", None) (each device has M/n whole rows) and rhs P("i", None)
(each device has K/n of its rows). A device's rows of the product need all of rhs, so the simple way
gathers it: every device then holds the whole (K, N) rhs at once, and multiplies only after the
gather has finished. The collective matmul ("How to Scale Your Model", the JAX shard_map guide)
splits the gather into n steps round a ring of devices instead: rhs's row block j multiplies only
the columns j*K/n:(j+1)*K/n of lhs, so a device can multiply the block it holds while the next one
travels, and never needs more than a block or two of rhs at a time.

Reduce-scatter matmul. lhs arrives P(None, "i") (each device has K/n of its columns) and rhs
P("i", None): each device can form a partial product, a full (M, N) array whose sum over the devices
is the answer, and the devices must sum and split it. The ring version passes partial sums of one
row block round the ring instead, each device adding its own contribution as the sum passes by.

The ring schedule. Number the devices 0, ..., n-1 round a ring; between two steps, what travels
(a block of rhs, or a running sum) moves one device along the ring, every device sending to the same
neighbour, all at once: one `jax.lax.ppermute` whose (source, destination) pairs you choose.
  - All-gather matmul: device d starts (step 0) with rhs block d. If blocks move from device d + 1
    to device d, at step s device d holds block (d + s) mod n; if they move the other way,
    block (d - s) mod n. n steps need only n - 1 moves.
  - Reduce-scatter matmul: the running sum of the result's row block b must arrive at device b
    after the last step, n - 1 moves after it started; count back along the ring to find where it
    starts and, from there, which block's sum device d holds at step s.
Make the pairs you give ppermute agree with the schedule you index by: with 2 devices both
directions are the same, with 3 or more the wrong one gives wrong values.

Results are compared with float64 NumPy at rtol=1e-5, atol=1e-4: float32 matmuls summed in
different orders differ slightly, and the tests use normal inputs with rhs scaled by 1/sqrt(K), so
the entries of the product are of order 1. They are graded on meshes of 2, 4 and 8 devices, three
ways (the output's sharding, each shard's shape, each shard's values). The tests also compile each
function and read which collectives its program runs (each function's docstring says which), how many
multiply-adds each device executes and how many bytes it sends to other devices (each docstring bounds
them by a formula of M, K, N and n: its share of the product's M K N, and what its way of meeting the
pieces needs; float32 takes 4 bytes an element), and how much temporary memory the compiled overlapped
all-gather matmul needs per device; those tests check the values of the program they read too. A
program in which every device gathers both operands and computes the whole product breaks the work
and traffic bounds. The visible tests check each rule on 8 devices; the hidden tests on other meshes
and shapes.

Grading: 15 points. Values and shardings 8 (2 per function: 1 on 8 devices in the visible tests, 1 on
2, 4 and 8 in the hidden ones). The compiled collectives, with the work and traffic, 5 (1 in the
visible tests, 4 hidden: 1 per function). The temporary memory of the overlapped all-gather matmul 2
(0.5 visible, 1.5 hidden).
"""

import jax
import jax.numpy as jnp
from jax.sharding import PartitionSpec as P


def allgather_matmul(lhs, rhs, mesh):
    """lhs @ rhs with rhs gathered whole on every device.

    lhs arrives P("i", None), rhs P("i", None); returns lhs @ rhs as P("i", None). Inside
    `jax.shard_map`, gather rhs with `jax.lax.all_gather` and multiply. The compiled program contains
    exactly one all-gather. Each device executes at most 2 x M K N / n multiply-adds (its M/n rows of
    the product) and sends at most (n - 1) / n x K N x 4 bytes: one all-gather of its block of rhs.
    Hint: `all_gather(..., tiled=True)` concatenates the blocks instead of stacking them.
    """

    # YOUR CODE HERE
    raise NotImplementedError("ex07: allgather_matmul")


def allgather_matmul_overlapped(lhs, rhs, mesh):
    """The same product, with rhs's row blocks sent round the ring instead of gathered.

    Same shardings as `allgather_matmul`: lhs P("i", None), rhs P("i", None), result P("i", None).
    At each of n steps a device multiplies the block of rhs it holds by the matching block of columns
    of its own lhs rows, adds that to its result, and passes the block on to its neighbour with
    `jax.lax.ppermute` (see the ring schedule in the module docstring).
    The compiled program must contain collective-permute and no all-gather. Each device executes at
    most 2 x M K N / n multiply-adds (its M/n rows of the product) and sends at most K N x 4 bytes:
    its block of rhs, once per step. The tests also read XLA's
    memory analysis of the compiled program (`temp_size_in_bytes`, per device) with rhs much larger
    than a device's rows of lhs (the visible test with 8 devices, the hidden ones with 4 and 8): it
    must stay below the size of the whole rhs (K * N * 4 bytes), which the all-gather version has to
    hold at once.
    A Python loop over the steps is fine; inside `jax.lax.fori_loop`, a carry that starts
    device-invariant (zeros) and becomes device-varying needs `jax.lax.pcast(..., "i", to="varying")`
    where it starts.
    Hint: `jax.lax.axis_index("i")` says which device you are, so which block you hold at step s;
    `jax.lax.dynamic_slice_in_dim` takes a block of columns at a traced position.
    """
    # YOUR CODE HERE
    raise NotImplementedError("ex07: allgather_matmul_overlapped")


def reducescatter_matmul(lhs, rhs, mesh):
    """lhs @ rhs from partial products summed and split with one reduce-scatter.

    lhs arrives P(None, "i"), rhs P("i", None); returns lhs @ rhs as P("i", None). Each device
    multiplies its columns of lhs by its rows of rhs (a partial (M, N) product), then
    `jax.lax.psum_scatter` sums the partial products over "i" and leaves each device its block of
    rows. The compiled program contains exactly one reduce-scatter. Each device executes at most
    2 x M K N / n multiply-adds (its K/n slice of the sum) and sends at most (n - 1) / n x M N x 4
    bytes: one reduce-scatter of its partial product.
    Hint: with `tiled=True` the scattered dimension keeps its rank and shrinks n times.
    """

    # YOUR CODE HERE
    raise NotImplementedError("ex07: reducescatter_matmul")


def reducescatter_matmul_overlapped(lhs, rhs, mesh):
    """The same product, with partial sums accumulated round the ring instead of reduce-scattered.

    Same shardings as `reducescatter_matmul`: lhs P(None, "i"), rhs P("i", None), result P("i", None).
    The running sum of one block of the result's rows travels round the ring with `jax.lax.ppermute`;
    at each step a device adds its contribution to the block it has just received: its columns of
    the matching rows of lhs times its rows of rhs. After the last step every device holds the
    finished sum of its own block. The compiled program must contain collective-permute and no other
    collective. Each device executes at most 2 x M K N / n multiply-adds (its K/n slice of the sum)
    and sends at most M N x 4 bytes: one block of M/n rows of running sums, once per step.
    Hint: decide first where the sum of block b must be after the last step, then walk the ring
    backwards to find where it starts.
    """
    # YOUR CODE HERE
    raise NotImplementedError("ex07: reducescatter_matmul_overlapped")
