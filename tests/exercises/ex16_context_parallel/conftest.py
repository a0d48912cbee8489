"""What ex16's visible and hidden tests share: the inputs, placed on the mesh, the float64 NumPy references
(attention, its gradients, the zigzag order), and the rules the compiled programs are graded by, so that
`shardlab check` applies the very checks grading does."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import NamedSharding, PartitionSpec as P

from grader.checks import (
    NotReported,
    Variant,
    assert_close,
    assert_collectives,
    assert_computes,
    assert_executed,
    assert_memory,
    assert_permute_pairs,
    assert_sharded_like,
    assert_traffic,
    assert_work,
    compiled,
    inputs,
    named_mistake,
    test_mesh,
)

# standard normal inputs, outputs of order 1; float32 softmaxes summed in other orders
TOL = dict(rtol=1e-5, atol=1e-5)
GRAD_TOL = dict(rtol=1e-4, atol=1e-4)


def _mesh(n):
    return test_mesh((n,), ("sp",), "explicit")


def _arrays(shape, seed, count=3):
    rng = inputs.rng(seed)
    return tuple(rng.standard_normal(shape, dtype=np.float32) for _ in range(count))


def _placed(mesh, *arrays):
    return tuple(jax.device_put(a, NamedSharding(mesh, P("sp"))) for a in arrays)


def _probabilities(q, k, causal):
    q, k = np.asarray(q, np.float64), np.asarray(k, np.float64)
    scores = q @ k.T / np.sqrt(q.shape[-1])
    if causal:
        scores = np.where(np.tril(np.ones(scores.shape, bool)), scores, -np.inf)
    p = np.exp(scores - scores.max(axis=-1, keepdims=True))
    return p / p.sum(axis=-1, keepdims=True)


def _attention(q, k, v, causal=False):
    """softmax(q @ k.T / sqrt(D) + mask) @ v in float64, (T, D); (T, H, D) head by head."""
    if np.ndim(q) == 3:
        heads = [_attention(q[:, h], k[:, h], v[:, h], causal) for h in range(q.shape[1])]
        return np.stack(heads, axis=1)
    return _probabilities(q, k, causal) @ np.asarray(v, np.float64)


def _attention_grads(q, k, v, r, causal):
    """The gradients of sum(attention(q, k, v) * r) with respect to q, k and v, in float64."""
    q, k, v, r = (np.asarray(a, np.float64) for a in (q, k, v, r))
    c = 1 / np.sqrt(q.shape[-1])
    p = _probabilities(q, k, causal)
    dp = r @ v.T
    ds = p * (dp - (dp * p).sum(axis=-1, keepdims=True))
    return ds @ k * c, ds.T @ q * c, p.T @ r


def _zigzag(seq_len, n):
    """The positions in device order: device d holds chunks d and 2n - 1 - d of 2n equal chunks."""
    chunks = np.arange(seq_len).reshape(2 * n, seq_len // (2 * n))
    return [int(i) for d in range(n) for i in np.concatenate([chunks[d], chunks[2 * n - 1 - d]])]


@pytest.fixture
def reference_zigzag():
    """reference_zigzag(seq_len, n) -> the list zigzag_order must return."""
    return _zigzag


# --- the share of each device ------------------------------------------------------------------------


def _ring_work_share(n, T, D):
    """One device's share of the attention's multiply-adds: q k^T and the weights times v for its T/n
    queries against all T keys, 2 T^2 D / n. The single-device reference computes every score, causal or
    not (a ring that skips masked blocks under lax.cond is counted at its larger branch, so the same)."""
    return 2 * T * T * D // n


def _ring_traffic_bound(n, T, D):
    """Its block of K and V, (T/n, D) float32 each, once per ring step: n - 1 moves are needed, n allowed
    (a scan that passes the blocks on after every step), so the bytes of the whole K and V."""
    return n * 2 * (T // n) * D * 4


def _ulysses_work_share(n, T, H, D):
    """One device's share of the heads' multiply-adds: every head's scores and weighted values over the
    whole sequence, 2 T^2 H D, split over the n devices (H/n heads each)."""
    return 2 * T * T * H * D // n


def _ulysses_traffic_bound(n, T, H, D):
    """Four blocks of (T/n, H, D) float32 through all-to-alls, each sending all but its own 1/n: q, k and v
    to the head split, the output back."""
    return 4 * (T // n) * H * D * 4 * (n - 1) // n


# --- the checks ------------------------------------------------------------------------------------


def _ring_call(impl, mesh, causal):
    return lambda q, k, v: impl.ring_attention(q, k, v, mesh, causal)


def _assert_no_nan(value, what):
    """A NaN in a ring's result is the fully masked block's mistake: said before any value differs."""
    bad = np.isnan(np.asarray(value))
    if bad.any():
        raise AssertionError(
            f"{what} has {int(bad.sum())} NaN entries, first at {tuple(int(i) for i in np.argwhere(bad)[0])}. "
            "Expected none. A block whose keys all come after the queries is masked out entirely: with a "
            "running maximum of -inf, exp(-inf - (-inf)) is NaN. Start the maximum finite, or make sure a "
            "fully masked block adds exactly nothing."
        )


def _chain_without_wrap(q, k, v, n) -> Variant:
    """A ring without the pair (n - 1, 0): device d only ever receives the blocks of devices 0..d, and
    zeros (keys scoring 0, values 0) in the steps where nothing reaches it."""
    tb = len(q) // n

    def computes():
        rows = []
        for d in range(n):
            kd, vd = np.array(k), np.array(v)
            kd[(d + 1) * tb :], vd[(d + 1) * tb :] = 0.0, 0.0
            rows.append(_attention(q[d * tb : (d + 1) * tb], kd, vd))
        return np.concatenate(rows)

    return Variant(
        computes,
        "matches a chain, not a ring: device d only ever receives the K and V blocks of the devices "
        "before it, and zeros where nothing arrives. Pass the blocks on with the pairs "
        "(j, (j + 1) % n), including (n - 1, 0), so that every block goes all the way round.",
    )


def _check_ring_values(impl, n, T, D, causal, seed):
    """ring_attention on n devices: no NaN, P("sp") and the float64 attention's values."""
    mesh = _mesh(n)
    q, k, v = _arrays((T, D), seed)
    out = jax.jit(_ring_call(impl, mesh, causal))(*_placed(mesh, q, k, v))
    _assert_no_nan(
        out, f"{'causal' if causal else 'non-causal'} ring_attention on {n} devices (T={T})"
    )
    want = _attention(q, k, v, causal)
    if not causal and np.shape(out) == want.shape:
        story = named_mistake(np.asarray(out), [_chain_without_wrap(q, k, v, n)], **TOL)
        if story:
            raise AssertionError(f"non-causal ring_attention on {n} devices (T={T}) {story}")
    assert_sharded_like(out, mesh, P("sp"), want, **TOL)


def _check_ring_grads(impl, n, T, D, causal, seed):
    """The gradients of sum(ring_attention(q, k, v) * r) for a fixed random r: no NaN anywhere (fully masked
    blocks), and the float64 gradients' values."""
    mesh = _mesh(n)
    q, k, v = _arrays((T, D), seed)
    (r,) = _arrays((T, D), seed + 100, count=1)
    ring = _ring_call(impl, mesh, causal)

    def loss(a, b, c):
        return jnp.sum(ring(a, b, c) * r)

    out, grads = jax.jit(
        lambda a, b, c: (ring(a, b, c), jax.grad(loss, argnums=(0, 1, 2))(a, b, c))
    )(*_placed(mesh, q, k, v))
    kind = "causal" if causal else "non-causal"
    for name, value in zip(("the output", "dq", "dk", "dv"), (out, *grads)):
        _assert_no_nan(value, f"{kind} ring_attention on {n} devices (T={T}): {name}")
    expected = _attention_grads(q, k, v, r, causal)
    for name, value, want in zip(("dq", "dk", "dv"), grads, expected):
        assert_close(value, want, **GRAD_TOL, name=f"{kind} {name} on {n} devices")


def _check_ring_program(impl, n, T, D, causal, seed):
    """The compiled ring_attention: collective-permute only, pairs forming one n-cycle, run at least n - 1
    times, each device executing at most twice its share of the attention's multiply-adds and sending at
    most its block of K and V per ring step; and the program computes the attention."""
    mesh = _mesh(n)
    q, k, v = _arrays((T, D), seed)
    args = _placed(mesh, q, k, v)
    expected = _attention(q, k, v, causal)
    program = compiled(_ring_call(impl, mesh, causal), *args)
    what = f"ring_attention on {n} devices"
    assert_collectives(
        program, *args, only=("collective-permute",), expected=expected, **TOL, what=what
    )
    assert_permute_pairs(
        program,
        mesh,
        "sp",
        shape="cycle",
        what=what,
        hint="K and V travel round a ring: every device sends its block to the same neighbour, the "
        "last one back to the first.",
    )
    assert_executed(
        program,
        "collective-permute",
        at_least=n - 1,
        what=what,
        hint="The K and V blocks must make n - 1 moves round the ring, and the step count must be "
        "static (a fori_loop or scan with Python int bounds).",
    )
    assert_work(
        program,
        share=_ring_work_share(n, T, D),
        share_of="the attention's dot work, 2 T^2 D / n",
        what=what,
        hint="Each device computes the rows of its own T/n queries, against one K and V block at a "
        "time. Does every device attend every query (q passed round too, the whole attention computed "
        "and its own rows sliced out)?",
    )
    assert_traffic(
        program,
        at_most=_ring_traffic_bound(n, T, D),
        bound_of="its block of K and V once per ring step, n steps at most: 2 T D x 4 bytes",
        what=what,
        hint="Only K and V travel, a block of each per step. Do the queries, or whole arrays, travel "
        "round the ring too?",
    )


def _check_ring_memory(impl, n, T, D, seed):
    """XLA's temporary bytes per device of the compiled causal ring_attention, which must compute the
    attention, stay below the whole K and V: a ring holds a block or two of them at a time."""
    mesh = _mesh(n)
    q, k, v = _arrays((T, D), seed)
    args = _placed(mesh, q, k, v)
    program = compiled(_ring_call(impl, mesh, True), *args)
    what = f"ring_attention on {n} devices (T={T}, D={D})"
    assert_computes(program(*args), _attention(q, k, v, True), **TOL, what=what)
    whole_kv = k.nbytes + v.nbytes
    try:
        assert_memory(
            program,
            temp_below=whole_kv,
            what=what,
            hint=f"The whole K and V take {whole_kv} bytes, one block of each {whole_kv // n}. Do you "
            "gather K and V, or keep every block you received (a Python loop over the steps)? Pass the "
            "blocks on in a fori_loop and keep only the running m, l and o.",
        )
    except NotReported as exc:
        pytest.skip(str(exc))


def _check_ulysses_values(impl, n, T, H, D, seed):
    mesh = _mesh(n)
    q, k, v = _arrays((T, H, D), seed)
    out = jax.jit(lambda a, b, c: impl.ulysses_attention(a, b, c, mesh))(*_placed(mesh, q, k, v))
    assert_sharded_like(out, mesh, P("sp"), _attention(q, k, v), **TOL)


def _check_ulysses_program(impl, n, T, H, D, seed):
    """The compiled ulysses_attention: all-to-all only, 2 to 4 of them (q, k and v stacked in one or apart,
    the output back in one), each device executing at most twice its share of the heads' multiply-adds and
    sending its blocks of q, k, v and the output once each; and the program computes the attention."""
    mesh = _mesh(n)
    q, k, v = _arrays((T, H, D), seed)
    args = _placed(mesh, q, k, v)
    expected = _attention(q, k, v)
    program = compiled(lambda a, b, c: impl.ulysses_attention(a, b, c, mesh), *args)
    what = f"ulysses_attention on {n} devices"
    assert_collectives(program, *args, only=("all-to-all",), expected=expected, **TOL, what=what)
    assert_executed(
        program,
        "all-to-all",
        at_least=2,
        at_most=4,
        what=what,
        hint="The queries, keys and values go to a head split in one all_to_all (stacked) or three, "
        "and the output comes back in one.",
    )
    assert_work(
        program,
        share=_ulysses_work_share(n, T, H, D),
        share_of="the heads' dot work, 2 T^2 H D / n",
        what=what,
        hint=f"After the first all_to_all each device holds {H // n} of the {H} heads over the whole "
        "sequence, and computes those heads only. Does every device compute every head?",
    )
    assert_traffic(
        program,
        at_most=_ulysses_traffic_bound(n, T, H, D),
        bound_of="its blocks of q, k and v to the head split and its heads' output back, each through "
        "one all-to-all: 4 x (n - 1)/n x (T/n) H D x 4 bytes",
        what=what,
        hint="An all_to_all sends each device's own block once, a piece to each device. Do you send "
        "copies of a block, or of whole arrays?",
    )


@pytest.fixture
def check_ring_values():
    """check_ring_values(impl, n, T, D, causal, seed): ring_attention's sharding and values."""
    return _check_ring_values


@pytest.fixture
def check_ring_grads():
    """check_ring_grads(impl, n, T, D, causal, seed): no NaN, and the gradients of q, k and v."""
    return _check_ring_grads


@pytest.fixture
def check_ring_program():
    """check_ring_program(impl, n, T, D, causal, seed): the compiled ring's collectives, pairs and count."""
    return _check_ring_program


@pytest.fixture
def check_ring_memory():
    """check_ring_memory(impl, n, T, D, seed): the compiled causal ring's temporary bytes per device."""
    return _check_ring_memory


@pytest.fixture
def check_ulysses_values():
    """check_ulysses_values(impl, n, T, H, D, seed): ulysses_attention's sharding and values."""
    return _check_ulysses_values


@pytest.fixture
def check_ulysses_program():
    """check_ulysses_program(impl, n, T, H, D, seed): the compiled Ulysses program's all-to-alls."""
    return _check_ulysses_program
