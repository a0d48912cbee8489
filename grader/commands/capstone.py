"""`shardlab capstone`: what part 2 adds up to, measured on the student's own ex17 and ex18.

A transformer block trained with three kinds of parallelism at once (FSDP over "data", tensor and sequence
parallelism over "model") on the course's 8 host devices, and the two memory savings that make a model fit:
rematerialization (ex18's stack_loss) and Adam's state sharded over "data" (ex17's ZeRO-1). Each figure is read
from what XLA compiled: the collectives one training step runs, from the program's one account
(grader.checks.account: runs, arrays, bytes of operands and bytes sent per device), and the bytes per device
XLA reports. docs/students.md quotes the reference's figures; this command prints the student's. Each part
first prints what it runs (the block's shapes and mesh, the stack's blocks): docs/students.md and ex18's
stack_loss docstring state the same configuration beside the reference's figures.

It runs the student's code in this process, as `shardlab check` does in-process: it is the student's machine.
A part whose functions are not written yet is reported as such and the others still run.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from grader.core.results import Traffic
from grader.course import catalog
from grader.course.devices import HOST_DEVICES, force_host_devices
from grader.course.implementations import (
    ImplementationImportError,
    NotAttempted,
    load_module,
    resolve_source,
)

BLOCK, ZERO = "ex18_transformer_block", "ex17_zero1_accumulation"
MESH_SHAPE = (2, 4)  # ("data", "model"): FSDP over 2, tensor and sequence parallelism over 4
D, HEADS, F, BATCH, SEQ = 256, 8, 1024, 8, 64  # the contract's block, as the issue measured it
LAYERS = 8  # blocks in the remat stack
STEPS, LR = 5, 0.05
MLP_SIZES = (64, 256, 256, 64)  # ex17's MLP: every leading dimension divides by 8
MICROBATCHES = 4


@dataclass(frozen=True)
class BlockFigures:
    losses: tuple[float, ...]  # block_train_step's loss at each step
    param_bytes: int  # the block's weights, whole
    param_bytes_per_device: int  # what one device holds of them
    traffic: tuple[Traffic, ...]  # one training step


@dataclass(frozen=True)
class RematFigures:
    layers: int
    temp_without: int  # the gradient program's temporary bytes per device
    temp_with: int
    loss_without: float
    loss_with: float

    @property
    def ratio(self) -> float:
        return self.temp_with / self.temp_without


@dataclass(frozen=True)
class ZeroFigures:
    moment_bytes: int  # m and v, whole
    moment_bytes_per_device: int  # what one device holds of them
    step_traffic: tuple[Traffic, ...]  # one zero1_adam_step
    accumulate_traffic: tuple[Traffic, ...]  # one accumulate_grads over MICROBATCHES microbatches
    leaves: int


@dataclass(frozen=True)
class Capstone:
    block: BlockFigures | str  # str: why this part could not run
    remat: RematFigures | str
    zero: ZeroFigures | str


# ----------------------------------------------------------------------------------------------- measuring


def _traffic(program, mesh) -> tuple[Traffic, ...]:
    """What one run of the program sends between devices, per kind of collective and mesh axes: its account's
    rows (grader.checks.account), those over singleton groups left out (they move nothing)."""
    from grader.checks.account import account_of, between_devices

    return between_devices(account_of(program, mesh=mesh))


def _bytes(tree) -> int:
    import jax

    return sum(leaf.nbytes for leaf in jax.tree.leaves(tree))


def _bytes_per_device(tree) -> int:
    import jax

    return sum(leaf.addressable_shards[0].data.nbytes for leaf in jax.tree.leaves(tree))


def _block_params(key, layers: int | None = None):
    import jax

    shapes = {"wq": (D, D), "wk": (D, D), "wv": (D, D), "wo": (D, D), "w1": (D, F), "w2": (F, D)}
    keys = jax.random.split(key, len(shapes))
    lead = () if layers is None else (layers,)
    return {
        name: jax.random.normal(k, lead + shape) / shape[0] ** 0.5
        for k, (name, shape) in zip(keys, shapes.items())
    }


def _block_mesh():
    import jax

    explicit = jax.sharding.AxisType.Explicit
    return jax.make_mesh(MESH_SHAPE, ("data", "model"), axis_types=(explicit, explicit))


def _data(mesh, key):
    import jax
    from jax.sharding import NamedSharding, PartitionSpec as P

    kx, ky = jax.random.split(key)
    placed = NamedSharding(mesh, P("data", "model", None))
    x = jax.device_put(jax.random.normal(kx, (BATCH, SEQ, D)), placed)
    y = jax.device_put(0.5 * jax.random.normal(ky, (BATCH, SEQ, D)), placed)
    return x, y


def measure_block(module) -> BlockFigures:
    import jax

    from grader.checks import compiled

    mesh = _block_mesh()
    params = module.shard_block_params(_block_params(jax.random.key(0)), mesh)
    x, y = _data(mesh, jax.random.key(1))

    def step(p, x, y):
        return module.block_train_step(p, x, y, LR, mesh, num_heads=HEADS)

    program = compiled(step, params, x, y)
    losses = []
    for _ in range(STEPS):
        params, loss = program(params, x, y)
        losses.append(float(loss))
    return BlockFigures(
        tuple(losses), _bytes(params), _bytes_per_device(params), _traffic(program, mesh)
    )


def measure_remat(module) -> RematFigures:
    import jax
    from jax.sharding import NamedSharding, PartitionSpec as P

    from grader.checks import compiled, memory_per_device

    mesh = _block_mesh()
    specs = {"wq": ("data", "model"), "wk": ("data", "model"), "wv": ("data", "model")}
    specs |= {"w1": ("data", "model"), "wo": ("model", "data"), "w2": ("model", "data")}
    stacked = {
        name: jax.device_put(w, NamedSharding(mesh, P(None, *specs[name])))
        for name, w in _block_params(jax.random.key(2), LAYERS).items()
    }
    x, y = _data(mesh, jax.random.key(3))
    figures = {}
    for remat in (False, True):

        def loss(s, x, y, remat=remat):
            return module.stack_loss(s, x, y, mesh, remat, num_heads=HEADS)

        program = compiled(jax.value_and_grad(loss), stacked, x, y)
        value, _ = program(stacked, x, y)
        figures[remat] = (memory_per_device(program).temp_bytes, float(value))
    (temp_without, loss_without), (temp_with, loss_with) = figures[False], figures[True]
    return RematFigures(LAYERS, temp_without, temp_with, loss_without, loss_with)


def measure_zero(module) -> ZeroFigures:
    import jax
    from jax.sharding import NamedSharding, PartitionSpec as P

    from grader.checks import compiled

    explicit = jax.sharding.AxisType.Explicit
    mesh = jax.make_mesh((HOST_DEVICES,), ("data",), axis_types=(explicit,))
    params = jax.device_put(module.init_mlp(jax.random.key(4), MLP_SIZES), NamedSharding(mesh, P()))
    kx, ky = jax.random.split(jax.random.key(5))
    shape = (MICROBATCHES, 4 * HOST_DEVICES)
    split = NamedSharding(mesh, P(None, "data"))
    xs = jax.device_put(jax.random.normal(kx, (*shape, MLP_SIZES[0])), split)
    ys = jax.device_put(jax.random.normal(ky, (*shape, MLP_SIZES[-1])), split)
    state = module.zero1_init(params, mesh)
    moments = (state["m"], state["v"])

    def step(p, s, xs, ys):
        return module.zero1_adam_step(p, s, xs, ys, 1e-3, mesh)

    def accumulate(p, xs, ys):
        return module.accumulate_grads(p, xs, ys, mesh)

    return ZeroFigures(
        _bytes(moments),
        _bytes_per_device(moments),
        _traffic(compiled(step, params, state, xs, ys), mesh),
        _traffic(compiled(accumulate, params, xs, ys), mesh),
        len(jax.tree.leaves(params)),
    )


def _attempt(source: Path, exercise_id: str, measure: Callable):
    """The figures, or why they could not be measured (not written yet, or what went wrong)."""
    exercise = catalog.get(exercise_id)
    try:
        return measure(load_module(exercise, source))
    except NotAttempted as exc:
        return str(exc)
    except NotImplementedError:
        return (
            f"{exercise.id} is not finished: `shardlab check {exercise.number}` shows what is left"
        )
    except ImplementationImportError as exc:
        return str(exc)
    except Exception as exc:  # the student's code: any failure is reported, never a traceback
        return f"{exercise.id} raised {type(exc).__name__}: {str(exc)[:300]}"


def capstone(source: Path) -> Capstone:
    force_host_devices()
    return Capstone(
        block=_attempt(source, BLOCK, measure_block),
        remat=_attempt(source, BLOCK, measure_remat),
        zero=_attempt(source, ZERO, measure_zero),
    )


# ----------------------------------------------------------------------------------------------- report


def _size(n: int | None) -> str:
    if n is None:
        return "not counted"
    for unit, scale in (("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= scale:
            return f"{n / scale:.1f} {unit}"
    return f"{n} B"


def _share(whole: int, per_device: int) -> str:
    return f"{_size(whole)}; each device holds {_size(per_device)} (1/{round(whole / per_device)})"


def _count(n: int, what: str) -> str:
    return f"{n:>3} {what}" + (" " if n == 1 else "s")  # padded: the columns line up


def _axes(row: Traffic) -> str:
    return "+".join(row.axes) if row.axes else "?"


def _traffic_lines(traffic: tuple[Traffic, ...]) -> list[str]:
    if not traffic:
        return ["    no collective"]
    return [
        f"    {t.kind:<19} over {_axes(t):<11} "
        + (
            "in a loop with no static trip count: not counted"
            if None in (t.runs, t.operands, t.operand_bytes, t.sent_bytes)
            else f"{_count(t.runs, 'run')}  {_count(t.operands, 'array')}  "
            f"{_size(t.operand_bytes):>9} of operands, {_size(t.sent_bytes):>9} sent per device"
        )
        for t in traffic
    ]


def block_configuration() -> str:
    """The block's shapes and mesh, as ex18 names them: "B = 8, T = 64, D = 256, H = 8 heads, F = 1024, mesh
    data=2 x model=4". docs/students.md and ex18's docstring state the stack's figures in these words."""
    rows, cols = MESH_SHAPE
    return f"B = {BATCH}, T = {SEQ}, D = {D}, H = {HEADS} heads, F = {F}, mesh data={rows} x model={cols}"


def stack_configuration() -> str:
    """The remat stack: LAYERS blocks of block_configuration()."""
    return f"L = {LAYERS} blocks, {block_configuration()}"


def render(figures: Capstone) -> str:
    lines = [f"Part 2's capstone on {HOST_DEVICES} host devices", ""]
    lines.append("1. A transformer block trained 3-D (ex18):")
    lines.append(f"    block: {block_configuration()}")
    block = figures.block
    if isinstance(block, str):
        lines.append(f"    {block}")
    else:
        lines.append(f"    weights {_share(block.param_bytes, block.param_bytes_per_device)}")
        lines.append(
            f"    loss over {STEPS} SGD steps: " + ", ".join(f"{v:.4f}" for v in block.losses)
        )
        lines.append("    one training step runs:")
        lines += _traffic_lines(block.traffic)
    lines += ["", "2. Rematerialization (ex18's stack_loss), the gradient of a stack of blocks:"]
    lines.append(f"    stack: {stack_configuration()}")
    remat = figures.remat
    if isinstance(remat, str):
        lines.append(f"    {remat}")
    else:
        lines.append(
            f"    temporaries per device: {_size(remat.temp_without)} without remat, "
            f"{_size(remat.temp_with)} with ({remat.ratio:.2f} of it); "
            f"loss {remat.loss_without:.6f} and {remat.loss_with:.6f}"
        )
    lines += [
        "",
        f'3. ZeRO-1 and gradient accumulation (ex17), {HOST_DEVICES} devices over "data":',
    ]
    zero = figures.zero
    if isinstance(zero, str):
        lines.append(f"    {zero}")
    else:
        lines.append(
            f"    Adam's m and v {_share(zero.moment_bytes, zero.moment_bytes_per_device)}"
        )
        lines.append(f"    one zero1_adam_step runs ({zero.leaves} parameter arrays):")
        lines += _traffic_lines(zero.step_traffic)
        lines.append(f"    one accumulate_grads over {MICROBATCHES} microbatches runs:")
        lines += _traffic_lines(zero.accumulate_traffic)
    return "\n".join(lines)


def capstone_from_args(args) -> int:
    figures = capstone(resolve_source(args.impl))
    print(render(figures))
    return (
        0
        if not any(isinstance(f, str) for f in (figures.block, figures.remat, figures.zero))
        else 1
    )
