"""ex04_sharded_layer: one layer, three ways.

The layer is `softmax(x @ W + b)`: x is (n_data, n_features), W is (n_features, n_out), b is (n_out,).
A batch of rows is the easiest thing in the world to parallelize: each output row needs only its own
row of x and all of W and b. You will run that one layer

  1. with automatic partitioning (`jax.jit` on an Auto mesh): place the data, let the compiler work;
  2. with explicit sharding types (an Explicit mesh): the sharding becomes part of each value's type;
  3. with `jax.shard_map`: you write what one device does with its block;

and then once more with the *features* split instead of the batch, where every device holds only a
partial product and the devices must sum them.

Every function takes the mesh it must use. Results are compared with a single-device
`softmax(x @ W + b)` at rtol=1e-5, atol=1e-6 (float32), and graded on meshes of 2, 4 and 8 devices.
The tests also compile your functions and read, from the program each device runs, which
collectives it runs, how many multiply-adds it executes (its dots, and products written out
elementwise, such as the softmax's division) and how many bytes it sends to other devices. Each
function's docstring bounds the last two by a formula of B = n_data, F = n_features, O = n_out and
the n devices: its share of the work, and what the layer needs to send. A program in which every
device computes the whole batch (and keeps its own rows) meets neither. The tests also time
`layer_shard_map` on a large batch against a baseline in which every device computes the whole batch:
a data-parallel layer must be several times faster than that. Each of these rules is earned only by a
compiled program that also computes the layer, and the collectives only with the output sharded as
the function's docstring says (a layer_auto that places x another way has no collectives either:
every device computes the whole batch). The visible tests check each rule once on 8 devices; the
hidden ones on other sizes, inputs and meshes.

Grading: 20 points. The values and shardings (and layer_explicit's types) 11, the collectives 4.5,
layer_shard_map's work 1.5, the speedup 3; the visible tests (`shardlab check ex04`) carry 7 of them:
values 4, collectives 1.5, work 0.5, speedup 1. The tests of values, collectives and work that compile a
function's program also hold it to the work and traffic bounds of its docstring.
"""

import jax
from jax.sharding import NamedSharding, PartitionSpec as P


def layer(x, W, b):
    """The reference layer, for one device. Use it; do not change it."""
    return jax.nn.softmax(x @ W + b)


def layer_auto(x, W, b, mesh):
    """Run `layer` under jax.jit on the 1-D Auto mesh `mesh` (axis "data").

    x, W and b arrive as plain arrays. Place x split along its batch (first) dimension over "data"
    and W, b replicated, then call the jitted layer. Returns the output sharded P("data", None).
    The compiled program needs no collective at all. Each device executes at most 2 x B O (F + 1) / n
    multiply-adds (its share: its B/n rows of x @ W and of the softmax) and sends nothing.
    Hint: the compiler follows the data; jax.device_put with a NamedSharding places it.
    """
    # YOUR CODE HERE
    raise NotImplementedError("ex04: layer_auto")


def layer_explicit(x, W, b, mesh):
    """The same layer on the 1-D Explicit mesh `mesh` (axis "data"), reporting the types JAX sees.

    Place x as P("data", None) and W, b replicated, run the layer under jax.jit, and while it is
    traced record `str(jax.typeof(v))` of the traced x, W, b and of the layer's output.
    Returns (output, types) where output is sharded P("data", None) and types is a dict with keys
    "x", "W", "b", "out", e.g. types["x"] == "float32[128@data,16]".
    Hint: on an Explicit mesh the sharding is part of the type, so it is visible while tracing.
    """
    # YOUR CODE HERE
    raise NotImplementedError("ex04: layer_explicit")


def layer_shard_map(x, W, b, mesh):
    """The layer as per-device code with `jax.shard_map` over the 1-D mesh `mesh` (axis "data").

    x arrives sharded P("data", None), W and b replicated. Each device applies the layer to its own
    block of rows. Returns the output sharded P("data", None). No collectives: the compiled program
    must contain none, so each device sends nothing, and each device executes at most
    2 x B O (F + 1) / n multiply-adds (its share: its B/n rows of x @ W and of the softmax). The tests
    time it (under jax.jit) against every device computing the whole batch, and expect at least n/2
    times that baseline's speed on n devices.
    Hint: in_specs say how each argument is split among the devices, out_specs how the per-device
    results are put back together.
    """
    # YOUR CODE HERE
    raise NotImplementedError("ex04: layer_shard_map")


def layer_feature_sharded(x, W, b, mesh):
    """The layer with the *features* split: x arrives P(None, "data"), W P("data", None), b replicated.

    With `jax.shard_map` over "data", each device multiplies its columns of x by its rows of W: a
    partial product of the full (n_data, n_out) result. Sum the partial products across devices with
    `jax.lax.psum`, then add b and apply the softmax. Returns the output replicated, P(None, None).
    The compiled program must contain exactly one all-reduce. Each device executes at most
    2 x (B F O / n + B O) multiply-adds (its F/n features of x @ W, and the softmax of the whole
    output, which every device holds) and sends at most 2 (n - 1) / n x B O x 4 bytes: one
    all-reduce of the float32 (B, O) partial products.
    Hint: x @ W is a sum over the feature dimension, and each device holds one slice of that sum.
    """

    # YOUR CODE HERE
    raise NotImplementedError("ex04: layer_feature_sharded")
