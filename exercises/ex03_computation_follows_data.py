"""ex03_computation_follows_data: automatic partitioning and explicit sharding types.

Under `jax.jit` you do not tell the compiler how to split the work: you place the data, and the
computation follows it. This exercise looks at that from both sides.

  1. Automatic partitioning (`sin_layer`, `column_sum`): give jit sharded inputs and see which
     sharding the output gets, and which collective the compiler inserts when a result needs values
     held by other devices.
  2. Explicit sharding types (`predict_add`, `predict_matmul`, `transpose_layout`): on a mesh whose
     axes are `AxisType.Explicit`, the sharding is part of each value's type (`jax.typeof(v)` prints
     `float32[16@x,32@y]`), JAX decides the result's sharding while tracing, and it refuses, with an
     error, the operations whose result's sharding it cannot decide on its own. You will predict
     those decisions, and move data to a new layout on purpose with `jax.reshard`.

The mesh is 2x4 with axes ("x", "y"); the hidden tests also run `sin_layer`, `column_sum` and
`transpose_layout` on smaller meshes with the same axis names (1x2 or 2x1 on 2 devices, 2x2 on 4),
so never assume the axis sizes. Values are float32. Tolerances (against a float64 NumPy reference):
`sin_layer` rtol=1e-5, atol=1e-6; `column_sum` rtol=1e-5, atol=1e-4; `transpose_layout` exact.
Useful tools: jax.make_mesh(shape, names, axis_types=...), NamedSharding, jax.P, jax.typeof,
jax.eval_shape with jax.ShapeDtypeStruct(shape, dtype, sharding=...), jax.set_mesh, jax.reshard.

To try things yourself on the course's 8 devices (the 2x4 mesh), start a scratch script, REPL or
notebook (not this module) with `import jax; jax.config.update("jax_num_cpu_devices", 8)` before any
other JAX call; if JAX has already run there, restart the REPL or kernel first (see "Experimenting on 8
devices" in the README).

Grading: 15 points, sin_layer 2, column_sum 4 (1.5 of them for the all-reduce in its compiled
program), predict_add 3.5, predict_matmul 3.5, transpose_layout 2.
"""

import jax
import jax.numpy as jnp
from jax.sharding import AxisType, NamedSharding, PartitionSpec as P  # noqa: F401  (for your code)


def sin_layer(x):
    """Compute `2 * sin(x)**2 + 1` elementwise under `jax.jit`.

    x arrives already placed on a mesh (Auto or Explicit axes), with any sharding; the output must
    have exactly x's sharding (and x's shape and values, of course: rtol=1e-5, atol=1e-6).
    Hint: an elementwise function needs no value from any other device; what does that leave the
    compiler to decide?
    """
    # YOUR CODE HERE
    raise NotImplementedError("ex03: sin_layer")


def column_sum(x):
    """The sum of each column of x (its sum over axis 0), computed under `jax.jit`.

    x arrives as a 2-D array sharded P("x", "y") on a mesh whose axes are Auto (automatic
    partitioning). Returns the 1-D array of column sums, sharded P("y"). Tolerance rtol=1e-5,
    atol=1e-4. The tests also compile your function with jax.jit (so it must be traceable: no
    NumPy conversions of x, and no reading `x.sharding`, which a traced value does not have),
    check that the compiled program contains an all-reduce, and run it for the column sums.
    Hint: after each device sums its own block of rows, what does it hold, and who holds the other
    rows of the same columns?
    """
    # YOUR CODE HERE
    raise NotImplementedError("ex03: column_sum")


def predict_add(spec_b, spec_c):
    """Predict the sharding JAX gives `b + c` on the 2x4 Explicit mesh ("x", "y"), without computing.

    b and c are 2-D float32 arrays of the same shape (which every split divides evenly), sharded
    NamedSharding(mesh, spec_b) and NamedSharding(mesh, spec_c). Each spec has two entries, each
    None, "x", "y", ("x", "y") or ("y", "x"), and no spec names a mesh axis twice.
    Returns the PartitionSpec of the result's sharding, or None when JAX refuses to compute `b + c`
    (it raises an error instead of choosing a layout for you).

    How predictions are compared: as PartitionSpecs after dropping trailing None entries and writing
    a one-axis tuple ("x",) as "x". So P("x", None), P("x") and P(("x",)) are the same prediction,
    and P() is a replicated result; P(("x", "y")) and P(("y", "x")) differ (the devices are numbered
    in another order). The hidden tests ask JAX itself about every pair of such specs.

    Hint, the questions to answer by experiment (jax.eval_shape on jax.ShapeDtypeStruct values that
    carry a NamedSharding on an Explicit mesh answers without computing anything; look at
    jax.typeof): what happens in a dimension that one operand splits and the other does not? In one
    that both split the same way? Differently? And is every combination of the per-dimension answers
    a sharding an array can have?
    """

    # YOUR CODE HERE
    raise NotImplementedError("ex03: predict_add")


def predict_matmul(spec_a, spec_b):
    """Predict the sharding JAX gives `a @ b` on the 2x4 Explicit mesh ("x", "y"), without computing.

    a is (I, J) and b is (J, K), float32, with every dimension divisible by every split used, sharded
    NamedSharding(mesh, spec_a) and NamedSharding(mesh, spec_b); specs are as in `predict_add`.
    Returns the PartitionSpec of the result's sharding, or None when JAX refuses to compute `a @ b`
    unless you tell it the output's sharding with `out_sharding=`. Compared like `predict_add`'s.

    Hint, the questions to answer by experiment: which dimension of the result comes from which
    operand? What becomes of a split of the contracting dimension J, when one operand splits it, and
    when both do: after multiplying its blocks, what does each device hold, and in how many ways
    could that be turned into a result? And, as for `+`, is the combination a legal sharding?
    """

    # YOUR CODE HERE
    raise NotImplementedError("ex03: predict_matmul")


def transpose_layout(x, mesh):
    """Move x to the "transposed" layout: the same values, sharded P("y", "x") instead of P("x", "y").

    x is a 2-D array sharded P("x", "y") on `mesh`, whose axes ("x", "y") are Explicit. Returns an
    array with exactly x's shape and values (the array is NOT transposed: only which device holds
    which block changes), sharded P("y", "x") on `mesh`. Compared exactly.
    Hint: on an Explicit mesh you ask for a new layout yourself, and there is one function made for
    that (it takes a NamedSharding, or a bare PartitionSpec while a mesh is set).
    """
    # YOUR CODE HERE
    raise NotImplementedError("ex03: transpose_layout")


def _normalized(entries) -> P:
    """The PartitionSpec the tests compare with: ("x",) written "x", trailing Nones dropped."""
    entries = [e[0] if isinstance(e, tuple) and len(e) == 1 else e for e in entries]
    while entries and entries[-1] is None:
        entries.pop()
    return P(*entries)
