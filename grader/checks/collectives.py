"""Rules on the collectives a compiled program holds: an exact count per kind, kinds that must appear or
must not, or only some kinds; each failure says what the collectives found and asked for do to the data.
Each check records the program's account (grader.checks.account) and a RuleFigure per kind it names."""

from __future__ import annotations

from collections import Counter

import jax

from grader.checks.account import recorded_account
from grader.checks.hlo import (
    COLLECTIVES,
    MEANS,
    METADATA,
    CollectiveOp,
    collective_ops,
    compiled,
    mesh_axes_of,
    program_mesh,
)
from grader.checks.numerics import assert_computes
from grader.core import facts
from grader.core.results import Collective, CollectivesCheck, RuleFigure
from grader.core.rules import Rule


def _fmt(counts: Counter) -> str:
    return ", ".join(f"{k} x{v}" for k, v in sorted(counts.items())) or "no collectives"


def assert_collectives(
    fn_or_text,
    *args,
    exactly: dict[str, int] | None = None,
    present=(),
    absent=(),
    only: tuple[str, ...] | None = None,
    what: str = "your function",
    expected=None,
    rtol: float = 1e-5,
    atol: float = 1e-6,
    **kwargs,
) -> Counter:
    """Check the compiled collectives: an exact count per kind, kinds that must appear or must not,
    or `only` these kinds (and at least one of them). Returns the counts.

    With `expected`, the compiled program is also run on `args` and must give those values (a function
    that does nothing has no collectives at all)."""
    program = (
        fn_or_text
        if isinstance(fn_or_text, (str, jax.stages.Compiled))
        else compiled(fn_or_text, *args, **kwargs)
    )
    ops = collective_ops(program)  # before the values are checked: the fact is recorded either way
    counts = Counter(op.kind for op in ops)
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
    mesh = program_mesh(program, args, kwargs)
    key = _recorded(program, what, mesh)
    facts.record_collectives(
        CollectivesCheck(
            what=what,
            found=tuple(collective_fact(op, mesh) for op in ops),
            passed=not problems,
            exactly=dict(exactly) if exactly is not None else None,
            present=tuple(present),
            absent=tuple(absent),
            only=tuple(only) if only is not None else None,
            program=key,
        )
    )
    for kind, words, held in _asked(counts, exactly, present, absent, only):
        facts.record_figure(
            RuleFigure(
                key, str(Rule.COLLECTIVES), f"{kind} instructions", words, counts[kind], held
            )
        )
    if expected is not None:
        if isinstance(program, str):
            raise TypeError("assert_collectives(expected=...) needs the function, not its HLO text")
        assert_computes(program(*args), expected, rtol=rtol, atol=atol, what=what)
    if problems:
        raise AssertionError(
            f"the compiled program of {what} uses {_fmt(counts)}; "
            + "; ".join(problems)
            + ".\n"
            + _meanings(counts, exactly, present, absent, only)
            + "The compiled HLO is what really runs across devices: check which collective your "
            "code asks for (or which one the compiler inserts to make your shardings work)."
        )
    return counts


def _recorded(program, what: str, mesh) -> str:
    """The program's account, recorded for the running test; its key."""
    return recorded_account(program, what=what, mesh=mesh).key


def _asked(counts: Counter, exactly, present, absent, only):
    """(kind, what the rule asks of it in words, whether the program holds to it), a row per kind it names."""
    rows = {}
    if exactly is not None:  # a kind it does not name must not run at all
        for kind in [*exactly, *(k for k in counts if k not in exactly)]:
            count = exactly.get(kind, 0)
            rows[kind] = (f"exactly {count}" if count else "none", counts[kind] == count)
    for kind in present:
        rows.setdefault(kind, ("at least 1", counts[kind] > 0))
    for kind in absent:
        rows[kind] = ("none", not counts[kind])
    if only is not None:
        for kind in only:
            rows.setdefault(kind, ("any, one kind of these at least", any(counts[k] for k in only)))
        for kind in counts:
            if kind not in only:
                rows[kind] = ("none", False)
    return [(kind, words, held) for kind, (words, held) in rows.items()]


def _meanings(counts: Counter, exactly, present, absent, only) -> str:
    """What the collectives the rule is about do: the ones the program used against it, and the ones
    it asks for, so that a failure says what the student's program does to the data."""
    wanted = {k for k, v in (exactly or {}).items() if v} | set(present) | set(only or ())
    used = [k for k in COLLECTIVES if counts[k] and (k in absent or k not in wanted)]
    missing = [k for k in COLLECTIVES if k in wanted and not counts[k]]
    lines = [f"Yours runs {k}: it {MEANS[k]}." for k in used]
    lines += [f"The rule asks for {k}: it {MEANS[k]}." for k in missing]
    return "".join(line + "\n" for line in lines)


def inspect_collectives(
    program: jax.stages.Compiled | str, *, what: str = "your function"
) -> list[CollectiveOp]:
    """collective_ops(program), recorded as the running test's fact: for a test that judges the collectives
    by a rule of its own (no all-gather of the whole batch, say) rather than through assert_collectives."""
    ops = collective_ops(program)
    mesh = program_mesh(program, (), {})
    facts.record_collectives(
        CollectivesCheck(
            what=what,
            found=tuple(collective_fact(op, mesh) for op in ops),
            passed=None,
            program=_recorded(program, what, mesh),
        )
    )
    return ops


def collective_fact(op: CollectiveOp, mesh: jax.sharding.Mesh | None) -> Collective:
    return Collective(
        op=op.kind,
        group_size=op.group_size,
        mesh_axes=mesh_axes_of(op, mesh) if mesh is not None else None,
        line=METADATA.sub("", op.line),
    )
