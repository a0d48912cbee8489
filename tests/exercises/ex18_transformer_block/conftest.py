"""What ex18's visible and hidden tests share: the problems, placed on the mesh, the references (a float64
NumPy block, a float32 single-device training step, and the course's own sequence-parallel stack for the
remat bound), and the rules the compiled programs are graded by, so that `shardlab check` applies the very
checks grading does."""

import math
from dataclasses import dataclass, replace

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import NamedSharding, PartitionSpec as P

from grader.checks import (
    NotReported,
    account_of,
    assert_close,
    assert_computes,
    assert_executed,
    assert_memory,
    assert_sharded_like,
    assert_traffic,
    assert_work,
    between_devices,
    compiled,
    inputs,
    memory_per_device,
    test_mesh,
)
from grader.checks.account import unknown_count
from grader.checks.shares import axes_words, traffic_words

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
# The work and traffic rules, measured (jax 0.10.2, CPU, the tests' sizes on 1x8, 2x4 and 4x2) against
# forward_share and forward_bytes. The forward: the reference and the honest alternative 1.01-1.13 x its
# share of the work (the norms, scaling and softmax's products on top) and exactly forward_bytes; on the
# visible 2x4, a block computed whole on every device 8.1 x the share and 3.8 x the bytes, every head and
# hidden unit on each device of a data row 4.1 and 3.6, the whole batch on each device of a model column
# 2.0 and 1.6 (4.3 and 1.9 on 4x2: a factor |data| = 2 of replication cannot exceed a bound twice over).
# The step against 3 x the forward's share and twice its bytes: honest 0.92-1.06 and 0.88-0.97;
# replicated on 2x4 7.3-7.4 and 2.1-3.5, 3.7 and 3.5, 1.8 and 1.4. No remat in either: 1.5 x the share,
# which keeps a decoy reduce-scatter from earning the rules for replicated work.
WORK_ALLOWED = 1.5
# The stack's gradient with remat (its forward run again: _recomputed) against 3 L x the forward's share
# and 4 L x its bytes: honest 1.63-1.64 and 0.94-0.98 (each block's forward run three times: the forward,
# the gradient's and remat's recompute); replicated on 2x4 13.1 and 2.4, 6.5 and 2.2 (every head), 3.3
# and 1.7 (the whole batch).
STACK_WORK_ALLOWED = 2.0


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


def forward_share(s: Sizes, mesh) -> int:
    """One device's share of the block's multiply-adds: the projections q, k, v and the output (4 D H Dh
    per position), the MLP (2 D F per position) and the scores and their weighted sum (2 H T Dh per
    position), split over the batch ("data") and the heads and hidden units ("model")."""
    whole = s.B * s.T * (4 * s.D * s.H * s.Dh + 2 * s.D * s.F + 2 * s.H * s.T * s.Dh)
    return whole // (mesh.shape["data"] * mesh.shape["model"])


def forward_bytes(s: Sizes, mesh) -> int:
    """What one device sends in the forward (float32): its block of every weight to the other |data| - 1
    devices that gather it, and its (B/|data|, T/|model|, D) positions gathered over "model" twice (before
    attention, before the MLP) and the two partial outputs (B/|data|, T, D) reduce-scattered back: each
    (|model| - 1) / |model| of its rows' activations. The least the contract's design sends (measured: the
    reference and the honest alternative exactly this on 1x8, 2x4 and 4x2)."""
    d, m = mesh.shape["data"], mesh.shape["model"]
    weights = 4 * s.D * s.H * s.Dh + 2 * s.D * s.F
    return 4 * ((d - 1) * weights + 4 * (m - 1) * s.B * s.T * s.D) // (d * m)


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


def _between(program, pr, what, rule):
    """{(kind, axes): Traffic} of the program's collectives between devices, from its account (singleton
    groups, which a size-1 axis may leave, dropped). A collective in a loop with no static trip count
    fails with the account's message: its count is unknown, never zero."""
    rows = {}
    for row in between_devices(account_of(program, what=what, mesh=pr.mesh)):
        if row.runs is None or row.sent_bytes is None:
            raise unknown_count(what, "collectives", rule)
        key = (row.kind, row.axes)
        if key in rows:  # one kind over the same axes in groups of another size: one row
            known = rows[key]
            row = replace(
                known,
                runs=known.runs + row.runs,
                operands=known.operands + row.operands,
                operand_bytes=known.operand_bytes + row.operand_bytes,
                sent_bytes=known.sent_bytes + row.sent_bytes,
            )
        rows[key] = row
    return rows


def _seen(rows) -> str:
    return traffic_words(list(rows.values()))


def _mesh_text(mesh):
    return "x".join(str(n) for n in mesh.devices.shape)


def _require(rows, kind, axis, mesh, what, why):
    """A collective of `kind` over `axis` must run, where that axis has more than one device."""
    if mesh.shape[axis] > 1 and (kind, (axis,)) not in rows:
        raise AssertionError(
            f'the compiled program of {what} on the {_mesh_text(mesh)} mesh has no {kind} over "{axis}"; '
            f"it has {_seen(rows)}. Expected: {why}"
        )


# --- the checks ------------------------------------------------------------------------------------


_PROGRAMS = {}  # (id(impl), what, mesh shape, sizes) -> (impl, program)


def _recomputed(f):
    """f, whose derivative runs its forward again from its inputs. Grading differentiates through the
    submission's exported program, whose derivative does that; this does the same in a check run here, so
    that both compile one program (measured: the same multiply-adds, bytes sent and temporary bytes)."""

    @jax.custom_vjp
    def once(*args):
        return f(*args)

    def forward(*args):
        return f(*args), args

    def backward(args, cotangent):
        return jax.vjp(f, *args)[1](cotangent)

    once.defvjp(forward, backward)
    return once


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
        "stack_loss_grad": jax.value_and_grad(_recomputed(lambda s, x, y: stack(s, x, y, True))),
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
    and over "model" (the sequence), reduce-scatters over "model", no all-reduce; each device's work
    within its share and its bytes sent within forward_bytes."""
    pr = problem(shape, sizes, seed)
    params, x, _ = pr.placed()
    program = _program(impl, "block_forward", pr, params, x)
    what = "block_forward"
    assert_computes(program(params, x), reference_forward(pr), **FORWARD_TOL, what=what)
    mesh = pr.mesh
    rows = _between(
        program, pr, what, "no all-reduce; all-gathers and reduce-scatters where they belong"
    )
    reduced = [row for (kind, _), row in rows.items() if kind == "all-reduce"]
    if reduced:
        raise AssertionError(
            f"the compiled program of {what} on the {_mesh_text(mesh)} mesh runs an all-reduce over "
            + " and over ".join(axes_words(row.axes) for row in reduced)
            + f"; it has {_seen(rows)}. Expected no all-reduce in the forward: "
            "the partial sums of the output projections go back sequence-split with a reduce-scatter "
            'over "model" '
            "(psum_scatter), not summed whole on every device. Is the residual stream kept whole (psum), "
            "or resharded in Explicit mode?"
        )
    _require(
        rows,
        "all-gather",
        "data",
        mesh,
        what,
        'the weights, split over "data", gathered where used.',
    )
    _require(
        rows,
        "all-gather",
        "model",
        mesh,
        what,
        'the sequence, split over "model" between blocks, gathered before attention and the MLP. Does '
        'each "model" device keep the whole sequence (sequence parallelism missing)?',
    )
    _require(
        rows,
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
        hint="One after attention, one after the MLP.",
    )
    on = f"on the {_mesh_text(mesh)} mesh"
    assert_work(
        program,
        share=forward_share(pr.sizes, mesh),
        share_of=f"the block's dot work, B T (4 D H Dh + 2 D F + 2 H T Dh) / (|data| |model|) {on}",
        allowed=WORK_ALLOWED,
        what=what,
        hint="Does every device compute all the heads, all the hidden units or the whole batch? Each "
        '"model" device computes its H/|model| heads and F/|model| units, each "data" device its own '
        "batch rows.",
    )
    assert_traffic(
        program,
        at_most=forward_bytes(pr.sizes, mesh),
        bound_of='each weight\'s block gathered once over "data", the positions gathered twice and '
        f'the partial outputs reduce-scattered twice over "model" {on}',
        what=what,
        hint='Are the weights gathered over "model" too, the batch over "data", or the partial outputs '
        "summed whole? Each device gathers only the weight blocks of its heads and units, and only its "
        "own batch rows' positions.",
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
    mesh = pr.mesh
    rows = _between(
        program, pr, what, 'reduce-scatters over "data", no all-reduce of a weight\'s size'
    )
    smallest = min(
        w.nbytes // math.prod(mesh.shape[a] for a in SPECS[name]) for name, w in pr.params.items()
    )
    # over "data" (or groups that follow no mesh axis): where the batch's gradients are summed; the
    # forward of a design without sequence parallelism all-reduces activations over "model", a rule of
    # its own
    whole = {
        axes: row
        for (kind, axes), row in rows.items()
        if kind == "all-reduce"
        and (axes is None or "data" in axes)
        and row.operand_bytes >= smallest
    }
    if whole:
        raise AssertionError(
            f"the compiled program of {what} on the {_mesh_text(mesh)} mesh all-reduces "
            + ", ".join(
                f"{row.operand_bytes} bytes per device over {axes_words(axes)} in {row.runs} runs"
                for axes, row in whole.items()
            )
            + f"; the smallest weight's slice is {smallest} bytes per device, and no all-reduce should "
            "move that much (the loss's scalar is fine). Are the weight gradients all-reduced and then "
            'sliced? The gradient of a weight gathered over "data" comes back with a reduce-scatter: '
            "each device receives only its own slice's sum."
        )
    _require(
        rows,
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
        hint='Each of the six weight gradients is reduce-scattered over "data".',
    )
    on = f"on the {_mesh_text(mesh)} mesh"
    assert_work(
        program,
        # forward and backward: the usual 3 x the forward's dots (the backward skips the gradient of x)
        share=3 * forward_share(pr.sizes, mesh),
        share_of=f"the step's dot work, 3 x the block's B T (4 D H Dh + 2 D F + 2 H T Dh) / "
        f"(|data| |model|) {on}",
        allowed=WORK_ALLOWED,
        what=what,
        hint="Is every device computing the gradient of all the heads, all the hidden units or the whole "
        'batch? The step\'s backward is split as its forward is: H/|model| heads per "model" device, '
        'its own batch rows per "data" device.',
    )
    assert_traffic(
        program,
        # the backward sends what the forward sends, transposed (a gather's transpose is a
        # reduce-scatter of the same bytes), less the gradient of x, which is not trained
        at_most=2 * forward_bytes(pr.sizes, mesh),
        bound_of=f"twice the forward's bytes: its collectives and their transposes {on}",
        what=what,
        hint='Are the weight gradients all-reduced, or the weights gathered over "model" too? Each '
        'device sends back only the gradients of its own weight blocks, with reduce-scatters over "data".',
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
    gradients: each device's work and bytes sent within their bounds, and its temporary bytes below
    REMAT_SHARE of the course's stack without remat."""
    pr = problem(shape, sizes, seed, stacked=True)
    args = pr.placed()
    program = _program(impl, "stack_loss_grad", pr, *args)
    try:
        bound_of, want_loss, want_grads = reference_without_remat(pr)
    except NotReported as exc:
        pytest.skip(str(exc))
    gradient = f"gradient of stack_loss with remat=True ({pr.sizes.L} blocks)"
    what = f"the {gradient}"
    loss, grads = program(*args)
    assert_close(loss, want_loss, **LOSS_TOL, name=f"{what}: the loss")
    assert_computes(
        [grads[k] for k in SPECS], [want_grads[k] for k in SPECS], **GRAD_TOL, what=what
    )
    on = f"on the {_mesh_text(pr.mesh)} mesh"
    assert_work(
        program,
        share=3 * pr.sizes.L * forward_share(pr.sizes, pr.mesh),
        share_of=f"the stack's gradient, 3 L x a block's B T (4 D H Dh + 2 D F + 2 H T Dh) / "
        f"(|data| |model|) {on} (the forward's recomputes fit in the {STACK_WORK_ALLOWED:g} x)",
        allowed=STACK_WORK_ALLOWED,
        what=gradient,  # "in the compiled gradient of ..."
        hint="Does every device compute all the heads, all the hidden units or the whole batch of "
        'each block? Each block is split as block_forward is: H/|model| heads per "model" device, its '
        'own batch rows per "data" device.',
    )
    assert_traffic(
        program,
        # each block's forward bytes: in the forward, in the gradient's forward (_recomputed), in remat's
        # recompute, and transposed in the backward
        at_most=4 * pr.sizes.L * forward_bytes(pr.sizes, pr.mesh),
        bound_of=f"4 L x a block's forward bytes: the forward, the gradient's forward, remat's "
        f"recompute and the backward {on}",
        what=gradient,  # "in the compiled gradient of ..."
        hint='Are the weights gathered over "model" too, the batch over "data", or the partial outputs '
        "summed whole? Each block gathers and scatters only what block_forward's bound allows.",
    )
    bound = int(REMAT_SHARE * bound_of)
    assert_memory(
        program,
        temp_below=bound,
        what=what,
        shown_against={"the course's stack without remat (temporaries)": bound_of},
        hint=f"The course's stack needs {bound_of} bytes without remat and about a quarter of it with. "
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
