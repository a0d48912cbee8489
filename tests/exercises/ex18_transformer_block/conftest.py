"""What ex18's visible and hidden tests share: the problems, placed on the mesh, the references (a float64
NumPy block, a float32 single-device training step, and the course's own sequence-parallel stack for the
remat bound), and the rules the compiled programs are graded by, so that `shardlab check` applies the very
checks grading does."""

import math
from dataclasses import dataclass

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import NamedSharding, PartitionSpec as P

from grader.checks import (
    NotReported,
    assert_close,
    assert_computes,
    assert_executed,
    assert_memory,
    assert_sharded_like,
    compiled,
    executed_collectives,
    flops_per_device,
    inputs,
    memory_per_device,
    test_mesh,
)
from grader.checks.hlo import mesh_axes_of

AXES = ("data", "model")
IN_PROJ, OUT_PROJ = P("data", "model"), P("model", "data")
SPECS = {"wq": IN_PROJ, "wk": IN_PROJ, "wv": IN_PROJ, "wo": OUT_PROJ, "w1": IN_PROJ, "w2": OUT_PROJ}
X_SPEC = P("data", "model", None)
LR = 0.5  # large enough that a gradient 1% off moves the new params past STEP_TOL
# float32 sums over heads, devices and positions in other orders than the float64 reference
FORWARD_TOL = dict(rtol=1e-4, atol=1e-5)
LOSS_TOL = dict(rtol=1e-4, atol=1e-6)
STEP_TOL = dict(rtol=1e-3, atol=1e-6)
GRAD_TOL = dict(rtol=1e-3, atol=1e-6)
# With remat, the gradient program's temporary bytes must stay below this share of the course's
# sequence-parallel stack without remat (measured, jax 0.10.2, CPU, the tests' stack L=4, B=4, T=32,
# D=64, H=8, F=128: the reference with remat at 0.28 of it on 1x8, 0.25 on 2x4 and 4x2; an 8-block stack
# with D=256, B=8, T=64, F=1024: 0.18, 0.16, 0.14). The bound is the reference's figure, never the
# submission's own remat=False program, which a submission could inflate on purpose.
REMAT_SHARE = 0.5
# The forward's flops per device (XLA's count) against its matmuls split as the contract says (batch over
# "data", heads and hidden units over "model"): measured 1.08-1.18 for the reference and the honest
# alternative on 1x8, 2x4 and 4x2 (the softmax and norms on top), 8.5-9.0 for a block computed whole on
# every device; a block repeated on every "model" device (or batch on every "data" device) doubles it at
# least. This keeps a decoy reduce-scatter from earning the rule for replicated work.
FLOPS_SLACK = 1.6


@dataclass(frozen=True)
class Sizes:
    """A block's shapes: batch B, sequence T, model width D, heads H of size Dh, MLP width F."""

    B: int
    T: int
    D: int
    H: int
    Dh: int
    F: int
    L: int = 1  # blocks in a stack


@dataclass(frozen=True)
class Problem:
    mesh: jax.sharding.Mesh
    sizes: Sizes
    params: dict  # NumPy float32, unplaced ((L, ...) leaves for a stack)
    x: np.ndarray
    y: np.ndarray

    def placed(self):
        """(params, x, y) placed as the contract hands them in."""
        lead = (None,) * (self.sizes.L > 1)
        params = {
            name: jax.device_put(w, NamedSharding(self.mesh, P(*lead, *SPECS[name])))
            for name, w in self.params.items()
        }
        x, y = (jax.device_put(a, NamedSharding(self.mesh, X_SPEC)) for a in (self.x, self.y))
        return params, x, y


def mesh_of(shape):
    return test_mesh(shape, AXES, "explicit")


def problem(shape, sizes: dict, seed: int, stacked: bool = False) -> Problem:
    """sizes: Sizes' fields by name, as the tests write them."""
    s = Sizes(**sizes)
    rng = inputs.rng(seed)
    lead = (s.L,) if stacked else ()
    shapes = dict(
        wq=(s.D, s.H * s.Dh), wk=(s.D, s.H * s.Dh), wv=(s.D, s.H * s.Dh), wo=(s.H * s.Dh, s.D)
    ) | dict(w1=(s.D, s.F), w2=(s.F, s.D))
    # weights scaled by 1/sqrt(fan-in): activations of order 1 through every block
    params = {
        name: (rng.standard_normal(lead + shape) / math.sqrt(shape[0])).astype(np.float32)
        for name, shape in shapes.items()
    }
    x, y = (rng.standard_normal((s.B, s.T, s.D)).astype(np.float32) for _ in range(2))
    return Problem(mesh_of(shape), s, params, x, y)


# --- the references --------------------------------------------------------------------------------


def _block(xp, p, x, num_heads):
    """The contract's block in NumPy (float64) or jax.numpy: pre-norm, causal attention, relu MLP."""

    def rms(h):
        return h / xp.sqrt(xp.mean(h * h, axis=-1, keepdims=True) + 1e-6)

    b, t, _ = x.shape
    a = rms(x)
    q, k, v = (
        xp.transpose((a @ p[n]).reshape(b, t, num_heads, -1), (0, 2, 1, 3))
        for n in ("wq", "wk", "wv")
    )
    scores = q @ xp.swapaxes(k, -1, -2) / math.sqrt(q.shape[-1])
    scores = xp.where(np.tril(np.ones((t, t), bool)), scores, -np.inf)
    e = xp.exp(scores - scores.max(axis=-1, keepdims=True))
    att = (e / e.sum(axis=-1, keepdims=True)) @ v  # (b, heads, t, Dh)
    h = x + xp.transpose(att, (0, 2, 1, 3)).reshape(b, t, -1) @ p["wo"]
    return h + xp.maximum(rms(h) @ p["w1"], 0) @ p["w2"]


def reference_forward(pr: Problem) -> np.ndarray:
    p = {k: np.asarray(v, np.float64) for k, v in pr.params.items()}
    return _block(np, p, np.asarray(pr.x, np.float64), pr.sizes.H)


def reference_stack_loss(pr: Problem) -> float:
    h = np.asarray(pr.x, np.float64)
    for layer in range(pr.sizes.L):
        h = _block(
            np, {k: np.asarray(v[layer], np.float64) for k, v in pr.params.items()}, h, pr.sizes.H
        )
    return float(np.mean((h - pr.y) ** 2))


def _rms_back(h, g):
    """The gradient through rms at h, given the gradient g of its output."""
    r = 1 / np.sqrt(np.mean(h * h, axis=-1, keepdims=True) + 1e-6)
    return r * g - h * r**3 * np.mean(g * h, axis=-1, keepdims=True)


def reference_step(pr: Problem):
    """(new params, loss) of one SGD step on mean((block(x) - y) ** 2), float64 NumPy, backward by hand."""
    p = {k: np.asarray(v, np.float64) for k, v in pr.params.items()}
    x, y, heads = np.asarray(pr.x, np.float64), np.asarray(pr.y, np.float64), pr.sizes.H
    b, t, _ = x.shape
    c = 1 / math.sqrt(p["wq"].shape[1] // heads)

    def split(m):  # (b, t, H*Dh) -> (b, H, t, Dh)
        return m.reshape(b, t, heads, -1).transpose(0, 2, 1, 3)

    def merge(m):
        return m.transpose(0, 2, 1, 3).reshape(b, t, -1)

    def outer(a, g):  # the weight gradient of a @ w, summed over batch and positions
        return np.einsum("bti,btj->ij", a, g)

    r = 1 / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + 1e-6)
    a = x * r
    q, k, v = (split(a @ p[n]) for n in ("wq", "wk", "wv"))
    s = np.where(np.tril(np.ones((t, t), bool)), q @ k.transpose(0, 1, 3, 2) * c, -np.inf)
    e = np.exp(s - s.max(axis=-1, keepdims=True))
    probs = e / e.sum(axis=-1, keepdims=True)
    att = merge(probs @ v)
    h = x + att @ p["wo"]
    a2 = h / np.sqrt(np.mean(h * h, axis=-1, keepdims=True) + 1e-6)
    z = a2 @ p["w1"]
    hidden = np.maximum(z, 0)
    out = h + hidden @ p["w2"]
    loss = np.mean((out - y) ** 2)

    g_out = 2 * (out - y) / out.size
    grads = {"w2": outer(hidden, g_out)}
    g_z = (g_out @ p["w2"].T) * (z > 0)
    grads["w1"] = outer(a2, g_z)
    g_h = g_out + _rms_back(h, g_z @ p["w1"].T)
    grads["wo"] = outer(att, g_h)
    g_o = split(g_h @ p["wo"].T)
    g_probs = g_o @ v.transpose(0, 1, 3, 2)
    g_s = probs * (g_probs - np.sum(g_probs * probs, axis=-1, keepdims=True))
    g_q, g_k = g_s @ k * c, g_s.transpose(0, 1, 3, 2) @ q * c
    g_v = probs.transpose(0, 1, 3, 2) @ g_o
    for name, g in (("wq", g_q), ("wk", g_k), ("wv", g_v)):
        grads[name] = outer(a, merge(g))
    return {n: p[n] - LR * grads[n] for n in p}, float(loss)


def _sp_block(p, xs, num_heads):
    """The course's sequence-parallel block, one device's share (inside shard_map)."""

    def rms(h):
        return h * jax.lax.rsqrt(jnp.mean(h * h, axis=-1, keepdims=True) + 1e-6)

    def weight(name):
        return jax.lax.all_gather(p[name], "data", axis=int(SPECS[name] == OUT_PROJ), tiled=True)

    def spread(h):
        return jax.lax.all_gather(rms(h), "model", axis=1, tiled=True)

    def back(partial):
        return jax.lax.psum_scatter(partial, "model", scatter_dimension=1, tiled=True)

    a = spread(xs)
    b, t, _ = a.shape
    heads = num_heads // jax.lax.axis_size("model")
    q, k, v = ((a @ weight(n)).reshape(b, t, heads, -1) for n in ("wq", "wk", "wv"))
    scores = jnp.einsum("bthd,bshd->bhts", q, k) / math.sqrt(q.shape[-1])
    scores = jnp.where(jnp.tril(jnp.ones((t, t), bool)), scores, -jnp.inf)
    att = jnp.einsum("bhts,bshd->bthd", jax.nn.softmax(scores, axis=-1), v).reshape(b, t, -1)
    h = xs + back(att @ weight("wo"))
    return h + back(jax.nn.relu(spread(h) @ weight("w1")) @ weight("w2"))


_NO_REMAT = {}  # (mesh shape, sizes) -> the compiled gradient program: one compile per shape


def reference_without_remat(pr: Problem):
    """The course's stack without remat on the same mesh: its gradient program's temporary bytes per
    device, and its loss and gradients (float32)."""
    key = (tuple(pr.mesh.devices.shape), pr.sizes)
    if key not in _NO_REMAT:
        mesh, heads = pr.mesh, pr.sizes.H

        def layer(h, p):
            block = jax.shard_map(
                lambda p, xs: _sp_block(p, xs, heads),
                mesh=mesh,
                in_specs=(SPECS, X_SPEC),
                out_specs=X_SPEC,
            )
            return block(p, h), None

        def loss(stacked, x, y):
            return jnp.mean((jax.lax.scan(layer, x, stacked)[0] - y) ** 2)

        _NO_REMAT[key] = compiled(jax.value_and_grad(loss), *pr.placed())
    program = _NO_REMAT[key]
    value, grads = program(*pr.placed())
    return (
        memory_per_device(program).temp_bytes,
        float(value),
        {k: np.asarray(v) for k, v in grads.items()},
    )


# --- the collectives rule's reading of a compiled program ------------------------------------------


def _spans(program, mesh):
    """{(kind, axes): (runs, largest operand bytes per device)} of the collectives between devices
    (singleton groups, which a size-1 axis may leave, ignored)."""
    found = {}
    for op in executed_collectives(program):
        axes = mesh_axes_of(op.groups, mesh) if op.groups else tuple(mesh.axis_names)
        if axes == ():
            continue
        runs, biggest = found.get((op.kind, axes), (0, 0))
        found[(op.kind, axes)] = (runs + (op.times or 0), max(biggest, op.operand_bytes))
    return found


def _seen(spans) -> str:
    if not spans:
        return "no collective between devices"
    return ", ".join(
        f"{kind} over {' and '.join(repr(a) for a in axes) if axes else '?'} ({runs}x, up to {size} bytes)"
        for (kind, axes), (runs, size) in sorted(
            spans.items(), key=lambda i: (i[0][0], str(i[0][1]))
        )
    )


def _mesh_text(mesh):
    return "x".join(str(n) for n in mesh.devices.shape)


def _require(spans, kind, axis, mesh, what, why):
    """A collective of `kind` over `axis` must run, where that axis has more than one device."""
    if mesh.shape[axis] > 1 and (kind, (axis,)) not in spans:
        raise AssertionError(
            f'the compiled program of {what} on the {_mesh_text(mesh)} mesh has no {kind} over "{axis}"; '
            f"it has {_seen(spans)}. Expected: {why}"
        )


# --- the checks ------------------------------------------------------------------------------------


_PROGRAMS = {}  # (id(impl), what, mesh shape, sizes) -> (impl, program)


def _calls(impl, pr):
    mesh, heads = pr.mesh, pr.sizes.H

    def stack(s, x, y, remat):
        return impl.stack_loss(s, x, y, mesh, remat, num_heads=heads)

    return {
        "block_forward": lambda p, x: impl.block_forward(p, x, mesh, num_heads=heads),
        "block_train_step": lambda p, x, y: impl.block_train_step(
            p, x, y, LR, mesh, num_heads=heads
        ),
        "stack_loss": lambda s, x, y: (stack(s, x, y, False), stack(s, x, y, True)),
        "stack_loss_grad": jax.value_and_grad(lambda s, x, y: stack(s, x, y, True)),
    }


def _program(impl, what, pr, *args):
    """A function of the submission compiled for a problem's mesh and sizes, once for every test that
    reads it (values, collectives; visible and hidden run other inputs through the same program). The
    impl is kept with it, so that its id is not reused."""
    key = (id(impl), what, tuple(pr.mesh.devices.shape), pr.sizes)
    if key not in _PROGRAMS:
        _PROGRAMS[key] = (impl, compiled(_calls(impl, pr)[what], *args))
    return _PROGRAMS[key][1]


def _check_shard_params(impl, shape, sizes, seed):
    """shard_block_params: every weight placed as the contract says, its values unchanged."""
    pr = problem(shape, sizes, seed)
    out = impl.shard_block_params(dict(pr.params), pr.mesh)
    missing = set(SPECS) - set(out)
    assert not missing, (
        f"shard_block_params returned no {sorted(missing)}; expected all six weights"
    )
    for name, spec in SPECS.items():
        assert_sharded_like(out[name], pr.mesh, spec, pr.params[name], rtol=0, atol=0, name=name)


def _check_forward_values(impl, shape, sizes, seed):
    pr = problem(shape, sizes, seed)
    params, x, _ = pr.placed()
    out = _program(impl, "block_forward", pr, params, x)(params, x)
    assert_sharded_like(
        out, pr.mesh, X_SPEC, reference_forward(pr), **FORWARD_TOL, name="block_forward's output"
    )


def _check_forward_program(impl, shape, sizes, seed):
    """The compiled block_forward, which must compute the block: all-gathers over "data" (the weights)
    and over "model" (the sequence), reduce-scatters over "model", no all-reduce."""
    pr = problem(shape, sizes, seed)
    params, x, _ = pr.placed()
    program = _program(impl, "block_forward", pr, params, x)
    what = "block_forward"
    assert_computes(program(params, x), reference_forward(pr), **FORWARD_TOL, what=what)
    spans, mesh = _spans(program, pr.mesh), pr.mesh
    reduced = sorted(str(axes) for kind, axes in spans if kind == "all-reduce")
    if reduced:
        raise AssertionError(
            f"the compiled program of {what} on the {_mesh_text(mesh)} mesh runs all-reduce over "
            f"{reduced}; it has {_seen(spans)}. Expected no all-reduce in the forward: the partial sums "
            'of the output projections go back sequence-split with a reduce-scatter over "model" '
            "(psum_scatter), not summed whole on every device. Is the residual stream kept whole (psum), "
            "or resharded in Explicit mode?"
        )
    _require(
        spans,
        "all-gather",
        "data",
        mesh,
        what,
        'the weights, split over "data", gathered where used.',
    )
    _require(
        spans,
        "all-gather",
        "model",
        mesh,
        what,
        'the sequence, split over "model" between blocks, gathered before attention and the MLP. Does '
        'each "model" device keep the whole sequence (sequence parallelism missing)?',
    )
    _require(
        spans,
        "reduce-scatter",
        "model",
        mesh,
        what,
        "the heads' and hidden units' partial outputs summed back to sequence blocks with psum_scatter "
        'over "model". Gathering x whole and slicing at the end computes the same values without it.',
    )
    assert_executed(
        program,
        "reduce-scatter",
        at_least=2 if mesh.shape["model"] > 1 else 0,
        what=what,
        hint="one after attention, one after the MLP.",
    )
    s, (d, m) = pr.sizes, (mesh.shape["data"], mesh.shape["model"])
    split = (
        2 * (s.B // d) * s.T * (4 * s.D * s.H * s.Dh // m + 2 * s.D * s.F // m)
        + 4 * (s.B // d) * (s.H // m) * s.T * s.T * s.Dh
    )
    try:
        flops = flops_per_device(program, what=what)
    except NotReported as exc:
        pytest.skip(str(exc))
    if flops > FLOPS_SLACK * split:
        raise AssertionError(
            f"the compiled program of {what} on the {_mesh_text(mesh)} mesh does {flops:.0f} flops per "
            f"device; its matmuls split as the contract says take {split}, and it should stay below "
            f"{FLOPS_SLACK * split:.0f}. Does every device compute all the heads, all the hidden units or "
            'the whole batch? Each "model" device computes its H/|model| heads and F/|model| units, each '
            '"data" device its own batch rows.'
        )


def _check_step_values(impl, shape, sizes, seed):
    pr = problem(shape, sizes, seed)
    args = pr.placed()
    new, loss = _program(impl, "block_train_step", pr, *args)(*args)
    want_params, want_loss = reference_step(pr)
    assert_close(loss, want_loss, **LOSS_TOL, name="block_train_step's loss")
    for name, spec in SPECS.items():
        assert_sharded_like(
            new[name], pr.mesh, spec, want_params[name], **STEP_TOL, name=f"the new {name}"
        )


def _check_step_program(impl, shape, sizes, seed):
    """The compiled block_train_step, which must compute the step: reduce-scatters over "data" for the
    weight gradients, and no all-reduce as large as any weight's slice per device."""
    pr = problem(shape, sizes, seed)
    args = pr.placed()
    program = _program(impl, "block_train_step", pr, *args)
    what = "block_train_step"
    want_params, want_loss = reference_step(pr)
    new, loss = program(*args)
    assert_computes(
        [new[k] for k in SPECS] + [loss],
        [want_params[k] for k in SPECS] + [want_loss],
        **STEP_TOL,
        what=what,
    )
    spans, mesh = _spans(program, pr.mesh), pr.mesh
    smallest = min(
        w.nbytes // math.prod(mesh.shape[a] for a in SPECS[name]) for name, w in pr.params.items()
    )
    # over "data" (or groups that follow no mesh axis): where the batch's gradients are summed; the
    # forward of a design without sequence parallelism all-reduces activations over "model", a rule of
    # its own
    whole = {
        axes: size
        for (kind, axes), (_, size) in spans.items()
        if kind == "all-reduce" and (axes is None or "data" in axes) and size >= smallest
    }
    if whole:
        raise AssertionError(
            f"the compiled program of {what} on the {_mesh_text(mesh)} mesh all-reduces "
            + ", ".join(f"{size} bytes per device over {axes}" for axes, size in whole.items())
            + f"; the smallest weight's slice is {smallest} bytes per device, and no all-reduce should "
            "move that much (the loss's scalar is fine). Are the weight gradients all-reduced and then "
            'sliced? The gradient of a weight gathered over "data" comes back with a reduce-scatter: '
            "each device receives only its own slice's sum."
        )
    _require(
        spans,
        "reduce-scatter",
        "data",
        mesh,
        what,
        'the weight gradients summed over the batch with reduce-scatters over "data", each device '
        "keeping its slice (the transpose of the forward's all-gather).",
    )
    assert_executed(
        program,
        "reduce-scatter",
        at_least=len(SPECS) if mesh.shape["data"] > 1 else 0,
        operands=True,
        what=what,
        per="step",
        hint='each of the six weight gradients is reduce-scattered over "data".',
    )


def _check_stack_values(impl, shape, sizes, seed):
    """stack_loss with remat False and True, in one program: both the reference loss (so the same)."""
    pr = problem(shape, sizes, seed, stacked=True)
    args = pr.placed()
    want = reference_stack_loss(pr)
    for remat, got in zip((False, True), _program(impl, "stack_loss", pr, *args)(*args)):
        assert_close(got, want, **LOSS_TOL, name=f"stack_loss with remat={remat}")


def _check_stack_memory(impl, shape, sizes, seed):
    """The compiled value_and_grad of stack_loss with remat=True, which must give the loss and the
    gradients: temporary bytes per device below REMAT_SHARE of the course's stack without remat."""
    pr = problem(shape, sizes, seed, stacked=True)
    args = pr.placed()
    program = _program(impl, "stack_loss_grad", pr, *args)
    try:
        bound_of, want_loss, want_grads = reference_without_remat(pr)
    except NotReported as exc:
        pytest.skip(str(exc))
    what = f"the gradient of stack_loss with remat=True ({pr.sizes.L} blocks)"
    loss, grads = program(*args)
    assert_close(loss, want_loss, **LOSS_TOL, name=f"{what}: the loss")
    assert_computes(
        [grads[k] for k in SPECS], [want_grads[k] for k in SPECS], **GRAD_TOL, what=what
    )
    bound = int(REMAT_SHARE * bound_of)
    assert_memory(
        program,
        temp_below=bound,
        what=what,
        shown_against={"the course's stack without remat (temporaries)": bound_of},
        hint=f"the course's stack needs {bound_of} bytes without remat and about a quarter of it with. "
        "Does remat=True wrap each scanned block in jax.checkpoint, so that the backward pass recomputes "
        "a block's intermediates instead of keeping all of them from the forward?",
    )


@pytest.fixture
def check_shard_params():
    """check_shard_params(impl, shape, sizes, seed): shard_block_params's shardings and values."""
    return _check_shard_params


@pytest.fixture
def check_forward_values():
    """check_forward_values(impl, shape, sizes, seed): block_forward's sharding and values."""
    return _check_forward_values


@pytest.fixture
def check_forward_program():
    """check_forward_program(impl, shape, sizes, seed): the compiled forward's collectives."""
    return _check_forward_program


@pytest.fixture
def check_step_values():
    """check_step_values(impl, shape, sizes, seed): block_train_step's loss and new params."""
    return _check_step_values


@pytest.fixture
def check_step_program():
    """check_step_program(impl, shape, sizes, seed): the compiled step's gradient reductions."""
    return _check_step_program


@pytest.fixture
def check_stack_values():
    """check_stack_values(impl, shape, sizes, seed): stack_loss's loss, remat False and True."""
    return _check_stack_values


@pytest.fixture
def check_stack_memory():
    """check_stack_memory(impl, shape, sizes, seed): the remat gradient program's temporary bytes."""
    return _check_stack_memory
