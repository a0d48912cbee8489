"""ex14_pipeline: pipeline parallelism.

A model of S layers is too big for one device, so each device holds one layer (a "stage") and the
activations travel from device to device. A stage is one layer `layer(w, h) = tanh(h @ w)`, w (F, F);
the S stages' weights are `ws` (S, F, F), and the model applies ws[0], ws[1], ..., ws[S-1] in order.
The batch comes cut into M microbatches `xs` (M, B, F): while stage 1 works on microbatch 0, stage 0
can already start microbatch 1, and so on (GPipe). At step t stage s works on microbatch t - s, so M
microbatches through S stages take M + S - 1 steps, and each stage idles S - 1 of them (the bubble).
A looping ("circular") pipeline with R layers per device sends each microbatch round the ring R times,
and its bubble is (S - 1) / (R*M + S - 1).

The shard_map functions run on a 1-D Explicit mesh "stage" of S devices (a 2-D ("data", "stage") mesh
for the training step). Between two steps every stage hands its activations to the next one with one
`jax.lax.ppermute`: (source, destination) pairs s -> s + 1, and, in the circular pipeline only,
S - 1 -> 0. Two traps:
  - Inside `jax.shard_map` (which checks what varies across devices), a loop carry that starts as the
    same value everywhere (zeros, or xs) and becomes different on each device (what a stage computed)
    must be made device-varying where it starts: `jax.lax.pcast(x, "stage", to="varying")`. On the
    training step's 2-D mesh the activations vary along both axes, so pcast the zeros to
    ("data", "stage"); note that `jnp.zeros_like(x)` keeps x's own varying axes, `jnp.zeros(shape)` has
    none.
  - Write the loop over the steps with static bounds: `jax.lax.fori_loop(0, n, ...)` with Python-int
    n, or `jax.lax.scan` with a static length (a Python loop also works). The tests read how many times
    the compiled program runs each collective, counting the trip counts of its loops; a loop whose
    count is only known at run time cannot be counted and fails those tests.

Values are compared with a float64 NumPy reference: the forward passes within rtol=1e-5, atol=1e-5,
the training step's new weights and loss within rtol=1e-4, atol=1e-5. The tests use normal inputs and
weights scaled by 1/sqrt(F), so activations are of order 1. They run on meshes of 2, 4 and 8 devices
(the training step on ("data", "stage") meshes of 2x4, 1x2, 2x2 and 4x2) with sizes you cannot guess;
the schedule table must be exact and the bubble fractions floats within 1e-12 (relative), on sizes the
visible tests do not use.

The tests also compile each shard_map function and read the collectives its program runs, how many
times (the trip counts of its loops included), between which devices and how many bytes each moves, the
multiply-adds each device executes and the bytes it sends (every step of a loop counted), and XLA's
memory figure per device: each function's docstring says what they expect. A device's share of the work
is the model's dot work divided by the devices that split it; each function may execute twice that,
room for the bubble's steps and a recompute, but not for every device running every layer. Those tests
check the values of the program they read too.

Grading: 20 points. The schedule and bubble fractions 3 (1 visible, 2 hidden). pipeline_forward: values
and sharding 2 (1 visible, 1 hidden); its collectives (how many sends, between which stages, how big, and
no other collective but the outputs' hand-out; its share of the work and of the bytes) 3 (1 visible, 2
hidden); its memory 2 (1 visible, 1 hidden). pipeline_train_step: values and shardings 4 (1.5 visible, 2.5
hidden); its pairs and gradient all-reduce, its share of the work and of the bytes 2 (1 visible, 1
hidden). circular_forward: values and sharding 2 (1 visible, 1 hidden); its collectives (as
pipeline_forward's, round a cycle) and shares 2 (1 visible, 1 hidden).
"""

import jax
import jax.numpy as jnp
from jax.sharding import PartitionSpec as P


def gpipe_schedule(num_stages: int, num_microbatches: int) -> list[list[int]]:
    """The GPipe forward schedule as a table: pure Python, no JAX.

    S = num_stages rows, one per stage, and M + S - 1 columns, one per step (M = num_microbatches):
    entry [s][t] is the microbatch stage s works on at step t, or -1 when it idles (a bubble). Stage s
    starts microbatch 0 at step s and takes one microbatch per step after that.
    Example: gpipe_schedule(2, 3) == [[0, 1, 2, -1], [-1, 0, 1, 2]].
    """
    ### BEGIN SOLUTION
    steps = num_microbatches + num_stages - 1
    return [
        [t - s if 0 <= t - s < num_microbatches else -1 for t in range(steps)]
        for s in range(num_stages)
    ]
    ### END SOLUTION


def bubble_fraction(num_stages: int, num_microbatches: int, repeats: int = 1) -> float:
    """The share of the steps a stage idles in a pipeline, a float: (S - 1) / (repeats*M + S - 1).

    With repeats=1 it is GPipe's bubble (count the -1 entries of gpipe_schedule's table); with R
    repeats, the circular pipeline's, where each microbatch goes round the S stages R times.
    """
    ### BEGIN SOLUTION
    return (num_stages - 1) / (repeats * num_microbatches + num_stages - 1)
    ### END SOLUTION


def pipeline_forward(ws, xs, mesh):
    """The S layers applied to every microbatch, one layer per device, GPipe style.

    mesh: 1-D Explicit mesh "stage" of S devices. ws (S, F, F) arrives P("stage"): each device holds only
    its own stage's (1, F, F) weights. xs (M, B, F) arrives P(): every device has every microbatch.
    Returns the (M, B, F) outputs, tanh(...tanh(tanh(xs[m] @ ws[0]) @ ws[1])... @ ws[S-1]) for each m,
    replicated (P()). Use `jax.shard_map`. Over M + S - 1 steps, stage 0 takes microbatch t at step t,
    every stage applies its layer to what it holds, and passes the result on to stage s + 1 with one
    `jax.lax.ppermute`; the last stage keeps what it finishes; at the end, hand the outputs to every
    device (one all-reduce or all-gather, e.g. a `psum` of outputs that are zero except on the last
    stage).
    The tests compile it and expect: collective-permutes between neighbours s -> s + 1 only (no pair
    S-1 -> 0), executed M + S - 2 or M + S - 1 times in all, each moving one microbatch's (B, F)
    activations; no all-gather of the weights, nor any other collective but one all-reduce or
    all-gather, run once, of at most M + S - 1 steps' (B, F) results (the outputs, or the last stage's
    whole history, bubbles included); and, with F large enough that one stage's (F, F) weights
    dominate, XLA's argument plus temporary bytes per device below two stages' weights (a device holds
    its own stage's, not S).
    Its share of the work: each device executes at most 2 M B F F multiply-adds, twice its share of the
    model's S M B F F (a pipeline that computes through the S - 1 bubble steps executes
    (M + S - 1) B F F, within that since the tests use M >= 2 (S - 1)); and it sends at most
    S (M + S - 1) B F floats through collectives: one microbatch's activations after each step, and the
    outputs' hand-out (at most an all-gather of the last stage's M + S - 1 steps' results).
    Mind the module docstring's traps: pcast the loop carry to varying, and give the loop static bounds.
    Hint: a stage s works at step t on microbatch t - s; `jnp.where` on `jax.lax.axis_index("stage")`
    picks what stage 0 takes in (a new microbatch) from what the others take in (what they received).
    """
    ### BEGIN SOLUTION
    S = mesh.shape["stage"]
    M = xs.shape[0]
    forward_pairs = [(s, s + 1) for s in range(S - 1)]

    def per_device(w, xs):
        s = jax.lax.axis_index("stage")
        w = w[0]

        def step(t, carry):
            received, outs = carry
            new = jax.lax.dynamic_index_in_dim(xs, jnp.minimum(t, M - 1), keepdims=False)
            h = jnp.tanh(jnp.where(s == 0, new, received) @ w)
            # the last stage finishes microbatch t - (S - 1) at step t
            m = t - (S - 1)
            done = jnp.where((s == S - 1) & (m >= 0), h, 0.0)
            outs = outs + jax.lax.dynamic_update_index_in_dim(
                jnp.zeros_like(outs), done, jnp.maximum(m, 0), 0
            )
            return jax.lax.ppermute(h, "stage", forward_pairs), outs

        start = jax.lax.pcast(
            (jnp.zeros(xs.shape[1:], xs.dtype), jnp.zeros_like(xs)), "stage", to="varying"
        )
        _, outs = jax.lax.fori_loop(0, M + S - 1, step, start)
        return jax.lax.psum(outs, "stage")

    return jax.shard_map(per_device, mesh=mesh, in_specs=(P("stage"), P()), out_specs=P())(ws, xs)
    ### END SOLUTION


def pipeline_train_step(ws, xs, ys, lr, mesh):
    """One SGD step of the pipelined model, data parallel over "data" and pipelined over "stage".

    mesh: 2-D Explicit mesh ("data", "stage"). ws (S, F, F) arrives P("stage") (the same on every data
    row); xs and ys (M, B, F) arrive P(None, "data"): each data row pipelines its part of every
    microbatch, as pipeline_forward does. loss = mean((pipeline output - ys) ** 2) over all M*B*F
    entries; returns (ws - lr * grad of loss, loss): the new ws P("stage"), the loss (at the old ws) a
    replicated float32 scalar.
    The tests compile it and expect: every collective-permute pair stays within one data row (along
    "stage", never across "data"); the backward pass's reversed pairs s + 1 -> s present beside the
    forward ones; every all-reduce of the weights' gradient summing over "data" only (each stage's
    gradient is summed over the data rows, never over the stages). Its share of the work: the step's
    dot work is (3 S - 1) M B F F multiply-adds (the forward pass's S M B F F, the weights' gradients as
    many, and the gradients passed down through every layer but the first), and each device executes at
    most twice its share of it, 2 (3 S - 1) M B F F / (data S): room for the bubble and for recomputing
    the forward pass (jax.checkpoint), since the tests use M >= 3 (S - 1), but not for every device of a
    row running the whole model. Each device sends at most 2 (M + S - 1) (B / data) F floats (its
    activations forward and their gradients back, at every step), one all-reduce of its stage's (F, F)
    gradient over "data" (2 (data - 1) / data F F floats), and 256 bytes for the loss. Values within
    rtol=1e-4.
    Hint: write the loss of one data row's pipeline inside `jax.shard_map` and take `jax.value_and_grad`
    of the whole shard_mapped loss: the backward pass of a ppermute is the ppermute the other way, and
    weights that are the same on every data row get their gradient summed over "data" for you. Where:
    used as they arrive inside the loop, at every step of the backward loop (more bytes than the bound
    allows); made varying over "data" (`jax.lax.pcast(w, "data", to="varying")`) before the loop, once.
    Mind the module docstring's traps (pcast, static loop bounds).
    """
    ### BEGIN SOLUTION
    S = mesh.shape["stage"]
    M, B, F = xs.shape
    forward_pairs = [(s, s + 1) for s in range(S - 1)]

    def local_loss(w, xs, ys):
        s = jax.lax.axis_index("stage")
        # varying over "data" before the loop: each row's gradient is summed over "data" once, by the
        # transpose of this pcast, instead of at every step inside the backward loop
        w = jax.lax.pcast(w[0], "data", to="varying")

        def step(t, carry):
            received, total = carry
            new = jax.lax.dynamic_index_in_dim(xs, jnp.minimum(t, M - 1), keepdims=False)
            h = jnp.tanh(jnp.where(s == 0, new, received) @ w)
            m = t - (S - 1)
            target = jax.lax.dynamic_index_in_dim(ys, jnp.maximum(m, 0), keepdims=False)
            err = jnp.where((s == S - 1) & (m >= 0), jnp.sum((h - target) ** 2), 0.0)
            return jax.lax.ppermute(h, "stage", forward_pairs), total + err

        start = jax.lax.pcast(
            (jnp.zeros(xs.shape[1:], xs.dtype), jnp.zeros((), xs.dtype)),
            ("data", "stage"),
            to="varying",
        )
        _, total = jax.lax.fori_loop(0, M + S - 1, step, start)
        return jax.lax.psum(total, ("data", "stage")) / (M * B * F)

    loss_fn = jax.shard_map(
        local_loss,
        mesh=mesh,
        in_specs=(P("stage"), P(None, "data"), P(None, "data")),
        out_specs=P(),
    )
    loss, grad = jax.value_and_grad(loss_fn)(ws, xs, ys)
    return ws - lr * grad, loss
    ### END SOLUTION


def circular_forward(ws, xs, mesh):
    """R*S layers on S devices: each microbatch goes round the ring of stages R times.

    mesh: 1-D Explicit mesh "stage" of S devices. ws (R, S, F, F) arrives P(None, "stage"): layer r*S + s
    is ws[r, s] and lives on device s (so device s holds layers s, S + s, 2S + s, ...). xs (M, B, F)
    arrives P(), with M >= S. Returns the (M, B, F) outputs of all R*S layers applied in order
    (ws[0, 0], ws[0, 1], ..., ws[0, S-1], ws[1, 0], ...), replicated (P()).
    Stage 0 starts microbatch m's pass r at step r*M + m; stage s works on it s steps later, so at step t
    stage s works on microbatch (t - s) mod M, pass (t - s) // M, over R*M + S - 1 steps. What the last
    stage sends round to stage 0 (pair S-1 -> 0) comes back before it is needed: stage 0 keeps it
    (a small buffer of M microbatches) until its turn, M - S steps later.
    The tests compile it and expect: collective-permutes whose pairs form one cycle through all S
    devices (s -> s + 1 and S-1 -> 0), executed R*M + S - 2 or R*M + S - 1 times in all (a send after
    every step, or after every step but the last), each moving one microbatch's (B, F) activations; no
    all-gather of the weights, nor any other collective but one all-reduce or all-gather, run once, of
    at most R*M + S - 1 steps' (B, F) results; each device executing at most 2 R M B F F multiply-adds
    (twice its share of the model's R S M B F F) and sending at most S (R M + S - 1) B F floats.
    Values within rtol=1e-5.
    Mind the module docstring's traps (pcast, static loop bounds).
    Hint: keep on every device an (M, B, F) buffer of each microbatch's latest activations (only stage
    0's is used): write what arrives into it before reading the microbatch to start.
    """
    ### BEGIN SOLUTION
    S = mesh.shape["stage"]
    R = ws.shape[0]
    M = xs.shape[0]
    ring = [(s, (s + 1) % S) for s in range(S)]

    def per_device(w, xs):
        s = jax.lax.axis_index("stage")
        w = w[:, 0]  # (R, F, F): this device's layers

        def step(t, carry):
            received, buf, outs = carry
            # stage 0 files what came round the ring: microbatch (t - S) mod M, from step t - 1
            back = t - S
            buf = jnp.where(
                back >= 0,
                jax.lax.dynamic_update_index_in_dim(buf, received, back % M, 0),
                buf,
            )
            k = t - s  # this stage's work count: microbatch k mod M, pass k // M
            m, r = k % M, jnp.clip(k // M, 0, R - 1)
            start = jax.lax.dynamic_index_in_dim(buf, m, keepdims=False)
            h = jnp.tanh(jnp.where(s == 0, start, received) @ w[r])
            last = (s == S - 1) & (k >= (R - 1) * M) & (k < R * M)
            outs = jnp.where(last, jax.lax.dynamic_update_index_in_dim(outs, h, m, 0), outs)
            return jax.lax.ppermute(h, "stage", ring), buf, outs

        start = jax.lax.pcast(
            (jnp.zeros(xs.shape[1:], xs.dtype), xs, jnp.zeros_like(xs)), "stage", to="varying"
        )
        _, _, outs = jax.lax.fori_loop(0, R * M + S - 1, step, start)
        return jax.lax.psum(outs, "stage")

    return jax.shard_map(per_device, mesh=mesh, in_specs=(P(None, "stage"), P()), out_specs=P())(
        ws, xs
    )
    ### END SOLUTION
