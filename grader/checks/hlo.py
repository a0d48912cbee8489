"""What a compiled program really does: its collectives (from the compiled HLO text), and the
per-device memory and flops XLA reports for it."""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass

import jax
import numpy as np

COLLECTIVES = ("all-reduce", "all-gather", "reduce-scatter", "collective-permute", "all-to-all")

# `%name = <type> all-reduce(` or the async form `all-reduce-start(`; `-done` halves are not counted.
_OP = re.compile(r"=\s.*?\b(" + "|".join(COLLECTIVES) + r")(-start)?\(")
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
    return jax.jit(fn).lower(*args, **kwargs).compile()


def hlo_text(fn_or_compiled, *args, **kwargs) -> str:
    if isinstance(fn_or_compiled, str):
        return fn_or_compiled
    if not isinstance(fn_or_compiled, jax.stages.Compiled):
        fn_or_compiled = compiled(fn_or_compiled, *args, **kwargs)
    return fn_or_compiled.as_text()


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
        if m := _OP.search(line):
            ops.append(CollectiveOp(m.group(1), _groups(line), line.strip()))
    return ops


def collectives_in(fn_or_text, *args, **kwargs) -> Counter:
    """How many of each collective the compiled program contains, e.g. Counter({'all-reduce': 1})."""
    return Counter(op.kind for op in collective_ops(fn_or_text, *args, **kwargs))


def _fmt(counts: Counter) -> str:
    return ", ".join(f"{k} x{v}" for k, v in sorted(counts.items())) or "no collectives"


def assert_collectives(fn_or_text, *args, exactly: dict[str, int] | None = None, present=(), absent=(),
                       only: tuple[str, ...] | None = None, what: str = "your function", **kwargs) -> Counter:
    """Check the compiled collectives: an exact count per kind, kinds that must appear or must not,
    or `only` these kinds (and at least one of them). Returns the counts."""
    counts = collectives_in(fn_or_text, *args, **kwargs)
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
