"""ex15_expert_parallel: a mixture of experts over devices.

A mixture-of-experts layer has E feed-forward "experts"; each token goes to one of them. Expert e is

    ffn_e(h) = relu(h @ w1[e]) @ w2[e]        w1 (E, D, H), w2 (E, H, D)

Expert parallelism keeps every expert's weights on one device and moves the tokens instead. On the 1-D
Explicit mesh `mesh` (axis "ep", n devices) there are E = n * k experts, and device d owns experts
d*k, ..., d*k + k - 1: w1 and w2 arrive P("ep"), so device d holds exactly those experts' rows. Tokens
x (T, D) arrive P("ep") too (T divisible by n): each device routes its own T/n tokens, wherever their
experts live.

Static shapes need a fixed-size exchange: a device puts the tokens it sends to expert e in slots
0 .. capacity-1 of a buffer (E, capacity, D), sends each expert's rows to that expert's owner with one
`jax.lax.all_to_all`, the owners apply their experts to what they received, and a second all_to_all
brings the results back to the slots they came from. The capacity rule, fixed so that every correct
answer agrees: for each source device and each expert, the FIRST `capacity` of that device's tokens
routed to that expert, in the device's token order, are kept; the rest are dropped, and a dropped
token's output row is 0. Dropping is allowed, losing count of it is not: num_dropped says how many.

Graded on meshes of 2, 4 and 8 devices (the visible tests on 8, and on 2 for moe_layer's capacity), with
k = 1 and 2 experts per device, capacities where nothing drops and tight ones. Values are compared with a
NumPy reference at rtol=1e-5, atol=1e-5 (float32 matmuls summed in different orders), num_dropped
exactly, and the gradients of sum(out * r) (r a fixed random array) with respect to x, w1 and w2 at
rtol=1e-4, atol=1e-4. The tests compile dispatch_combine and read its program: it runs all-to-all
exactly twice (no loop needed here), each moving one (E, capacity, D) float32 buffer per device (the
bound allows two more float32 values per slot, e.g. a gate sent with its token), no all-gather, and
its other collectives move at most 1 KiB per device in all (room for the drop counts: the experts'
weights never move, by any collective); XLA's argument bytes per device hold only 1/n of w1 and w2,
its temporary bytes stay below w1 and w2 together; each device executes at most twice its share of the
work, the experts' work on full (E, capacity) buffers (on sizes where a device's T/n tokens are far fewer
than H, so that sorting tokens into slots costs little; every step of a loop is counted), and sends at
most the two all-to-alls' buffers and the drop counts. moe_layer is held to the same shares, its router's
work added. Each of those rules is earned only by a program that also computes the right values.

Grading: 20 points. dispatch_combine: values, num_dropped and shardings 6 (1.5 in the visible tests);
gradients 3 (1 visible); the two all-to-alls and their buffers, no all-gather, the bytes sent 3 (1
visible); memory and work 2 (0.5 visible). moe_layer: the capacity formula and the routing, values and
num_dropped, its shares of the work and the bytes 6 (2 visible).
"""

import math
from functools import partial

import jax
import jax.numpy as jnp
from jax.sharding import PartitionSpec as P


# Given: jax.jit compiles each function once per mesh and capacity and reuses the program; without
# it, shard_map called outside jit runs its body one operation at a time.
@partial(jax.jit, static_argnames=("mesh", "capacity"))
def dispatch_combine(x, expert_ids, gates, w1, w2, mesh, capacity: int):
    """Send every token to its expert's device, apply the expert, bring the result back.

    Inputs, all P("ep") on the 1-D mesh (axis "ep", n devices, E = n * k experts):
      x (T, D) float32, expert_ids (T,) int32 in [0, E), gates (T,) float32,
      w1 (E, D, H) and w2 (E, H, D) float32 (device d holds experts d*k .. d*k + k - 1).
    `capacity` is a Python int, the same for every expert.
    Returns (out, num_dropped):
      out (T, D) float32, P("ep"): out[t] = gates[t] * ffn_{expert_ids[t]}(x[t]) for a kept token,
        0 for a dropped one, where ffn_e(h) = relu(h @ w1[e]) @ w2[e];
      num_dropped: int32 scalar, replicated (P()): the total number of dropped tokens over all devices.
    Capacity rule: for each source device and each expert, the first `capacity` of the device's tokens
    routed to that expert (in the device's own token order) are kept, the rest dropped.

    Inside `jax.shard_map`, each device sorts its T/n tokens into an (E, capacity, D) buffer (a token's
    slot: how many of the device's earlier tokens chose the same expert), exchanges it with
    `jax.lax.all_to_all` so that each device receives, from every device, the slots of the experts it
    owns, applies its k experts to them, sends the results back with a second all_to_all, and reads each
    kept token's result from its slot. Exactly two all-to-alls, each moving the (E, capacity, D) buffer:
    never a buffer of T/n (or T) rows per expert, and never the experts' weights (no all-gather, and no
    other collective moving more than the drop count).
    Shares: each device executes at most 4 E capacity D H multiply-adds, twice its share of the work
    (its k experts applied to the capacity slots of each of the n devices: 2 E capacity D H); it sends
    at most (n - 1) / n of two (E, capacity, D + 2) float32 buffers (room for a gate and one more value
    per slot) and 1 KiB for the drop counts.
    No loop is needed; a loop around a collective must have static bounds (a Python loop, or
    fori_loop/scan with Python-int bounds), since the tests count the all-to-alls as executed.
    Traps: the capacity counts per SOURCE device (each device decides alone which of its tokens fit);
    the first tokens are kept, not the last; num_dropped is the sum over all devices, returned P().
    Tolerances: out at rtol=1e-5, atol=1e-5 against float64 NumPy; num_dropped exactly; the gradients
    of sum(out * r) with respect to x, w1 and w2 at rtol=1e-4, atol=1e-4.
    Hint: a one-hot of expert_ids and a cumulative sum down the tokens gives each token its slot;
    `all_to_all(buf, "ep", split_axis=0, concat_axis=0, tiled=True)` on a buffer whose first axis
    is grouped by destination device sends group j to device j.
    """

    ### BEGIN SOLUTION
    n = mesh.shape["ep"]
    num_experts = w1.shape[0]
    k = num_experts // n

    def per_device(x, ids, gates, w1, w2):
        tokens, d = x.shape
        onehot = jax.nn.one_hot(ids, num_experts, dtype=jnp.int32)  # (T/n, E)
        # A token's slot: how many of this device's earlier tokens chose the same expert.
        slot = jnp.take_along_axis(jnp.cumsum(onehot, axis=0) - 1, ids[:, None], axis=1)[:, 0]
        kept = slot < capacity
        # Dropped tokens get an out-of-range slot, which mode="drop" leaves out of the buffer.
        where = jnp.where(kept, slot, capacity)
        buf = jnp.zeros((num_experts, capacity, d), x.dtype).at[ids, where].set(x, mode="drop")
        # (n, k, C, D): group j holds the slots of device j's experts; afterwards, what device j sent us.
        received = jax.lax.all_to_all(
            buf.reshape(n, k, capacity, d), "ep", split_axis=0, concat_axis=0, tiled=True
        )
        hidden = jax.nn.relu(jnp.einsum("skcd,kdh->skch", received, w1))
        done = jnp.einsum("skch,khd->skcd", hidden, w2)
        back = jax.lax.all_to_all(done, "ep", split_axis=0, concat_axis=0, tiled=True)
        back = back.reshape(num_experts, capacity, d)
        rows = back[ids, jnp.minimum(slot, capacity - 1)]
        out = jnp.where(kept[:, None], rows * gates[:, None], 0.0)
        dropped = jax.lax.psum(jnp.sum(~kept, dtype=jnp.int32), "ep")
        return out, dropped

    spec = P("ep")
    return jax.shard_map(
        per_device,
        mesh=mesh,
        in_specs=(spec, spec, spec, spec, spec),
        out_specs=(spec, P()),
    )(x, expert_ids, gates, w1, w2)
    ### END SOLUTION


@partial(jax.jit, static_argnames=("mesh", "capacity_factor"))
def moe_layer(x, wg, w1, w2, mesh, capacity_factor: float):
    """A top-1 mixture-of-experts layer: route each token, then dispatch_combine.

    x (T, D): P("ep"); wg (D, E): P() (replicated); w1 (E, D, H), w2 (E, H, D): P("ep");
    capacity_factor a Python float. Returns (out, num_dropped) as dispatch_combine does.
    Routing: logits = x @ wg; a token's expert is the argmax of its logits (the lowest index on ties,
    as jnp.argmax does) and its gate is softmax(logits)[expert].
    Capacity: `math.ceil(capacity_factor * (T / n) / E)`, computed exactly so, in Python floats (T/n
    tokens per device). That formula is the contract: 2.2 * 50 / 2 gives 56 in floats, not 55, and
    1.12 * 50 / 8 gives 8, not 7; int(), round() or exact fractions give other capacities, hence
    other drops.
    Values at rtol=1e-5, atol=1e-5, num_dropped exactly (the tests route tokens clearly, so float32
    and float64 argmaxes agree, and make some tokens' logits exactly equal). Shares: each device executes
    at most twice its share of the work, (T/n) D E for its tokens' logits and 2 E capacity D H for the
    experts (the tests use H far above T/n), and sends at most what dispatch_combine may.
    Hint: the shapes are static, so the capacity is a Python int computed before anything is traced.
    """
    ### BEGIN SOLUTION
    n = mesh.shape["ep"]
    num_experts = wg.shape[1]
    capacity = math.ceil(capacity_factor * (x.shape[0] / n) / num_experts)
    logits = x @ wg
    expert_ids = jnp.argmax(logits, axis=-1).astype(jnp.int32)
    gates = jnp.take_along_axis(jax.nn.softmax(logits, axis=-1), expert_ids[:, None], axis=-1)[:, 0]
    return dispatch_combine(x, expert_ids, gates, w1, w2, mesh, capacity)
    ### END SOLUTION
