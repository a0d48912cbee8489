"""What ex04's visible and hidden tests share: the inputs, the float64 NumPy reference layer, the tolerance,
and the rules each function's compiled program is graded by (its collectives, the multiply-adds each device
executes and the bytes it sends, the speed of the data-parallel layer), checked the same way by the visible
and the hidden tests."""

import jax
import numpy as np
import pytest
from jax.sharding import NamedSharding, PartitionSpec as P

from grader.checks import (
    Clock,
    Variant,
    assert_collectives,
    assert_computes,
    assert_sharded_like,
    assert_traffic,
    assert_work,
    compiled,
    inputs,
    test_mesh,
    written_per_device,
)

# The module docstring's tolerance (float32).
TOL = dict(rtol=1e-5, atol=1e-6)

# function: (its mesh's kind, x's spec, W's spec, the collectives its compiled program must have exactly,
# its output's spec). The output's layout, from a call as a student makes it, is checked with the
# collectives: a layer_auto that places x another way has none either (every device computing the whole
# batch), and compiled on inputs the test placed, its own placement is dropped from the program.
COLLECTIVES = {
    "layer_auto": ("auto", P("data", None), P(), {}, P("data", None)),
    "layer_shard_map": ("explicit", P("data", None), P(), {}, P("data", None)),
    "layer_feature_sharded": (
        "explicit",
        P(None, "data"),
        P("data", None),
        {"all-reduce": 1},
        P(None, None),
    ),
}


def rows_share(B, F, outputs, n):
    """Multiply-adds per device of a layer split by rows, B O (F + 1) / n: its B/n rows of x @ W (F for each
    output) and of the softmax (one division per output). Every device computing the whole batch executes
    n times this."""
    return B * outputs * (F + 1) // n


def features_share(B, F, outputs, n):
    """Multiply-adds per device of the feature-split layer, B F O / n + B O: its F/n features of x @ W for
    every output, and the softmax of the whole (B, O) output, which every device holds (replicated)."""
    return B * (F // n) * outputs + B * outputs


def partial_products_all_reduce(B, F, outputs, n):
    """Bytes each device sends for one all-reduce of the float32 (B, O) partial products: 2 (n - 1) / n of
    them (the account's all-reduce, a reduce-scatter then an all-gather). Gathering x and W instead sends
    (n - 1) / n x (B + O) F x 4 bytes, and more again when every device then computes the whole layer."""
    return 2 * (n - 1) * B * outputs * 4 // n


def nothing(B, F, outputs, n):
    """Bytes a layer split by rows sends: none, each device's rows stay where they are."""
    return 0


# function: (its share of the work per device from B, F, O and n, the share in words; the bytes it may
# send, the bound in words; what its program likely does wrong when it breaks them)
SHARES = {
    "layer_auto": (
        rows_share,
        "the layer (B O (F + 1) / n: its B/n rows of x @ W and of the softmax)",
        nothing,
        "the batch stays where it is",
        "Is x placed split over 'data' before the jitted layer runs? Placed replicated, every device "
        "computes the whole batch and keeps its rows.",
    ),
    "layer_shard_map": (
        rows_share,
        "the layer (B O (F + 1) / n: its B/n rows of x @ W and of the softmax)",
        nothing,
        "the batch stays where it is",
        "Is every device computing the whole batch? Each device applies the layer to its own block of "
        "rows only: no gather.",
    ),
    "layer_feature_sharded": (
        features_share,
        "the layer split by features (B F O / n + B O: its F/n features of x @ W, and the softmax "
        "of the whole output)",
        partial_products_all_reduce,
        "2 (n - 1) / n x B O x 4: one all-reduce of the (B, O) partial products",
        "Each device multiplies only its own features (its columns of x by its rows of W) and psums "
        "the (B, O) partial products once; gathering x or W moves and computes far more.",
    ),
}


def _shapes(inputs, n):
    x, W, _ = inputs
    return (*x.shape, W.shape[1], n)


def assert_shares(program, name, n, inputs, args):
    """The compiled program of `name` on n devices: each device executes at most 2 x its share of the work
    and sends at most the bytes of SHARES (its values are checked by the caller, on the same program)."""
    share, share_words, bound, bound_words, hint = SHARES[name]
    shapes = _shapes(inputs, n)
    assert_work(
        program, share=share(*shapes), share_of=share_words, what=name, hint=hint, args=args
    )
    assert_traffic(
        program, at_most=bound(*shapes), bound_of=bound_words, what=name, hint=hint, args=args
    )


# Against every device computing the whole batch, a layer that divides the work is up to n times
# faster; half of that leaves room for a noisy machine and none for replicated work (about 1x).
SPEEDUP_FRACTION_OF_N = 0.5


def _inputs(n_data=64, n_features=16, n_out=10, seed=0):
    rng = inputs.rng(seed)
    return (
        rng.standard_normal((n_data, n_features), dtype=np.float32),
        (rng.standard_normal((n_features, n_out), dtype=np.float32) / np.sqrt(n_features)),
        rng.standard_normal(n_out, dtype=np.float32),
    )


def _reference(x, W, b):
    x, W, b = (np.asarray(v, dtype=np.float64) for v in (x, W, b))
    z = x @ W + b
    e = np.exp(z - z.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


def _softmax(z, axis=-1):
    e = np.exp(z - z.max(axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)


def _wrong_layers(x, W, b, n):
    """The layers a sharded version is known to compute by mistake on n devices, each with its story."""
    x, W, b = (np.asarray(v, dtype=np.float64) for v in (x, W, b))
    f = x.shape[1] // n  # each device's features, when they are split
    partials = [x[:, k * f : (k + 1) * f] @ W[k * f : (k + 1) * f] for k in range(n)]
    return [
        Variant(
            lambda: sum(_softmax(p + b) for p in partials),
            "matches softmax taken on each device's partial product before the psum, then summed: "
            "softmax is not linear, so the partial products must be summed first. psum the partial "
            "x @ W, then add b and apply the softmax once, to the sum.",
        ),
        Variant(
            lambda: _softmax(x @ W + n * b),
            f"matches the layer with b added {n} times (once on each device, then summed): add b "
            "after the psum, once.",
        ),
        Variant(
            lambda: x @ W + b,
            "matches x @ W + b without the softmax: apply jax.nn.softmax over the last axis.",
        ),
        Variant(
            lambda: x[:, : W.shape[1]] + b if x.shape[1] >= W.shape[1] else None,
            "matches x's first columns plus b: W is never multiplied in, nor the softmax taken. "
            "Each device computes softmax(x @ W + b) on its own rows.",
        ),
        Variant(
            lambda: _softmax(x @ W + b, axis=0),
            "matches a softmax over the rows (axis 0) instead of over each row's outputs: "
            "apply jax.nn.softmax over the last axis.",
        ),
    ]


@pytest.fixture
def wrong_layers():
    """wrong_layers(x, W, b, n) -> the known wrong layers (grader.checks.Variant) on n devices."""
    return _wrong_layers


def _placed(mesh, x_spec, W_spec, inputs):
    x, W, b = inputs
    return (
        jax.device_put(x, NamedSharding(mesh, x_spec)),
        jax.device_put(W, NamedSharding(mesh, W_spec)),
        jax.device_put(b, NamedSharding(mesh, P())),
    )


@pytest.fixture
def layer_inputs():
    """layer_inputs(n_data, n_features, n_out, seed) -> (x, W, b) as float32 NumPy arrays."""
    return _inputs


@pytest.fixture
def reference_layer():
    """softmax(x @ W + b) in float64 NumPy, on one device."""
    return _reference


@pytest.fixture
def tol():
    return TOL


@pytest.fixture
def placed():
    """placed(mesh, x_spec, W_spec, (x, W, b)) -> x, W and b on the mesh (b replicated)."""
    return _placed


@pytest.fixture
def collectives_rule(impl):
    """check(name, n, inputs): the compiled program of the function `name` on a mesh of n devices, its
    inputs placed as its docstring says, has exactly the collectives its docstring states, computes the
    layer, and keeps to the work and traffic of SHARES; and the function called on them gives the output
    the sharding its docstring states."""

    def check(name, n, inputs):
        kind, x_spec, W_spec, exactly, out_spec = COLLECTIVES[name]
        mesh = test_mesh((n,), ("data",), kind)
        args = _placed(mesh, x_spec, W_spec, inputs)
        with written_per_device(name):
            program = compiled(lambda x, W, b: getattr(impl, name)(x, W, b, mesh), *args)
            assert_collectives(
                program, *args, exactly=exactly, expected=_reference(*inputs), **TOL, what=name
            )
            assert_shares(program, name, n, inputs, args)
            out = getattr(impl, name)(*args, mesh)
        assert_sharded_like(
            out, mesh, out_spec, _reference(*inputs), **TOL, name=f"{name}'s output"
        )

    return check


@pytest.fixture
def work_rule(impl):
    """check(n, inputs): the multiply-adds each device executes in layer_shard_map's compiled program, on n
    devices (the program's account, counted through any loop), are at most 2 x its rows' share of the
    layer; the program computes the layer."""

    def check(n, inputs):
        mesh = test_mesh((n,), ("data",), "explicit")
        args = _placed(mesh, P("data", None), P(), inputs)
        with written_per_device("layer_shard_map"):
            program = compiled(lambda x, W, b: impl.layer_shard_map(x, W, b, mesh), *args)
        share, share_words, _, _, hint = SHARES["layer_shard_map"]
        assert_work(
            program,
            share=share(*_shapes(inputs, n)),
            share_of=share_words,
            what="layer_shard_map",
            hint=hint,
            expected=_reference(*inputs),
            args=args,
            **TOL,
        )

    return check


def _speed_setup(impl, n, inputs):
    mesh = test_mesh((n,), ("data",), "explicit")
    x, W, b = _placed(mesh, P("data", None), P(), inputs)
    candidate = jax.jit(lambda x, W, b: impl.layer_shard_map(x, W, b, mesh))
    return mesh, (x, W, b), lambda: candidate(x, W, b)


@pytest.fixture
def speed_setup(impl):
    """speed_setup(n, inputs) -> (mesh, (x, W, b) placed for layer_shard_map, a call of its jitted program)."""
    return lambda n, inputs: _speed_setup(impl, n, inputs)


@pytest.fixture
def speedup_rule(impl, speedup):
    """check(n, inputs): layer_shard_map's jitted program on n devices computes the layer, and runs at least
    SPEEDUP_FRACTION_OF_N * n times as fast as every device computing the whole batch."""

    def check(n, inputs):
        mesh, (_, W, b), run_candidate = _speed_setup(impl, n, inputs)
        assert_computes(run_candidate(), _reference(*inputs), **TOL, what="layer_shard_map")
        # The baseline: the jitted layer with every input replicated on the mesh, so that every device
        # computes the whole batch.
        x_everywhere = jax.device_put(inputs[0], NamedSharding(mesh, P()))
        replicated = jax.jit(lambda x, W, b: jax.nn.softmax(x @ W + b))
        speedup(
            lambda: replicated(x_everywhere, W, b),
            run_candidate,
            threshold=SPEEDUP_FRACTION_OF_N * n,
            label="layer_shard_map against every device computing the whole batch",
            clock=Clock.PROCESSOR,  # the work each device does, whatever else the machine runs
            devices=n,
        )

    return check
