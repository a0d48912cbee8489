"""What a compiled program holds, read from its HLO text: its collectives (kind, replica groups, the mesh
axes they run along), and the per-device memory and flops XLA reports for it. The rules on them are
grader.checks.collectives (the kinds a program holds) and grader.checks.executed (what runs).

Collectives are read from each instruction's opcode, never from names or metadata: a student's
`jax.named_scope("all-reduce(")` lands in `metadata={op_name=...}` and must not count as one."""

from __future__ import annotations

import itertools
import re
from collections import Counter
from dataclasses import dataclass

import jax
import numpy as np

from grader.checks import compile_policy
from grader.checks.tracing import compiling_for
from grader.core.errors import ShardlabError

COLLECTIVES = ("all-reduce", "all-gather", "reduce-scatter", "collective-permute", "all-to-all")
# What each collective does to the data, for a failure that names the one a program used or missed.
MEANS = {
    "all-reduce": "sums every device's array and gives each device the whole sum",
    "all-gather": "copies every device's block to every device, so each holds the whole array "
    "(data moved, nothing summed)",
    "reduce-scatter": "sums every device's array and leaves each device only its own block of the sum",
    "collective-permute": "sends each device's block to one other device (one step of a ring)",
    "all-to-all": "sends each device a different block of every other device's array",
}

_INSTRUCTION = re.compile(r"^\s*(?:ROOT\s+)?%?[\w.\-]+\s*=\s*")
METADATA = re.compile(r',\s*metadata=\{(?:[^{}"]|"(?:[^"\\]|\\.)*")*\}')
_LIST_GROUPS = re.compile(r"replica_groups=\{((?:\{[\d,]*\},?)*)\}")
_IOTA_GROUPS = re.compile(r"replica_groups=\[([\d,]+)\]<=\[([\d,]+)\](?:T\(([\d,]+)\))?")
_PAIRS = re.compile(r"source_target_pairs=\{((?:\{\d+,\d+\},?)*)\}")
_MESH_GROUPS = re.compile(r"replica_groups=mesh\[([^\]]*)\]")
_MESH_AXIS = re.compile(r"'?([^'=,\s]+)'?=(\d+)")
_AXIS_REF = re.compile(r"^'?([^':]+)'?(?::\((\d+)\)(\d+))?$")


class NotReported(ShardlabError, RuntimeError):
    """The platform's compiler does not report this figure."""


@dataclass(frozen=True)
class CollectiveOp:
    kind: str  # one of COLLECTIVES
    groups: tuple[tuple[int, ...], ...] | None  # replica groups (positions in the program's device
    # assignment: see mesh_axes_of), when the op states them
    line: str

    @property
    def group_size(self) -> int | None:
        return len(self.groups[0]) if self.groups else None


def compiled(fn, *args, **kwargs) -> jax.stages.Compiled:
    """jit, lower and compile `fn` for these arguments (already-jitted functions are fine too), as hard as
    grader.checks.compile_policy says."""

    def compile() -> jax.stages.Compiled:
        with compiling_for((args, kwargs)):
            return jax.jit(fn).lower(*args, **kwargs).compile()

    program = compile()
    if compile_policy.cross_checking():
        assert_same_program(program, compile_policy.compiled_the_other_way(compile))
    return program


def assert_same_program(program: jax.stages.Compiled, other: jax.stages.Compiled) -> None:
    """The two compilations are the same program: their text (metadata aside: the Python lines it was
    traced from), memory and flops (grader.checks.compile_policy's cross-check)."""
    facts, other_facts = _compiled_facts(program), _compiled_facts(other)
    differing = [name for name in facts if facts[name] != other_facts[name]]
    assert not differing, (
        f"compiled quickly and fully optimized, this program differs in {', '.join(differing)}: a "
        "program whose facts depend on how hard XLA optimizes must be compiled fully optimized "
        "(grader.checks.compile_policy)"
    )


def _compiled_facts(program: jax.stages.Compiled) -> dict[str, object]:
    memory = program.memory_analysis()
    cost = program.cost_analysis()
    if isinstance(cost, (list, tuple)):
        cost = cost[0] if cost else None
    return {
        "its HLO": METADATA.sub("", program.as_text()),
        "its memory": None
        if memory is None
        else tuple(
            getattr(memory, f"{part}_size_in_bytes")
            for part in ("argument", "output", "temp", "alias")
        ),
        "its flops": (cost or {}).get("flops"),
    }


def hlo_text(fn_or_compiled, *args, **kwargs) -> str:
    if isinstance(fn_or_compiled, str):
        return fn_or_compiled
    if not isinstance(fn_or_compiled, jax.stages.Compiled):
        fn_or_compiled = compiled(fn_or_compiled, *args, **kwargs)
    return fn_or_compiled.as_text()


def closing_bracket(text: str) -> int:
    """The index of the bracket that closes text[0]."""
    depth = 0
    for index, char in enumerate(text):
        depth += char in "([{"
        depth -= char in ")]}"
        if depth == 0:
            return index
    return len(text) - 1


def instruction_opcode(line: str) -> tuple[str, str] | None:
    """(opcode, attributes) of an HLO instruction line, or None for any other line. The opcode is the
    token after the result's shape (a tuple shape is skipped with its nested brackets); the
    attributes are what follows the operands, metadata removed."""
    head = _INSTRUCTION.match(line)
    if not head:
        return None
    rest = line[head.end() :]
    if rest.startswith("("):  # a tuple shape: skip to its closing parenthesis
        rest = rest[closing_bracket(rest) + 1 :]
    else:
        rest = rest.split(" ", 1)[1] if " " in rest else ""
    opcode = re.match(r"\s*([\w\-]+)\(", rest)
    if not opcode:
        return None
    return opcode.group(1), METADATA.sub("", rest[opcode.end() :])


def _mesh_device_ids(text: str, count: int):
    """The device order of a mesh written `[4,2]T(1,0)` (an iota reshaped and transposed) or as a list."""
    if "T(" in text:
        dims, perm = text.split("T(", 1)
        dims = [int(d) for d in re.findall(r"\d+", dims)]
        ids = (
            np.arange(int(np.prod(dims)))
            .reshape(dims)
            .transpose([int(d) for d in re.findall(r"\d+", perm)])
        )
        ids = ids.reshape(-1)
    else:
        ids = np.array([int(d) for d in re.findall(r"\d+", text)])
    return ids if sorted(ids.tolist()) == list(range(count)) else None


def _mesh_axes_groups(line: str):
    """Groups written over a mesh of the compiler's own (`replica_groups=mesh['axis_0'=4,'axis_1'=2]
    {'axis_0'}`, optionally with `, device_ids=(...)` and sub-axes `'axis_0':(2)2`): the devices are
    laid out on that mesh and each group runs along the listed axes (XLA's MeshAxesReplicaGroupList)."""
    m = _MESH_GROUPS.search(line)
    if not m:
        return None
    axes = [(name, int(size)) for name, size in _MESH_AXIS.findall(m.group(1))]
    names, sizes = [a for a, _ in axes], [s for _, s in axes]
    count, rest = int(np.prod(sizes)), line[m.end() :]
    ids = np.arange(count)
    if rest.startswith(", device_ids=("):
        start = rest.index("(")
        end = start + closing_bracket(rest[start:])
        ids = _mesh_device_ids(rest[start + 1 : end], count)
        rest = rest[end + 1 :]
    listed = re.match(r"\s*\{([^}]*)\}", rest)
    if ids is None or not listed:
        return None
    refs = []  # (mesh dim, pre-size, size): a whole axis is (dim, 1, its size)
    for ref in (r.strip() for r in listed.group(1).split(",") if r.strip()):
        parsed = _AXIS_REF.match(ref)
        if not parsed or parsed.group(1) not in names:
            return None
        dim = names.index(parsed.group(1))
        refs.append(
            (dim, int(parsed.group(2)), int(parsed.group(3)))
            if parsed.group(2)
            else (dim, 1, sizes[dim])
        )
    # Split each mesh dim into the pieces the refs name (and the pieces between them), as XLA does.
    shape, grouped = [], {}
    for dim, size in enumerate(sizes):
        prefix = 1
        for index in sorted(
            (i for i, r in enumerate(refs) if r[0] == dim), key=lambda i: refs[i][1]
        ):
            _, pre, piece = refs[index]
            if pre % prefix or pre < prefix:
                return None
            if pre != prefix:
                shape.append(pre // prefix)
            grouped[index] = len(shape)
            shape.append(piece)
            prefix = pre * piece
        if size % prefix:
            return None
        if prefix != size:
            shape.append(size // prefix)
    order = [grouped[i] for i in range(len(refs))]
    layout = ids.reshape(shape).transpose([d for d in range(len(shape)) if d not in order] + order)
    per_group = int(np.prod([shape[d] for d in order]))
    return tuple(tuple(int(d) for d in row) for row in layout.reshape(-1, per_group))


def replica_groups(line: str):
    if _MESH_GROUPS.search(line):
        try:
            return _mesh_axes_groups(line)
        except ValueError:  # a form this parser does not know: no groups rather than a crash
            return None
    if m := _LIST_GROUPS.search(line):
        groups = re.findall(r"\{([\d,]*)\}", m.group(1))
        return tuple(tuple(int(d) for d in g.split(",") if d) for g in groups) or None
    if m := _IOTA_GROUPS.search(line):
        shape = [int(d) for d in m.group(1).split(",")]
        dims = [int(d) for d in m.group(2).split(",")]
        ids = np.arange(int(np.prod(dims))).reshape(dims)
        if m.group(3):
            ids = ids.transpose([int(d) for d in m.group(3).split(",")])
        return tuple(tuple(int(d) for d in row) for row in ids.reshape(shape[0], -1))
    if m := _PAIRS.search(line):
        return tuple(
            tuple(int(d) for d in p.split(",")) for p in re.findall(r"\{(\d+,\d+)\}", m.group(1))
        )
    return None


def collective_ops(fn_or_text, *args, **kwargs) -> list[CollectiveOp]:
    """Every collective in the compiled program, in text order (loop bodies count once)."""
    ops = []
    for line in hlo_text(fn_or_text, *args, **kwargs).splitlines():
        parsed = instruction_opcode(line)
        if parsed is None:
            continue
        opcode, attributes = parsed
        # async pairs count once, by their start; "-done" is not counted
        kind = opcode.removesuffix("-start")
        if kind in COLLECTIVES:
            ops.append(CollectiveOp(kind, replica_groups(attributes), line.strip()))
    return ops


def mesh_axes_of(
    op_or_groups: CollectiveOp | tuple[tuple[int, ...], ...] | None, mesh: jax.sharding.Mesh
) -> tuple[str, ...] | None:
    """The axes of `mesh` along which a collective's replica groups run, in the mesh's order: ("model",)
    when each group is one row of devices along "model" (the other axes fixed), ("data", "model") when
    one group holds every device, () when every device is alone; None when the groups follow no set of
    axes (or the op states none).

    The ids in the groups of a partitioned program are positions in its device assignment, which for a
    program whose arguments live on `mesh` is the order of `mesh.devices.flat` (they are the device ids
    only when the mesh lists the devices in id order); so groups are compared by position in the mesh."""
    groups = op_or_groups.groups if isinstance(op_or_groups, CollectiveOp) else op_or_groups
    if not groups:
        return None
    shape = mesh.devices.shape
    found = frozenset(frozenset(g) for g in groups)
    if sum(len(g) for g in groups) != mesh.devices.size or len(found) != len(groups):
        return None
    positions = np.arange(mesh.devices.size).reshape(shape)
    for count in range(len(shape) + 1):
        for axes in itertools.combinations(range(len(shape)), count):
            others = [i for i in range(len(shape)) if i not in axes]
            size = int(np.prod([shape[i] for i in axes]))  # 1 for no axes
            rows = positions.transpose(others + list(axes)).reshape(-1, size)
            if found == frozenset(frozenset(int(d) for d in row) for row in rows):
                return tuple(mesh.axis_names[i] for i in axes)
    return None


def collectives_in(fn_or_text, *args, **kwargs) -> Counter:
    """How many of each collective the compiled program contains, e.g. Counter({'all-reduce': 1})."""
    return Counter(op.kind for op in collective_ops(fn_or_text, *args, **kwargs))


def program_mesh(program, args, kwargs) -> jax.sharding.Mesh | None:
    """The mesh the program's arguments live on (its device assignment, for mesh_axes_of), if any."""
    shardings = []
    if isinstance(program, jax.stages.Compiled):
        try:
            shardings = jax.tree.leaves(program.input_shardings)
        except Exception:  # noqa: BLE001  (a program that states none: no mesh to name axes by)
            shardings = []
    shardings += [getattr(leaf, "sharding", None) for leaf in jax.tree.leaves((args, kwargs))]
    return next(
        (
            s.mesh
            for s in shardings
            if isinstance(s, jax.sharding.NamedSharding) and isinstance(s.mesh, jax.sharding.Mesh)
        ),
        None,
    )


@dataclass(frozen=True)
class DeviceMemory:
    argument_bytes: int
    output_bytes: int
    temp_bytes: int
    alias_bytes: int


def memory_per_device(compiled_fn: jax.stages.Compiled) -> DeviceMemory:
    stats = compiled_fn.memory_analysis()
    if stats is None:
        raise NotReported(f"the {jax.default_backend()} compiler does not report memory_analysis()")
    return DeviceMemory(
        stats.argument_size_in_bytes,
        stats.output_size_in_bytes,
        stats.temp_size_in_bytes,
        stats.alias_size_in_bytes,
    )


class LoopedFlops(AssertionError):
    """A flops rule asked of a program with a loop: XLA's count would not be the work it does."""


def flops_per_device(compiled_fn: jax.stages.Compiled, *, what: str = "your function") -> float:
    """XLA's count of the flops one device does in the program. XLA:CPU's cost analysis counts a loop's
    body once, whatever its trip count (measured, jax 0.10.2), so work moved into a loop would vanish
    from the count: a program with a loop fails the rule (LoopedFlops) instead of being counted."""
    if any(
        (parsed := instruction_opcode(line)) is not None and parsed[0] == "while"
        for line in compiled_fn.as_text().splitlines()
    ):
        raise LoopedFlops(
            f"the compiled program of {what} has a loop (a fori_loop, scan or while_loop), and XLA counts "
            "a loop's body once however many times it runs, so its flops cannot be read; this rule "
            "needs a program without one. Write it without a loop: the work here needs none."
        )
    analysis = compiled_fn.cost_analysis()
    if isinstance(analysis, (list, tuple)):  # older jax returned one dict per program
        analysis = analysis[0] if analysis else None
    if not analysis or "flops" not in analysis:
        raise NotReported(
            f"the {jax.default_backend()} compiler does not report flops in cost_analysis()"
        )
    return float(analysis["flops"])
