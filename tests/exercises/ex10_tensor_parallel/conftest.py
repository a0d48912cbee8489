"""What ex10's visible and hidden tests share: the tests' own copy of the single-device MLP and SGD step
(a student's module cannot change them), the problem, the references, the checks of forward outputs
and trained params (saying which known mistake a wrong result is), the reading of a compiled
program's all-reduces as groups of devices along the mesh's axes, and each device's share of the work
and of the traffic."""

import math
import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import NamedSharding, PartitionSpec as P

from grader.checks import (
    assert_collectives,
    assert_computes,
    assert_sharded_like,
    assert_traffic,
    assert_work,
    compare,
    inputs,
    inspect_collectives,
    test_mesh,
)
from grader.checks.hlo import mesh_axes_of

# Every mesh's tests use these shapes (one reference compile). The element counts of the arrays that
# get all-reduced differ on every mesh: the activations (N_BATCH/|data| x N_OUT) from the gradients of
# W1, b1, W2 (N_IN x N_HIDDEN/|model|, N_HIDDEN/|model|, N_HIDDEN/|model| x N_OUT), so the tests can
# tell which all-reduce is which. The batch outweighs the weights enough that a step in which every
# device gathers it sends over twice the traffic bound below (3.2 times on 4 x 2; on 48 rows, 1.4 times).
N_IN, N_HIDDEN, N_OUT, N_BATCH = 8, 32, 3, 192
LR = 0.1
# float32 against the float64 forward, and against single-device SGD after one and three steps: the
# partial sums over "model" and the gradient sums over "data" add up in another order than one device.
TOL = dict(rtol=1e-5, atol=1e-6)
# How close a wrong result must be to a known mistake's result for the message to name that mistake.
DIAGNOSIS_TOL = dict(rtol=1e-3, atol=1e-5)
AXES = ("data", "model")
SPECS = {"W1": P(None, "model"), "b1": P("model"), "W2": P("model", None), "b2": P()}
BATCH = P("data", None)


def mesh_of(shape):
    return test_mesh(shape, AXES, "explicit")


# --- the tests' copy of the given functions (exactly as in the exercise module) -------------------


def forward(params, x):
    h = jax.nn.relu(x @ params["W1"] + params["b1"])
    return h @ params["W2"] + params["b2"]


def mse_loss(params, x, y):
    return jnp.mean((forward(params, x) - y) ** 2)


def sgd_step(params, x, y, lr):
    loss, grads = jax.value_and_grad(mse_loss)(params, x, y)
    return jax.tree.map(lambda p, g: p - lr * g, params, grads), loss


_one_device_step = jax.jit(sgd_step)


# --- the problem and the references --------------------------------------------------------------


def _problem(seed=0):
    """(params, x, y) as float32 NumPy arrays: params drawn like init_params's (NumPy here, which costs
    no compilation) and a target y = sin(x @ A) that the MLP can learn."""
    rng = inputs.rng(seed)
    f32 = lambda a: np.asarray(a, np.float32)  # noqa: E731
    params = {
        "W1": f32(rng.standard_normal((N_IN, N_HIDDEN)) / np.sqrt(N_IN)),
        "b1": f32(0.1 * rng.standard_normal(N_HIDDEN)),
        "W2": f32(rng.standard_normal((N_HIDDEN, N_OUT)) / np.sqrt(N_HIDDEN)),
        "b2": f32(0.1 * rng.standard_normal(N_OUT)),
    }
    x = f32(rng.standard_normal((N_BATCH, N_IN)))
    A = rng.standard_normal((N_IN, N_OUT)) / np.sqrt(N_IN)
    return params, x, f32(np.sin(x @ A))


def _reference_forward(params, x):
    """The forward pass in float64 NumPy."""
    p = {k: np.asarray(v, np.float64) for k, v in params.items()}
    h = np.maximum(np.asarray(x, np.float64) @ p["W1"] + p["b1"], 0.0)
    return h @ p["W2"] + p["b2"]


def _reference_steps(params, x, y, steps, lr=LR):
    """[(params, loss)] after each of `steps` single-device SGD steps on the whole batch, as NumPy."""
    device = jax.devices()[0]
    params, x, y = jax.device_put((params, x, y), device)
    out = []
    for _ in range(steps):
        params, loss = _one_device_step(params, x, y, lr)
        out.append(({k: np.asarray(v) for k, v in params.items()}, np.float32(loss)))
    return out


def placed(mesh, params, *batch):
    """params in the tensor-parallel layout, and the batch arrays split P("data", None)."""
    params = {k: jax.device_put(v, NamedSharding(mesh, SPECS[k])) for k, v in params.items()}
    return (params, *(jax.device_put(v, NamedSharding(mesh, BATCH)) for v in batch))


# --- each device's share: the work it executes, the bytes it sends ---------------------------------------

# 4 bytes a float32; what the compiler adds to the collectives' bytes (the loss, a split it chooses) stays
# within a quarter.
F32, TRAFFIC_SLACK = 4, 1.25


def forward_share(mesh):
    """Multiply-adds per device of the forward: B (N_IN H + H N_OUT) / (|data| |model|), its B/|data| rows
    through its H/|model| hidden units, in both matmuls. Every device computing the whole layer executes
    |data| |model| times this; one that gathers only the weights, |model| times."""
    return N_BATCH * (N_IN * N_HIDDEN + N_HIDDEN * N_OUT) // mesh.devices.size


def step_share(mesh):
    """Multiply-adds per device of a step: the forward's, and backward the gradients of W2 and of h (each
    B H N_OUT) and of W1 (B N_IN H), for its rows and its hidden units (none for x):
    B (2 N_IN H + 3 H N_OUT) / (|data| |model|)."""
    return N_BATCH * (2 * N_IN * N_HIDDEN + 3 * N_HIDDEN * N_OUT) // mesh.devices.size


def _partial_sums_all_reduce(mesh):
    """Bytes a device sends in one all-reduce over "model" of its rows' partial sums of h @ W2, a
    (B/|data|, N_OUT) float32 array: 2 (|model| - 1)/|model| of them (the account's all-reduce)."""
    d, m = mesh.shape["data"], mesh.shape["model"]
    return 2 * (m - 1) * (N_BATCH // d) * N_OUT * F32 / m


def forward_traffic(mesh):
    """Bytes each device may send in the forward: one all-reduce over "model" of its partial sums, with a
    quarter to spare. Gathering W1 and W2 instead sends (|model| - 1)/|model| of their bytes, and gathering
    the batch (|data| - 1)/|data| of its."""
    return int(TRAFFIC_SLACK * _partial_sums_all_reduce(mesh))


def step_traffic(mesh):
    """Bytes each device may send in a step: the forward's all-reduce over "model", and one all-reduce over
    "data" of the gradients of the slices it holds (N_IN H/|model| + H/|model| + H N_OUT/|model| + N_OUT
    floats, 2 (|data| - 1)/|data| of their bytes; the loss rides along), with a quarter to spare. A step in
    which every device gathers the batch and the weights sends (|data| - 1)/|data| x the batch's bytes
    besides: 3.2 x this bound on 4 x 2."""
    d, m = mesh.shape["data"], mesh.shape["model"]
    held = (N_IN * N_HIDDEN + N_HIDDEN + N_HIDDEN * N_OUT) // m + N_OUT
    gradients = 2 * (d - 1) * held * F32 / d
    return int(TRAFFIC_SLACK * (_partial_sums_all_reduce(mesh) + gradients))


FORWARD_SHARE_WORDS = (
    "the layer, B (N_IN H + H N_OUT) / n: its B/|data| rows through its H/|model| hidden units"
)
STEP_SHARE_WORDS = (
    "a step, B (2 N_IN H + 3 H N_OUT) / n: its B/|data| rows through its H/|model| hidden units, "
    "forward and backward"
)
FORWARD_TRAFFIC_WORDS = (
    "1.25 x 2 (|model| - 1)/|model| x B/|data| x N_OUT x 4: one all-reduce over 'model' of the partial "
    "sums of its rows, and a quarter to spare"
)
STEP_TRAFFIC_WORDS = (
    "1.25 x (the forward's all-reduce over 'model', and one all-reduce over 'data' of the gradients of "
    "the slices it holds, 2 (|data| - 1)/|data| of their bytes): a quarter to spare"
)
WORK_HINT = (
    "Is every device computing the whole layer? Each device multiplies its own rows of the batch by its own "
    'slices of W1 and W2 only: no gather of the weights over "model", nor of the batch over "data".'
)
TRAFFIC_HINT = (
    'Tensor parallelism moves the partial sums of h @ W2 (one psum over "model") and the gradients (summed '
    'over "data"); the weights and the batch stay where they are.'
)


def _assert_shares(program, args, mesh, share, share_words, bound, bound_words, what):
    """The program keeps to its share of the work and of the traffic (its values checked by the caller, on
    the same program)."""
    assert_work(program, share=share, share_of=share_words, what=what, hint=WORK_HINT, args=args)
    assert_traffic(
        program, at_most=bound, bound_of=bound_words, what=what, hint=TRAFFIC_HINT, args=args
    )


@pytest.fixture
def tp_mesh():
    """tp_mesh((4, 2)) -> an Explicit mesh over the first 8 devices with axes ("data", "model")."""
    return mesh_of


@pytest.fixture
def place():
    """place(mesh, params, *batch) -> params in the tensor-parallel layout, the batch split P("data", None)."""
    return placed


@pytest.fixture
def problem():
    """problem(seed=0) -> (params, x, y) as float32 NumPy arrays; params a dict W1, b1, W2, b2."""
    return _problem


@pytest.fixture
def reference_forward():
    return _reference_forward


@pytest.fixture
def reference_steps():
    """reference_steps(params, x, y, steps, lr=LR) -> [(params, loss)] after each single-device step."""
    return _reference_steps


# --- checking forward outputs and trained params --------------------------------------------------


def _close(a, b, tol):
    return compare(np.asarray(a), np.asarray(b), **tol) is None


def _forward_diagnosis(out, params, x, mesh):
    m = mesh.shape["model"]
    want = _reference_forward(params, x)
    b2 = np.asarray(params["b2"], np.float64)
    cols = slice(0, N_HIDDEN // m)
    h0 = np.maximum(
        np.asarray(x, np.float64) @ np.asarray(params["W1"], np.float64)[:, cols]
        + np.asarray(params["b1"], np.float64)[cols],
        0.0,
    )
    known = [
        (
            want + (m - 1) * b2,
            f"it matches the right output with b2 added {m} times (|model| = {m}): b2 was added before the "
            'psum over "model", so every device of a "model" group contributed it once. Add b2 after the sum.',
        ),
        (
            h0 @ np.asarray(params["W2"], np.float64)[cols] + b2,
            'it matches the partial sum of the first "model" slice alone (its columns of h times its rows of '
            'W2, plus b2): the partial sums were never added up over "model" (a psum over "model").',
        ),
    ]
    # psum over "data" instead of "model": every row block is the sum over the batch blocks of the
    # first "model" slice's partial products (the device of model index 0 shows each row block).
    d = mesh.shape["data"]
    xs = np.asarray(x, np.float64).reshape(d, -1, np.shape(x)[-1])
    w1, b1 = (
        np.asarray(params["W1"], np.float64)[:, cols],
        np.asarray(params["b1"], np.float64)[cols],
    )
    w2 = np.asarray(params["W2"], np.float64)[cols]
    first_slice = sum(np.maximum(xs[i] @ w1 + b1, 0.0) @ w2 for i in range(d))
    known.append(
        (
            np.concatenate([first_slice + b2] * d),
            'it matches partial sums added up over "data" instead of "model": the rows of different '
            "batch blocks were summed together, and the slices of the hidden layer never were. psum the "
            "partial products h @ W2 over \"model\", the axis that splits W1's columns and W2's rows.",
        )
    )
    for candidate, story in known:
        if _close(out, candidate, DIAGNOSIS_TOL):
            return story
    return None


def _check_forward(out, mesh, params, x, what="tp_forward's output"):
    """Values first (naming a known mistake), then the layout: P("data", None), each shard its rows."""
    want = _reference_forward(params, x)
    if isinstance(out, jax.Array) and out.shape == want.shape and not _close(out, want, TOL):
        story = _forward_diagnosis(out, params, x, mesh)
        if story:
            raise AssertionError(
                f"{what} on the {_mesh_text(mesh)} mesh differs from relu(x @ W1 + b1) @ W2 + b2: "
                f"{story}\n{compare(np.asarray(out), want, **TOL, name=what)}"
            )
    assert_sharded_like(out, mesh, BATCH, want, **TOL, name=what)


@pytest.fixture
def check_forward():
    """check_forward(out, mesh, params, x, what=...)"""
    return _check_forward


def _leaves(params, what):
    if not isinstance(params, dict) or sorted(params) != sorted(SPECS):
        got = sorted(params) if isinstance(params, dict) else type(params).__name__
        raise AssertionError(
            f"{what} should be a dict with the keys {sorted(SPECS)} like the params given, "
            f"got {got}"
        )
    want = {"W1": (N_IN, N_HIDDEN), "b1": (N_HIDDEN,), "W2": (N_HIDDEN, N_OUT), "b2": (N_OUT,)}
    shapes = {k: tuple(np.shape(v)) for k, v in params.items()}
    if shapes != want:
        raise AssertionError(f"{what} should have the shapes {want}, got {shapes}")
    return params


def _averaged_over_model(params0, params1, lr, m):
    """The update whose gradients of W1, b1 and W2 were also averaged over the "model" slices."""
    out = dict(params1)
    for name, axis in (("W1", 1), ("b1", 0), ("W2", 0)):
        grad = (np.asarray(params0[name], np.float64) - params1[name]) / lr
        blocks = np.stack(np.split(grad, m, axis=axis))
        out[name] = params0[name] - lr * np.concatenate([blocks.mean(axis=0)] * m, axis=axis)
    return out


def _step_diagnosis(params, params0, x, y, mesh, step, lr):
    d, m = mesh.shape["data"], mesh.shape["model"]
    known = [
        (
            _reference_steps(params0, x, y, step, lr * d)[-1][0],
            f"they match SGD with {d} times the true gradient (|data| = {d}), as if the learning rate were {d} "
            'times larger. That is ex08\'s trap on the "data" axis: inside shard_map, jax.grad with respect to '
            'params invariant over "data" already sums the per-device gradients over "data", and a pmean '
            "of that sum changes nothing. Take jax.grad from outside of a shard_mapped loss, or pcast the "
            'params to varying over "data" before taking local gradients and pmean those.',
        ),
        (
            _reference_steps(params0, x, y, step, lr / d)[-1][0],
            f"they match SGD with 1/{d} of the true gradient (|data| = {d}): the gradients were averaged twice, "
            "or divided by the number of batch blocks once too often.",
        ),
    ]
    if step == 1 and m > 1:
        known.append(
            (
                _averaged_over_model(params0, _reference_steps(params0, x, y, 1, lr)[0][0], lr, m),
                f'they match SGD whose gradients of W1, b1 and W2 were also averaged over "model" '
                f'(|model| = {m}): the devices of a "model" group hold *different* slices of these '
                'weights, so averaging their gradients over "model" mixes the slices. Reduce the '
                'gradients over "data" only.',
            )
        )
    for want, story in known:
        if all(_close(params[k], want[k], DIAGNOSIS_TOL) for k in SPECS):
            return story
    return None


def _check_step(params, loss, mesh, params0, x, y, *, step, expected, lr=LR, what="the new params"):
    """Values first (naming a known gradient mistake), then the layouts: every parameter in the
    tensor-parallel layout with the reference's values, the loss a replicated scalar."""
    want, want_loss = expected
    params = _leaves(params, what)
    bad = [k for k in SPECS if not _close(params[k], want[k], TOL)]
    if bad:
        loss_off = np.shape(loss) == () and not _close(loss, want_loss, TOL)
        story = (
            (
                f"the loss at the old params is already wrong ({float(np.asarray(loss)):.6g}, expected "
                f"{float(want_loss):.6g}), so the forward pass inside the step is: check tp_forward's tests first."
            )
            if loss_off
            else _step_diagnosis(params, params0, x, y, mesh, step, lr)
        )
        raise AssertionError(
            f"{what} after step {step} on the {_mesh_text(mesh)} mesh differ from single-device SGD on the "
            "whole batch: "
            + (
                story
                or "the update matches none of the usual mistakes (|data| times or "
                '1/|data| of the gradient, gradients averaged over "model"); check the gradient '
                "and the update p - lr * g."
            )
            + "\n"
            + compare(np.asarray(params[bad[0]]), want[bad[0]], **TOL, name=f"{bad[0]}")
        )
    for k in SPECS:
        assert_sharded_like(params[k], mesh, SPECS[k], want[k], **TOL, name=f"{what}: {k}")
    assert_sharded_like(
        loss, mesh, P(), want_loss, **TOL, name=f"the loss of step {step} (a replicated scalar)"
    )


@pytest.fixture
def check_step():
    """check_step(params, loss, mesh, params0, x, y, step=, expected=(params, loss), lr=LR, what=...)"""
    return _check_step


# --- the all-reduces of a compiled program, as groups along the mesh's axes --------------------------


def _mesh_text(mesh):
    return " x ".join(f"{size} ({name})" for name, size in mesh.shape.items())


def _groups_text(groups, limit=4):
    shown = " ".join("{" + ",".join(map(str, g)) + "}" for g in groups[:limit])
    return shown + (" ..." if len(groups) > limit else "")


def _axis_groups(mesh, axis):
    """The groups of device positions along one axis of the mesh, as HLO writes them."""
    positions = np.arange(mesh.devices.size).reshape(mesh.devices.shape)
    i = mesh.axis_names.index(axis)
    return [
        tuple(int(d) for d in row)
        for row in np.moveaxis(positions, i, -1).reshape(-1, mesh.shape[axis])
    ]


def _span_text(op, mesh):
    """'groups of 4 devices ({0,2,4,6} {1,3,5,7}), the mesh's "data" axis'"""
    axes = mesh_axes_of(op, mesh)
    size = len(op.groups[0]) if op.groups else mesh.devices.size
    if axes is None:
        where = "which follow no axis of the mesh"
    elif not axes:
        where = "each device alone (no axis of the mesh)"
    elif len(axes) == 1:
        where = f'the mesh\'s "{axes[0]}" axis'
    else:
        where = "both of the mesh's axes, " + " and ".join(f'"{a}"' for a in axes)
    return f"groups of {size} devices ({_groups_text(op.groups or ())}), {where}"


def _expected_text(mesh, axis):
    return (
        f'groups of {mesh.shape[axis]} devices along "{axis}" ({_groups_text(_axis_groups(mesh, axis))}) '
        f"on this {_mesh_text(mesh)} mesh"
    )


def _element_counts(op) -> set[int]:
    """The element count of every array an all-reduce returns (`%a = (f32[6,16]{1,0}, f32[]) all-reduce(...)`)."""
    shapes = op.line.split("=", 1)[1].split(" all-reduce", 1)[0]
    return {
        math.prod(int(d) for d in dims.split(",") if d)
        for dims in re.findall(r"\w\[([\d,]*)\]", shapes)
    }


def _all_reduces(program):
    return [op for op in inspect_collectives(program) if op.kind == "all-reduce"]


_PARTIAL_SUMS = (
    'the partial sums of h @ W2 live along "model": each device of a "model" group holds its '
    'own slice of the hidden layer, and the devices along "data" hold other rows of the batch, '
    "which must never be added together"
)


def _values_note(program, args, expected):
    try:
        assert_computes(program(*args), expected, **TOL)
    except AssertionError:
        return "\n(Its values are wrong too.)"
    return ""


def _assert_forward_program(program, args, expected, mesh, what="tp_forward"):
    """The forward's all-reduces run over "model" only, exactly one of them, the very program measured
    computes the forward, and each device keeps to its share of the work and of the traffic."""
    for op in _all_reduces(program):
        if mesh_axes_of(op, mesh) != ("model",):
            raise AssertionError(
                f"your forward's all-reduce runs over {_span_text(op, mesh)}; {_PARTIAL_SUMS}. Expected "
                f"{_expected_text(mesh, 'model')}.\n  {op.line[:300]}"
                + _values_note(program, args, expected)
            )
    gathers = [op for op in inspect_collectives(program, what=what) if op.kind == "all-gather"]
    over_model = [op for op in gathers if mesh_axes_of(op, mesh) == ("model",)]
    if over_model:
        raise AssertionError(
            f"the compiled program of {what} all-gathers over {_span_text(over_model[0], mesh)} "
            f"({len(gathers)} all-gather(s) in all): gathering the slices of W1 and W2 makes every device of a "
            '"model" group compute the whole hidden layer, which is data parallelism, not tensor parallelism. '
            'Keep each slice where it is and add up the partial sums of h @ W2 with one psum over "model".'
            f"\n  {over_model[0].line[:300]}" + _values_note(program, args, expected)
        )
    if gathers:
        raise AssertionError(
            f"the compiled program of {what} all-gathers over {_span_text(gathers[0], mesh)} "
            f"({len(gathers)} all-gather(s) in all): every device then holds rows of the batch (or slices) "
            "that other devices hold, and computes them again. Keep each device's rows of x and its slices of "
            'the weights where they are, and add up the partial sums of h @ W2 with one psum over "model".'
            f"\n  {gathers[0].line[:300]}" + _values_note(program, args, expected)
        )
    assert_collectives(
        program, *args, exactly={"all-reduce": 1}, expected=expected, **TOL, what=what
    )
    _assert_shares(
        program,
        args,
        mesh,
        forward_share(mesh),
        FORWARD_SHARE_WORDS,
        forward_traffic(mesh),
        FORWARD_TRAFFIC_WORDS,
        what,
    )


def _assert_step_program(program, args, expected, mesh, what="tp_train_step"):
    """Read from the compiled step: the all-reduce of the activations (N_BATCH/|data| x N_OUT elements)
    runs over "model"; every all-reduce of the gradients of W1, b1 or W2 (their per-device block sizes)
    runs over "data"; both exist; the very program measured computes the step; and each device keeps to
    its share of the work and of the traffic."""
    d, m = mesh.shape["data"], mesh.shape["model"]
    activation = (N_BATCH // d) * N_OUT
    gradients = {N_IN * N_HIDDEN // m, N_HIDDEN // m, N_HIDDEN // m * N_OUT}
    ops = _all_reduces(program)
    problems, wrong_activations, wrong_gradients = [], False, False
    for op in ops:
        axes, counts = mesh_axes_of(op, mesh), _element_counts(op)
        if activation in counts and axes != ("model",):
            wrong_activations = True
            problems.append(
                f"the all-reduce of the activations (the partial sums of h @ W2) runs over "
                f"{_span_text(op, mesh)}; {_PARTIAL_SUMS}. Expected {_expected_text(mesh, 'model')}."
                f"\n  {op.line[:300]}"
            )
        elif counts & gradients and axes != ("data",):
            wrong_gradients = True
            problems.append(
                f"an all-reduce of the gradients runs over {_span_text(op, mesh)}; the gradients "
                'of W1, b1 and W2 are summed over the batch blocks, along "data", never over '
                '"model", whose devices hold different slices of the weights. Expected '
                f"{_expected_text(mesh, 'data')}.\n  {op.line[:300]}"
            )
    if not wrong_activations and not any(
        activation in _element_counts(op) and mesh_axes_of(op, mesh) == ("model",) for op in ops
    ):
        problems.append(
            f'no all-reduce over "model" adds up the activations\' partial sums (an array of '
            f"{N_BATCH // d} x {N_OUT}, each device's rows of h @ W2): with W1 split by columns and "
            'W2 by rows, the forward needs exactly that one psum over "model". (Gathering the '
            "weights instead makes every device compute the whole hidden layer: that is data "
            "parallelism, not tensor parallelism.)"
        )
    if not wrong_gradients and not any(
        _element_counts(op) & gradients and mesh_axes_of(op, mesh) == ("data",) for op in ops
    ):
        problems.append(
            'no all-reduce over "data" sums the gradients of W1, b1 and W2 (blocks of the sizes '
            'each device holds): each batch block\'s gradient must be added up over "data" for '
            "every device to take the whole batch's step."
        )
    if problems:
        found = "; ".join(_span_text(op, mesh) for op in ops) or "none"
        raise AssertionError(
            "in the compiled program of "
            + what
            + ", "
            + "\n".join(problems)
            + f"\nAll-reduces found: {found}."
            + _values_note(program, args, expected)
        )
    assert_computes(program(*args), expected, **TOL, what=what)
    _assert_shares(
        program,
        args,
        mesh,
        step_share(mesh),
        STEP_SHARE_WORDS,
        step_traffic(mesh),
        STEP_TRAFFIC_WORDS,
        what,
    )


@pytest.fixture
def assert_forward_program():
    """assert_forward_program(program, args, expected, mesh)"""
    return _assert_forward_program


@pytest.fixture
def assert_step_program():
    """assert_step_program(program, args, expected, mesh)"""
    return _assert_step_program
