"""What ex15's visible and hidden tests share: routed tokens and experts' weights, the float64 NumPy reference
of the capacity rule (values, drops and gradients), moe_layer's routing and capacity, and the rules the
compiled dispatch_combine is graded by (two all-to-alls of (E, capacity, D) buffers, no all-gather, XLA's
memory, each device's share of the work and of the bytes sent; moe_layer's shares too), so that
`shardlab check` applies the very checks grading does."""

import math
from typing import NamedTuple

import jax
import numpy as np
import pytest
from jax.sharding import NamedSharding, PartitionSpec as P

from grader.checks import (
    NotReported,
    Variant,
    account_of,
    assert_close,
    assert_close_or_named,
    assert_collectives,
    assert_computes,
    assert_executed,
    assert_memory,
    assert_operand_bytes,
    assert_sharding,
    assert_traffic,
    assert_work,
    between_devices,
    compiled,
    executed_collectives,
    inputs,
    test_mesh,
)
from grader.checks.account import unknown_count

# float32 matmuls summed in other orders than float64 NumPy's; outputs are of order 1.
TOL = dict(rtol=1e-5, atol=1e-5)
GRAD_TOL = dict(rtol=1e-4, atol=1e-4)
# What an all-to-all may move per slot beyond a token's D floats: a gate and one more value sent with it.
EXTRA_PER_SLOT = 2
# What every collective but the all-to-alls may move per device, as executed: the drop count (4 bytes), with
# room for an honest count per (device, expert) summed (n * E int32: 512 bytes at n = 8, E = 16); one
# expert's w1 alone is D * H * 4 = 4096 bytes on the tests' sizes, and replicating the weights moves all of
# them but a device's own.
OTHER_BYTES = 1024
# The multiply-adds each device executes (grader.checks.account, every loop's steps counted) against its
# share, the experts' work on full (E, capacity) buffers, 2 E capacity D H, on the tests' sizes (T/n = 16
# tokens per device, D = 16, H = 64, balanced routing): measured 1.01x for the reference's scatter and
# gather, 1.29x for a dense one-hot einsum dispatch; buffers of T/n rows per expert (in a loop or not) 4.0x
# (n = 2, k = 2) to 16.0x (n = 8, k = 2), and 8.0x on the visible test's 8 devices, as every device
# applying every token's expert. The rules allow twice the share.


class Case(NamedTuple):
    """One dispatch_combine input, as NumPy arrays (x, ids, gates, w1, w2 are the function's order)."""

    n: int
    capacity: int
    x: np.ndarray  # (T, D) float32
    ids: np.ndarray  # (T,) int32
    gates: np.ndarray  # (T,) float32
    w1: np.ndarray  # (E, D, H) float32
    w2: np.ndarray  # (E, H, D) float32

    @property
    def arrays(self):
        return self.x, self.ids, self.gates, self.w1, self.w2

    @property
    def experts(self) -> int:
        return self.w1.shape[0]


def _weights(rng, experts, d, h):
    w1 = rng.standard_normal((experts, d, h), dtype=np.float32) / np.float32(np.sqrt(d))
    w2 = rng.standard_normal((experts, h, d), dtype=np.float32) / np.float32(np.sqrt(h))
    return w1, w2


def _case(n, k, tokens_per_device, d, h, capacity, *, seed=0, skew=1.0, balanced=False) -> Case:
    """Random tokens routed with a skew (skew > 0: low experts more popular), so that tight capacities drop;
    `balanced`: each device sends tokens_per_device / E tokens to every expert, in a random order."""
    rng = inputs.rng(seed)
    experts = n * k
    t = n * tokens_per_device
    if balanced:
        assert tokens_per_device % experts == 0, "balanced routing needs E to divide T/n"
        per_expert = np.repeat(np.arange(experts), tokens_per_device // experts)
        ids = np.concatenate([rng.permutation(per_expert) for _ in range(n)]).astype(np.int32)
    else:
        weights = np.exp(-skew * np.arange(experts) / experts)
        ids = rng.choice(experts, size=t, p=weights / weights.sum()).astype(np.int32)
    x = rng.standard_normal((t, d), dtype=np.float32)
    gates = rng.uniform(0.1, 1.0, t).astype(np.float32)
    return Case(n, capacity, x, ids, gates, *_weights(rng, experts, d, h))


def _kept(ids, n, experts, capacity, last=False):
    """The capacity rule: per source device and expert, the first `capacity` tokens in the device's order
    (with `last`, the known mistake: the last ones)."""
    kept = np.zeros(len(ids), bool)
    for block in np.split(np.arange(len(ids)), n):
        for e in range(experts):
            routed = block[ids[block] == e]
            kept[routed[max(len(routed) - capacity, 0) :] if last else routed[:capacity]] = True
    return kept


def _reference(case: Case, last=False):
    """(out float64, num_dropped) of the capacity rule (with `last`, of the last tokens kept)."""
    x, ids, gates, w1, w2 = (np.asarray(a, np.float64) for a in case.arrays)
    ids = case.ids
    kept = _kept(ids, case.n, case.experts, case.capacity, last)
    hidden = np.maximum(np.einsum("td,tdh->th", x, w1[ids]), 0.0)
    out = np.einsum("th,thd->td", hidden, w2[ids]) * (gates * kept)[:, None]
    return out, int((~kept).sum())


def _reference_grads(case: Case, r):
    """Gradients of sum(out * r) with respect to x, w1 and w2, by hand in float64."""
    x, ids, gates, w1, w2 = (np.asarray(a, np.float64) for a in case.arrays)
    ids = case.ids
    kept = _kept(ids, case.n, case.experts, case.capacity)
    pre = np.einsum("td,tdh->th", x, w1[ids])
    hidden = np.maximum(pre, 0.0)
    d_out = np.asarray(r, np.float64) * (gates * kept)[:, None]  # (T, D)
    d_hidden = np.einsum("td,thd->th", d_out, w2[ids]) * (pre > 0)
    dx = np.einsum("th,tdh->td", d_hidden, w1[ids])
    dw1, dw2 = np.zeros_like(w1), np.zeros_like(w2)
    np.add.at(dw1, ids, np.einsum("td,th->tdh", x, d_hidden))
    np.add.at(dw2, ids, np.einsum("th,td->thd", hidden, d_out))
    return dx, dw1, dw2


def _placed(mesh, *arrays):
    sharding = NamedSharding(mesh, P("ep"))
    return tuple(jax.device_put(a, sharding) for a in arrays)


def _drops_by_device(case: Case) -> list[int]:
    kept = _kept(case.ids, case.n, case.experts, case.capacity)
    return [int((~block).sum()) for block in np.split(kept, case.n)]


def _check_result(result, mesh, out_ref, dropped_ref, *, what, why_drops="", mistakes=()):
    """(out, num_dropped): its shape, num_dropped replicated and exact, then out's sharding and values (a
    wrong out named by the Variant of `mistakes` it matches)."""
    assert isinstance(result, (tuple, list)) and len(result) == 2, (
        f"{what} should return (out, num_dropped), got {type(result).__name__}"
        + (f" of length {len(result)}" if isinstance(result, (tuple, list)) else "")
    )
    out, dropped = result
    assert isinstance(dropped, jax.Array) and dropped.sharding.is_fully_replicated, (
        f"{what}'s num_dropped should be a jax int32 scalar replicated on every device (P()), got "
        f"{type(dropped).__name__} {getattr(dropped, 'sharding', '')}: the total is the same on every device"
    )
    got = np.asarray(dropped)
    assert got.shape == () and np.issubdtype(got.dtype, np.integer), (
        f"{what}'s num_dropped should be an int32 scalar, got shape {got.shape} and dtype {got.dtype}"
    )
    assert int(got) == dropped_ref, (
        f"{what} reports num_dropped = {int(got)}, expected {dropped_ref}{why_drops}. It is the total over "
        "all devices (a psum of each device's count); each device keeps, per expert, the first capacity "
        "of its own tokens routed there."
    )
    assert_sharding(out, mesh, P("ep"), name=f"{what}'s out")
    assert_close_or_named(
        out,
        out_ref,
        mistakes,
        **TOL,
        name=f"{what}'s out (a dropped token's row is 0; a kept one is gate * ffn(x))",
    )


def _check_dispatch(impl, mesh, case: Case):
    """dispatch_combine called directly (as a student calls it) on the case: every output rule."""
    out_ref, dropped_ref = _reference(case)
    result = impl.dispatch_combine(*_placed(mesh, *case.arrays), mesh, case.capacity)
    why = (
        f" (capacity {case.capacity}; dropped per device {_drops_by_device(case)}, "
        f"{len(case.ids) // case.n} tokens each)"
    )
    last = Variant(
        lambda: _reference(case, last=True)[0],
        "matches the LAST capacity tokens kept for each (device, expert) and the first ones dropped: "
        "keep the first capacity of a device's tokens routed to an expert, in the device's order "
        "(a token's place among them is the running count of earlier tokens with that expert)",
    )
    _check_result(
        result, mesh, out_ref, dropped_ref, what="dispatch_combine", why_drops=why, mistakes=[last]
    )


def _check_gradients(impl, mesh, case: Case, seed=0):
    """Gradients of sum(out * r) with respect to x, w1 and w2, under jax.jit, against the float64 ones."""
    r = inputs.rng(seed).standard_normal(case.x.shape, dtype=np.float32)
    x, ids, gates, w1, w2 = _placed(mesh, *case.arrays)
    r_placed = jax.device_put(r, NamedSharding(mesh, P("ep")))

    def loss(x, w1, w2):
        out, _ = impl.dispatch_combine(x, ids, gates, w1, w2, mesh, case.capacity)
        return (out * r_placed).sum()

    # While grading, the program is the one the worker traced: it comes with its derivative, checked.
    grads = jax.jit(jax.grad(loss, argnums=(0, 1, 2)))(x, w1, w2)
    for name, got, want in zip(("x", "w1", "w2"), grads, _reference_grads(case, r)):
        assert_close(
            got,
            want,
            **GRAD_TOL,
            name=f"the gradient of sum(out * r) with respect to {name} (dropped tokens have none)",
        )


def _program(impl, mesh, case: Case):
    args = _placed(mesh, *case.arrays)
    return compiled(lambda *a: impl.dispatch_combine(*a, mesh, case.capacity), *args), args


def _check_program_out(program, args, case: Case):
    """A structure rule is earned only by a program that computes out; the drop count has its own rule
    (the structure tests use capacities where nothing drops)."""
    result = program(*args)
    assert isinstance(result, (tuple, list)) and len(result) == 2, (
        "dispatch_combine should return (out, num_dropped): its compiled program is graded only if it "
        "computes out"
    )
    assert_computes(result[0], _reference(case)[0], **TOL, what="dispatch_combine")


def _check_nothing_else_moves(program):
    """Beside the all-to-alls, the collectives between devices together move at most OTHER_BYTES of operands
    per device, as executed (the program's account): the experts' weights do not move by any other
    collective (a psum of zero-padded weights or a ring of permutes replicates them without an all-gather)."""
    rule = f"at most {OTHER_BYTES} bytes moved by collectives other than the all-to-alls"
    account = account_of(program, what="dispatch_combine")
    others = [row for row in between_devices(account) if row.kind != "all-to-all"]
    if any(row.operand_bytes is None for row in others):
        raise unknown_count("dispatch_combine", "collectives", rule)
    moved = sum(row.operand_bytes for row in others)
    assert moved <= OTHER_BYTES, (
        f"the compiled program of dispatch_combine moves {moved} bytes per device in collectives other "
        f"than its all-to-alls ({', '.join(sorted({row.kind for row in others}))}); expected at most "
        f"{OTHER_BYTES} (the drop counts' psum). Only the tokens travel, by the two all_to_alls: are the "
        "experts' weights brought to every device some other way?"
    )


def _exchange_bytes(n, experts, capacity, d):
    """What one device may send in dispatch_combine: two all-to-alls of an (E, capacity, D) float32 buffer
    with EXTRA_PER_SLOT more values per slot, each sending all but its own 1/n of it, and OTHER_BYTES for
    the drop counts. A device that gathers every token and expert sends (n - 1) / n of all of x and of
    w1 and w2, many times more on the tests' sizes."""
    exchange = (n - 1) * experts * capacity * (d + EXTRA_PER_SLOT) * 4 // n
    return 2 * exchange + OTHER_BYTES


def _expert_share(experts, capacity, d, h):
    """One device's share of the experts' dot work: E experts each applied, relu(h @ w1) @ w2, to the
    capacity slots of each of the n devices, 2 E n capacity D H multiply-adds over the n devices."""
    return 2 * experts * capacity * d * h


def _check_exchange(impl, mesh, case: Case):
    """The compiled dispatch_combine: exactly two all-to-alls, each moving an (E, capacity, D) buffer per
    device, no all-gather and no other collective moving more than the drop count, and no more bytes sent
    than those; earned only by a program that also computes the values."""
    program, args = _program(impl, mesh, case)
    d = case.x.shape[1]
    ops = executed_collectives(program)
    exchanges = [op for op in ops if op.kind == "all-to-all"]
    hint = (
        "One all_to_all sends the tokens' buffer to the experts' devices, one brings the results back: "
        + (
            "without them the tokens never move; are the experts' weights gathered instead?"
            if not exchanges
            else "are the tokens (or their gates and ids) sent in several exchanges?"
        )
    )
    assert_executed(
        program, "all-to-all", at_least=2, at_most=2, what="dispatch_combine", hint=hint
    )
    _check_program_out(program, args, case)
    assert_collectives(program, absent=("all-gather",), what="dispatch_combine")
    _check_nothing_else_moves(program)
    buffer = case.experts * case.capacity * d * 4
    assert_operand_bytes(
        program,
        "all-to-all",
        at_most=case.experts * case.capacity * (d + EXTRA_PER_SLOT) * 4,
        what="dispatch_combine",
        hint=f"An (E, capacity, D) = ({case.experts}, {case.capacity}, {d}) float32 buffer is {buffer} "
        "bytes: is each expert given room for all of a device's tokens instead of capacity slots?",
        buffer_bytes=buffer,
    )
    assert_traffic(
        program,
        at_most=_exchange_bytes(case.n, case.experts, case.capacity, d),
        bound_of=f"two all-to-alls of an (E, capacity, D) = ({case.experts}, {case.capacity}, {d}) buffer "
        f"with {EXTRA_PER_SLOT} more values per slot, (n - 1) / n of it each, and {OTHER_BYTES} bytes "
        "for the drop counts",
        what="dispatch_combine",
        hint="Only the tokens travel, in capacity slots: are every token and every expert brought to "
        "every device?",
    )


def _check_memory_and_work(impl, mesh, case: Case):
    """The compiled dispatch_combine (which must compute the right values): XLA's argument bytes hold 1/n of
    w1 and w2, its temporaries less than the whole of w1 and w2 together (measured on the tests' sizes:
    4240-12480 bytes for honest dispatches, 139392-198784 with the weights gathered); each device executes
    at most twice its share of the experts' work, on full (E, capacity) buffers."""
    program, args = _program(impl, mesh, case)
    _check_program_out(program, args, case)
    n, experts, capacity = case.n, case.experts, case.capacity
    d, h = case.w1.shape[1:]
    whole = sum(a.nbytes for a in case.arrays)
    # before the memory rule, which skips where XLA reports no memory: the work is read from the account
    assert_work(
        program,
        share=_expert_share(experts, capacity, d, h),
        share_of=f"the experts' work on full (E, capacity) = ({experts}, {capacity}) buffers, "
        "2 E capacity D H multiply-adds",
        what="dispatch_combine",
        hint=f"Does each expert get a buffer of all of a device's {len(case.ids) // n} tokens instead of "
        "capacity slots, or does every device apply every token's expert?",
    )
    try:
        assert_memory(
            program,
            argument_below=whole // n + min(case.w1.nbytes, case.w2.nbytes) // n,
            temp_below=case.w1.nbytes + case.w2.nbytes,
            what="dispatch_combine",
            hint=f"Each device should hold only its {experts // n} expert(s) of w1 and w2 (1/{n} of each, "
            f"{case.w1.nbytes // n} bytes), never all of w1 and w2 ({case.w1.nbytes + case.w2.nbytes} bytes): "
            "are the experts' weights gathered instead of the tokens sent to them?",
        )
    except NotReported as exc:
        pytest.skip(str(exc))


# --- moe_layer -----------------------------------------------------------------------------------


class MoeCase(NamedTuple):
    n: int
    capacity_factor: float
    x: np.ndarray  # (T, D) float32
    wg: np.ndarray  # (D, E) float32
    w1: np.ndarray
    w2: np.ndarray

    @property
    def experts(self) -> int:
        return self.wg.shape[1]

    @property
    def capacity(self) -> int:
        """The contract's formula, exactly as written."""
        return math.ceil(self.capacity_factor * (self.x.shape[0] / self.n) / self.experts)


def _moe_counts(experts, tokens, capacity, device):
    """How many of a device's tokens choose each expert: one expert exactly `capacity` (kept whole only with
    the right capacity), the next two more (drops 2), the rest below capacity where the tokens allow."""
    counts = np.zeros(experts, int)
    first = device % experts
    counts[first] = min(capacity, tokens)
    second = (device + 1) % experts
    if second != first:
        counts[second] = min(capacity + 2, tokens - counts.sum())
    for e in range(experts):
        if e not in (first, second):
            counts[e] = min(capacity - 1, tokens - counts.sum())
    counts[second] += tokens - counts.sum()  # whatever is left drops from the second
    return counts


def _moe_case(n, k, tokens_per_device, d, h, capacity_factor, *, seed=0, ties=0) -> MoeCase:
    """Tokens whose logits pick the planned experts clearly (routing needs no tie-break in float32), except
    `ties` tokens per device whose logits are all equal: they go to expert 0, the lowest index."""
    rng = inputs.rng(seed)
    experts = n * k
    t = n * tokens_per_device
    assert d >= experts, "the routing plan needs D >= E"
    wg = np.zeros((d, experts), np.float32)
    wg[np.arange(experts), np.arange(experts)] = 4.0
    x = rng.standard_normal((t, d), dtype=np.float32)
    capacity = math.ceil(capacity_factor * (tokens_per_device) / experts)
    for device in range(n):
        counts = _moe_counts(experts, tokens_per_device, capacity, device)
        chosen = rng.permutation(np.repeat(np.arange(experts), counts))
        rows = slice(device * tokens_per_device, (device + 1) * tokens_per_device)
        x[rows, :experts] = rng.uniform(-0.3, 0.3, (tokens_per_device, experts))
        x[rows, :experts][np.arange(tokens_per_device), chosen] += 1.0
        tied = np.flatnonzero(chosen == 0)[:ties]
        x[rows, :experts][tied] = 0.5
    return MoeCase(n, capacity_factor, x, wg, *_weights(rng, experts, d, h))


def _moe_reference(case: MoeCase):
    logits = case.x.astype(np.float64) @ case.wg.astype(np.float64)
    ids = np.argmax(logits, axis=-1).astype(np.int32)
    soft = np.exp(logits - logits.max(axis=-1, keepdims=True))
    gates = (soft / soft.sum(axis=-1, keepdims=True))[np.arange(len(ids)), ids]
    routed = Case(case.n, case.capacity, case.x, ids, gates, case.w1, case.w2)
    return _reference(routed), _drops_by_device(routed)


def _check_moe(impl, case: MoeCase):
    """moe_layer, compiled once: its values and drops, then its shares of the work (the router's and the
    experts' on (E, capacity) buffers) and of the bytes (dispatch_combine's)."""
    mesh = test_mesh((case.n,), ("ep",), "explicit")
    (out_ref, dropped_ref), by_device = _moe_reference(case)
    x, w1, w2 = _placed(mesh, case.x, case.w1, case.w2)
    wg = jax.device_put(case.wg, NamedSharding(mesh, P()))
    tokens = case.x.shape[0] // case.n
    why = (
        f" with capacity_factor {case.capacity_factor}, T/n = {tokens} and E = {case.experts}: capacity "
        f"math.ceil({case.capacity_factor} * ({case.x.shape[0]} / {case.n}) / {case.experts}) = "
        f"{case.capacity} in Python floats (dropped per device {by_device}). int(), round() or exact "
        "arithmetic give another capacity"
    )
    program = compiled(
        lambda x, wg, w1, w2: impl.moe_layer(x, wg, w1, w2, mesh, case.capacity_factor),
        x,
        wg,
        w1,
        w2,
    )
    _check_result(
        program(x, wg, w1, w2), mesh, out_ref, dropped_ref, what="moe_layer", why_drops=why
    )
    d, h = case.w1.shape[1:]
    assert_work(
        program,
        share=tokens * d * case.experts + _expert_share(case.experts, case.capacity, d, h),
        share_of=f"the router's and the experts' dot work (T/n = {tokens} tokens' logits, and "
        f"(E, capacity) = ({case.experts}, {case.capacity}) buffers: T/n D E + 2 E capacity D H)",
        what="moe_layer",
        hint="Does each expert get a buffer of all of a device's tokens instead of capacity slots, or does "
        "every device route every token and apply its expert? Each device routes its own tokens and "
        "applies its own experts to the slots it receives.",
    )
    assert_traffic(
        program,
        at_most=_exchange_bytes(case.n, case.experts, case.capacity, d),
        bound_of=f"dispatch_combine's: two all-to-alls of an (E, capacity, D) = ({case.experts}, "
        f"{case.capacity}, {d}) buffer with {EXTRA_PER_SLOT} more values per slot, (n - 1) / n of it "
        f"each, and {OTHER_BYTES} bytes for the drop counts",
        what="moe_layer",
        hint="Only the tokens travel, in capacity slots: are the tokens or the experts' weights brought "
        "to every device?",
    )


@pytest.fixture
def case():
    """case(n, k, tokens_per_device, d, h, capacity, seed=0, skew=1.0) -> Case (NumPy arrays)."""
    return _case


@pytest.fixture
def moe_case():
    """moe_case(n, k, tokens_per_device, d, h, capacity_factor, seed=0, ties=0) -> MoeCase."""
    return _moe_case


@pytest.fixture
def check_dispatch():
    """check_dispatch(impl, mesh, case): out and num_dropped of a direct call, values and shardings."""
    return _check_dispatch


@pytest.fixture
def check_gradients():
    """check_gradients(impl, mesh, case, seed=0): gradients of sum(out * r) w.r.t. x, w1 and w2."""
    return _check_gradients


@pytest.fixture
def check_exchange():
    """check_exchange(impl, mesh, case): two all-to-alls of (E, capacity, D) buffers, no all-gather, and the
    bytes each device sends."""
    return _check_exchange


@pytest.fixture
def check_memory_and_work():
    """check_memory_and_work(impl, mesh, case): 1/n of the weights per device, the work of capacity buffers."""
    return _check_memory_and_work


@pytest.fixture
def check_moe():
    """check_moe(impl, moe_case): moe_layer's routing, capacity, values and drops, and its shares."""
    return _check_moe
