"""The JAX errors students of the shard_map exercises meet most, each explained in the course's words: what
it means, its usual cause in these exercises, what to do. grader.harness.outcomes.student_explanation gives
a test's result the explanation beside JAX's own message, which stays (cut to its first lines when it is
long); the reports say it once for the tests of an exercise that met the same error.

Each error is known by the builtin its exception derives from and a part of JAX's message that names the
mistake (the numbers and names in it vary): an exception rebuilt from a worker's report keeps both. The
texts are JAX 0.10's; tests/grader/harness/test_jax_errors.py raises each one for real."""

from __future__ import annotations

import re
from dataclasses import dataclass

from grader.core.bounds import clipped

# How much of JAX's message an explained error keeps: its first lines say what went wrong, and the
# explanation must still fit in the test's message after it.
JAX_TEXT_LINES = 16
JAX_TEXT_CHARS = 2_000


@dataclass(frozen=True)
class KnownError:
    """One JAX error and its explanation, three short lines a student reads below JAX's message."""

    name: str  # what the course calls it
    base: type[BaseException]  # the builtin JAX's exception derives from
    text: re.Pattern[str]  # searched for in JAX's message
    meaning: str
    cause: str
    fix: str
    # For an error whose message is empty: the student's line that raised it, which must match.
    line: re.Pattern[str] | None = None

    def matches(self, exc: BaseException, line: str | None) -> bool:
        if not isinstance(exc, self.base) or not self.text.search(_message(exc)):
            return False
        return self.line is None or (line is not None and self.line.search(line) is not None)

    def explanation(self) -> str:
        return f"What it means: {self.meaning}\nUsual cause: {self.cause}\nWhat to do: {self.fix}"


def _message(exc: BaseException) -> str:
    try:
        return str(exc)
    except Exception:  # a student's __str__ may raise
        return ""


# A call of a collective that checks its axis names through JAX's internal assertion (the line must call one,
# not be the student's own `assert`).
_COLLECTIVE_CALL = re.compile(r"^(?!assert\b).*\b(?:psum|pmean|pmax|pmin|ppermute|pcast)\s*\(")

KNOWN_ERRORS = (
    KnownError(
        "replication not inferred",
        ValueError,
        re.compile(r"out_specs which require replication which can't be statically inferred"),
        meaning="out_specs say this output is the same on every device, but it comes from per-device "
        "values.",
        cause="a pmean'd (replicated) value added to a per-device accumulator: the sum is still per-device.",
        fix="psum or pmean what you return over that axis, or keep the axis in out_specs (not check_vma=False).",
    ),
    KnownError(
        "in_specs do not match the argument",
        ValueError,
        re.compile(r"in_specs passed to shard_map: .* does not match the specs of the input"),
        meaning="an argument arrives in another layout than its in_specs entry, and shard_map does not "
        "move it.",
        cause='assuming an argument replicated when it arrives split (ZeRO-1\'s m and v are P("data")).',
        fix="give in_specs the layout the docstring gives, or change the argument's layout with jax.reshard.",
    ),
    KnownError(
        "spec longer than the array's rank",
        ValueError,
        re.compile(r"(?:in|out)_specs entry which is too long"),
        meaning="a PartitionSpec has more entries than its value has dimensions (one entry per dimension).",
        cause="a spec written for a bigger array given to a value of lower rank (a scalar loss, a bias).",
        fix='give each value a spec no longer than its rank: P() for a scalar, P("data") for a row split.',
    ),
    KnownError(
        "dimension not divisible by the mesh axis",
        ValueError,
        re.compile(r"not evenly divisible by the corresponding mesh axis|does not evenly divide"),
        meaning="a split dimension must be a multiple of the mesh axis's size: each device gets an "
        "equal block.",
        cause='the spec splits another dimension than the exercise does (P("data") splits the first).',
        fix="split the dimension the docstring names. If its size does not divide, pad it first (as in ex11).",
    ),
    KnownError(
        "axis not in the mesh",
        ValueError,
        re.compile(
            r"must refer to an axis marked as manual|Resource axis: .* is not found in mesh"
        ),
        meaning="a PartitionSpec names an axis that the mesh (or shard_map's axis_names) does not have.",
        cause="a misspelt axis name, or an array dimension given where a mesh axis name belongs.",
        fix="name only the mesh's axes (mesh.axis_names) in specs, as the exercise's docstring names them.",
    ),
    KnownError(
        "collective axis not in the mesh",
        AssertionError,
        re.compile(r"\A\Z"),  # JAX's internal check fails without a word
        meaning="JAX's own check failed in this collective: its axis_name is not one of the mesh's axes.",
        cause="a misspelt axis name, or a name from another exercise's mesh.",
        fix="pass one of mesh.axis_names, as the exercise's docstring names them.",
        line=_COLLECTIVE_CALL,
    ),
    KnownError(
        "unbound axis name",
        NameError,
        re.compile(r"unbound axis name"),
        meaning="a collective (psum, all_gather, axis_index ...) ran where its axis name is not bound.",
        cause="a collective called outside jax.shard_map, or an axis name the mesh does not have.",
        fix="call collectives only inside the function given to jax.shard_map, over mesh.axis_names.",
    ),
    KnownError(
        "loop carry changes from replicated to per-device",
        TypeError,
        re.compile(r"carry output must have equal types(?s:.*)manual axis types do not match"),
        meaning="a loop's carry starts the same on every device but comes back differing per device.",
        cause="a carry started from zeros (replicated) that accumulates each device's own values.",
        fix='make the initial carry per-device: jax.lax.pcast(init, axis, to="varying"), as JAX suggests.',
    ),
)


def known_error(exc: BaseException, line: str | None = None) -> KnownError | None:
    """The known error `exc` is, if any; `line`: the student's line that raised it, when known."""
    return next((known for known in KNOWN_ERRORS if known.matches(exc, line)), None)


def jax_text(exc: BaseException) -> str:
    """JAX's message, each line said once and cut to its first lines when it is long: the explanation
    comes after it. (JAX repeats a line for every leaf of a pytree its error concerns.)"""
    lines: list[str] = []
    times: dict[str, int] = {}
    for line in _message(exc).splitlines():
        if line.strip() and line in times:
            times[line] += 1
        elif line.strip() or not lines or lines[-1].strip():  # one blank line between paragraphs
            times[line] = 1
            lines.append(line)
    said = [f"{line} (said {times[line]} times)" if times[line] > 1 else line for line in lines]
    kept = "\n".join(said[:JAX_TEXT_LINES])
    if len(said) > JAX_TEXT_LINES:
        kept += f"\n[{len(said) - JAX_TEXT_LINES} more lines of JAX's message cut]"
    return clipped(kept, JAX_TEXT_CHARS)
