"""ex13_comm_costs, hidden tests: the cost model exactly (rel_tol=1e-9) on many arrays, rings, bandwidths
and latencies (hypothesis: derandomized in a student's run, each test's own examples from the grading's
secret while grading), its properties (monotonic, one device costs nothing, an all-reduce is a
reduce-scatter plus an all-gather, an all-to-all a quarter of an all-gather), its units, and where it turns
latency-bound (Part 3 of "How to Scale Your Model", https://jax-ml.github.io/scaling-book/sharding/).

Points (the module docstring of ex13_comm_costs.py): these tests carry 6 of the 10. A property holds for
answers that model nothing (0.0 everywhere is never decreasing, and 0 + 0 is 0), so every property test first
checks the value of the function it speaks about, on the same example: it earns only with the model's values.
"""

import pytest
from hypothesis import given, settings, strategies as st

from grader.checks.properties import GRADING

pytestmark = pytest.mark.hidden

COLLECTIVES = ("allgather_time", "reducescatter_time", "allreduce_time", "alltoall_time")
EXAMPLES = 40
# The words of conftest.py's ANCHOR, which the visible property sample (one device costs nothing) says too.
ANCHOR = "the value is checked before the property: a property earns its points only with the model's values"

nbytes_st = st.integers(0, 2**40)
bandwidth_st = st.floats(1e6, 1e13)
n_st = st.integers(1, 512)
latency_st = st.one_of(st.just(0.0), st.floats(1e-9, 1e-3))
flops_st = st.floats(1e9, 1e19)


def _exact(impl, name, args, check_seconds, cost_model, call_text, why=""):
    return check_seconds(
        getattr(impl, name)(*args), cost_model[name](*args), call_text(name, *args), why=why
    )


@pytest.mark.points(0.75)
@pytest.mark.rules("values")
@settings(GRADING, max_examples=EXAMPLES)
@given(nbytes=nbytes_st, bandwidth=bandwidth_st, n=n_st, latency=latency_st)
def test_allgather_follows_the_ring_model(
    impl, check_seconds, cost_model, call_text, nbytes, bandwidth, n, latency
):
    _exact(
        impl,
        "allgather_time",
        (nbytes, bandwidth, n, latency),
        check_seconds,
        cost_model,
        call_text,
        why="the slower of n // 2 hops at `latency` and (n - 1)/n of nbytes at `bandwidth`",
    )


@pytest.mark.points(0.75)
@pytest.mark.rules("values")
@settings(GRADING, max_examples=EXAMPLES)
@given(nbytes=nbytes_st, bandwidth=bandwidth_st, n=n_st, latency=latency_st)
def test_reducescatter_follows_the_ring_model(
    impl, check_seconds, cost_model, call_text, nbytes, bandwidth, n, latency
):
    _exact(
        impl,
        "reducescatter_time",
        (nbytes, bandwidth, n, latency),
        check_seconds,
        cost_model,
        call_text,
        why="a reduce-scatter costs what an all-gather of the same array costs",
    )


@pytest.mark.points(0.75)
@pytest.mark.rules("values")
@settings(GRADING, max_examples=EXAMPLES)
@given(nbytes=nbytes_st, bandwidth=bandwidth_st, n=n_st, latency=latency_st)
def test_allreduce_follows_the_ring_model(
    impl, check_seconds, cost_model, call_text, nbytes, bandwidth, n, latency
):
    _exact(
        impl,
        "allreduce_time",
        (nbytes, bandwidth, n, latency),
        check_seconds,
        cost_model,
        call_text,
        why="a reduce-scatter followed by an all-gather: twice the all-gather",
    )


@pytest.mark.points(0.75)
@pytest.mark.rules("values")
@settings(GRADING, max_examples=EXAMPLES)
@given(nbytes=nbytes_st, bandwidth=bandwidth_st, n=n_st, latency=latency_st)
def test_alltoall_follows_the_ring_model(
    impl, check_seconds, cost_model, call_text, nbytes, bandwidth, n, latency
):
    _exact(
        impl,
        "alltoall_time",
        (nbytes, bandwidth, n, latency),
        check_seconds,
        cost_model,
        call_text,
        why="the slower of n // 2 hops at `latency` and a quarter of the all-gather's bandwidth time",
    )


@pytest.mark.points(0.25)
@pytest.mark.rules("values", "properties")
@settings(GRADING, max_examples=EXAMPLES)
@given(nbytes=nbytes_st, bandwidth=bandwidth_st, n=n_st, latency=latency_st)
def test_allreduce_is_reducescatter_plus_allgather(
    impl, check_seconds, as_number, cost_model, call_text, nbytes, bandwidth, n, latency
):
    args = (nbytes, bandwidth, n, latency)
    _exact(impl, "allreduce_time", args, check_seconds, cost_model, call_text, why=ANCHOR)
    parts = as_number(
        impl.reducescatter_time(*args), call_text("reducescatter_time", *args)
    ) + as_number(impl.allgather_time(*args), call_text("allgather_time", *args))
    check_seconds(
        impl.allreduce_time(*args),
        parts,
        call_text("allreduce_time", *args),
        why="an all-reduce should cost exactly a reduce-scatter plus an all-gather",
    )


@pytest.mark.points(0.25)
@pytest.mark.rules("values", "properties")
@settings(GRADING, max_examples=EXAMPLES)
@given(nbytes=nbytes_st, bandwidth=bandwidth_st, n=n_st, latency=latency_st)
def test_alltoall_is_a_quarter_of_an_allgather(
    impl, check_seconds, as_number, cost_model, call_text, nbytes, bandwidth, n, latency
):
    # Bandwidth-bound (latency 0), exactly the book's factor 4; with latency, never dearer than it.
    free = (nbytes, bandwidth, n, 0.0)
    _exact(impl, "alltoall_time", free, check_seconds, cost_model, call_text, why=ANCHOR)
    gather = as_number(impl.allgather_time(*free), call_text("allgather_time", *free))
    check_seconds(
        impl.alltoall_time(*free),
        gather / 4,
        call_text("alltoall_time", *free),
        why="with no latency an all-to-all takes a quarter of an all-gather's time (bidirectional ring)",
    )
    args = (nbytes, bandwidth, n, latency)
    gather = as_number(impl.allgather_time(*args), call_text("allgather_time", *args))
    got = as_number(impl.alltoall_time(*args), call_text("alltoall_time", *args))
    assert got <= gather * (1 + 1e-12), (
        f"{call_text('alltoall_time', *args)} = {got:.6g} s is more than the all-gather's {gather:.6g} s"
    )


# The property tests below run once per function (a mistake in one costs only that function's share).


@pytest.mark.points(0.125)
@pytest.mark.rules("values", "properties", functions=("{name}",))
@pytest.mark.parametrize("name", COLLECTIVES)
@settings(GRADING, max_examples=20)
@given(nbytes=nbytes_st, bandwidth=bandwidth_st, latency=latency_st)
def test_one_device_costs_nothing_for_any_array(
    impl, check_one_device, name, nbytes, bandwidth, latency
):
    check_one_device(impl, name, nbytes, bandwidth, latency)


def _nondecreasing(impl, as_number, call_text, name, low, high, rule, *, check_seconds, cost_model):
    """The times of name(*low) and name(*high); asserts the first is the model's and the second is not
    shorter (`rule` says why)."""
    a = _exact(impl, name, low, check_seconds, cost_model, call_text, why=ANCHOR)
    b = as_number(getattr(impl, name)(*high), call_text(name, *high))
    assert b >= a * (1 - 1e-12), (
        f"{rule}, but {call_text(name, *low)} = {a:.6g} s and {call_text(name, *high)} = {b:.6g} s"
    )
    return a, b


@pytest.mark.points(0.125)
@pytest.mark.rules("values", "properties")
@pytest.mark.parametrize("name", COLLECTIVES)
@settings(GRADING, max_examples=25)
@given(
    nbytes=nbytes_st,
    more=st.integers(1, 2**30),
    bandwidth=bandwidth_st,
    n=st.integers(2, 512),
    latency=latency_st,
)
def test_monotonic_in_nbytes(
    impl, as_number, check_seconds, cost_model, call_text, name, nbytes, more, bandwidth, n, latency
):
    _nondecreasing(
        impl,
        as_number,
        call_text,
        name,
        (nbytes, bandwidth, n, latency),
        (nbytes + more, bandwidth, n, latency),
        "more bytes never take less time",
        check_seconds=check_seconds,
        cost_model=cost_model,
    )


@pytest.mark.points(0.125)
@pytest.mark.rules("values", "properties")
@pytest.mark.parametrize("name", COLLECTIVES)
@settings(GRADING, max_examples=25)
@given(
    nbytes=nbytes_st,
    bandwidth=bandwidth_st,
    n=st.integers(2, 512),
    latency=latency_st,
    more=st.floats(1e-9, 1e-3),
)
def test_monotonic_in_latency(
    impl, as_number, check_seconds, cost_model, call_text, name, nbytes, bandwidth, n, latency, more
):
    _nondecreasing(
        impl,
        as_number,
        call_text,
        name,
        (nbytes, bandwidth, n, latency),
        (nbytes, bandwidth, n, latency + more),
        "a longer hop never makes it faster",
        check_seconds=check_seconds,
        cost_model=cost_model,
    )


@pytest.mark.points(0.125)
@pytest.mark.rules("values", "properties")
@pytest.mark.parametrize("name", COLLECTIVES)
@settings(GRADING, max_examples=25)
@given(
    nbytes=st.integers(1, 2**40),
    bandwidth=bandwidth_st,
    factor=st.floats(1.01, 1e3),
    n=st.integers(2, 512),
    latency=latency_st,
)
def test_decreasing_in_bandwidth(
    impl,
    as_number,
    check_seconds,
    cost_model,
    call_text,
    name,
    nbytes,
    bandwidth,
    factor,
    n,
    latency,
):
    # More bandwidth never hurts; with no latency to hide behind it helps, in proportion.
    wide, narrow = _nondecreasing(
        impl,
        as_number,
        call_text,
        name,
        (nbytes, bandwidth * factor, n, latency),
        (nbytes, bandwidth, n, latency),
        "more bandwidth never takes more time",
        check_seconds=check_seconds,
        cost_model=cost_model,
    )
    if latency == 0.0:
        assert abs(wide * factor - narrow) <= 1e-9 * narrow, (
            f"with no latency, {factor:g} times the bandwidth should take {factor:g} times less time: "
            f"{call_text(name, nbytes, bandwidth, n, latency)} = {narrow:.6g} s but with bandwidth "
            f"{bandwidth * factor:g}, {wide:.6g} s"
        )


@pytest.mark.points(0.25)
@pytest.mark.rules("values", "properties", functions=("allgather_time",))
def test_units_are_bytes_bytes_per_second_and_seconds(
    impl, check_seconds, cost_model, call_text, check_drawn
):
    # A gigabyte over a ring of 2 at a gigabyte per second: each device takes in half of it, 0.5 s.
    args = (10**9, 1e9, 2, 0.0)
    check_seconds(
        impl.allgather_time(*args),
        0.5,
        call_text("allgather_time", *args),
        why="nbytes in bytes, bandwidth in bytes/s, the result in seconds",
    )
    # Latency-bound: 4 hops of a microsecond are 4e-6 seconds (not 4: the result is in seconds).
    args = (64, 1e11, 8, 1e-6)
    for name in ("allgather_time", "reducescatter_time", "alltoall_time"):
        check_seconds(
            getattr(impl, name)(*args),
            4e-6,
            call_text(name, *args),
            why="4 hops of 1e-6 s each; latency is in seconds per hop",
        )
    # Bytes and bytes/s cancel: scaling both together changes nothing.
    for scale in (1e-3, 8.0, 1e6):
        small, large = (2**26, 1e11, 8, 1e-6), (2**26 * scale, 1e11 * scale, 8, 1e-6)
        for name in COLLECTIVES:
            before = _exact(impl, name, small, check_seconds, cost_model, call_text, why=ANCHOR)
            check_seconds(
                getattr(impl, name)(*large),
                before,
                call_text(name, *large),
                why=f"the same as {call_text(name, *small)}: bytes and bytes/s scaled together",
            )
    # And the model's value on rings drawn for this test, one per collective.
    for seed, name in enumerate(COLLECTIVES):
        check_drawn(impl, name, "bandwidth", seed)


@pytest.mark.points(0.5)
@pytest.mark.rules(
    "values", functions=("allgather_time", "reducescatter_time", "allreduce_time", "alltoall_time")
)
@pytest.mark.parametrize("n", [2, 3, 4, 5, 8, 9])
def test_ring_hops_when_latency_bound(impl, check_seconds, call_text, check_drawn, n):
    # 8 bytes: every hop lasts its latency. The farthest device of a bidirectional ring is n // 2 hops
    # away (a ring of 3: both others are neighbours, one hop).
    args = (8, 1e11, n, 1e-6)
    hops = n // 2
    for name in COLLECTIVES:
        passes = 2 if name == "allreduce_time" else 1
        check_seconds(
            getattr(impl, name)(*args),
            passes * hops * 1e-6,
            call_text(name, *args),
            why=f"{passes * hops} hop(s) of 1 us: on a ring of {n} the farthest device is {hops} "
            "hop(s) away in one direction or the other",
        )
    # And on latency-bound rings drawn for this test, any size, any latency.
    for seed, name in enumerate(COLLECTIVES):
        check_drawn(impl, name, "latency", seed)


@pytest.mark.points(0.5)
@pytest.mark.rules("values")
def test_latency_bound_below_the_book_threshold(impl, check_seconds, call_text, check_drawn):
    # Part 3, "A note on ICI latency": on TPU v5e (4.5e10 bytes/s each way, 1 us per hop) "sending any
    # buffer under 45kB will be latency bound". A ring of 16 (8 hops) gathering 30 kB shards waits on its
    # hops; with 60 kB shards it waits on its bytes.
    n, bandwidth, latency = 16, 9e10, 1e-6
    small = (16 * 30_000, bandwidth, n, latency)
    check_seconds(
        impl.allgather_time(*small),
        8 * latency,
        call_text("allgather_time", *small),
        why="latency-bound: 8 hops of 1 us (the bytes alone would take 5 us)",
    )
    large = (16 * 60_000, bandwidth, n, latency)
    check_seconds(
        impl.allgather_time(*large),
        15 / 16 * 16 * 60_000 / bandwidth,
        call_text("allgather_time", *large),
        why="bandwidth-bound: 15/16 of the array at 9e10 bytes/s, 10 us (the 8 hops alone take 8 us)",
    )
    check_drawn(impl, "allgather_time", "latency", 0)
    check_drawn(impl, "allgather_time", "bandwidth", 1)


@pytest.mark.points(0.5)
@pytest.mark.rules("values")
@settings(GRADING, max_examples=EXAMPLES)
@given(flops=flops_st, bandwidth=bandwidth_st)
def test_dp_comm_bound_batch_is_compute_over_bandwidth(
    impl, check_seconds, call_text, flops, bandwidth
):
    check_seconds(
        impl.dp_comm_bound_batch(flops, bandwidth),
        flops / bandwidth,
        call_text("dp_comm_bound_batch", flops, bandwidth),
        why="4 backward FLOPs per parameter per token against 4 bytes (bf16, all-reduced twice) per "
        "parameter: the constant is 1, the batch is C / W",
    )


@pytest.mark.points(0.25)
@pytest.mark.rules("values", "properties")
def test_dp_comm_bound_batch_units(impl, check_seconds, call_text, check_drawn_batch):
    base = check_seconds(
        impl.dp_comm_bound_batch(4.59e14, 1.8e11),
        4.59e14 / 1.8e11,
        call_text("dp_comm_bound_batch", 4.59e14, 1.8e11),
        why=ANCHOR,
    )
    check_seconds(
        impl.dp_comm_bound_batch(2 * 4.59e14, 1.8e11),
        2 * base,
        call_text("dp_comm_bound_batch", 2 * 4.59e14, 1.8e11),
        why="twice the FLOP/s need twice the batch to stay compute-bound",
    )
    check_seconds(
        impl.dp_comm_bound_batch(4.59e14, 2 * 1.8e11),
        base / 2,
        call_text("dp_comm_bound_batch", 4.59e14, 2 * 1.8e11),
        why="twice the bandwidth halves the batch needed",
    )
    check_seconds(
        impl.dp_comm_bound_batch(4.59e14 * 1e3, 1.8e11 * 1e3),
        base,
        call_text("dp_comm_bound_batch", 4.59e14 * 1e3, 1.8e11 * 1e3),
        why="FLOP/s and bytes/s scaled together leave the batch (tokens) unchanged",
    )
    check_drawn_batch(impl)
