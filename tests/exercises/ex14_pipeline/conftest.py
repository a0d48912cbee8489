"""What ex14's visible and hidden tests share: the weights and microbatches, placed on the mesh, the float64
NumPy references (the forward pass, and the training step's loss and gradient written out by hand), and the
rules the compiled programs are graded by (the sends of a pipeline, its weights staying put, its memory, the
training step's pairs and gradient all-reduce, and each program's share of the work and of the traffic), so
that `shardlab check` applies the very checks grading does.

Why sizes matter here: the forward pipeline's tests pick F > 2 (M + S) B, so that the bytes a pipeline may
move (M + S - 1 sends of one (B, F) microbatch, and one hand-out of at most its M + S - 1 steps' (B, F)
results) cannot carry even one other stage's (F, F) weights; a function whose sends and values are right,
and whose collectives move no more than that, has computed each layer where its weights live. The programs'
tests also pick R M >= 2 (S - 1) microbatches (3 (S - 1) for the training step): a pipeline computes through
its S - 1 bubble steps, (R M + S - 1) / (R M) of its share of the work, and a training step that recomputes
its forward pass (a remat) 4/3 of that again; both stay within twice the share, which a device that runs
every stage's layers exceeds S / 2 times over."""

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
    assert_computes,
    assert_executed,
    assert_operand_bytes,
    assert_permute_pairs,
    assert_sharding,
    assert_traffic,
    assert_work,
    between_devices,
    compiled,
    executed_collectives,
    inputs,
    memory_per_device,
)
from grader.checks.account import unknown_count
from grader.checks.hlo import mesh_axes_of
from grader.core.results import PipelineSchedule

# float32 tanh layers applied in a different order of sums; activations are of order 1.
FORWARD_TOL = dict(rtol=1e-5, atol=1e-5)
TRAIN_TOL = dict(rtol=1e-4, atol=1e-5)
LR = 0.5  # large enough that a wrong gradient moves ws visibly
F32 = 4  # bytes
# What the training step may send besides its activations and its gradient's all-reduce: the loss's sums
# (a float's all-reduce is a few bytes; a psum of the error at every step, 27 of them on 8 devices, 189).
LOSS_BYTES = 256


def _weights(shape, seed):
    """float32 weights of `shape` (..., F, F), scaled by 1/sqrt(F) so that activations stay of order 1."""
    F = shape[-1]
    return inputs.rng(seed).standard_normal(shape, dtype=np.float32) / np.float32(np.sqrt(F))


def _microbatches(M, B, F, seed):
    return inputs.rng(seed).standard_normal((M, B, F), dtype=np.float32)


def _reference_forward(ws, xs):
    """ws (L, F, F) applied in order to every microbatch, in float64."""
    h = np.asarray(xs, np.float64)
    for w in np.asarray(ws, np.float64):
        h = np.tanh(h @ w)
    return h


def _reference_train_step(ws, xs, ys, lr):
    """(ws - lr * grad, loss) of loss = mean((forward - ys) ** 2), in float64, the backward pass by hand."""
    ws = np.asarray(ws, np.float64)
    hs = [np.asarray(xs, np.float64).reshape(-1, ws.shape[-1])]
    for w in ws:
        hs.append(np.tanh(hs[-1] @ w))
    err = hs[-1] - np.asarray(ys, np.float64).reshape(hs[-1].shape)
    loss = np.mean(err**2)
    grad = np.zeros_like(ws)
    dh = 2 * err / err.size
    for i in reversed(range(len(ws))):
        dz = dh * (1 - hs[i + 1] ** 2)
        grad[i] = hs[i].T @ dz
        dh = dz @ ws[i].T
    return ws - lr * grad, loss


def _placed(mesh, *pairs):
    """Each (value, spec) put on the mesh."""
    return tuple(jax.device_put(v, NamedSharding(mesh, spec)) for v, spec in pairs)


@pytest.fixture
def weights():
    """weights(shape, seed) -> float32 NumPy weights scaled by 1/sqrt(F)."""
    return _weights


@pytest.fixture
def microbatches():
    """microbatches(M, B, F, seed) -> (M, B, F) float32 NumPy microbatches."""
    return _microbatches


@pytest.fixture
def reference_forward():
    return _reference_forward


@pytest.fixture
def reference_train_step():
    return _reference_train_step


# --- values and shardings --------------------------------------------------------------------------


def _check_forward(impl, name, mesh, ws, xs):
    """impl.<name> (pipeline_forward or circular_forward) under jax.jit: P() outputs, the reference's values."""
    ws_spec = P("stage") if ws.ndim == 3 else P(None, "stage")
    args = _placed(mesh, (ws, ws_spec), (xs, P()))
    out = jax.jit(lambda w, x: getattr(impl, name)(w, x, mesh))(*args)
    assert_sharding(out, mesh, P(), name=f"the output of {name}")
    layers = ws.reshape(-1, *ws.shape[-2:])
    # Without the pair (S - 1, 0) the first stage receives zeros, and tanh keeps a pass begun from 0 at 0.
    unwrapped = Variant(
        lambda: np.zeros(np.shape(xs)),
        "are all zeros, as a ring without its wrap gives: when nothing is sent from the last stage "
        "back to the first (the pair (S - 1, 0)), the passes after the first start from the zeros the "
        "first stage receives, and tanh(0 @ w) stays 0. Send with the pairs (s, (s + 1) % S).",
    )
    assert_close_or_named(
        out,
        _reference_forward(layers, xs),
        [unwrapped] if name == "circular_forward" else [],
        **FORWARD_TOL,
        name=f"the output of {name}",
    )


def _train_args(mesh, ws, xs, ys):
    return _placed(mesh, (ws, P("stage")), (xs, P(None, "data")), (ys, P(None, "data")))


def _check_train_step(impl, mesh, ws, xs, ys):
    """pipeline_train_step under jax.jit: ws P("stage"), the loss a replicated scalar, both the reference's."""
    args = _train_args(mesh, ws, xs, ys)
    result = jax.jit(lambda w, x, y: impl.pipeline_train_step(w, x, y, LR, mesh))(*args)
    assert isinstance(result, (tuple, list)) and len(result) == 2, (
        f"pipeline_train_step should return (ws, loss), got {type(result).__name__}"
    )
    new_ws, loss = result
    want_ws, want_loss = _reference_train_step(ws, xs, ys, LR)
    assert np.shape(loss) == (), f"the loss should be a scalar, got shape {np.shape(loss)}"
    assert_sharding(new_ws, mesh, P("stage"), name="the new ws")
    assert_sharding(loss, mesh, P(), name="the loss")
    assert_close(loss, want_loss, **TRAIN_TOL, name="the loss (at the old ws)")
    old_ws = np.asarray(ws, np.float64)
    grad = (old_ws - want_ws) / LR
    summed = Variant(
        lambda: old_ws - LR * grad.sum(axis=0, keepdims=True),
        "matches every stage updated with the sum of all the stages' gradients: the gradients were "
        'summed over "stage" as well as "data". Each stage holds a different layer, so its gradient '
        'is its own: sum it over "data" only.',
    )
    assert_close_or_named(
        new_ws, want_ws, [summed], **TRAIN_TOL, name="the new ws (ws - lr * grad)"
    )


@pytest.fixture
def check_forward():
    """check_forward(impl, name, mesh, ws, xs): impl.<name>'s outputs (P(), values); ws (S, F, F) for
    pipeline_forward, (R, S, F, F) for circular_forward, as NumPy arrays (placed here)."""
    return _check_forward


@pytest.fixture
def check_train_step():
    """check_train_step(impl, mesh, ws, xs, ys): pipeline_train_step's new ws and loss (shardings, values)."""
    return _check_train_step


# --- the compiled programs -------------------------------------------------------------------------


def _weights_stay_put(program, name, steps, B, F):
    """Besides its sends, the program may hand the outputs to every device once: one all-reduce or
    all-gather of at most every step's (B, F) results (the outputs, or the whole history of the last stage,
    bubbles included). Any other collective moves weights (or more than the answer needs): an all-gather of
    ws, a psum of everything, a second exchange. Read from the program's account: each kind of collective
    between devices, its runs and its operands' bytes, as executed."""
    outputs = steps * B * F * F32
    rule = f"besides the collective-permutes, at most one all-reduce or all-gather of at most {outputs} bytes"
    others = [
        row
        for row in between_devices(account_of(program, what=name))
        if row.kind != "collective-permute"
    ]
    if any(row.runs is None or row.operand_bytes is None for row in others):
        raise unknown_count(name, "collectives", rule)
    wrong = [
        row
        for row in others
        if row.kind not in ("all-reduce", "all-gather") or row.operand_bytes > outputs
    ]
    if wrong or sum(row.runs for row in others) > 1:
        found = "; ".join(
            f"{row.kind} over {' and '.join(map(repr, row.axes or ())) or 'its groups'}: "
            f"{row.operand_bytes} bytes of operands in {row.runs} run(s)"
            for row in others
        )
        raise AssertionError(
            f"the compiled program of {name} runs, besides its collective-permutes: {found}. Only one "
            f"all-reduce or all-gather of at most {outputs} bytes ({steps} steps' ({B}, {F}) results) is "
            "allowed, to hand the outputs to every device at the end. Are the weights gathered (each stage "
            f"holds one layer of {F * F * F32} bytes), or the outputs summed at every step?"
        )


def _forward_share(S, R, M, B, F):
    """One device's share of a forward pipeline's dot work: the model's R S layers, each (B, F) @ (F, F) on
    M microbatches, R S M B F F multiply-adds over the S devices. A pipeline that computes through its
    S - 1 bubble steps executes (R M + S - 1) B F F, within twice the share on the tests' sizes."""
    return R * M * B * F * F


def _forward_traffic(S, R, M, B, F):
    """What one device may send in a forward pipeline: one microbatch's (B, F) activations after each of the
    R M + S - 1 steps, and the hand-out of the outputs, at most an all-gather of the last stage's R M + S - 1
    steps' results ((S - 1) copies of them): S (R M + S - 1) B F floats. A device that gathers the other
    stages' weights sends (S - 1) R F F floats, on the tests' sizes at least twice that."""
    return S * (R * M + S - 1) * B * F * F32


def _check_sends(impl, mesh, ws, xs):
    """The compiled pipeline_forward (ws (S, F, F)) or circular_forward (ws (R, S, F, F)): its sends run
    the schedule's number of times, between the pairs the contract gives, each one microbatch; no other
    collective moves weights; each device executes at most twice its share of the work and sends no more
    than its sends and one hand-out of the outputs; and it computes the reference's values."""
    circular = ws.ndim == 4
    name = "circular_forward" if circular else "pipeline_forward"
    S = mesh.shape["stage"]
    R = ws.shape[0] if circular else 1
    M, B, F = xs.shape
    args = _placed(mesh, (ws, P(None, "stage") if circular else P("stage")), (xs, P()))
    program = compiled(lambda w, x: getattr(impl, name)(w, x, mesh), *args)
    expected = _reference_forward(ws.reshape(-1, F, F), xs)
    steps = R * M + S - 1
    passes = f"{M} microbatches through {S} stages" + (f", {R} times round," if circular else "")
    assert_executed(
        program,
        "collective-permute",
        at_least=steps - 1,
        at_most=steps,
        what=name,
        hint=f"{passes} take {steps} steps, and the activations move once between two steps: "
        f"{steps - 1} sends, or {steps} with one more after the last step, which nothing reads. Is the "
        "whole batch going through as one microbatch, or a step sending more than once?",
        schedule=PipelineSchedule(stages=S, microbatches=M, repeats=R),
        expected=expected,
        args=args,
        **FORWARD_TOL,
    )
    assert_permute_pairs(
        program,
        mesh,
        "stage",
        shape="cycle" if circular else "chain",
        what=name,
        hint=(
            "Stage S-1 hands each microbatch back to stage 0 for its next pass (pair S-1 -> 0)."
            if circular
            else "Stage s hands its activations to stage s + 1 only: nothing comes back from the last."
        ),
    )
    assert_operand_bytes(
        program,
        "collective-permute",
        at_most=B * F * F32,
        what=name,
        hint=f"A send carries one microbatch's (B, F) = ({B}, {F}) activations. Is the whole batch going "
        "through as one microbatch, or are weights travelling between the stages?",
    )
    _weights_stay_put(program, name, steps, B, F)
    layers = f"{R} x {S}" if circular else f"{S}"
    formula = "R S M B F F" if circular else "S M B F F"
    assert_work(
        program,
        share=_forward_share(S, R, M, B, F),
        share_of=f"the model's dot work ({layers} layers on {M} microbatches of ({B}, {F}): {formula} "
        f"multiply-adds over the {S} stages)",
        what=name,
        hint="Does every device run every stage's layer? Each stage applies its own "
        + ("layers" if circular else "layer")
        + " to what it holds, once per step.",
    )
    assert_traffic(
        program,
        at_most=_forward_traffic(S, R, M, B, F),
        bound_of=f"one ({B}, {F}) microbatch sent after each of the {steps} steps, and the outputs handed "
        f"out by at most an all-gather of the last stage's {steps} steps' results: S ({'R M' if circular else 'M'} "
        "+ S - 1) B F floats",
        what=name,
        hint=f"Are the weights travelling (each stage's are ({F}, {F}))?",
    )


def _check_memory(impl, mesh, ws, xs):
    """XLA's argument plus temporary bytes per device of the compiled pipeline_forward (which must also
    compute the reference's values): below two stages' weights, where F is large enough that one stage's
    (F, F) weights dominate what else a device holds (the microbatches, the outputs, one in flight)."""
    S = mesh.shape["stage"]
    M, B, F = xs.shape
    args = _placed(mesh, (ws, P("stage")), (xs, P()))
    program = compiled(lambda w, x: impl.pipeline_forward(w, x, mesh), *args)
    assert_computes(
        program(*args), _reference_forward(ws, xs), **FORWARD_TOL, what="pipeline_forward"
    )
    stage = F * F * F32
    # the rule bounds the sum of the two, which assert_memory (a bound on each) does not
    try:
        memory = memory_per_device(program)
    except NotReported as exc:
        pytest.skip(str(exc))
    held = memory.argument_bytes + memory.temp_bytes
    assert held < 2 * stage, (
        f"with {S} stages of ({F}, {F}) weights ({stage} bytes each) and xs {xs.shape}, the compiled "
        f"pipeline_forward holds {memory.argument_bytes} bytes of arguments and {memory.temp_bytes} of "
        f"temporary buffers per device, {held} in all: it should hold one stage's weights, below "
        f"{2 * stage} bytes (two stages'). Are the weights gathered onto every device?"
    )


def _check_train_program(impl, mesh, ws, xs, ys):
    """The compiled pipeline_train_step: its permutes run along "stage" within each data row, forward and
    back; every all-reduce of a weight-sized gradient sums over "data" only (at least one does); each device
    executes at most twice its share of the step's work and sends no more than its activations, their
    gradients, one all-reduce of its gradient and the loss; and it computes the reference's new ws and
    loss."""
    args = _train_args(mesh, ws, xs, ys)
    program = compiled(lambda w, x, y: impl.pipeline_train_step(w, x, y, LR, mesh), *args)
    new_ws, loss = _reference_train_step(ws, xs, ys, LR)
    assert_permute_pairs(
        program,
        mesh,
        "stage",
        shape="chain",
        reverse_too=True,
        what="pipeline_train_step",
        hint="Activations go forward s -> s + 1 within each data row, and the backward pass sends their "
        "gradients back s + 1 -> s; nothing crosses from one data row to another.",
        expected=(new_ws, loss),
        args=args,
        **TRAIN_TOL,
    )
    M, B, F = xs.shape
    grads = [
        op
        for op in executed_collectives(program)
        if op.kind == "all-reduce" and op.operand_bytes >= F * F * F32
    ]
    axes = [mesh_axes_of(op.groups, mesh) for op in grads]
    wrong = [(op, a) for op, a in zip(grads, axes) if a != ("data",)]
    assert grads and not wrong, (
        "in the compiled program of pipeline_train_step, "
        + (
            "all-reduces of weight-sized gradients sum over "
            + ", ".join(
                f"{a or 'no set of mesh axes'} ({op.operand_bytes} bytes)" for op, a in wrong
            )
            if grads
            else f"no all-reduce sums a weight-sized ({F}, {F}) gradient"
        )
        + f"; each stage's gradient should be summed over the data rows only (mesh {dict(mesh.shape)}: "
        '"data" groups). Stages hold different layers: their gradients must never be added together, and '
        "each data row saw only its part of the batch."
    )
    data, S = mesh.shape["data"], mesh.shape["stage"]
    assert_work(
        program,
        share=_train_share(data, S, M, B, F),
        share_of=f"the step's dot work ({S} layers on {M} microbatches of ({B}, {F}), forward and back: "
        f"(3 S - 1) M B F F multiply-adds over the {data} x {S} devices)",
        what="pipeline_train_step",
        hint="Does every device of a data row run the whole model? Each stage applies its own layer, "
        "forward and back, once per step, to its data row's part of the microbatch.",
    )
    assert_traffic(
        program,
        at_most=_train_traffic(data, S, M, B, F),
        bound_of=f"each step's ({B // data}, {F}) activations sent forward and their gradient back, "
        f'{M + S - 1} steps each way, one all-reduce of its stage\'s ({F}, {F}) gradient over "data", '
        f"and {LOSS_BYTES} bytes for the loss: 2 (M + S - 1) (B / data) F + 2 (data - 1) / data F F "
        "floats",
        what="pipeline_train_step",
        hint="Are the stages' weights brought to every device, or the gradient summed at every step?",
    )


def _train_share(data, S, M, B, F):
    """One device's share of the training step's dot work: the forward pass's S layers on M microbatches of
    (B, F) (S M B F F multiply-adds), the weights' gradients (as many) and the gradients passed down through
    every layer but the first ((S - 1) M B F F): (3 S - 1) M B F F over the data x S devices. The pipeline
    executes 3 (M + S - 1) (B / data) F F with its bubbles, a remat 4 (M + S - 1) (B / data) F F."""
    return (3 * S - 1) * M * B * F * F // (data * S)


def _train_traffic(data, S, M, B, F):
    """What one device may send in a training step: its (B / data, F) activations after each of the M + S - 1
    forward steps and their gradient back as many times, 2 (M + S - 1) (B / data) F floats; one all-reduce of
    its stage's (F, F) gradient over the data rows, 2 (data - 1) / data F F floats; and LOSS_BYTES for the
    loss. A device that gathers the other stages' weights sends (S - 1) F F floats for them, and as many
    again for their gradients."""
    return (2 * (M + S - 1) * (B // data) * F + 2 * (data - 1) * F * F // data) * F32 + LOSS_BYTES


@pytest.fixture
def check_sends():
    """check_sends(impl, mesh, ws, xs): the compiled pipeline_forward (ws (S, F, F)) or circular_forward
    (ws (R, S, F, F)) sends as the contract says, moves no weights, keeps to its shares of the work and the
    bytes, and computes the reference."""
    return _check_sends


@pytest.fixture
def check_memory():
    """check_memory(impl, mesh, ws, xs): the compiled pipeline_forward holds one stage's weights per device."""
    return _check_memory


@pytest.fixture
def check_train_program():
    """check_train_program(impl, mesh, ws, xs, ys): the compiled pipeline_train_step's pairs and gradient
    all-reduces, its shares of the work and the bytes, and its values."""
    return _check_train_program
