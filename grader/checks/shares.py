"""Rules that hold a program on a mesh to its share: the work each device executes and the bytes it sends.

A program in which every device computes everything can still run the collectives a rule names, and compute
the right values: these two rules are what it cannot meet. Each reads the program's one account
(grader.checks.account) and states its bound as a figure of the test's shapes, which the function's docstring
gives as a formula:

- work: the multiply-adds one device executes (its dots' and convolutions', and products written out
  elementwise), at most `allowed` x its share (the whole computation's divided by the devices that split
  it; a remat's recompute needs about 2x);
- traffic: the bytes one device sends through its collectives (grader.checks.account: what each kind sends
  per run), at most a bound the test computes from the shapes ("its block of K and V, once per ring step").

Both are earned only by a program that also computes the right values (`expected`, on `args`)."""

from __future__ import annotations

from collections.abc import Sequence

import jax

from grader.checks.account import between_devices, recorded_account, unknown_count
from grader.checks.numerics import Tolerance, assert_computes
from grader.core import facts
from grader.core.results import ProgramAccount, RuleFigure, Traffic
from grader.core.rules import Rule


def _say(hint: str) -> str:
    return f" {hint}" if hint else ""


def _check_values(program, expected, args, rtol, atol, what) -> None:
    if expected is not None:
        if isinstance(program, str):
            raise TypeError("expected=... needs the compiled program, not its HLO text")
        assert_computes(program(*args), expected, rtol=rtol, atol=atol, what=what)


def _count(value, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(f"{name} must be a count of at least 0, got {value!r}")
    return value


def assert_work(
    program: jax.stages.Compiled | str,
    *,
    share: int,
    share_of: str,
    allowed: float = 2.0,
    what: str = "your function",
    hint: str = "",
    expected=None,
    args: Sequence = (),
    rtol: float = 1e-5,
    atol: Tolerance | Sequence[Tolerance] = 1e-6,
    mesh: jax.sharding.Mesh | None = None,
) -> ProgramAccount:
    """Each device executes at most `allowed` x `share` multiply-adds. `share`: one device's share of the
    work (the whole computation's multiply-adds over the devices that split it); `share_of`: what it is a
    share of, in words, for the message and the table ("the step's dot work, 6 B F H / n"). `mesh` names the
    collectives' axes where the program's arguments do not (a program of no array)."""
    share = _count(share, "share")
    if not allowed > 0:
        raise ValueError(f"allowed must be a positive multiple of the share, got {allowed!r}")
    account = recorded_account(program, what=what, args=args, mesh=mesh)
    bound = int(allowed * share)
    actual = account.work
    passed = actual is not None and actual <= bound
    expected_words = (
        f"at most {allowed:g} x its share of {share_of} ({share:,}): {bound:,}"
        if share
        else f"none ({share_of})"
    )
    facts.record_figure(
        RuleFigure(
            account.key,
            str(Rule.WORK),
            "multiply-adds per device",
            expected_words,
            actual,
            passed,
            bound,
            share,
        )
    )
    _check_values(program, expected, args, rtol, atol, what)
    if actual is None:
        raise unknown_count(what, "dots or products", f"multiply-adds {expected_words}")
    if not passed:
        if not share:
            raise AssertionError(
                f"each device of {what} executed {actual:,} multiply-adds (its dots and products); "
                f"it needs none: {share_of}.{_say(hint)}"
            )
        raise AssertionError(
            f"each device executed {actual / share:.1f} x its share of {share_of}: {actual:,} "
            f"multiply-adds in the compiled {what}, where its share is {share:,} and the rule allows "
            f"{allowed:g} x ({bound:,}).{_say(hint)}"
        )
    return account


def axes_words(axes: tuple[str, ...] | None) -> str:
    """The mesh axes a collective runs over, in words: "'data' and 'model'"."""
    if axes is None:
        return "groups of devices that follow no mesh axis"
    return " and ".join(repr(axis) for axis in axes) or "each device alone"


def _where(row: Traffic) -> str:
    return axes_words(row.axes)


def traffic_words(rows: Sequence[Traffic]) -> str:
    """What each kind of collective sends, in words: "all-gather over 'i': 1,792 bytes in 1 run"."""
    return (
        "; ".join(
            f"{row.kind} over {_where(row)}: "
            + (
                "an unknown number of bytes"
                if row.sent_bytes is None
                else f"{row.sent_bytes:,} bytes"
            )
            + ("" if row.runs is None else f" in {row.runs} run" + ("" if row.runs == 1 else "s"))
            for row in rows
        )
        or "no collective between devices"
    )


def assert_traffic(
    program: jax.stages.Compiled | str,
    *,
    at_most: int,
    bound_of: str,
    what: str = "your function",
    hint: str = "",
    expected=None,
    args: Sequence = (),
    rtol: float = 1e-5,
    atol: Tolerance | Sequence[Tolerance] = 1e-6,
    mesh: jax.sharding.Mesh | None = None,
) -> ProgramAccount:
    """Each device sends at most `at_most` bytes through its collectives in one run of the program.
    `bound_of`: the bound's formula in words, for the message and the table ("its block of K and V, once
    per ring step")."""
    at_most = _count(at_most, "at_most")
    account = recorded_account(program, what=what, args=args, mesh=mesh)
    actual = account.sent_bytes
    passed = actual is not None and actual <= at_most
    expected_words = f"at most {at_most:,} ({bound_of})" if at_most else f"none ({bound_of})"
    facts.record_figure(
        RuleFigure(
            account.key,
            str(Rule.TRAFFIC),
            "bytes sent per device",
            expected_words,
            actual,
            passed,
            at_most,
        )
    )
    _check_values(program, expected, args, rtol, atol, what)
    if actual is None:
        raise unknown_count(what, "collectives", f"bytes sent {expected_words}")
    if not passed:
        sent = traffic_words(between_devices(account))
        if not at_most:
            raise AssertionError(
                f"each device of {what} sent {actual:,} bytes through collectives ({sent}); it needs "
                f"none: {bound_of}.{_say(hint)}"
            )
        raise AssertionError(
            f"each device sent {actual / at_most:.1f} x the bytes allowed: {actual:,} bytes through the "
            f"collectives of the compiled {what} ({sent}), where at most {at_most:,} are allowed "
            f"({bound_of}).{_say(hint)}"
        )
    return account


__all__ = ["assert_traffic", "assert_work", "traffic_words"]
