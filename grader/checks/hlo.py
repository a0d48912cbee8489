"""What a compiled program really does: its collectives (from the compiled HLO text), and the
per-device memory and flops XLA reports for it.

Collectives are read from each instruction's opcode, never from names or metadata: a student's
`jax.named_scope("all-reduce(")` lands in `metadata={op_name=...}` and must not count as one."""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass

import jax
import numpy as np

from grader.checks.numerics import assert_computes
from grader.checks.tracing import compiling_for

COLLECTIVES = ("all-reduce", "all-gather", "reduce-scatter", "collective-permute", "all-to-all")

_INSTRUCTION = re.compile(r"^\s*(?:ROOT\s+)?%?[\w.\-]+\s*=\s*")
_METADATA = re.compile(r',\s*metadata=\{(?:[^{}"]|"(?:[^"\\]|\\.)*")*\}')
_LIST_GROUPS = re.compile(r"replica_groups=\{((?:\{[\d,]*\},?)*)\}")
_IOTA_GROUPS = re.compile(r"replica_groups=\[([\d,]+)\]<=\[([\d,]+)\](?:T\(([\d,]+)\))?")
_PAIRS = re.compile(r"source_target_pairs=\{((?:\{\d+,\d+\},?)*)\}")


class NotReported(RuntimeError):
    """The platform's compiler does not report this figure."""


@dataclass(frozen=True)
class CollectiveOp:
    kind: str                                     # one of COLLECTIVES
    groups: tuple[tuple[int, ...], ...] | None    # replica groups (device ids), when the op states them
    line: str

    @property
    def group_size(self) -> int | None:
        return len(self.groups[0]) if self.groups else None


def compiled(fn, *args, **kwargs) -> jax.stages.Compiled:
    """jit, lower and compile `fn` for these arguments (already-jitted functions are fine too)."""
    with compiling_for((args, kwargs)):
        return jax.jit(fn).lower(*args, **kwargs).compile()


def hlo_text(fn_or_compiled, *args, **kwargs) -> str:
    if isinstance(fn_or_compiled, str):
        return fn_or_compiled
    if not isinstance(fn_or_compiled, jax.stages.Compiled):
        fn_or_compiled = compiled(fn_or_compiled, *args, **kwargs)
    return fn_or_compiled.as_text()


def _closing(text: str) -> int:
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
    rest = line[head.end():]
    if rest.startswith("("):   # a tuple shape: skip to its closing parenthesis
        rest = rest[_closing(rest) + 1:]
    else:
        rest = rest.split(" ", 1)[1] if " " in rest else ""
    opcode = re.match(r"\s*([\w\-]+)\(", rest)
    if not opcode:
        return None
    return opcode.group(1), _METADATA.sub("", rest[opcode.end():])


def _groups(line: str):
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
        return tuple(tuple(int(d) for d in p.split(",")) for p in re.findall(r"\{(\d+,\d+)\}", m.group(1)))
    return None


def collective_ops(fn_or_text, *args, **kwargs) -> list[CollectiveOp]:
    """Every collective in the compiled program, in text order (loop bodies count once)."""
    ops = []
    for line in hlo_text(fn_or_text, *args, **kwargs).splitlines():
        parsed = instruction_opcode(line)
        if parsed is None:
            continue
        opcode, attributes = parsed
        kind = opcode.removesuffix("-start")   # async pairs count once, by their start; "-done" is not counted
        if kind in COLLECTIVES:
            ops.append(CollectiveOp(kind, _groups(attributes), line.strip()))
    return ops


def collectives_in(fn_or_text, *args, **kwargs) -> Counter:
    """How many of each collective the compiled program contains, e.g. Counter({'all-reduce': 1})."""
    return Counter(op.kind for op in collective_ops(fn_or_text, *args, **kwargs))


def _fmt(counts: Counter) -> str:
    return ", ".join(f"{k} x{v}" for k, v in sorted(counts.items())) or "no collectives"


def assert_collectives(fn_or_text, *args, exactly: dict[str, int] | None = None, present=(), absent=(),
                       only: tuple[str, ...] | None = None, what: str = "your function", expected=None,
                       rtol: float = 1e-5, atol: float = 1e-6, **kwargs) -> Counter:
    """Check the compiled collectives: an exact count per kind, kinds that must appear or must not,
    or `only` these kinds (and at least one of them). Returns the counts.

    With `expected`, the compiled program is also run on `args` and must give those values (a function
    that does nothing has no collectives at all)."""
    program = fn_or_text if isinstance(fn_or_text, (str, jax.stages.Compiled)) else compiled(fn_or_text, *args,
                                                                                              **kwargs)
    if expected is not None:
        if isinstance(program, str):
            raise TypeError("assert_collectives(expected=...) needs the function, not its HLO text")
        assert_computes(program(*args), expected, rtol=rtol, atol=atol, what=what)
    counts = collectives_in(program)
    problems = []
    if exactly is not None:
        want = Counter({k: v for k, v in exactly.items() if v})
        if +counts != want:
            problems.append(f"expected exactly {_fmt(want)}")
    problems += [f"expected at least one {k}" for k in present if not counts[k]]
    problems += [f"expected no {k}" for k in absent if counts[k]]
    if only is not None:
        extra = sorted(k for k in counts if k not in only)
        if extra or not any(counts[k] for k in only):
            problems.append(f"expected only {' / '.join(only)}")
    if problems:
        raise AssertionError(
            f"the compiled program of {what} uses {_fmt(counts)}; " + "; ".join(problems) + ".\n"
            "The compiled HLO is what really runs across devices: check which collective your "
            "code asks for (or which one the compiler inserts to make your shardings work)."
        )
    return counts


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
    return DeviceMemory(stats.argument_size_in_bytes, stats.output_size_in_bytes,
                        stats.temp_size_in_bytes, stats.alias_size_in_bytes)


def flops_per_device(compiled_fn: jax.stages.Compiled) -> float:
    analysis = compiled_fn.cost_analysis()
    if isinstance(analysis, (list, tuple)):   # older jax returned one dict per program
        analysis = analysis[0] if analysis else None
    if not analysis or "flops" not in analysis:
        raise NotReported(f"the {jax.default_backend()} compiler does not report flops in cost_analysis()")
    return float(analysis["flops"])
