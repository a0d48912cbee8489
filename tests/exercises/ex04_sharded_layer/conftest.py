"""What ex04's visible and hidden tests share: the inputs, the float64 NumPy reference layer, the tolerance,
and the rules each function's compiled program is graded by (its collectives, the flops each device does,
the speed of the data-parallel layer), checked the same way by the visible and the hidden tests."""

import jax
import numpy as np
import pytest
from jax.sharding import NamedSharding, PartitionSpec as P

from grader.checks import (
    Clock,
    NotReported,
    Variant,
    assert_collectives,
    assert_computes,
    assert_sharded_like,
    compiled,
    flops_per_device,
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
    inputs placed as its docstring says, has exactly the collectives its docstring states and computes
    the layer; and the function called on them gives the output the sharding its docstring states."""

    def check(name, n, inputs):
        kind, x_spec, W_spec, exactly, out_spec = COLLECTIVES[name]
        mesh = test_mesh((n,), ("data",), kind)
        args = _placed(mesh, x_spec, W_spec, inputs)
        with written_per_device(name):
            assert_collectives(
                lambda x, W, b: getattr(impl, name)(x, W, b, mesh),
                *args,
                exactly=exactly,
                expected=_reference(*inputs),
                **TOL,
                what=name,
            )
            out = getattr(impl, name)(*args, mesh)
        assert_sharded_like(
            out, mesh, out_spec, _reference(*inputs), **TOL, name=f"{name}'s output"
        )

    return check


@pytest.fixture
def flops_rule(impl):
    """check(n, inputs): XLA's own count of the floating-point work each device does in layer_shard_map's
    compiled program, on n devices, is a 1/n share of the one-device layer's; the program computes the layer."""

    def check(n, inputs):
        mesh = test_mesh((n,), ("data",), "explicit")
        args = _placed(mesh, P("data", None), P(), inputs)
        with written_per_device("layer_shard_map"):
            program = compiled(lambda x, W, b: impl.layer_shard_map(x, W, b, mesh), *args)
        assert_computes(program(*args), _reference(*inputs), **TOL, what="layer_shard_map")
        try:
            one = flops_per_device(compiled(lambda x, W, b: jax.nn.softmax(x @ W + b), *inputs))
            each = flops_per_device(program, what="layer_shard_map")
        except NotReported as exc:
            pytest.skip(str(exc))
        assert each <= 1.25 * one / n, (
            f"each device performs {each:.0f} flops, the whole layer on one device {one:.0f}: with the batch "
            f"split over {n} devices each should do about {one / n:.0f}. Is every device computing the "
            "whole batch?"
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
