"""The one account of a compiled program: what one device executes when the program runs once.

A compiled SPMD program is the program every device runs, its shapes one device's blocks. Its text is read
here once (per program: the parse is cached), and every rule, page and command reads the figures kept here
instead of counting again (as XLA's own cost analysis keeps an instruction's flops for every consumer):

- each collective: its kind, its groups and the mesh axes they run along, its operands and their bytes, and
  the bytes a device sends over the links for it in one run, as the usual algorithms move them (g devices
  to a group, B bytes of operands per device): an all-reduce 2 (g - 1) / g x B (a reduce-scatter, then an
  all-gather), an all-gather (g - 1) x B (its block to every other device), a reduce-scatter and an
  all-to-all (g - 1) / g x B (every block but its own), a collective-permute B (a device that only
  receives sends nothing, and the figure is the most any device sends);
- the work: each dot's and convolution's multiply-adds, from its shapes and dimension numbers; and each
  product of floating-point values written out elementwise (a multiply or divide, its elements; a
  reduction, scatter or window whose combiner multiplies, its largest operand's elements), since
  `(a[:, :, None] * b).sum(1)` does a dot's work without a dot (an integer product is index arithmetic);
- XLA's bytes of the program's arguments, temporaries and outputs, per device.

Each figure counts its instruction as many times as its computation runs: a loop's body times the loop's
static trip count (XLA:CPU writes `known_trip_count` on a `while` whose bounds are fixed when it compiles),
its condition once more than that; a conditional runs one of its branches, so the largest of their figures
counts. XLA's cost analysis counts a loop's body once, which is why the work is counted here.

An unknown count is one thing everywhere: a figure that counts anything inside a loop with no static trip
count is None, never a guess, and a rule over it fails with `UnknownCount`'s message (the loop needs static
bounds). Everything is read from opcodes, shapes and attributes, never from names or metadata a student's
code can choose (grader.checks.hlo)."""

from __future__ import annotations

import hashlib
import json
import math
import re
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cache, lru_cache

import jax
import numpy as np

from grader.checks.hlo import (
    COLLECTIVES,
    METADATA,
    NotReported,
    closing_bracket,
    hlo_text,
    instruction_opcode,
    memory_per_device,
    mesh_axes_of,
    program_mesh,
    replica_groups,
)
from grader.core import facts
from grader.core.results import ProgramAccount, Traffic

_COMPUTATION = re.compile(r"^(ENTRY\s+)?%?([\w.\-]+)\s*\(.*\{\s*$")
_NAME = re.compile(r"^\s*(?:ROOT\s+)?%?([\w.\-]+)\s*=\s*")
_OPERAND = re.compile(r"%([\w.\-]+)")
_ARRAY = re.compile(r"\b([a-z]+\d*(?:e\d+m\d+\w*)?)\[([\d,]*)\]")
_CALLED = re.compile(
    r"\b(body|condition|calls|to_apply|true_computation|false_computation|select|scatter)=%?([\w.\-]+)"
)
_CALLED_LISTS = re.compile(r"\b(branch_computations|called_computations)=\{([^}]*)\}")
_BACKEND_CONFIG = re.compile(r",\s*backend_config=(\{.*\})\s*$")
_PARTITIONS = re.compile(r"\bnum_partitions=(\d+)")
_CONTRACTING = re.compile(r"\blhs_contracting_dims=\{([\d,]*)\}")
_DIM_LABELS = re.compile(r"\bdim_labels=[^_\s]*_([^-\s]*)->")

DTYPE_BYTES = {"pred": 1, "s4": 1, "u4": 1, "s8": 1, "u8": 1, "s16": 2, "u16": 2, "f16": 2}
DTYPE_BYTES |= {"bf16": 2, "s32": 4, "u32": 4, "f32": 4, "s64": 8, "u64": 8, "f64": 8}
DTYPE_BYTES |= {"c64": 8, "c128": 16}

# Elementwise ops that compute a product (a quotient is one by the reciprocal), counted on floating-point
# values: an integer product is index arithmetic (a device's offset, axis_index * rows), not the course's work.
_PRODUCTS = frozenset({"multiply", "divide"})
_FLOATING = frozenset({"f16", "bf16", "f32", "f64", "c64", "c128"})
# Ops that apply a combiner computation to each element: its own figures are per element, so the op counts
# its largest operand's elements when the combiner multiplies, and the combiner is not walked as a callee.
_COMBINING = frozenset(
    {"reduce", "reduce-window", "scatter", "map", "select-and-scatter", "sort"}
    | {"all-reduce", "all-reduce-start", "reduce-scatter"}
)


class UnknownCount(AssertionError):
    """A rule over a figure that counts something in a loop with no static trip count."""


def unknown_count(what: str, measure: str, rule: str) -> UnknownCount:
    """The one message for a rule whose figure is unknown."""
    return UnknownCount(
        f"the compiled program of {what} runs {measure} inside a loop whose number of steps is not fixed "
        "when it compiles (a while_loop, or a fori_loop/scan whose bounds are traced values), so how "
        f"much it does cannot be counted; the rule is: {rule}. Give the loop static bounds: Python ints "
        "in fori_loop, or scan over an array of known length."
    )


# -- the program's text --------------------------------------------------------------------------------


@dataclass
class Instruction:
    name: str
    opcode: str
    attributes: str  # what follows the operands, metadata removed
    shape: str  # its result's shape, as written
    line: str


@dataclass(frozen=True)
class ExecutedCollective:
    """One collective instruction of the program, with how it runs."""

    kind: str  # one of COLLECTIVES
    times: int | None  # how many times it runs; None: a loop around it has no static trip count
    # replica groups, or a permute's pairs (positions in the program's device assignment)
    groups: tuple[tuple[int, ...], ...] | None
    operand_shapes: tuple[tuple[int, ...], ...]  # per device
    operand_bytes: int  # per device, every operand together
    line: str

    @property
    def pairs(self) -> tuple[tuple[int, int], ...]:
        """A collective-permute's source -> target pairs (positions in the mesh's device order)."""
        if self.kind != "collective-permute" or not self.groups:
            return ()
        return tuple((g[0], g[1]) for g in self.groups if len(g) == 2)

    @property
    def group_size(self) -> int | None:
        return len(self.groups[0]) if self.groups else None


def _computations(text: str) -> tuple[dict[str, list[Instruction]], str | None]:
    """The program's computations by name, each its instructions in order, and the entry's name."""
    computations: dict[str, list[Instruction]] = {}
    entry, current = None, None
    for line in text.splitlines():
        if current is None:
            if m := _COMPUTATION.match(line):
                current = m.group(2)
                computations[current] = []
                entry = current if m.group(1) else entry
            continue
        if line.strip() == "}":
            current = None
            continue
        parsed = instruction_opcode(line)
        head = _NAME.match(line)
        if parsed is None or head is None:
            continue
        opcode, attributes = parsed
        rest = line[head.end() :]
        shape = rest[: closing_bracket(rest) + 1] if rest.startswith("(") else rest.split(" ", 1)[0]
        computations[current].append(Instruction(head.group(1), opcode, attributes, shape, line))
    return computations, entry


def _trip_count(attributes: str) -> int | None:
    """The compiler's static trip count of a `while`: the known_trip_count of its backend_config, which
    XLA prints as the instruction's last attribute (`attributes` has its metadata removed). A program can
    put text of its own on an op (jax's set_xla_metadata: frontend attributes, whose keys print as
    written), always followed by a quoted value: so only a backend_config that ends the line counts, and
    _loops_counted refuses a program whose text claims more counts than its loops carry."""
    m = _BACKEND_CONFIG.search(attributes)
    if not m or closing_bracket(m.group(1)) != len(m.group(1)) - 1:
        return None
    try:
        count = int(json.loads(m.group(1))["known_trip_count"]["n"])
    except (ValueError, KeyError, TypeError):
        return None
    return count if count >= 0 else None


def _loops_counted(text: str, computations) -> bool:
    """Whether the loop counts read are all the program claims: every "known_trip_count" in its text
    (metadata aside) is one a loop's own backend_config holds. More is text a program put there itself."""
    claimed = sum(METADATA.sub("", line).count("known_trip_count") for line in text.splitlines())
    read = sum(
        _trip_count(i.attributes) is not None
        for instructions in computations.values()
        for i in instructions
        if i.opcode == "while"
    )
    return claimed == read


def _called(instruction: Instruction, counted: bool) -> list[tuple[str, int | None]]:
    """The computations an instruction calls, each with how many times per call (None: not static, or
    not `counted`: the program's loop counts are not to be trusted). A loop's condition runs once more
    than its body."""
    calls = []
    trip = _trip_count(instruction.attributes) if counted else None
    for key, name in _CALLED.findall(instruction.attributes):
        if instruction.opcode == "while" and key == "body":
            calls.append((name, trip))
        elif instruction.opcode == "while" and key == "condition":
            calls.append((name, None if trip is None else trip + 1))
        else:
            calls.append((name, 1))
    for _, listed in _CALLED_LISTS.findall(instruction.attributes):
        calls += [(name, 1) for name in _OPERAND.findall(listed)]
    return calls


def _times(a: int | None, b: int | None) -> int | None:
    """a x b where None is unknown, except that nothing done no times, or no times at all, is 0."""
    if a == 0 or b == 0:
        return 0
    return None if a is None or b is None else a * b


def _plus(a: int | None, b: int | None) -> int | None:
    return None if a is None or b is None else a + b


def _larger(a: int | None, b: int | None) -> int | None:
    return None if a is None or b is None else max(a, b)


def _array_shapes(shape: str) -> list[tuple[str, tuple[int, ...]]]:
    return [
        (dtype, tuple(int(d) for d in dims.split(",") if d))
        for dtype, dims in _ARRAY.findall(shape)
        if dtype in DTYPE_BYTES
    ]


def _operand_names(instruction: Instruction) -> list[str]:
    line = instruction.line
    rest = line[line.index(instruction.opcode + "(") + len(instruction.opcode) :]
    return _OPERAND.findall(rest[1 : closing_bracket(rest)])


def _operands(instruction: Instruction, shapes: dict[str, str]) -> list[tuple[str, tuple]]:
    found = []
    for name in _operand_names(instruction):
        found += _array_shapes(shapes.get(name, ""))
    return found


def _elements(shape: tuple[int, ...]) -> int:
    return math.prod(shape)


# -- the work of one instruction -----------------------------------------------------------------------


def _dot_work(instruction: Instruction, shapes: dict[str, str]) -> int:
    """A dot's multiply-adds: each element of its result sums the products over the contracting dimensions;
    a convolution's: each output element sums a window of the kernel over its input features."""
    result = _array_shapes(instruction.shape)
    operands = [_array_shapes(shapes.get(name, "")) for name in _operand_names(instruction)]
    if not result or len(operands) < 2 or not operands[0] or not operands[1]:
        return 0
    out = _elements(result[0][1])
    if instruction.opcode == "dot":
        lhs = operands[0][0][1]
        m = _CONTRACTING.search(instruction.attributes)
        dims = [int(d) for d in m.group(1).split(",") if d] if m else []
        return out * math.prod(lhs[d] for d in dims if d < len(lhs))
    kernel = operands[1][0][1]
    labels = _DIM_LABELS.search(instruction.attributes)
    if not labels or "o" not in labels.group(1) or len(labels.group(1)) != len(kernel):
        return out * _elements(kernel)  # read no labels: every kernel element for each output
    per_output = _elements(kernel) // max(kernel[labels.group(1).index("o")], 1)
    return out * per_output


def _is_product(instruction: Instruction) -> bool:
    return instruction.opcode in _PRODUCTS and any(
        dtype in _FLOATING for dtype, _ in _array_shapes(instruction.shape)
    )


def _combiner_multiplies(instruction: Instruction, computations) -> bool:
    names = [name for _, name in _CALLED.findall(instruction.attributes)]
    return any(_is_product(i) for name in names for i in computations.get(name, ()))


def _product_work(instruction: Instruction, shapes: dict[str, str], computations) -> int:
    if _is_product(instruction):
        return sum(_elements(dims) for _, dims in _array_shapes(instruction.shape))
    if instruction.opcode in _COMBINING and _combiner_multiplies(instruction, computations):
        return max((_elements(dims) for _, dims in _operands(instruction, shapes)), default=0)
    return 0


# -- collectives ---------------------------------------------------------------------------------------


def sent_bytes(kind: str, group_size: int, operand_bytes: int, pairs=()) -> int:
    """What one device sends over the links in one run of a collective (the module's docstring)."""
    g, b = group_size, operand_bytes
    if kind == "collective-permute":
        return b if any(source != target for source, target in pairs) else 0
    if g <= 1:
        return 0
    return {
        "all-reduce": 2 * b * (g - 1) // g,
        "all-gather": b * (g - 1),
        "reduce-scatter": b * (g - 1) // g,
        "all-to-all": b * (g - 1) // g,
    }[kind]


@dataclass
class _Row:
    """One kind of collective over one set of groups, in one run of a computation (callees included)."""

    runs: int | None = 0
    operands: int | None = 0
    operand_bytes: int | None = 0
    sent_bytes: int | None = 0

    def scaled(self, factor: int | None) -> _Row:
        return _Row(*(_times(value, factor) for value in self.figures()))

    def figures(self) -> tuple:
        return self.runs, self.operands, self.operand_bytes, self.sent_bytes


@dataclass
class _Tally:
    """What one run of a computation executes, the computations it calls included."""

    dot_work: int | None = 0
    product_work: int | None = 0
    rows: dict | None = None  # (kind, groups) -> _Row

    def add(self, other: _Tally, factor: int | None = 1) -> None:
        self.dot_work = _plus(self.dot_work, _times(other.dot_work, factor))
        self.product_work = _plus(self.product_work, _times(other.product_work, factor))
        for key, row in (other.rows or {}).items():
            mine = self.rows.setdefault(key, _Row())
            scaled = row.scaled(factor)
            mine.runs, mine.operands, mine.operand_bytes, mine.sent_bytes = (
                _plus(a, b) for a, b in zip(mine.figures(), scaled.figures())
            )

    def widen(self, other: _Tally) -> None:
        """Keep, figure by figure, the larger of this and `other` (the branches of a conditional)."""
        self.dot_work = _larger(self.dot_work, other.dot_work)
        self.product_work = _larger(self.product_work, other.product_work)
        for key in set(self.rows) | set(other.rows or {}):
            mine, theirs = self.rows.get(key, _Row()), (other.rows or {}).get(key, _Row())
            self.rows[key] = _Row(
                *(_larger(a, b) for a, b in zip(mine.figures(), theirs.figures()))
            )


@dataclass(frozen=True)
class Parsed:
    """A program's text, parsed once: its computations, the per-instruction collectives, and the tally of
    one run of its entry."""

    key: str
    devices: int
    collectives: tuple[ExecutedCollective, ...]
    tally: _Tally
    instructions: dict  # (kind, groups) -> instructions in the text


def _collective(instruction: Instruction, shapes, times) -> ExecutedCollective:
    operands = _operands(instruction, shapes)
    return ExecutedCollective(
        kind=instruction.opcode.removesuffix("-start"),
        times=times,
        groups=replica_groups(instruction.attributes),
        operand_shapes=tuple(dims for _, dims in operands),
        operand_bytes=sum(DTYPE_BYTES[dtype] * _elements(dims) for dtype, dims in operands),
        line=instruction.line.strip(),
    )


def _runs(computations, entry, counted: bool) -> dict[str, int | None]:
    """How many times each computation runs in one run of the program, summed over where it is called."""
    callers: dict[str, list[tuple[str, int | None]]] = {name: [] for name in computations}
    for name, instructions in computations.items():
        for instruction in instructions:
            for called, per_call in _called(instruction, counted):
                if called in callers:
                    callers[called].append((name, per_call))

    @cache
    def runs(name: str, depth: int = 0) -> int | None:
        if name == entry:
            return 1
        if depth > len(computations):  # a cycle of calls is no program XLA writes
            return None
        total: int | None = 0
        for caller, per_call in callers[name]:
            total = _plus(total, _times(runs(caller, depth + 1), per_call))
        return total

    return {name: runs(name) for name in computations}


@lru_cache(maxsize=32)
def parse(text: str) -> Parsed:
    """The program's account before a mesh names its axes (cached: every check on a program reads it)."""
    computations, entry = _computations(text)
    counted = _loops_counted(text, computations)
    partitions = _PARTITIONS.search(text.split("\n", 1)[0])
    devices = int(partitions.group(1)) if partitions else 1
    runs = _runs(computations, entry, counted) if entry else {}
    shapes = {name: {i.name: i.shape for i in body} for name, body in computations.items()}

    collectives, instructions = [], {}
    own: dict[str, _Tally] = {}
    for name, body in computations.items():
        tally = _Tally(rows={})
        for instruction in body:
            if instruction.opcode in ("dot", "convolution"):
                tally.dot_work += _dot_work(instruction, shapes[name])
            tally.product_work += _product_work(instruction, shapes[name], computations)
            if instruction.opcode.removesuffix("-start") not in COLLECTIVES:
                continue
            op = _collective(instruction, shapes[name], runs.get(name))
            collectives.append(op)
            key = (op.kind, op.groups)
            instructions[key] = instructions.get(key, 0) + 1
            size = op.group_size if op.kind != "collective-permute" and op.groups else devices
            sent = sent_bytes(op.kind, size, op.operand_bytes, op.pairs)
            row = tally.rows.setdefault(key, _Row())
            row.runs += 1
            row.operands += len(op.operand_shapes)
            row.operand_bytes += op.operand_bytes
            row.sent_bytes += sent
        own[name] = tally

    @cache
    def total(name: str, depth: int = 0) -> _Tally:
        tally = _Tally(rows={})
        if depth > len(computations):  # a cycle of calls is no program XLA writes
            return _Tally(None, None, {})
        tally.add(own[name])
        for instruction in computations[name]:
            if instruction.opcode in _COMBINING:
                continue  # its combiner runs per element: counted by the op itself
            called = [(c, n) for c, n in _called(instruction, counted) if c in computations]
            if instruction.opcode == "conditional":
                branches = _Tally(rows={})
                for callee, _ in called:
                    branches.widen(total(callee, depth + 1))
                tally.add(branches)
                continue
            for callee, per_call in called:
                tally.add(total(callee, depth + 1), per_call)
        return tally

    return Parsed(
        key=hashlib.sha256(text.encode()).hexdigest()[:16],
        devices=devices,
        collectives=tuple(collectives),
        tally=total(entry) if entry else _Tally(rows={}),
        instructions=instructions,
    )


def executed_collectives(program: jax.stages.Compiled | str) -> list[ExecutedCollective]:
    """Every collective of the compiled program in text order, with how many times it runs per run of the
    program (each branch of a conditional as if it ran). Async pairs count once, by their start."""
    return list(parse(hlo_text(program)).collectives)


# -- the account ---------------------------------------------------------------------------------------


def _permute_axes(pairs, mesh) -> tuple[str, ...] | None:
    """The mesh axes a permute's pairs cross: those in which some source and target differ."""
    shape = mesh.devices.shape
    crossed = set()
    for source, target in pairs:
        if not (0 <= source < mesh.devices.size and 0 <= target < mesh.devices.size):
            return None
        a, b = np.unravel_index(source, shape), np.unravel_index(target, shape)
        crossed |= {axis for axis, (i, j) in zip(mesh.axis_names, zip(a, b)) if i != j}
    return tuple(axis for axis in mesh.axis_names if axis in crossed)


def _where(kind, groups, mesh, devices) -> tuple[tuple[str, ...] | None, int | None]:
    """(the mesh axes a collective's groups run along, devices per group)."""
    if kind == "collective-permute":
        pairs = tuple((g[0], g[1]) for g in groups or () if len(g) == 2)
        return (_permute_axes(pairs, mesh) if mesh is not None else None), 2
    if not groups:
        return (tuple(mesh.axis_names) if mesh is not None else None), devices
    return (mesh_axes_of(groups, mesh) if mesh is not None else None), len(groups[0])


def account_of(
    program: jax.stages.Compiled | str,
    *,
    what: str = "your function",
    args: Sequence = (),
    mesh: jax.sharding.Mesh | None = None,
) -> ProgramAccount:
    """What one device executes in one run of the program. The mesh that names the collectives' axes is
    `mesh`, or the one the program's arguments (or `args`) live on."""
    parsed = parse(hlo_text(program))
    if mesh is None:
        mesh = program_mesh(program, args, {})
    rows: dict[tuple, list] = {}
    for (kind, groups), row in (parsed.tally.rows or {}).items():
        axes, size = _where(kind, groups, mesh, parsed.devices)
        key = (kind, axes, size)
        known = rows.setdefault(key, [0, 0, 0, 0, 0])
        known[0] += parsed.instructions.get((kind, groups), 0)
        for index, value in enumerate(row.figures(), start=1):
            known[index] = _plus(known[index], value)
    traffic = tuple(
        Traffic(kind, axes, size, *figures)
        for (kind, axes, size), figures in sorted(
            rows.items(), key=lambda item: (COLLECTIVES.index(item[0][0]), str(item[0][1]))
        )
    )
    memory = None
    if isinstance(program, jax.stages.Compiled):
        try:
            memory = memory_per_device(program)
        except NotReported:
            memory = None
    return ProgramAccount(
        what=what,
        key=parsed.key,
        devices=parsed.devices,
        traffic=traffic,
        dot_work=parsed.tally.dot_work,
        product_work=parsed.tally.product_work,
        argument_bytes=memory.argument_bytes if memory else None,
        temp_bytes=memory.temp_bytes if memory else None,
        output_bytes=memory.output_bytes if memory else None,
    )


def recorded_account(
    program: jax.stages.Compiled | str,
    *,
    what: str = "your function",
    args: Sequence = (),
    mesh: jax.sharding.Mesh | None = None,
) -> ProgramAccount:
    """account_of(...), recorded as one of the running test's programs (once, however many rules read it)."""
    account = account_of(program, what=what, args=args, mesh=mesh)
    facts.record_program(account)
    return account


def between_devices(account: ProgramAccount) -> tuple[Traffic, ...]:
    """The account's collectives that move data between devices: not those over singleton groups, which a
    mesh axis of size 1 may leave."""
    return tuple(row for row in account.traffic if row.axes != () and (row.group_size or 2) > 1)


__all__ = [
    "DTYPE_BYTES",
    "ExecutedCollective",
    "Parsed",
    "UnknownCount",
    "account_of",
    "between_devices",
    "executed_collectives",
    "parse",
    "recorded_account",
    "sent_bytes",
    "unknown_count",
]
