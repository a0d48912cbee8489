"""The one account of a compiled program (grader.checks.account): what one device executes, every figure
counted through the program's loops; an unknown count is unknown everywhere; and the share rules that read it
(grader.checks.shares) tell a program that divides the work from one that replicates it."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import NamedSharding, PartitionSpec as P

from grader.checks import (
    UnknownCount,
    account_of,
    assert_executed,
    assert_traffic,
    assert_work,
    between_devices,
    compiled,
    test_mesh,
)
from grader.checks.account import sent_bytes
from grader.core import facts
from grader.core.results import ProgramAccount, RuleFigure, TestResult, Traffic

N, ROWS, F, OUT = (
    8,
    4,
    16,
    8,
)  # 8 devices, each with ROWS rows of an (N * ROWS, F) batch; W (F, OUT)


@pytest.fixture(scope="module")
def line():
    return test_mesh((N,), ("i",), "explicit")


@pytest.fixture(scope="module")
def grid():
    return test_mesh((2, 4), ("data", "model"), "explicit")


def placed(mesh, shape, spec, fill=None):
    values = (
        np.arange(np.prod(shape), dtype=np.float32).reshape(shape) % 7 if fill is None else fill
    )
    return jax.device_put(np.asarray(values, np.float32), NamedSharding(mesh, spec))


def mapped(mesh, body, in_specs, out_specs, *args):
    fn = jax.shard_map(body, mesh=mesh, in_specs=in_specs, out_specs=out_specs, check_vma=False)
    return compiled(fn, *args)


def layer_args(mesh):
    return placed(mesh, (N * ROWS, F), P("i")), placed(mesh, (F, OUT), P())


# -- work ---------------------------------------------------------------------------------------------


def test_a_dot_counts_its_multiply_adds_and_a_loop_its_trip_count(line):
    x, w = layer_args(line)
    square = placed(line, (OUT, OUT), P())

    def body(x, w, s):
        h = x @ w  # ROWS x OUT outputs, F multiply-adds each
        return jax.lax.fori_loop(
            0, 5, lambda i, h: jax.lax.fori_loop(0, 3, lambda j, h: h @ s, h), h
        )

    account = account_of(mapped(line, body, (P("i"), P(), P()), P("i"), x, w, square))
    assert account.dot_work == ROWS * OUT * F + 15 * ROWS * OUT * OUT
    assert account.devices == N and account.traffic == ()


def test_a_batched_contraction_and_a_convolution_count_their_multiply_adds(line):
    a, b = placed(line, (N * 2, 3, 5), P("i")), placed(line, (N * 2, 5, 4), P("i"))
    account = account_of(
        mapped(line, lambda a, b: jnp.einsum("bij,bjk->bik", a, b), (P("i"), P("i")), P("i"), a, b)
    )
    assert account.dot_work == 2 * 3 * 4 * 5  # each device: 2 batches of (3, 4) outputs over 5
    images = placed(line, (N, 3, 9, 9), P("i"))
    kernel = placed(line, (6, 3, 3, 3), P())

    def conv(x, k):
        return jax.lax.conv_general_dilated(x, k, (1, 1), "VALID")

    account = account_of(mapped(line, conv, (P("i"), P()), P("i"), images, kernel))
    assert account.dot_work == (1 * 6 * 7 * 7) * (3 * 3 * 3)  # outputs x (window x input features)


def test_a_product_written_out_is_counted_as_the_dot_it_is(line):
    """`(x[:, :, None] * w).sum(1)` computes x @ w without a dot: its products count all the same, so
    computing every device's rows this way is no cheaper for the rule than with a dot."""
    x, w = layer_args(line)
    account = account_of(
        mapped(line, lambda x, w: (x[:, :, None] * w[None]).sum(1), (P("i"), P()), P("i"), x, w)
    )
    assert account.dot_work == 0 and account.product_work == ROWS * F * OUT
    assert account.work == ROWS * F * OUT

    def offset_rows(x):  # an integer product (the device's offset) is index arithmetic, not work
        return jax.lax.dynamic_slice_in_dim(x, jax.lax.axis_index("i") * 2, 2) * 3.0

    account = account_of(mapped(line, offset_rows, P("i"), P("i"), x))
    assert "s32[] multiply(" in mapped(line, offset_rows, P("i"), P("i"), x).as_text()
    assert account.product_work == 2 * F  # the float product of the slice by 3, not the offset

    def rank_one_updates(x, w):  # acc += x[:, k] w[k, :], one column of x at a time
        def step(k, acc):
            return acc + jax.lax.dynamic_slice_in_dim(x, k, 1, 1) * jax.lax.dynamic_slice_in_dim(
                w, k, 1, 0
            )

        return jax.lax.fori_loop(0, F, step, jnp.zeros((ROWS, OUT)))

    account = account_of(mapped(line, rank_one_updates, (P("i"), P()), P("i"), x, w))
    assert account.work >= ROWS * F * OUT


def test_a_conditional_counts_its_larger_branch_not_both(line):
    x, w = layer_args(line)
    big = placed(line, (OUT, OUT), P())

    def body(x, w, s):
        h = x @ w
        return jax.lax.cond(h[0, 0] > 0, lambda: h @ s @ s, lambda: h @ s)

    account = account_of(mapped(line, body, (P("i"), P(), P()), P("i"), x, w, big))
    assert account.dot_work == ROWS * OUT * F + 2 * ROWS * OUT * OUT


def test_a_checkpointed_scan_counts_its_recompute(line):
    """The gradient of a rematerialized scan runs each step's forward again: the account counts what runs."""
    x, w = placed(line, (N * ROWS, OUT), P("i")), placed(line, (OUT, OUT), P())

    def loss(w, x, remat):
        def step(h, _):
            return jnp.tanh(h @ w), None

        return jax.lax.scan(jax.checkpoint(step) if remat else step, x, None, length=4)[0].sum()

    def grads(remat):
        body = lambda x, w: jax.grad(loss)(w, x, remat)  # noqa: E731
        return account_of(mapped(line, body, (P("i"), P()), P(), x, w)).dot_work

    plain, remat = grads(False), grads(True)
    step = ROWS * OUT * OUT
    assert plain == 3 * 4 * step  # forward, and two dots of the backward, per step
    assert remat == 4 * 4 * step  # and the forward again


# -- unknown counts -------------------------------------------------------------------------------------


def test_a_loop_with_no_static_trip_count_makes_only_what_it_holds_unknown(line):
    x, w = layer_args(line)
    square = placed(line, (OUT, OUT), P())

    def body(x, w, s, steps):
        h = x @ w
        h = jax.lax.fori_loop(0, steps[0], lambda i, h: h @ s, h)
        counter = jax.lax.fori_loop(
            0, steps[0], lambda i, c: c + 1.0, 0.0
        )  # nothing counted inside
        return jax.lax.psum(h, "i") + counter

    steps = jax.device_put(jnp.array([3], jnp.int32), NamedSharding(line, P()))
    program = mapped(line, body, (P("i"), P(), P(), P()), P("i"), x, w, square, steps)
    account = account_of(program)
    assert account.dot_work is None and account.work is None
    (reduce,) = account.traffic
    assert reduce.runs == 1 and reduce.sent_bytes == sent_bytes("all-reduce", N, ROWS * OUT * 4)
    facts.start()
    with pytest.raises(UnknownCount, match="not fixed when it compiles.*static bounds"):
        assert_work(program, share=1, share_of="the layer")
    assert assert_traffic(program, at_most=10**6, bound_of="anything").sent_bytes is not None
    (work, traffic) = facts.take().figures
    assert (work.actual, work.passed, traffic.passed) == (None, False, True)


def test_an_unknown_count_fails_every_rule_over_it_with_the_same_message(line):
    x = placed(line, (N * ROWS, OUT), P("i"))

    def body(x, steps):
        return jax.lax.fori_loop(0, steps[0], lambda i, c: jax.lax.ppermute(c, "i", ring()), x)

    steps = jax.device_put(jnp.array([3], jnp.int32), NamedSharding(line, P()))
    program = mapped(line, body, (P("i"), P()), P("i"), x, steps)
    messages = []
    for check in (
        lambda: assert_traffic(program, at_most=10**9, bound_of="anything"),
        lambda: assert_executed(program, "collective-permute", at_least=1),
    ):
        with pytest.raises(UnknownCount) as caught:
            check()
        messages.append(str(caught.value).split("; the rule is")[0])
    assert messages[0].replace("collectives", "X") == messages[1].replace("collective-permute", "X")


def ring(step=1):
    return [(s, (s + step) % N) for s in range(N)]


# -- traffic ---------------------------------------------------------------------------------------------


def test_each_kind_sends_what_its_algorithm_moves(line):
    x = placed(line, (N * N, OUT), P("i"))  # an (N, OUT) block per device: B bytes
    block = N * OUT * 4

    def body(x):
        return (
            jax.lax.psum(x, "i"),
            jax.lax.all_gather(x, "i", tiled=True),
            jax.lax.psum_scatter(x, "i", tiled=True),
            jax.lax.all_to_all(x, "i", 0, 0, tiled=True),
            jax.lax.ppermute(x, "i", ring()),
        )

    specs = (P("i"), P(), P("i"), P("i"), P("i"))
    account = account_of(mapped(line, body, P("i"), specs, x))
    sent = {row.kind: row.sent_bytes for row in account.traffic}
    assert sent == {
        "all-reduce": 2 * (N - 1) * block // N,
        "all-gather": (N - 1) * block,
        "reduce-scatter": (N - 1) * block // N,
        "all-to-all": (N - 1) * block // N,
        "collective-permute": block,
    }
    assert all(row.axes == ("i",) and row.runs == 1 for row in account.traffic)
    assert account.sent_bytes == sum(sent.values())


def test_axes_on_a_grid_and_singleton_groups_send_nothing(grid):
    x = placed(grid, (4, 8), P("data", "model"))  # a (2, 2) block per device: 16 bytes

    def body(x):
        across = jax.lax.ppermute(x, "model", [(s, (s + 1) % 4) for s in range(4)])
        return jax.lax.psum(x, "data") + jax.lax.psum(across, "model")

    account = account_of(mapped(grid, body, P("data", "model"), P(None, None), x))
    rows = {(row.kind, row.axes): row for row in account.traffic}
    assert rows[("all-reduce", ("data",))].sent_bytes == 2 * 1 * 16 // 2
    assert rows[("all-reduce", ("model",))].sent_bytes == 2 * 3 * 16 // 4
    assert rows[("collective-permute", ("model",))].sent_bytes == 16
    flat = test_mesh((1, 8), ("data", "model"), "explicit")
    x = placed(flat, (8, 8), P("data", "model"))
    account = account_of(
        mapped(flat, lambda x: jax.lax.psum(x, "data"), P("data", "model"), P(None, "model"), x)
    )
    # a collective over singleton groups moves nothing between devices (XLA may keep or drop it)
    assert all(row.sent_bytes == 0 and row.axes == () for row in account.traffic)
    assert between_devices(account) == ()


def test_bytes_sent_per_run_of_each_kind():
    assert sent_bytes("all-reduce", 4, 400) == 600
    assert sent_bytes("all-gather", 4, 400) == 1200
    assert sent_bytes("reduce-scatter", 4, 400) == sent_bytes("all-to-all", 4, 400) == 300
    assert sent_bytes("all-reduce", 1, 400) == 0
    assert sent_bytes("collective-permute", 2, 400, [(0, 1)]) == 400
    assert sent_bytes("collective-permute", 2, 400, [(0, 0), (1, 1)]) == 0


# -- the share rules -----------------------------------------------------------------------------------


def honest_layer(x, w):
    return x @ w


def replicated_layer(x, w):
    """Every device computes the whole batch and keeps its rows: the right values, no collective named."""
    whole = jax.lax.all_gather(x, "i", tiled=True)
    rows = whole @ w
    return jax.lax.dynamic_slice_in_dim(rows, jax.lax.axis_index("i") * ROWS, ROWS)


@pytest.mark.parametrize("body", [honest_layer, replicated_layer])
def test_the_share_rules_tell_divided_work_from_replicated(line, body):
    x, w = layer_args(line)
    program = mapped(line, body, (P("i"), P()), P("i"), x, w)
    want = np.asarray(x) @ np.asarray(w)
    share = ROWS * F * OUT  # the layer's N ROWS F OUT multiply-adds over N devices
    facts.start()
    checks = [
        lambda: assert_work(
            program,
            share=share,
            share_of="the layer's dot work, B F O / n",
            what="layer",
            hint="Is the whole batch computed on every device?",
            expected=want,
            args=(x, w),
        ),
        lambda: assert_traffic(
            program, at_most=0, bound_of="the batch stays where it is", what="layer"
        ),
    ]
    if body is honest_layer:
        for check in checks:
            check()
    else:
        with pytest.raises(AssertionError) as work:
            checks[0]()
        assert str(work.value).startswith(
            "each device executed 8.0 x its share of the layer's dot work, B F O / n:"
        )
        assert "Is the whole batch computed on every device?" in str(work.value)
        with pytest.raises(
            AssertionError, match=r"sent 1,792 bytes.*all-gather over 'i'.*needs none"
        ):
            checks[1]()
    recorded = facts.take()
    (account,) = recorded.programs  # one account, however many rules read it
    assert [f.rule for f in recorded.figures] == ["work", "traffic"]
    assert all(f.program == account.key for f in recorded.figures)
    work_figure = recorded.figures[0]
    assert work_figure.share == share and work_figure.bound == 2 * share
    assert work_figure.ratio == pytest.approx(1.0 if body is honest_layer else 8.0, abs=0.01)


def test_a_share_is_earned_only_with_the_right_values(line):
    """A function that does nothing is within any bound: the rule holds only when the values are right."""
    x, w = layer_args(line)
    program = mapped(line, lambda x, w: jnp.zeros((ROWS, OUT)), (P("i"), P()), P("i"), x, w)
    want = np.asarray(x) @ np.asarray(w)
    for check in (
        lambda: assert_work(program, share=1, share_of="the layer", expected=want, args=(x, w)),
        lambda: assert_traffic(program, at_most=0, bound_of="none", expected=want, args=(x, w)),
    ):
        with pytest.raises(AssertionError, match="your function"):
            check()


def test_work_where_none_is_needed_is_named(line):
    x = placed(line, (N * ROWS, OUT), P("i"))
    program = mapped(line, lambda x: jax.lax.psum(x * x, "i"), P("i"), P(), x)
    with pytest.raises(AssertionError, match=r"executed 32 multiply-adds.*it needs none: a sum"):
        assert_work(program, share=0, share_of="a sum multiplies nothing", what="all_reduce")


def test_bad_bounds_are_refused(line):
    x, w = layer_args(line)
    program = mapped(line, honest_layer, (P("i"), P()), P("i"), x, w)
    with pytest.raises(ValueError, match="share must be a count"):
        assert_work(program, share=-1, share_of="x")
    with pytest.raises(ValueError, match="allowed must be a positive"):
        assert_work(program, share=1, share_of="x", allowed=0)
    with pytest.raises(ValueError, match="at_most must be a count"):
        assert_traffic(program, at_most=1.5, bound_of="x")


# -- the facts -------------------------------------------------------------------------------------------


def test_the_account_and_its_figures_cross_as_json_and_refuse_unknown_keys(line):
    x, w = layer_args(line)
    account = account_of(mapped(line, replicated_layer, (P("i"), P()), P("i"), x, w), what="layer")
    figure = RuleFigure(
        account.key, "work", "multiply-adds per device", "at most 2 x", None, False, 8, 4
    )
    assert ProgramAccount.from_dict(account.to_dict()) == account
    assert RuleFigure.from_dict(figure.to_dict()) == figure
    result = TestResult("t.py::test_x", "ex04_sharded_layer", False, 1.0, "failed", "no")
    result = result.with_facts(facts.TestFacts(programs=[account], figures=[figure]))
    assert TestResult.from_dict(result.to_dict()) == result
    with pytest.raises(ValueError, match="unknown key"):
        Traffic.from_dict({**account.traffic[0].to_dict(), "extra": 1})
    with pytest.raises(ValueError, match="must be a count"):
        ProgramAccount.from_dict({**account.to_dict(), "dot_work": -3})


def test_a_test_keeps_a_bounded_table(line):
    x, w = layer_args(line)
    account = account_of(mapped(line, honest_layer, (P("i"), P()), P("i"), x, w))
    many = [RuleFigure(account.key, "work", "m", "e", 1, True)] * 100
    result = TestResult("t.py::test_x", "ex04_sharded_layer", False, 1.0, "passed")
    result = result.with_facts(facts.TestFacts(programs=[account] * 20, figures=many))
    assert len(result.programs) <= 8 and len(result.figures) <= 48
    assert "programs' accounts" in result.message and "rules' figures" in result.message
