"""Rules on what a compiled program's collectives do when it runs: how many times each kind runs, where a
collective-permute sends (its source -> target pairs), how many bytes each moves per device, and XLA's
memory figures. Every figure is read from the program's one account (grader.checks.account): a collective
in the body of a `fori_loop(0, 9, ...)` runs 9 times, one in a loop with no static trip count an unknown
number of times, which no rule passes. Each check records the program's account and its rule's figures
(grader.core.results.RuleFigure) for the test's table."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Literal

import jax
import numpy as np

from grader.checks.account import (
    ExecutedCollective,
    executed_collectives,
    recorded_account,
    unknown_count,
)
from grader.checks.hlo import (
    COLLECTIVES,
    METADATA,
    DeviceMemory,
    NotReported,
    memory_per_device,
    mesh_axes_of,
    program_mesh,
)
from grader.checks.numerics import Tolerance, assert_computes
from grader.core import facts
from grader.core.bounds import MAX_FIGURES, NAME_CHARS
from grader.core.results import (
    Collective,
    CollectivesCheck,
    ExecutedRule,
    MemoryCheck,
    PipelineSchedule,
    RuleFigure,
)
from grader.core.rules import Rule

PairShape = Literal["chain", "cycle", "within"]
_SHOWN_PAIRS = 12  # a message lists this many pairs, then says how many more


def _fact(op: ExecutedCollective, mesh) -> Collective:
    return Collective(
        op.kind,
        op.group_size,
        mesh_axes_of(op.groups, mesh) if mesh is not None else None,
        METADATA.sub("", op.line),
        executed=op.times,
        unknown_trip_count=op.times is None,
        pairs=op.pairs,
        operand_shapes=op.operand_shapes,
        operand_bytes=op.operand_bytes,
    )


def _record(
    program, ops, args, *, what: str, passed: bool, rule: str, figures=(), **check_fields
) -> None:
    """The program's account, the collectives check (its instructions, for the pictures) and the rule's
    figures, for the running test's facts."""
    mesh = program_mesh(program, args, {})
    account = recorded_account(program, what=what, mesh=mesh)
    facts.record_collectives(
        CollectivesCheck(
            what=what,
            found=tuple(_fact(op, mesh) for op in ops),
            passed=passed,
            rule=rule,
            program=account.key,
            **check_fields,
        )
    )
    for figure in figures:
        facts.record_figure(figure(account.key))


def _figure(rule: Rule, measure: str, expected: str, actual, passed: bool, bound=None):
    """A RuleFigure waiting for its program's key."""
    return lambda key: RuleFigure(key, str(rule), measure, expected, actual, passed, bound)


def _check_values(program, expected, args, rtol, atol, what) -> None:
    if expected is None:
        return
    if isinstance(program, str):
        raise TypeError("expected=... needs the compiled program, not its HLO text")
    assert_computes(program(*args), expected, rtol=rtol, atol=atol, what=what)


def _say(hint: str) -> str:
    return f" {hint}" if hint else ""


def _range(at_least: int | None, at_most: int | None) -> str:
    if at_least is not None and at_least == at_most:
        return f"exactly {at_least} times"
    if at_least is not None and at_most is not None:
        return (
            f"{at_least} to {at_most} times"
            if at_most > at_least + 1
            else f"{at_least} or {at_most} times"
        )
    if at_least is not None:
        return f"at least {at_least} times"
    return f"at most {at_most} times"


def assert_executed(
    program: jax.stages.Compiled | str,
    kind: str,
    *,
    at_least: int | None = None,
    at_most: int | None = None,
    what: str = "your function",
    hint: str = "",
    schedule: PipelineSchedule | None = None,
    expected=None,
    args: Sequence = (),
    rtol: float = 1e-5,
    atol: Tolerance | Sequence[Tolerance] = 1e-6,
    operands: bool = False,
    per: str = "run",
) -> int:
    """How many times collectives of `kind` run when the program runs, summed: it must lie within
    [at_least, at_most]. With `operands`, each run counts its operands: XLA combines collectives of one
    kind into a single instruction of several operands (six per-microbatch all-reduces become one
    instruction run MB times), so a rule per array counts operands, not instructions. A collective of
    that kind inside a loop without a static trip count fails (its count is unknown, and a rule on it
    cannot be earned by a guess). With `expected`, the program is also
    run on `args` and must give those values: a function that does nothing runs no collective at all.
    `per`: what one run of the program is, for the pages ("1 to 6 per step" for a training step's)."""
    if kind not in COLLECTIVES:
        raise ValueError(f"unknown collective {kind!r} (known: {', '.join(COLLECTIVES)})")
    if not isinstance(per, str) or not per.strip() or len(per) > NAME_CHARS:
        raise ValueError(f"per must name what one run of the program is, like 'step'; got {per!r}")
    ops = executed_collectives(program)
    account = recorded_account(program, what=what, args=args)
    rows = [row for row in account.traffic if row.kind == kind]
    counts = [row.operands if operands else row.runs for row in rows]
    total = None if None in counts else sum(counts)
    counted = f"{kind} operands" if operands else kind
    rule = (
        f"{counted} run {_range(at_least, at_most)}"
        if operands
        else f"{kind} runs {_range(at_least, at_most)}"
    )
    low_ok = total is not None and (at_least is None or total >= at_least)
    high_ok = total is not None and (at_most is None or total <= at_most)
    passed = low_ok and high_ok
    per_run = "" if per == "run" else f" per {per}"
    _record(
        program,
        ops,
        args,
        what=what,
        passed=passed,
        rule=rule,
        schedule=schedule,
        executed_rule=ExecutedRule(kind, at_least, at_most, operands, total, per),
        figures=[
            _figure(
                Rule.COLLECTIVES,
                f"{counted} run" if operands else f"{kind} runs",
                _range(at_least, at_most).removesuffix(" times") + per_run,
                total,
                passed,
                at_most,
            )
        ],
    )
    _check_values(program, expected, args, rtol, atol, what)
    if total is None:
        raise unknown_count(what, kind, rule)
    if not passed:
        raise AssertionError(
            f"the compiled program of {what} runs {counted} {total} times; it should run "
            f"{_range(at_least, at_most)}.{_say(hint)}"
        )
    return total


def _coordinates(mesh: jax.sharding.Mesh, position: int) -> tuple[int, ...]:
    return tuple(int(i) for i in np.unravel_index(position, mesh.devices.shape))


def _along(mesh, axis: str, pair: tuple[int, int]):
    """(the group's other coordinates, source, target) along `axis`, or None if the pair leaves its group."""
    index = mesh.axis_names.index(axis)
    size = mesh.devices.size
    if not all(0 <= p < size for p in pair):
        return None
    source, target = (_coordinates(mesh, p) for p in pair)
    rest = source[:index] + source[index + 1 :]
    if rest != target[:index] + target[index + 1 :]:
        return None
    return rest, source[index], target[index]


def _shown(mesh, pairs) -> str:
    def where(position):
        if len(mesh.devices.shape) == 1:
            return str(position)
        coords = _coordinates(mesh, position)
        return "(" + ", ".join(f"{a} {c}" for a, c in zip(mesh.axis_names, coords)) + ")"

    listed = [f"{where(s)}->{where(t)}" for s, t in pairs[:_SHOWN_PAIRS]]
    more = f" and {len(pairs) - _SHOWN_PAIRS} more" if len(pairs) > _SHOWN_PAIRS else ""
    return ", ".join(listed) + more


def _chain(n: int, reverse: bool = False) -> set[tuple[int, int]]:
    return {(s + 1, s) if reverse else (s, s + 1) for s in range(n - 1)}


def _is_cycle(pairs: set[tuple[int, int]], n: int) -> bool:
    forward = {(s, (s + 1) % n) for s in range(n)}
    backward = {(s, (s - 1) % n) for s in range(n)}
    return n > 1 and pairs in (forward, backward)


def _expected_positions(mesh, axis: str, shape: PairShape, reverse_too: bool):
    """The pairs a rule expects, as mesh positions: for the pages to draw beside the program's."""
    if shape == "within":
        return None
    index = mesh.axis_names.index(axis)
    n = int(mesh.shape[axis])
    along = _chain(n) | (_chain(n, reverse=True) if reverse_too else set())
    if shape == "cycle":
        along = {(s, (s + 1) % n) for s in range(n)}
    positions = np.arange(mesh.devices.size).reshape(mesh.devices.shape)
    rows = np.moveaxis(positions, index, -1).reshape(-1, n)
    return tuple(sorted((int(row[a]), int(row[b])) for row in rows for a, b in along))


def assert_permute_pairs(
    program: jax.stages.Compiled | str,
    mesh: jax.sharding.Mesh,
    axis: str,
    *,
    shape: PairShape,
    reverse_too: bool = False,
    what: str = "your function",
    hint: str = "",
    expected=None,
    args: Sequence = (),
    rtol: float = 1e-5,
    atol: Tolerance | Sequence[Tolerance] = 1e-6,
) -> list[tuple[tuple[int, int], ...]]:
    """Where the program's collective-permutes send. Every pair runs along mesh axis `axis` (source and
    target differ in that coordinate only); and per group of devices along it:
    - "chain": each permute sends only to the next device (s -> s+1, never the last back to the first), and
      together they do; with `reverse_too`, the reversed chain (s+1 -> s, a backward pass) is present as well;
    - "cycle": each permute's pairs make one cycle through every device of the group, in either direction;
    - "within": any pairs, within the group.
    There must be at least one collective-permute. Returns each permute's pairs."""
    if axis not in mesh.axis_names:
        raise ValueError(f"mesh has no axis {axis!r} (it has {', '.join(mesh.axis_names)})")
    n = int(mesh.shape[axis])
    ops = executed_collectives(program)
    permutes = [op for op in ops if op.kind == "collective-permute"]
    words = {
        "chain": f"to the next device along {axis!r} only (s -> s+1, no pair from the last back to the first)"
        + (", and back (s+1 -> s) in the backward pass" if reverse_too else ""),
        "cycle": f"round one cycle through all {n} devices along {axis!r}",
        "within": f"within {axis!r} only",
    }[shape]
    problems: list[str] = []
    if not permutes:
        problems.append("it has no collective-permute at all")
    union: dict[tuple, set[tuple[int, int]]] = {}
    for op in permutes:
        placed = [(pair, _along(mesh, axis, pair)) for pair in op.pairs]
        crossing = [pair for pair, at in placed if at is None]
        if crossing:
            problems.append(
                f"a collective-permute sends {_shown(mesh, crossing)}, across another mesh axis than {axis!r}"
            )
            continue
        by_group: dict[tuple, set[tuple[int, int]]] = {}
        for _, (group, source, target) in placed:
            by_group.setdefault(group, set()).add((source, target))
            union.setdefault(group, set()).add((source, target))
        for pairs in by_group.values():
            if shape == "cycle" and not _is_cycle(pairs, n):
                problems.append(
                    f"a collective-permute sends {_shown(mesh, op.pairs)}, not one cycle"
                )
                break
            allowed = _chain(n) | (_chain(n, reverse=True) if reverse_too else set())
            if shape == "chain" and not pairs <= allowed:
                problems.append(f"a collective-permute sends {_shown(mesh, op.pairs)}")
                break
    if shape == "chain" and permutes and not problems:
        groups = int(mesh.devices.size // n)
        needed = [_chain(n)] + ([_chain(n, reverse=True)] if reverse_too else [])
        if len(union) < groups or any(
            not want <= pairs for pairs in union.values() for want in needed
        ):
            missing = (
                "the reversed pairs of the backward pass" if reverse_too else "some of the chain"
            )
            problems.append(f"its permutes leave out {missing}")
    _record(
        program,
        ops,
        args,
        what=what,
        passed=not problems,
        rule=f"collective-permute sends {words}",
        expected_pairs=_expected_positions(mesh, axis, shape, reverse_too),
        figures=[
            _figure(
                Rule.COLLECTIVES,
                "collective-permute pairs",
                f"sent {words}",
                len({pair for op in permutes for pair in op.pairs}),
                not problems,
            )
        ],
    )
    _check_values(program, expected, args, rtol, atol, what)
    if problems:
        raise AssertionError(
            f"the compiled program of {what} should send {words}; "
            + "; ".join(dict.fromkeys(problems))
            + f".{_say(hint)}"
        )
    return [op.pairs for op in permutes]


def assert_operand_bytes(
    program: jax.stages.Compiled | str,
    kind: str,
    *,
    at_most: int | None = None,
    at_least: int | None = None,
    what: str = "your function",
    hint: str = "",
    buffer_bytes: int | None = None,
    expected=None,
    args: Sequence = (),
    rtol: float = 1e-5,
    atol: Tolerance | Sequence[Tolerance] = 1e-6,
) -> list[int]:
    """Each collective of `kind` moves, per device, between at_least and at_most bytes of operands (there
    must be one). `buffer_bytes`: the size the rule is about (an exchange's buffer at its capacity), for the
    pages to show beside what moved. Returns each op's bytes."""
    ops = executed_collectives(program)
    of_kind = [op for op in ops if op.kind == kind]
    wrong = [
        op
        for op in of_kind
        if (at_most is not None and op.operand_bytes > at_most)
        or (at_least is not None and op.operand_bytes < at_least)
    ]
    bounds = " and ".join(
        text
        for text in (
            f"at least {at_least}" if at_least is not None else "",
            f"at most {at_most}" if at_most is not None else "",
        )
        if text
    )
    rule = f"each {kind} moves {bounds} bytes per device"
    passed = bool(of_kind) and not wrong
    moved = [op.operand_bytes for op in of_kind]
    _record(
        program,
        ops,
        args,
        what=what,
        passed=passed,
        rule=rule,
        buffer_bytes=buffer_bytes,
        figures=[
            _figure(
                Rule.COLLECTIVES,
                f"bytes of the largest {kind}"
                if at_most is not None
                else f"bytes of the least {kind}",
                f"{bounds}, and one {kind} at least",
                (max(moved) if at_most is not None else min(moved)) if moved else 0,
                passed,
                at_most if at_most is not None else at_least,
            )
        ],
    )
    _check_values(program, expected, args, rtol, atol, what)
    if not of_kind:
        raise AssertionError(f"the compiled program of {what} has no {kind}; {rule}.{_say(hint)}")
    if wrong:
        moved = ", ".join(
            f"{op.operand_bytes} bytes ({' + '.join(str(list(s)) for s in op.operand_shapes) or 'no array'})"
            for op in wrong[:_SHOWN_PAIRS]
        )
        raise AssertionError(
            f"in the compiled program of {what}, {kind} moves {moved} per device; "
            f"each should move {bounds} bytes.{_say(hint)}"
        )
    return [op.operand_bytes for op in of_kind]


def assert_memory(
    program: jax.stages.Compiled,
    *,
    argument_below: int | None = None,
    temp_below: int | None = None,
    what: str = "your function",
    hint: str = "",
    shown_against: Mapping[str, int] | None = None,
) -> DeviceMemory:
    """XLA's own figures for one device of the compiled program: the bytes of its arguments and of its
    temporary buffers, each below its bound. Raises NotReported where the compiler reports none.
    `shown_against`: labelled bytes per device the pages draw beside the program's ("the reference
    without remat": its temporaries), at most MAX_FIGURES; they judge nothing."""
    against = _figures(shown_against or {})
    memory = memory_per_device(program)
    problems = []
    if argument_below is not None and memory.argument_bytes >= argument_below:
        problems.append(
            f"its arguments take {memory.argument_bytes} bytes per device (should be below {argument_below})"
        )
    if temp_below is not None and memory.temp_bytes >= temp_below:
        problems.append(
            f"its temporary buffers take {memory.temp_bytes} bytes per device (should be below {temp_below})"
        )
    key = recorded_account(program, what=what).key
    for measure, actual, below in (
        ("argument bytes", memory.argument_bytes, argument_below),
        ("temporary bytes", memory.temp_bytes, temp_below),
    ):
        if below is not None:
            figure = _figure(
                Rule.MEMORY, measure, f"below {below:,}", actual, actual < below, below
            )
            facts.record_figure(figure(key))
    facts.record_memory(
        MemoryCheck(
            what,
            memory.argument_bytes,
            memory.output_bytes,
            memory.temp_bytes,
            not problems,
            argument_below,
            temp_below,
            against,
        )
    )
    if problems:
        raise AssertionError(
            f"in the compiled program of {what}, " + "; ".join(problems) + f".{_say(hint)}"
        )
    return memory


def _figures(shown_against: Mapping[str, int]) -> dict[str, int]:
    """The test's comparison figures, refused with the reason when they are not labelled byte counts."""
    if not isinstance(shown_against, Mapping):
        raise TypeError(
            f"shown_against must map labels to bytes, got {type(shown_against).__name__}"
        )
    if len(shown_against) > MAX_FIGURES:
        raise ValueError(
            f"shown_against has {len(shown_against)} figures; a memory check shows at most {MAX_FIGURES}"
        )
    for label, value in shown_against.items():
        if not isinstance(label, str) or not label.strip():
            raise ValueError(
                f"shown_against: a figure's label must be a non-empty string, got {label!r}"
            )
        if isinstance(value, bool) or not isinstance(value, int | np.integer) or value < 0:
            raise ValueError(
                f"shown_against[{label!r}] must be bytes, an int of at least 0, got {value!r}"
            )
    return {label: int(value) for label, value in shown_against.items()}


__all__ = [
    "ExecutedCollective",
    "NotReported",
    "assert_executed",
    "assert_memory",
    "assert_operand_bytes",
    "assert_permute_pairs",
    "executed_collectives",
]
