"""What ex17's visible and hidden tests share: the problem (params, microbatches), the float64 NumPy
references (the mean gradient, Adam on it), the test's own placements, and the rules the results and the
compiled programs are graded by, so that `shardlab check` applies the very checks grading does."""

from dataclasses import dataclass

import jax
import numpy as np
import pytest
from jax.sharding import NamedSharding, PartitionSpec as P

from grader.checks import (
    NotReported,
    account_of,
    assert_computes,
    assert_executed,
    assert_memory,
    assert_operand_bytes,
    assert_sharded_like,
    assert_traffic,
    assert_work,
    between_devices,
    compare,
    compiled,
    inputs,
    test_mesh,
)
from grader.checks.account import unknown_count
from grader.checks.training import leaf_name, param_leaves

# float32 against float64. The mean gradient: measured worst 9e-9 absolute (2 to 8 devices, MB 1 to 4),
# all within atol; rtol covers the larger entries.
GRAD_TOL = dict(rtol=1e-5, atol=1e-6)
# Each Adam step against one float64 step from the state the program's previous step returned: params and
# loss within rtol, and atol where the update is well conditioned (measured worst 1.5e-7: the reference and
# two other honest programs, 2 devices and 2,000 problems, 4 and 8 devices and 40); an entry whose update
# direction turns on float32's rounding of its gradient gets what that rounding can move it
# (_update_tolerance). Judged against the end of a float64 path instead, one entry's first update (its
# gradient -1.3e-10) moved a later gradient and failed the reference on 1 of those 2,000 problems.
ADAM_TOL = dict(rtol=1e-4, atol=1e-5)
GRAD_NOISE = (
    1e-5  # float32's error in a gradient element, relative to its leaf's largest (generous)
)
# m and v after one step from the program's own state: float32's rounding of B1 m + (1 - B1) g and of
# B2 v + (1 - B2) g ** 2 (measured as above, worst 2.9e-9 for m, 3.9e-12 for v)
MOMENT_TOL = {"m": dict(rtol=1e-4, atol=1e-6), "v": dict(rtol=1e-4, atol=1e-9)}
B1, B2, EPS = 0.9, 0.999, 1e-8
LR = 0.01
SCALARS = 4  # an all-reduce of the step may carry the loss (and a few more scalars): 4 float32s


@dataclass(frozen=True)
class Problem:
    params: list  # [(W, b)] float32 NumPy
    xs: np.ndarray  # (MB, B, n_in)
    ys: np.ndarray  # (MB, B, n_out)

    @property
    def leaves(self) -> int:
        return 2 * len(self.params)

    @property
    def param_bytes(self) -> int:
        return sum(a.nbytes for a in jax.tree.leaves(self.params))

    @property
    def weights(self) -> int:
        """W: the entries of the weight matrices, sum of n_in * n_out."""
        return sum(W.size for W, _ in self.params)


def _mesh(n):
    return test_mesh((n,), ("data",), "explicit")


def _problem(sizes, mb, batch, seed) -> Problem:
    rng = inputs.rng(seed)
    params = [
        (
            (0.1 * rng.standard_normal((n_in, n_out))).astype(np.float32),
            (0.1 * rng.standard_normal(n_out)).astype(np.float32),
        )
        for n_in, n_out in zip(sizes[:-1], sizes[1:])
    ]
    xs = rng.standard_normal((mb, batch, sizes[0]), dtype=np.float32)
    A = rng.standard_normal((sizes[0], sizes[-1])) / np.sqrt(sizes[0])
    return Problem(params, xs, np.sin(xs @ A).astype(np.float32))


@pytest.fixture
def problem():
    """problem(sizes, mb, batch, seed) -> Problem (float32 NumPy)."""
    return _problem


# --- the float64 references ------------------------------------------------------------------------


def _loss_and_grads(params, x, y):
    """mse_loss and its gradient for one microbatch, by hand in float64 (no compile)."""
    acts, h = [], np.asarray(x, np.float64)
    for i, (W, b) in enumerate(params):
        acts.append(h)
        a = h @ np.asarray(W, np.float64) + b
        h = np.tanh(a) if i < len(params) - 1 else a
    diff = h - y
    delta = 2 * diff / diff.size
    grads = []
    for i in reversed(range(len(params))):
        W = np.asarray(params[i][0], np.float64)
        grads.append((acts[i].T @ delta, delta.sum(axis=0)))
        if i:
            delta = (delta @ W.T) * (1 - acts[i] ** 2)
    return float(np.mean(diff**2)), grads[::-1]


def _mean_grads(params, xs, ys):
    """(the mean loss, the mean gradient) over the microbatches, float64."""
    results = [_loss_and_grads(params, x, y) for x, y in zip(xs, ys)]
    loss = np.mean([r[0] for r in results])
    grads = jax.tree.map(lambda *g: sum(g) / len(results), *[r[1] for r in results])
    return loss, grads


@dataclass(frozen=True)
class AdamStep:
    """One float64 Adam step on the mean gradient: the new params, m and v (params' structure), the loss
    at the params it started from, and each param element's absolute tolerance (leaves, in order)."""

    params: list
    m: list
    v: list
    loss: float
    tolerances: list


def _adam_step(pr: Problem, params, m, v, t: int, *, bias_correction=True) -> AdamStep:
    """Adam's step number `t` (1 at the first) from params, m and v (any float arrays, taken as float64)."""
    params, m, v = (jax.tree.map(lambda a: np.asarray(a, np.float64), x) for x in (params, m, v))
    loss, g = _mean_grads(params, pr.xs, pr.ys)
    scale = (1 - B1**t, 1 - B2**t) if bias_correction else (1, 1)
    new_m = jax.tree.map(lambda m, g: B1 * m + (1 - B1) * g, m, g)
    new_v = jax.tree.map(lambda v, g: B2 * v + (1 - B2) * g * g, v, g)
    new_params = jax.tree.map(
        lambda p, m, v: p - LR * _direction(m, v, scale), params, new_m, new_v
    )
    tolerances = [
        _update_tolerance(*leaves, scale)
        for leaves in zip(jax.tree.leaves(m), jax.tree.leaves(v), jax.tree.leaves(g))
    ]
    return AdamStep(new_params, new_m, new_v, loss, tolerances)


def _direction(m, v, scale):
    """Adam's update direction m_hat / (sqrt(v_hat) + eps), from the step's new moments."""
    return (m / scale[0]) / (np.sqrt(v / scale[1]) + EPS)


def _update_tolerance(m, v, g, scale) -> np.ndarray:
    """Per element of one leaf, lr x the most the update direction moves while its gradient g moves by
    float32's noise (GRAD_NOISE x the leaf's largest), from moments m and v going in; ADAM_TOL's atol at
    least. Where g is within that noise of zero, or of cancelling m, the direction turns on rounding an
    honest program's summation order changes: up to 2 lr at the first step, where it is g's sign."""
    noise = GRAD_NOISE * np.max(np.abs(g))

    def direction(g):
        return _direction(B1 * m + (1 - B1) * g, B2 * v + (1 - B2) * g * g, scale)

    # Eps aside, the direction is (a + b g) / sqrt(c + d g^2): its one turning point is g = b c / (a d).
    a, b = B1 * m / scale[0], (1 - B1) / scale[0]
    c, d = B2 * v / scale[1], (1 - B2) / scale[1]
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        turn = np.where(a != 0, b * c / (a * d), g)
    turn = np.clip(turn, g - noise, g + noise)
    here = direction(g)
    moved = np.maximum.reduce([np.abs(direction(x) - here) for x in (g - noise, g + noise, turn)])
    return np.maximum(LR * moved, ADAM_TOL["atol"])


def _first_step(pr: Problem) -> AdamStep:
    """The first step, from the problem's params and zero moments."""
    zeros = jax.tree.map(np.zeros_like, pr.params)
    return _adam_step(pr, pr.params, zeros, zeros, 1)


# --- placements --------------------------------------------------------------------------------------


def _placed(mesh, pr: Problem):
    """(params P(), xs P(None, "data"), ys P(None, "data")) on the mesh."""
    whole, split = NamedSharding(mesh, P()), NamedSharding(mesh, P(None, "data"))
    return jax.device_put(pr.params, whole), *jax.device_put((pr.xs, pr.ys), split)


def _zero_state(mesh, params):
    """The test's own ZeRO-1 state: m and v zeros P("data"), t an int32 0 P()."""
    split = NamedSharding(mesh, P("data"))

    def zeros():
        return jax.device_put(jax.tree.map(np.zeros_like, params), split)

    t = jax.device_put(np.int32(0), NamedSharding(mesh, P()))
    return {"m": zeros(), "v": zeros(), "t": t}


# --- the share of each device ------------------------------------------------------------------------


def _step_work_share(n, pr: Problem) -> int:
    """One device's share of the step's multiply-adds: for each of its B/n rows of every microbatch, one
    per weight entry forward and two backward (the input's and the weight's gradient), 3 MB B W / n.
    Adam's products on a device's shard of the params are a fraction of it, inside the rule's 2 x."""
    mb, batch = pr.xs.shape[:2]
    return 3 * mb * batch * pr.weights // n


def _gradient_traffic_bound(n, pr: Problem) -> int:
    """The gradients' bytes, plus a few scalars (the loss), reduced once: an all-reduce sends 2 (n - 1)/n
    of its operands; so do a reduce-scatter of the gradients and an all-gather of the updated shards."""
    return 2 * (n - 1) * (pr.param_bytes + SCALARS * 4) // n


def _carried_bytes(program, kind, what) -> int:
    """Bytes of operands the program's collectives of `kind` carry per device, each run counted (the
    program's account, between devices); a count the account cannot know fails with its one message."""
    carried = [
        row.operand_bytes for row in between_devices(account_of(program)) if row.kind == kind
    ]
    if None in carried:
        raise unknown_count(what, f"{kind}s", f"every leaf's whole gradient through its {kind}s")
    return sum(carried)


def _assert_step_shares(program, n, pr: Problem, what):
    """Each device executes at most twice its share of the step's multiply-adds and sends the gradients
    (and the loss) through one reduction: the whole batch computed on every device fails both."""
    assert_work(
        program,
        share=_step_work_share(n, pr),
        share_of="the step's dot work, 3 MB B W / n",
        what=what,
        hint="Is the whole batch computed on every device? Each device takes the gradient of its own "
        "block of every microbatch; the reduction across the devices sums those.",
    )
    assert_traffic(
        program,
        at_most=_gradient_traffic_bound(n, pr),
        bound_of="the gradients reduced once, 2 (n - 1)/n x their bytes, and a few scalars",
        what=what,
        hint="Only the gradients travel, reduced once per leaf: does the batch travel between the "
        "devices, or is a gradient reduced more than once?",
    )


# --- accumulate_grads ------------------------------------------------------------------------------


def _check_grads(grads, mesh, pr: Problem, what="accumulate_grads's result"):
    _, want = _mean_grads(pr.params, pr.xs, pr.ys)
    for i, (leaf, value) in enumerate(
        zip(param_leaves(grads, pr.params, what), jax.tree.leaves(want))
    ):
        assert_sharded_like(leaf, mesh, P(), value, **GRAD_TOL, name=f"{what}: {leaf_name(i)}")


def _check_accumulate(impl, n, pr: Problem):
    """Values (the mean gradient over the microbatches and devices), every leaf replicated."""
    mesh = _mesh(n)
    grads = jax.jit(lambda p, x, y: impl.accumulate_grads(p, x, y, mesh))(*_placed(mesh, pr))
    _check_grads(grads, mesh, pr)


def _check_accumulate_program(impl, n, pr: Problem):
    """The compiled accumulate_grads computes the mean gradient and all-reduces exactly one array per leaf,
    the whole gradient; it all-gathers nothing (the microbatches stay split); each device executes its
    share of the step's work and sends the gradients once."""
    mesh = _mesh(n)
    args = _placed(mesh, pr)
    program = compiled(lambda p, x, y: jax.tree.leaves(impl.accumulate_grads(p, x, y, mesh)), *args)
    expected = jax.tree.leaves(_mean_grads(pr.params, pr.xs, pr.ys)[1])
    what = "accumulate_grads"
    mb, leaves = pr.xs.shape[0], pr.leaves
    assert_executed(
        program,
        "all-reduce",
        at_least=leaves,
        at_most=leaves,
        operands=True,
        what=what,
        expected=expected,
        args=args,
        **GRAD_TOL,
        hint=f"There are {leaves} parameter leaves and {mb} microbatches. More: is the gradient reduced "
        "once per microbatch, inside the loop? Sum locally, reduce once, after the loop (inside shard_map, "
        "jax.grad with respect to replicated params reduces by itself: pcast them to varying first). "
        "Fewer: every leaf's gradient must be reduced across the devices, each as its own array.",
    )
    assert_executed(
        program,
        "all-gather",
        at_most=0,
        what=what,
        hint="Nothing needs gathering: gathering the microbatches makes every device compute every "
        "device's gradient. Keep each device's block and reduce the gradients.",
    )
    reduced = _carried_bytes(program, "all-reduce", what)
    assert reduced >= pr.param_bytes, (
        f"the all-reduces of the compiled {what} carry {reduced} bytes per device in all; the gradients "
        f"alone are {pr.param_bytes}. Every leaf's whole gradient must be reduced across the devices: "
        "a token all-reduce beside gradients computed another way does not count."
    )
    _assert_step_shares(program, n, pr, what)


# --- zero1_init -------------------------------------------------------------------------------------


def _check_state(state, mesh, pr: Problem, want=None, *, what):
    """{"m", "v", "t"}: m and v shaped like params, float32, P("data") with `want`'s values (within
    MOMENT_TOL; zeros exactly when None), t an int32 scalar, replicated."""
    if not isinstance(state, dict) or set(state) != {"m", "v", "t"}:
        keys = sorted(state) if isinstance(state, dict) else type(state).__name__
        raise AssertionError(f'{what} should be a dict with keys "m", "v" and "t"; got {keys}')
    m, v, t = want if want is not None else (None, None, 0)
    for key, values in (("m", m), ("v", v)):
        leaves = param_leaves(state[key], pr.params, f'{what}["{key}"]')
        like = (
            jax.tree.leaves(values)
            if values is not None
            else [0 * a for a in jax.tree.leaves(pr.params)]
        )
        close = MOMENT_TOL[key] if values is not None else dict(rtol=0, atol=0)
        for i, (leaf, value) in enumerate(zip(leaves, like)):
            name = f'{what}["{key}"]: {leaf_name(i)}'
            assert np.asarray(leaf).dtype == np.float32, (
                f"{name} is {np.asarray(leaf).dtype}, expected float32"
            )
            assert_sharded_like(leaf, mesh, P("data"), value, **close, name=name)
    step = state["t"]
    dtype, shape = np.asarray(step).dtype, np.shape(step)
    assert dtype == np.int32 and shape == (), (
        f'{what}["t"] should be an int32 scalar (the step count); got {dtype} of shape {shape}'
    )
    assert_sharded_like(step, mesh, P(), np.int32(t), rtol=0, atol=0, name=f'{what}["t"]')


def _check_init(impl, n, pr: Problem):
    mesh = _mesh(n)
    _check_state(impl.zero1_init(pr.params, mesh), mesh, pr, what="zero1_init's result")


# --- zero1_adam_step -----------------------------------------------------------------------------------


def _check_steps(impl, n, pr: Problem, steps=3):
    """`steps` steps from the test's zero state, each checked by _check_step from the params and state the
    program's previous step returned."""
    mesh = _mesh(n)
    params, xs, ys = _placed(mesh, pr)
    state = _zero_state(mesh, pr.params)
    # compiled once by the test (a loop in shard_map runs op by op without jit)
    step = jax.jit(lambda p, s, x, y: impl.zero1_adam_step(p, s, x, y, LR, mesh))
    for t in range(1, steps + 1):
        going_in = (params, state["m"], state["v"])
        params, state, loss = step(params, state, xs, ys)
        _check_step(pr, mesh, t, going_in, (params, state, loss), of=steps)


def _check_step(pr: Problem, mesh, t: int, going_in, returned, *, of: int):
    """Step t of `of` against one float64 Adam step from `going_in` (params, m, v: what the program's previous
    step returned, or the test's start): `returned`'s params (naming a missing bias correction), its loss,
    then its opt_state's m, v and t, in their layouts. Judged from the program's own state, an earlier
    step's allowed difference (up to 2 lr at an entry whose gradient is near zero) moves no later verdict."""
    params, state, loss = returned
    want = _adam_step(pr, *going_in, t)
    start = (
        "the test's params and zero state"
        if t == 1
        else f"the params and state step {t - 1} returned"
    )
    what = f"step {t} of {of} (checked against one Adam step from {start})"
    leaves = param_leaves(params, pr.params, f"{what}: the params")
    unbiased = _adam_step(pr, *going_in, t, bias_correction=False)
    first = np.asarray(leaves[0])
    rtol = ADAM_TOL["rtol"]
    if (
        compare(first, unbiased.params[0][0], rtol=rtol, atol=unbiased.tolerances[0]) is None
        and compare(first, want.params[0][0], rtol=rtol, atol=want.tolerances[0]) is not None
    ):
        raise AssertionError(
            f"{what}: W of layer 0 matches Adam WITHOUT bias correction: m and v start at zero, so early on "
            "they are too small by (1 - b1 ** t) and (1 - b2 ** t); divide them by these, with t the step "
            "count after the increment (1 at the first step)."
        )
    for i, (leaf, value) in enumerate(zip(leaves, jax.tree.leaves(want.params))):
        assert_sharded_like(
            leaf,
            mesh,
            P(),
            value,
            rtol=ADAM_TOL["rtol"],
            atol=want.tolerances[i],
            name=f"{what}: the params: {leaf_name(i)}",
        )
    assert_sharded_like(
        loss, mesh, P(), want.loss, **ADAM_TOL, name=f"{what}: the loss (a replicated scalar)"
    )
    _check_state(state, mesh, pr, (want.m, want.v, t), what=f"{what}: the opt_state")


def _step_program(impl, mesh, args):
    return compiled(
        lambda p, s, x, y: jax.tree.leaves(impl.zero1_adam_step(p, s, x, y, LR, mesh)), *args
    )


def _one_step_leaves(pr: Problem):
    """The first step's results, flat as the compiled step's: params, opt_state (m, t, v), loss."""
    first = _first_step(pr)
    return [
        *jax.tree.leaves(first.params),
        *jax.tree.leaves({"m": first.m, "v": first.v, "t": np.int32(1)}),
        first.loss,
    ]


def _one_step_tolerances(pr: Problem) -> list:
    """The absolute tolerance of each of _one_step_leaves: the params' by element, the rest ADAM_TOL's."""
    params = _first_step(pr).tolerances
    return [*params, *[ADAM_TOL["atol"]] * (2 * len(params) + 2)]


def _check_step_program(impl, n, pr: Problem):
    """The compiled step computes one Adam step; it reduce-scatters exactly one array per leaf (the whole
    gradients) and all-gathers exactly one per leaf (the updated shards); no all-reduce larger than a few
    scalars; each device executes its share of the step's work and sends nothing more."""
    mesh = _mesh(n)
    params, xs, ys = _placed(mesh, pr)
    args = (params, _zero_state(mesh, pr.params), xs, ys)
    program = _step_program(impl, mesh, args)
    what, leaves, mb = "zero1_adam_step", pr.leaves, pr.xs.shape[0]
    assert_executed(
        program,
        "reduce-scatter",
        at_least=leaves,
        at_most=leaves,
        operands=True,
        what=what,
        per="step",
        expected=_one_step_leaves(pr),
        args=args,
        rtol=ADAM_TOL["rtol"],
        atol=_one_step_tolerances(pr),
        hint=f"There are {leaves} parameter leaves and {mb} microbatches: one psum_scatter per leaf, after "
        "the loop over the microbatches (more: is it inside the loop?; fewer: is a gradient all-reduced "
        "instead, or are leaves joined into one array?).",
    )
    assert_executed(
        program,
        "all-gather",
        at_least=leaves,
        at_most=leaves,
        operands=True,
        what=what,
        per="step",
        hint=f"One all_gather per leaf ({leaves}), of the updated shard of the params, after Adam.",
    )
    if any(row.kind == "all-reduce" for row in account_of(program).traffic):
        assert_operand_bytes(
            program,
            "all-reduce",
            at_most=SCALARS * 4,
            what=what,
            hint="A gradient is all-reduced (psum), so every device receives all of it and then keeps a "
            "slice: reduce each leaf's gradient with jax.lax.psum_scatter, so each device receives only "
            "its own rows. Only scalars (the loss) may be all-reduced.",
        )
    scattered = _carried_bytes(program, "reduce-scatter", what)
    gathered = _carried_bytes(program, "all-gather", what)
    assert scattered >= pr.param_bytes and gathered * n >= pr.param_bytes, (
        f"the reduce-scatters of the compiled {what} take {scattered} bytes per device in all and its "
        f"all-gathers {gathered}; the gradients are {pr.param_bytes} bytes, each device's shard of the params "
        f"{pr.param_bytes // n}. Every leaf's whole gradient must be reduce-scattered and every updated shard "
        "gathered: token collectives beside work done another way do not count."
    )
    _assert_step_shares(program, n, pr, what)


def _check_argument_bytes(impl, n, pr: Problem):
    """With the state from the student's zero1_init, the compiled step computes one Adam step and each
    device's arguments hold the params whole, m and v at 1/n, and a block of the microbatches; that state
    is laid out as zero1_init's must be."""
    mesh = _mesh(n)
    state = impl.zero1_init(pr.params, mesh)
    params, xs, ys = _placed(mesh, pr)
    args = (params, state, xs, ys)
    program = _step_program(impl, mesh, args)
    assert_computes(
        program(*args),
        _one_step_leaves(pr),
        rtol=ADAM_TOL["rtol"],
        atol=_one_step_tolerances(pr),
        what="zero1_adam_step",
    )
    data = (pr.xs.nbytes + pr.ys.nbytes) // n
    # ZeRO-1's arguments plus one more n-th of the params as slack; replicated moments add 2 (n - 1) / n.
    bound = pr.param_bytes + 3 * pr.param_bytes // n + data + 64
    try:
        assert_memory(
            program,
            argument_below=bound,
            what="zero1_adam_step",
            # what a step's arguments hold when m and v are whole on every device
            shown_against={"m and v replicated": pr.param_bytes * 3 + data},
            hint=f"The params ({pr.param_bytes} bytes) are whole on every device, but m and v should take "
            f"1/{n} of that each, and the microbatches 1/{n} ({data} bytes): are the moments replicated?",
        )
    except NotReported as exc:
        pytest.skip(str(exc))
    # after the bytes, so that replicated moments fail on what they cost (the page's memory bars)
    _check_state(
        state, mesh, pr, what="zero1_init's result (the state this test compiles the step on)"
    )


@pytest.fixture
def checks():
    """The rule checks, each check(impl, n, problem)."""
    return dict(
        accumulate=_check_accumulate,
        accumulate_program=_check_accumulate_program,
        init=_check_init,
        steps=_check_steps,
        step_program=_check_step_program,
        argument_bytes=_check_argument_bytes,
    )
