"""What ex13's visible and hidden tests share: the check that a result is a plain number close to the
expected one, the tests' own copy of the cost model that the exercise's docstring states, the check of a
property (one device costs nothing) after the value it speaks about, and cases drawn for each test: a test
of fixed numbers (the book's) also checks the model on a case drawn for it, so that no fixed answer is
earned by a function that only knows the fixed answers."""

import math

import numpy as np
import pytest

from grader.checks import Variant, inputs, named_mistake

# Exact types only: a subclass of float can make `==` (and even isclose's comparisons) say anything.
PLAIN_NUMBERS = (int, float, np.float64, np.float32, np.int64, np.int32)


def _number(value, call):
    if type(value) not in PLAIN_NUMBERS:
        raise AssertionError(
            f"{call} returned {type(value).__name__} {value!r:.80}; return a plain number (a Python float)"
        )
    return float(value)


def _check(value, expected, call, rel_tol=1e-9, why="", mistakes=()):
    """value is a plain number close to expected; a wrong one is first named by the known mistake
    (a Variant of `mistakes`) it matches."""
    got = _number(value, call)
    # abs_tol: an attosecond, so that "0" and "0.0" agree whatever the formula's rounding.
    if not math.isclose(got, expected, rel_tol=rel_tol, abs_tol=1e-18):
        story = named_mistake(got, mistakes, rtol=rel_tol, atol=1e-18)
        raise AssertionError(
            (f"{call} = {got:.6g} {story}\n" if story else "")
            + f"{call} = {got:.6g}, expected {expected:.6g}"
            + (f": {why}" if why else "")
        )
    return got


def _call(name, *args):
    return f"{name}({', '.join(f'{a:g}' if isinstance(a, float) else repr(a) for a in args)})"


def _ring(nbytes, bandwidth, n, latency, share=1.0):
    """The tests' copy of the model: max(hops x latency, ring factor x bytes / bandwidth)."""
    return max((n // 2) * latency, (n - 1) / n * nbytes * share / bandwidth)


MODEL = {
    "allgather_time": _ring,
    "reducescatter_time": _ring,
    "allreduce_time": lambda *a: 2 * _ring(*a),
    "alltoall_time": lambda *a: _ring(*a, share=0.25),
}


def _mistakes(name, nbytes, bandwidth, n, latency):
    """The wrong models the course knows for name(nbytes, bandwidth, n, latency), each with its story."""
    share = 0.25 if name == "alltoall_time" else 1.0
    times = 2 if name == "allreduce_time" else 1
    hops, moved = (n // 2) * latency, (n - 1) / n * nbytes * share / bandwidth
    found = [
        Variant(
            lambda: 0.0,
            "is zero: only a ring of one device is free; the time is the slower of n // 2 hops at "
            "`latency` and the bytes a device takes in over `bandwidth`",
        ),
        Variant(
            lambda: times * max(hops, nbytes * share / bandwidth),
            "leaves out the ring factor (n - 1) / n: each device already holds its own 1/n of the "
            "array, so it receives only the other n - 1 shards",
        ),
        Variant(
            lambda: times * max(hops, 2 * moved),
            "sends everything one way round the ring: `bandwidth` counts both directions together, "
            "and a bidirectional ring sends half each way",
        ),
        Variant(
            lambda: times * (hops + moved),
            "adds the hops' latency to the transfer time: the model is the slower of the two "
            "(max), since the hops overlap the transfer",
        ),
        Variant(
            lambda: times * max((n - 1) * latency, moved),
            "counts n - 1 hops: on a bidirectional ring the farthest shard is n // 2 hops away",
        ),
    ]
    if name == "alltoall_time":
        found.append(
            Variant(
                lambda: max(hops, 4 * moved),
                "is the all-gather's time: on a bidirectional ring an all-to-all moves a quarter of "
                "what an all-gather moves (divide the bandwidth time by 4)",
            )
        )
    if name == "allreduce_time":
        found.append(
            Variant(
                lambda: max(hops, moved),
                "is one all-gather's time: an all-reduce is a reduce-scatter followed by an "
                "all-gather, twice that",
            )
        )
    return found


COLLECTIVES = tuple(MODEL)
REGIMES = ("bandwidth", "latency")


# What a property test says when the value it checks first is wrong.
ANCHOR = "the value is checked before the property: a property earns its points only with the model's values"


def _exact(impl, name, args, why=""):
    """name(*args) is the model's value (see _check)."""
    return _check(
        getattr(impl, name)(*args),
        MODEL[name](*args),
        _call(name, *args),
        why=why,
        mistakes=_mistakes(name, *args),
    )


def _check_one_device(impl, name, nbytes, bandwidth, latency):
    """The property "one device costs nothing", after the value on a ring of 2 of the same array (at least a
    byte, so never 0): 0.0 everywhere has the property and is no model."""
    _exact(impl, name, (max(nbytes, 1), bandwidth, 2, latency), why=ANCHOR)
    args = (nbytes, bandwidth, 1, latency)
    _check(
        getattr(impl, name)(*args),
        0.0,
        _call(name, *args),
        why="with n = 1 no byte moves and no hop is made, whatever the latency",
    )


def _drawn_ring(regime, seed=0):
    """(nbytes, bandwidth, n, latency) drawn for the test, in one regime for every collective: "bandwidth"
    (the bytes take at least twice the hops' time, even an all-to-all's quarter of them over the ring
    factor) or "latency" (the hops take at least twice the bytes' time, even without the ring factor)."""
    assert regime in REGIMES, regime
    rng = inputs.rng(seed)
    n = int(rng.integers(2, 513))
    bandwidth = float(10 ** rng.uniform(6, 13))
    latency = float(10 ** rng.uniform(-9, -3))
    hops = (n // 2) * latency
    if regime == "bandwidth":
        return int(16 * hops * bandwidth * 10 ** rng.uniform(0, 1)) + 1, bandwidth, n, latency
    return int(hops * bandwidth / 2 * rng.uniform(0, 1)), bandwidth, n, latency


def _check_drawn(impl, name, regime, seed=0):
    """name's value on a ring drawn for the test (see _drawn_ring) is the model's."""
    args = _drawn_ring(regime, seed)
    return _check(
        getattr(impl, name)(*args),
        MODEL[name](*args),
        _call(name, *args),
        why=f"the model on a {regime}-bound ring drawn for this test",
        mistakes=_mistakes(name, *args),
    )


def _check_drawn_batch(impl, seed=0):
    """dp_comm_bound_batch on FLOP/s and bandwidth drawn for the test is C / W."""
    rng = inputs.rng(seed)
    flops, bandwidth = float(10 ** rng.uniform(9, 19)), float(10 ** rng.uniform(6, 13))
    return _check(
        impl.dp_comm_bound_batch(flops, bandwidth),
        flops / bandwidth,
        _call("dp_comm_bound_batch", flops, bandwidth),
        why="C / W, on numbers drawn for this test",
    )


@pytest.fixture
def check_seconds():
    """check_seconds(value, expected, call, rel_tol=1e-9, why="", mistakes=()) asserts that value is a
    plain number close to expected (math.isclose on float(value)), a wrong one named by the Variant of
    `mistakes` it matches, and returns it as a float."""
    return _check


@pytest.fixture
def known_mistakes():
    """known_mistakes(name, nbytes, bandwidth, n, latency) -> the Variants (wrong models) that
    check_seconds(..., mistakes=...) names a wrong value by."""
    return _mistakes


@pytest.fixture
def as_number():
    """as_number(value, call) asserts that value is a plain number and returns float(value)."""
    return _number


@pytest.fixture
def call_text():
    """call_text(name, *args): how a call reads in a message, e.g. "allgather_time(256, 9e+10, 4, 1e-06)"."""
    return _call


@pytest.fixture
def cost_model():
    """{function name: the tests' copy of its cost in seconds, same arguments as the exercise's}."""
    return MODEL


@pytest.fixture
def check_one_device():
    """check_one_device(impl, name, nbytes, bandwidth, latency): the model's value on a ring of 2, then 0 on a
    ring of one device."""
    return _check_one_device


@pytest.fixture
def check_drawn():
    """check_drawn(impl, name, regime, seed=0): the model's value on a "bandwidth"- or "latency"-bound ring
    drawn for the test."""
    return _check_drawn


@pytest.fixture
def check_drawn_batch():
    """check_drawn_batch(impl, seed=0): dp_comm_bound_batch on numbers drawn for the test."""
    return _check_drawn_batch
