"""ex06_matmul_cases: the four cases of a sharded matmul.

C = A @ B, with A (I, J) and B (J, K), on a 2-D Explicit mesh with axes ("x", "y"). What a sharded
matmul must communicate depends on one thing: where the *contracting* dimension J is.

  1. J is split on neither operand: each device multiplies what it has. No communication.
  2. J is split on one operand only: that operand must be gathered before anything can be multiplied.
  3. J is split on both, the same way: each device computes a *partial sum* of the whole C (its
     slice of J only), and the partial sums must be added up, with an all-reduce (everyone gets all
     of C) or a reduce-scatter (everyone gets a slice of C, for 1/|x| of the memory and traffic).
  4. A non-contracting dimension is split on both (A's rows and B's columns over the same axis):
     one of them must be gathered, or the output would need the same axis twice.

Write each case with `jax.shard_map` over `mesh`, taking A and B with the shardings stated in each
function and returning C with the sharding stated. Every dimension is divisible by the mesh sizes.
In cases 2 to 4 only the "x" axis splits anything: the devices along "y" hold the same blocks and do
the same work.

Results are compared with float64 NumPy at rtol=1e-5, atol=1e-5, three ways (the output's sharding,
each shard's shape, each shard's values), on meshes of 2, 4 and 8 devices (2x1, 2x2, 2x4 and 4x2).
The tests also compile each function and read the collectives of the program (each function's
docstring states them), and for case3_reducescatter the bytes each device's output takes, from the
compiled program; the compiled program must also compute C. The same program is held to two bounds per
device, each function's docstring gives them as formulas of I, J, K and the mesh sizes |x| and |y|: the
multiply-adds it executes, at most 2 x its share of C's I J K (the devices that split the work divide
it), and the bytes it sends to other devices, what its case needs (float32: 4 bytes an element). A
program in which every device gathers both operands and computes all of C breaks them. The visible
tests check values and output bytes on the 2x4 mesh and the compiled programs on the 4x2 mesh (four
devices along "x"), the hidden ones on every mesh above, with other inputs.

Grading: 15 points. The values and output shardings 7, the collectives (with the work and traffic) 6,
case3_reducescatter's output bytes 2; the visible tests (`shardlab check ex06`) carry 5 of them: values
2, collectives 2, bytes 1.
"""

import jax
from jax.sharding import PartitionSpec as P


def case1_local(A, B, mesh):
    """A: P("x", None) (rows split over "x"), B: P(None, "y") (columns split over "y").

    Returns C = A @ B sharded P("x", "y"). The compiled program contains no collective: each device
    sends nothing, and executes at most 2 x I J K / (|x| |y|) multiply-adds, its block of C.
    """
    ### BEGIN SOLUTION
    return jax.shard_map(
        lambda a, b: a @ b, mesh=mesh, in_specs=(P("x", None), P(None, "y")), out_specs=P("x", "y")
    )(A, B)
    ### END SOLUTION


def case2_allgather(A, B, mesh):
    """A: P(None, "x") (the contracting dimension split), B: P(None, None) (replicated).

    Only "x" splits anything: the devices along "y" hold the same blocks and compute the same C.
    Returns C = A @ B replicated, P(None, None). The compiled program contains an all-gather and no
    all-reduce. Each device executes at most 2 x I J K multiply-adds (all of C is on every device: that
    is this case) and sends at most (|x| - 1) x I J / |x| x 4 bytes: its block of A to each other
    device along "x", once. Hint: the result of `jax.lax.all_gather` is device-varying as far as JAX's types
    know, so a replicated out_specs needs `check_vma=False`.
    """

    ### BEGIN SOLUTION
    def per_device(a_cols, b):
        return jax.lax.all_gather(a_cols, "x", axis=1, tiled=True) @ b

    return jax.shard_map(
        per_device,
        mesh=mesh,
        in_specs=(P(None, "x"), P(None, None)),
        out_specs=P(None, None),
        check_vma=False,
    )(A, B)
    ### END SOLUTION


def case3_allreduce(A, B, mesh):
    """A: P(None, "x"), B: P("x", None): the contracting dimension split the same way on both.

    Only "x" splits anything: the devices along "y" hold the same blocks, and the partial sums to add
    are those along "x". Returns C = A @ B replicated, P(None, None). The compiled program contains
    an all-reduce. Each device executes at most 2 x I J K / |x| multiply-adds (its slice of J) and
    sends at most 2 (|x| - 1) / |x| x I K x 4 bytes: one all-reduce of its partial C.
    """

    ### BEGIN SOLUTION
    def per_device(a_cols, b_rows):
        return jax.lax.psum(a_cols @ b_rows, "x")

    return jax.shard_map(
        per_device, mesh=mesh, in_specs=(P(None, "x"), P("x", None)), out_specs=P(None, None)
    )(A, B)
    ### END SOLUTION


def case3_reducescatter(A, B, mesh):
    """The same inputs as case3_allreduce; returns C = A @ B sharded P("x", None).

    As there, "y" splits nothing: C's rows are split over "x" and replicated along "y".
    The partial sums are added and split in one collective, so each device ends with only its rows
    of C. The compiled program contains a reduce-scatter and no all-reduce, and each device's output
    takes 1/|x| of the bytes of case3_allreduce's. Each device executes at most 2 x I J K / |x|
    multiply-adds (its slice of J) and sends at most (|x| - 1) / |x| x I K x 4 bytes: one
    reduce-scatter of its partial C.
    """

    ### BEGIN SOLUTION
    def per_device(a_cols, b_rows):
        return jax.lax.psum_scatter(a_cols @ b_rows, "x", scatter_dimension=0, tiled=True)

    return jax.shard_map(
        per_device, mesh=mesh, in_specs=(P(None, "x"), P("x", None)), out_specs=P("x", None)
    )(A, B)
    ### END SOLUTION


def case4_allgather(A, B, mesh):
    """A: P("x", None) (rows over "x"), B: P(None, "x") (columns over "x" too).

    Only "x" splits anything: the devices along "y" hold the same blocks and compute the same rows.
    Returns C = A @ B sharded P("x", None), by gathering B: each device keeps its rows of A and
    needs every column of B. The compiled program contains an all-gather. Each device executes at
    most 2 x I J K / |x| multiply-adds (its rows of C) and sends at most (|x| - 1) x J K / |x| x 4
    bytes: its block of B to each other device along "x", once.
    """

    ### BEGIN SOLUTION
    def per_device(a_rows, b_cols):
        return a_rows @ jax.lax.all_gather(b_cols, "x", axis=1, tiled=True)

    return jax.shard_map(
        per_device, mesh=mesh, in_specs=(P("x", None), P(None, "x")), out_specs=P("x", None)
    )(A, B)
    ### END SOLUTION
