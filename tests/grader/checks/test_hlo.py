"""Collectives are counted from the compiled HLO; memory and flops come from XLA's own analyses."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import NamedSharding, PartitionSpec as P

from grader.checks import (
    NotReported,
    assert_collectives,
    assert_computes,
    collective_ops,
    collectives_in,
    compiled,
    flops_per_device,
    memory_per_device,
    test_mesh,
)
from grader.checks.hlo import instruction_opcode, mesh_axes_of


@pytest.fixture
def mesh():
    return test_mesh((8,), ("i",))


@pytest.fixture
def x(mesh):
    return jax.device_put(jnp.arange(64.0).reshape(64, 1), NamedSharding(mesh, P("i")))


def per_device(mesh, body, out_specs=None, check_vma=True):
    out_specs = P("i") if out_specs is None else out_specs
    return jax.shard_map(body, mesh=mesh, in_specs=P("i"), out_specs=out_specs, check_vma=check_vma)


@pytest.mark.parametrize(
    "kind, body, out_specs, check_vma",
    [
        ("all-reduce", lambda v: jax.lax.psum(v, "i"), P(), True),
        ("all-gather", lambda v: jax.lax.all_gather(v, "i", tiled=True), P(), False),
        ("reduce-scatter", lambda v: jax.lax.psum_scatter(v, "i", tiled=True), P("i"), True),
        (
            "collective-permute",
            lambda v: jax.lax.ppermute(v, "i", [(k, (k + 1) % 8) for k in range(8)]),
            P("i"),
            True,
        ),
        ("all-to-all", lambda v: jax.lax.all_to_all(v, "i", 0, 0, tiled=True), P("i"), True),
    ],
)
def test_each_shard_map_collective_is_counted_once(mesh, x, kind, body, out_specs, check_vma):
    assert collectives_in(per_device(mesh, body, out_specs, check_vma), x) == {kind: 1}


def test_no_collectives_in_local_work(mesh, x):
    assert collectives_in(per_device(mesh, lambda v: jnp.sin(v) * 2), x) == {}


def test_replica_groups_are_read(x):
    mesh = test_mesh((4, 2), ("a", "b"))
    y = jax.device_put(jnp.ones((8, 8)), NamedSharding(mesh, P("a", "b")))
    f = jax.shard_map(
        lambda v: jax.lax.psum(v, "a"), mesh=mesh, in_specs=P("a", "b"), out_specs=P(None, "b")
    )
    (op,) = collective_ops(f, y)
    assert op.kind == "all-reduce" and op.group_size == 4
    assert sorted(op.groups) == [(0, 2, 4, 6), (1, 3, 5, 7)]


@pytest.mark.parametrize("order", ["in id order", "permuted"])
def test_replica_groups_are_mapped_to_mesh_axes(order):
    """Groups are read as positions in the mesh (the program's device assignment), not as device ids:
    on a mesh that lists the devices out of order the same psum gives the same groups and axes."""
    ids = list(range(8)) if order == "in id order" else [3, 1, 7, 5, 0, 2, 6, 4]
    mesh = jax.sharding.Mesh(
        np.array(jax.devices())[ids].reshape(4, 2),
        ("a", "b"),
        axis_types=(jax.sharding.AxisType.Explicit,) * 2,
    )
    y = jax.device_put(jnp.ones((8, 8)), NamedSharding(mesh, P("a", "b")))
    for axes, out_specs in ((("a",), P(None, "b")), (("b",), P("a", None)), (("a", "b"), P())):
        f = jax.shard_map(
            lambda v, axes=axes: jax.lax.psum(v, axes),
            mesh=mesh,
            in_specs=P("a", "b"),
            out_specs=out_specs,
        )
        (op,) = collective_ops(f, y)
        assert mesh_axes_of(op, mesh) == axes
    square = test_mesh((2, 2), ("a", "b"))
    assert mesh_axes_of(((0, 2), (1, 3)), square) == ("a",)
    assert mesh_axes_of(((0, 1), (2, 3)), square) == ("b",)
    assert mesh_axes_of(((0, 3), (1, 2)), square) is None  # pairs along no axis
    assert mesh_axes_of(((0,), (1,), (2,), (3,)), square) == ()
    assert mesh_axes_of(((0, 1, 2, 3),), square) == ("a", "b")
    assert mesh_axes_of(((0, 1),), square) is None  # not every device
    assert mesh_axes_of(None, square) is None


def test_async_and_iota_forms_are_understood():
    text = "\n".join(
        [
            "  %ars = (f32[8]{0}, f32[8]{0}) all-reduce-start(f32[8]{0} %p), replica_groups=[2,4]<=[8], to_apply=%add",
            "  %ard = f32[8]{0} all-reduce-done((f32[8]{0}, f32[8]{0}) %ars)",
            "  %ag = f32[16]{0} all-gather(f32[2]{0} %q), replica_groups=[4,2]<=[2,4]T(1,0), dimensions={0}",
            '  %x = f32[2]{0} add(%a, %b), metadata={op_name="jit(f)/all-reduce"}',
        ]
    )
    ops = collective_ops(text)
    assert [op.kind for op in ops] == ["all-reduce", "all-gather"]
    assert ops[0].groups == ((0, 1, 2, 3), (4, 5, 6, 7))
    assert ops[1].groups == ((0, 4), (1, 5), (2, 6), (3, 7))


def test_groups_written_over_the_compilers_mesh_are_understood():
    """XLA may write groups over a mesh of its own (`replica_groups=mesh[...] {axes}`, with sub-axes and
    a device order): the lines below are what jax.reshard and its gradient compile to on a 4 x 2 mesh."""
    text = "\n".join(
        [
            "  %ar = (f32[32,6]{1,0}, f32[]) all-reduce(%a, %b), channel_id=4, "
            "replica_groups=mesh['axis_0'=4,'axis_1'=1,'axis_2'=2] {'axis_0'}, "
            "use_global_device_ids=true, to_apply=%add",
            "  %ag = f32[6,32]{0,1} all-gather(%c), channel_id=1, "
            "replica_groups=mesh['axis_0'=1,'axis_1'=2,'axis_2'=4], "
            "device_ids=([4,2]T(1,0)) {'axis_1'}, dimensions={1}, use_global_device_ids=true",
            "  %sub = f32[8]{0} all-reduce(%d), replica_groups=mesh['a'=8] {'a':(2)2}, to_apply=%add",
            "  %two = f32[8]{0} all-reduce(%d), replica_groups=mesh['a'=2,'b'=4] {'b':(1)2,'a'}, to_apply=%add",
        ]
    )
    ops = collective_ops(text)
    assert ops[0].groups == ((0, 2, 4, 6), (1, 3, 5, 7))
    assert ops[1].groups == ((0, 1), (2, 3), (4, 5), (6, 7))
    assert ops[2].groups == ((0, 2), (1, 3), (4, 6), (5, 7))
    assert ops[3].groups == ((0, 4, 2, 6), (1, 5, 3, 7))  # the major half of 'b', then 'a'
    unknown = [
        "%u = f32[8]{0} all-reduce(%d), replica_groups=mesh['a'=8] {'z'}, to_apply=%add",
        "%v = f32[8]{0} all-reduce(%d), replica_groups=mesh['a'=8], device_ids=([4,2]T(1)) {'a'}, to_apply=%add",
    ]
    assert [op.groups for op in collective_ops("\n".join(unknown))] == [None, None]


def test_gathers_of_a_reshard_map_to_the_mesh_axis():
    mesh = test_mesh((4, 2), ("a", "b"))
    w = jax.device_put(jnp.ones((6, 32)), NamedSharding(mesh, P(None, "b")))
    ops = collective_ops(lambda w: jax.reshard(w, NamedSharding(mesh, P())), w)
    assert ops and all(op.kind == "all-gather" and mesh_axes_of(op, mesh) == ("b",) for op in ops)


def test_assert_collectives_rejects_an_unexpected_collective(mesh, x):
    gathered = per_device(
        mesh, lambda v: jax.lax.all_gather(v, "i", tiled=True), P(), check_vma=False
    )
    with pytest.raises(AssertionError) as failure:
        assert_collectives(gathered, x, exactly={"all-reduce": 1}, what="all_reduce")
    assert (
        "the compiled program of all_reduce uses all-gather x1; expected exactly all-reduce x1"
        in str(failure.value)
    )
    with pytest.raises(AssertionError, match="expected no all-gather"):
        assert_collectives(gathered, x, absent=("all-gather",))
    with pytest.raises(AssertionError, match="expected at least one reduce-scatter"):
        assert_collectives(gathered, x, present=("reduce-scatter",))
    with pytest.raises(AssertionError, match="expected only collective-permute"):
        assert_collectives(gathered, x, only=("collective-permute",))
    assert assert_collectives(gathered, x, exactly={"all-gather": 1}, present=("all-gather",)) == {
        "all-gather": 1
    }


def test_a_wrong_collective_is_said_by_what_it_does_to_the_data(mesh, x):
    """The failure says what the program's collective does and what the asked-for one does, not only
    their names: an all-gather where an all-reduce is asked for moves blocks and sums nothing."""
    gathered = per_device(
        mesh, lambda v: jax.lax.all_gather(v, "i", tiled=True), P(), check_vma=False
    )
    with pytest.raises(AssertionError) as failure:
        assert_collectives(gathered, x, exactly={"all-reduce": 1})
    said = str(failure.value)
    assert "Yours runs all-gather: it copies every device's block to every device" in said
    assert "The rule asks for all-reduce: it sums every device's array" in said
    with pytest.raises(AssertionError) as failure:  # only the collectives the rule is about
        assert_collectives(gathered, x, present=("all-gather", "reduce-scatter"))
    said = str(failure.value)
    assert "Yours runs" not in said and "The rule asks for reduce-scatter" in said


def test_flops_per_device_drop_with_the_batch_split(mesh):
    a = np.ones((256, 64), np.float32)
    w = np.ones((64, 32), np.float32)
    whole = flops_per_device(compiled(lambda a, w: a @ w, a, w))
    assert whole == pytest.approx(2 * 256 * 64 * 32, rel=0.01)
    split = per_device(mesh, lambda a: a @ jnp.ones((64, 32)))
    each = flops_per_device(compiled(split, jax.device_put(a, NamedSharding(mesh, P("i")))))
    assert each == pytest.approx(whole / 8, rel=0.01)


def test_memory_per_device_counts_the_local_shard(mesh):
    a = jax.device_put(np.ones((64, 16), np.float32), NamedSharding(mesh, P("i")))
    memory = memory_per_device(compiled(per_device(mesh, lambda v: v * 2), a))
    assert memory.argument_bytes == 64 * 16 * 4 // 8
    assert memory.output_bytes == 64 * 16 * 4 // 8


class _SilentCompiled:
    """What a platform that reports nothing answers (some plugins return None or {})."""

    def memory_analysis(self):
        return None

    def cost_analysis(self):
        return {}

    def as_text(self):
        return "HloModule silent"


def test_unreported_figures_raise_a_clear_error():
    with pytest.raises(NotReported, match="does not report memory_analysis"):
        memory_per_device(_SilentCompiled())
    with pytest.raises(NotReported, match="does not report flops"):
        flops_per_device(_SilentCompiled())


def test_names_and_metadata_are_not_collectives(mesh):
    """A named scope, a function name or any metadata spelling a collective is not one: only opcodes count."""
    v = jax.device_put(np.ones(16, np.float32), NamedSharding(mesh, P("i")))

    def faked(v):
        with jax.named_scope("all-reduce("), jax.named_scope("all-gather-start("):
            return per_device(mesh, lambda b: b * 2)(v)

    assert collectives_in(faked, v) == {}
    real = per_device(mesh, lambda b: jax.lax.psum(b, "i"))
    assert collectives_in(jax.named_scope("reduce-scatter(")(real), v) == {"all-reduce": 1}


@pytest.mark.parametrize(
    "line, opcode",
    [
        (
            'ROOT %all_gather.3 = f32[16]{0} all-gather(%param.1), replica_groups={{0,1}}, metadata={op_name="x"}',
            "all-gather",
        ),
        (
            "%ags = (f32[2]{0}, f32[16]{0}) all-gather-start(%p), channel_id=3, replica_groups=[1,8]<=[8]",
            "all-gather-start",
        ),
        ('%add.1 = f32[8]{0} add(%a, %b), metadata={op_name="jit(f)/all-reduce(/add"}', "add"),
        (
            '%f = f32[8]{0} fusion(%a), kind=kLoop, calls=%all-reduce-like.1, metadata={op_name="all-to-all("}',
            "fusion",
        ),
        ("ENTRY %main.5 (p: f32[8]) -> f32[8] {", None),
    ],
)
def test_the_opcode_is_read_from_the_instruction(line, opcode):
    parsed = instruction_opcode(line)
    assert (parsed[0] if parsed else None) == opcode
    if parsed:
        assert "op_name" not in parsed[1]


def test_structure_rules_also_check_the_values(mesh):
    v = jax.device_put(np.arange(16, dtype=np.float32), NamedSharding(mesh, P("i")))
    doubles = per_device(mesh, lambda b: b * 2)
    assert assert_collectives(doubles, v, exactly={}, expected=np.arange(16) * 2) == {}
    lazy = per_device(mesh, lambda b: b)  # no collectives either, but not the right values
    with pytest.raises(
        AssertionError, match="earned only by a function that also computes the right values"
    ):
        assert_collectives(lazy, v, exactly={}, expected=np.arange(16) * 2)
    with pytest.raises(AssertionError, match="returns 1 value"):
        assert_computes((np.zeros(2),), (np.zeros(2), np.zeros(2)))


def test_collectives_inspected_by_a_test_are_recorded_as_its_fact(mesh, x):
    """A test that judges the collectives by its own rule (inspect_collectives) still leaves them in report.json."""
    from grader.checks import compiled, inspect_collectives
    from grader.core import facts

    facts.start()
    ops = inspect_collectives(
        compiled(per_device(mesh, lambda v: jax.lax.psum(v, "i"), P()), x), what="the sum"
    )
    (check,) = facts.take().collectives
    assert (
        [op.kind for op in ops] == ["all-reduce"]
        and check.passed is None
        and check.what == "the sum"
    )
    assert [(c.op, c.group_size, tuple(c.mesh_axes)) for c in check.found] == [
        ("all-reduce", 8, ("i",))
    ]


def test_flops_are_not_read_from_a_program_with_a_loop():
    """XLA:CPU's cost analysis counts a loop body once: 8 steps of a matmul report the flops of one, so work
    moved into a loop would vanish from a flops rule. Such a program fails the rule instead."""
    from grader.checks.hlo import LoopedFlops

    x = w = jnp.ones((64, 64), jnp.float32)

    def looped(x):
        return jax.lax.fori_loop(0, 8, lambda i, c: c @ w, x)

    once, eight = (compiled(f, x).cost_analysis()["flops"] for f in (lambda x: x @ w, looped))
    assert eight < 2 * once  # the reason for the rule, as measured
    with pytest.raises(LoopedFlops, match="has a loop"):
        flops_per_device(compiled(looped, x), what="looped")
