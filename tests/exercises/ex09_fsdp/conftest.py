"""What ex09's visible and hidden tests share: the tests' own copy of the single-device MLP and SGD step
(a student's module cannot change them), the training problem, the reference run on one device, the
test's own FSDP placement, the check of trained parameters (values first, saying which gradient
mistake a wrong update made, then the layouts), and the rules a compiled step is graded by (its
collectives, the multiply-adds each device executes and the bytes it sends, its per-device argument
bytes), so that `shardlab check` applies the very checks grading does."""

import math
import re

import jax
import pytest
from jax.sharding import NamedSharding, PartitionSpec as P

from grader.checks import (
    NotReported,
    assert_collectives,
    assert_computes,
    assert_sharded_like,
    assert_traffic,
    assert_work,
    compiled,
    inspect_collectives,
    memory_per_device,
)
from grader.checks.training import (
    assert_losses,
    assert_trains_like_sgd,
    leaf_name,
    make_problem,
    param_leaves,
    parameter_bytes,
    sgd_reference,
    sgd_step,
    sgd_step_work,
)

# Every n_in divides by 8 (W is split along it over up to 8 devices). The smallest W (64 x 8) has 512
# elements, the biases 136 in all: an all-reduce of the biases' gradients and the loss stays far below
# any full weight's gradient.
SIZES = (16, 64, 64, 8)
N_BATCH = (
    32  # every mesh size's tests use this batch (8 devices: 4 rows each): one reference compile
)
# The compiled step's batch (8 devices: 256 rows each). FSDP sends what the weights weigh, whatever the
# batch; a step that gathers the batch sends what the batch weighs: on these rows 3.8 times the traffic
# bound below (on N_BATCH rows it would send less than an honest step).
PROGRAM_BATCH = 2048
LR = 0.05
# Parameters after one or five steps of FSDP SGD against the single-device step (float32): the per-device
# means and their reduction add up the batch in another order than one device does.
TOL = dict(rtol=1e-5, atol=1e-6)
# How close a wrong update must be to a known mistake's update for the message to name that mistake.
DIAGNOSIS_TOL = dict(rtol=1e-3, atol=1e-5)


# --- the problem, the reference and the layouts ------------------------------------------------------


def _problem(n_batch=N_BATCH, *, sizes=SIZES, seed=0):
    return make_problem(n_batch, sizes, seed)


def _reference(params, x, y, lr=LR, steps=1):
    return sgd_reference(params, x, y, lr, steps)


def _fsdp_placed(mesh, params, x, y):
    """The test's own FSDP placement: W P("data", None), b P(), x and y P("data", None)."""
    rows, whole = NamedSharding(mesh, P("data", None)), NamedSharding(mesh, P())
    params = [(jax.device_put(W, rows), jax.device_put(b, whole)) for W, b in params]
    return params, jax.device_put(x, rows), jax.device_put(y, rows)


@pytest.fixture
def problem():
    """problem(n_batch=N_BATCH, sizes=SIZES, seed=0) -> (params, x, y) as float32 NumPy arrays."""
    return _problem


@pytest.fixture
def reference():
    """reference(params, x, y, lr=LR, steps=1) -> (params, losses): sgd_step on one device, in NumPy."""
    return _reference


@pytest.fixture
def single_device_step():
    """The tests' copy of the given sgd_step(params, x, y, lr) -> (params, loss), to build baselines with."""
    return sgd_step


@pytest.fixture
def fsdp_placed():
    """fsdp_placed(mesh, params, x, y) -> (params, x, y) placed as fsdp_train_step expects them."""
    return _fsdp_placed


# --- checking placed and trained parameters ------------------------------------------------------


def _spec(i):
    return P("data", None) if i % 2 == 0 else P()


def _check_fsdp_layout(params, mesh, like, *, what, rtol=0, atol=0):
    """Every W sharded P("data", None) and every b replicated on `mesh`, with the values of `like`."""
    leaves = param_leaves(params, like, what)
    for i, (leaf, value) in enumerate(zip(leaves, jax.tree.leaves(like))):
        assert_sharded_like(
            leaf, mesh, _spec(i), value, rtol=rtol, atol=atol, name=f"{what}: {leaf_name(i)}"
        )


def _mistakes(n, rows):
    """What each known mistake means here (see grader.checks.training.assert_trains_like_sgd)."""
    return {
        "n times": (
            f"they match SGD with {n} times the true gradient (n = {n} devices), as if the learning rate were "
            f"{n} times larger: the gradients were summed over the devices, not averaged. The gradient of a "
            "gathered weight comes back already summed (the transpose of all_gather is psum_scatter), and "
            "inside shard_map jax.grad with respect to a replicated (invariant) bias sums over the devices "
            "too; a pmean of such a sum changes nothing. Each device's loss is the mean over its block, so "
            "the whole batch's gradient is the mean of the per-device gradients."
        ),
        "1/n": (
            f"they match SGD with 1/{n} of the true gradient (n = {n} devices): the gradients were averaged "
            "twice (e.g. the loss was pmean'd and the gradients divided by n again), or divided by the device "
            "count once too often."
        ),
        "one block": (
            f"they match SGD on device 0's block of the batch alone (its first {rows} rows): the gradients "
            'were never reduced over the devices. Sum (then average) the gradients over "data" before '
            "the update."
        ),
    }


def _check_trained(params, losses, mesh, params0, x, y, *, lr=LR, steps=1, what="the new params"):
    """Values first (saying which mistake a wrong update made), then the layouts: every W sharded
    P("data", None) and every b replicated on `mesh`, with the reference's values in every shard; the
    loss a replicated scalar (one step), or the `steps` losses (several)."""
    n = mesh.devices.size
    _, want, want_losses = assert_trains_like_sgd(
        params,
        params0,
        x,
        y,
        lr=lr,
        steps=steps,
        n=n,
        what=what,
        tol=TOL,
        diagnosis_tol=DIAGNOSIS_TOL,
        stories=_mistakes(n, x.shape[0] // n),
        hint="Check which rows of each gradient each device keeps and the update p - lr * g.",
    )
    _check_fsdp_layout(params, mesh, want, what=what, **TOL)
    if steps == 1:
        assert_sharded_like(
            losses, mesh, P(), want_losses[0], **TOL, name="the loss (a replicated scalar)"
        )
    else:
        assert_losses(losses, want_losses, steps=steps, tol=TOL)


@pytest.fixture
def check_layout():
    """check_layout(params, mesh, like, what=...): W P("data", None), b P(), with like's values (exactly)."""
    return _check_fsdp_layout


@pytest.fixture
def check_trained():
    """check_trained(params, loss_or_losses, mesh, params0, x, y, lr=LR, steps=1, what=...)"""
    return _check_trained


# --- the compiled step ---------------------------------------------------------------------------


def _expected_leaves(params, x, y, lr=LR):
    """One single-device step's new params and loss, flat (as the tests' compiled steps return them)."""
    want, losses = _reference(params, x, y, lr=lr)
    return [*jax.tree.leaves(want), losses[0]]


def _step_program(impl, mesh, args):
    """The student's step compiled by the test (inside its own jax.jit), its results as a flat list."""
    return compiled(lambda p, x, y: jax.tree.leaves(impl.fsdp_train_step(p, x, y, LR, mesh)), *args)


def _elements(line: str, kind: str = "all-reduce") -> int:
    """Elements of a collective's result (summed over a tuple): `%ar = (f32[64]{0}, f32[]) all-reduce(...)`."""
    shapes = line.split("=", 1)[1].split(kind, 1)[0]
    return sum(
        math.prod(int(d) for d in dims.split(",") if d)
        for dims in re.findall(r"\w+\[([\d,]*)\]", shapes)
    )


# --- each device's share: the work it executes, the bytes it sends ---------------------------------------


def step_share(n_batch, n):
    """Multiply-adds per device of an FSDP step: the single-device step's matmuls on the whole batch
    (grader.checks.training.sgd_step_work) over the n devices, each of which takes n_batch / n rows through
    the whole (gathered) weights. Every device taking the whole batch's step executes n times this."""
    return sgd_step_work(n_batch, SIZES) // n


STEP_SHARE_WORDS = (
    "the matmuls of one SGD step on the whole batch, B (3 S - n_0 n_1) / n with S the sum over the "
    "layers of n_in n_out"
)
WORK_HINT = (
    "Is every device training on the whole batch? Each device computes the gradients of its own block of "
    "rows only, through the gathered weights."
)


def step_traffic(n):
    """Bytes each device may send in a step: each W's all-gather and its gradient's reduce-scatter, (n - 1)/n
    of W's bytes each (the account's), and the biases' gradients' all-reduce, 2 (n - 1)/n of theirs: in all
    2 (n - 1)/n x the bytes of all the parameters, what ex08's all-reduce of the gradients sends, with a
    quarter to spare for the loss and whatever small else. A step that gathers the batch sends (n - 1)/n
    x the batch's bytes besides the weights' (3.8 x this bound on PROGRAM_BATCH rows); one that all-reduces
    each weight's gradient sends 1.5 x its scatter's."""
    return int(1.25 * 2 * (n - 1) * parameter_bytes(SIZES) / n)


STEP_TRAFFIC_WORDS = (
    "1.25 x 2 (n - 1)/n x the bytes of all the parameters: each weight's all-gather and its gradient's "
    "reduce-scatter, (n - 1)/n of its bytes each, the biases' gradients' all-reduce, and a quarter to spare"
)
TRAFFIC_HINT = (
    "FSDP moves the weights (one all-gather each) and their gradients (one reduce-scatter each), never the "
    "batch: each device keeps its own block of rows."
)


def _assert_shares(program, n_batch, n, args):
    """The step's program keeps to its share of the work and of the traffic (its values checked by the caller,
    on the same program)."""
    assert_work(
        program,
        share=step_share(n_batch, n),
        share_of=STEP_SHARE_WORDS,
        what="fsdp_train_step",
        hint=WORK_HINT,
        args=args,
    )
    assert_traffic(
        program,
        at_most=step_traffic(n),
        bound_of=STEP_TRAFFIC_WORDS,
        what="fsdp_train_step",
        hint=TRAFFIC_HINT,
        args=args,
    )


def _check_program(impl, mesh, params, x, y):
    """Weights all-gathered, their gradients reduce-scattered: no device ever receives a weight's whole
    gradient. The biases' gradients and the loss may be all-reduced: they are far smaller than any W.
    Then each device's share of the work and of the traffic. The values of the compiled step first: a
    program that computes nothing has no collectives."""
    n_devices = mesh.devices.size
    args = _fsdp_placed(mesh, params, x, y)
    program = _step_program(impl, mesh, args)
    expected = _expected_leaves(params, x, y)
    assert_computes(program(*args), expected, **TOL, what="fsdp_train_step")
    ops = inspect_collectives(program, what="fsdp_train_step")
    all_reduces = [op.line for op in ops if op.kind == "all-reduce"]
    moved = sum(_elements(line) for line in all_reduces)
    smallest = min(W.size for W, _ in params)
    small_stuff = sum(b.size for _, b in params) + 1
    if moved >= smallest:
        biggest = max(all_reduces, key=_elements)
        raise AssertionError(
            f"the compiled program of fsdp_train_step all-reduces {moved} elements per step in all; the biases' "
            f"gradients and the loss are only {small_stuff}, and the smallest weight's full gradient alone has "
            f"{smallest}: a full weight gradient is all-reduced, so every device receives all of it (and, if it "
            "then keeps only its own rows, throws the rest away). FSDP reduces each weight's gradient with a "
            "reduce-scatter (jax.lax.psum_scatter): each device receives only its own slice of the sum, "
            f"1/{n_devices} of it, and no device ever holds a whole reduced gradient.\n  {biggest[:300]}"
        )
    assert_collectives(
        program,
        *args,
        present=("all-gather", "reduce-scatter"),
        expected=expected,
        **TOL,
        what="fsdp_train_step (the weights gathered where they are used, their gradients "
        "reduce-scattered)",
    )
    # Every weight's gradient goes through a reduce-scatter: each device receives its 1/n of each (a token
    # reduce-scatter beside gradients reduced another way does not count).
    scatters = [op.line for op in ops if op.kind == "reduce-scatter"]
    scattered = sum(_elements(line, "reduce-scatter") for line in scatters)
    slices = sum(W.size for W, _ in params) // n_devices
    if scattered < slices:
        raise AssertionError(
            f"the reduce-scatters of the compiled fsdp_train_step give each device {scattered} elements in "
            f"all; its slices of the weights' gradients alone have {slices} (1/{n_devices} of every W's "
            "gradient): only a part of the gradients is reduce-scattered, the rest reduced another way. "
            "Reduce every weight's gradient with jax.lax.psum_scatter, not only a part of them."
        )
    _assert_shares(program, x.shape[0], n_devices, args)


_BASELINES: dict = {}  # the replicated data-parallel step compiled per device count and shapes


def _replicated_baseline(mesh, params, xs, ys):
    """ex08's data-parallel step, written here: every parameter replicated, the batch split. Its
    per-device memory is what FSDP divides."""
    replicated = jax.device_put(params, NamedSharding(mesh, P()))
    key = (mesh.devices.size, tuple(W.shape for W, _ in params), xs.shape, ys.shape)
    if key not in _BASELINES:
        _BASELINES[key] = compiled(
            lambda p, x, y: jax.tree.leaves(sgd_step(p, x, y, LR)), replicated, xs, ys
        )
    return _BASELINES[key]


def _check_argument_bytes(impl, mesh, params, x, y):
    """XLA's own figure for the bytes of each device's arguments of the compiled step, with the params placed
    by the student's shard_params (their layouts checked first, then the step's values): 1/n of the weights,
    against all of them in a replicated data-parallel step. Both hold the biases whole and one block of the
    batch, which is the slack allowed."""
    n_devices = mesh.devices.size
    placed = impl.shard_params(params, mesh)
    _check_fsdp_layout(
        placed,
        mesh,
        params,
        what="shard_params's result (the params this test compiles the step on)",
    )
    _, xs, ys = _fsdp_placed(mesh, [], x, y)
    args = (placed, xs, ys)
    program = _step_program(impl, mesh, args)
    assert_computes(program(*args), _expected_leaves(params, x, y), **TOL, what="fsdp_train_step")
    baseline = _replicated_baseline(mesh, params, xs, ys)
    try:
        fsdp, replicated = memory_per_device(program), memory_per_device(baseline)
    except NotReported as exc:
        pytest.skip(str(exc))
    biases = sum(b.nbytes for _, b in params)
    block = (x.nbytes + y.nbytes) // n_devices
    bound = replicated.argument_bytes / n_devices + biases + block
    assert fsdp.argument_bytes <= bound, (
        f"each device's arguments of the compiled fsdp_train_step take {fsdp.argument_bytes} bytes; a replicated "
        f"data-parallel step's take {replicated.argument_bytes}, and FSDP on {n_devices} devices should need at "
        f"most 1/{n_devices} of that plus the biases ({biases} bytes) and one block of the batch ({block} bytes), "
        f"which both hold: {bound:.0f}. Does every device still receive whole weights?"
    )


@pytest.fixture
def check_program():
    """check_program(impl, mesh, params, x, y): the compiled fsdp_train_step, on inputs placed as it expects,
    computes single-device SGD's step, all-gathers, reduce-scatters every weight's gradient, all-reduces
    nothing as large as a weight's full gradient, and keeps to its share of the work (step_share) and of the
    traffic (step_traffic)."""
    return _check_program


@pytest.fixture
def check_argument_bytes():
    """check_argument_bytes(impl, mesh, params, x, y): with params placed by impl.shard_params, the compiled
    fsdp_train_step computes single-device SGD's step, and each device's arguments take at most 1/n of a
    replicated data-parallel step's, plus the biases and one block of the batch."""
    return _check_argument_bytes


@pytest.fixture
def step_program():
    """step_program(impl, mesh, args): the student's step compiled inside the test's own jax.jit."""
    return _step_program


@pytest.fixture
def replicated_baseline():
    """replicated_baseline(mesh, params, xs, ys): the compiled replicated data-parallel step, for its memory."""
    return _replicated_baseline


@pytest.fixture
def expected_leaves():
    """expected_leaves(params, x, y): one single-device step's new params and loss, as a flat list."""
    return _expected_leaves
