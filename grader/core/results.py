"""The result of one test, as every layer sees it: the harness records it, the grading process scores it,
the reports write it. With it, the facts the checks established while the test ran (what layout an array
had, which collectives a program compiled to, how fast it ran), recorded whether the check passed or not.

Every type here is a plain dataclass of JSON values, written by `to_dict` and read back by `from_dict`,
which refuses a key it does not know: a result never loses a field silently on its way.

Its text is bounded where it is built (grader.core.bounds): each fact cuts its names and lines, and a test
keeps the facts that fit in its share and its message says what it left out; whatever builds them, a
check, the harness or a reader of report.json."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from grader.core import wall_cap
from grader.core.bounds import (
    AROUND_A_FACT,
    LINE_CHARS,
    MAX_FIGURES,
    MAX_OPERANDS,
    MAX_PAIRS,
    MAX_PROGRAMS,
    MAX_RULE_FIGURES,
    MAX_TRAFFIC_ROWS,
    MESSAGE_CHARS,
    NAME_CHARS,
    OUTPUT_CHARS,
    TEST_FACTS_CHARS,
    clipped,
    text_size,
)
from grader.core.errors import ShardlabError
from grader.core.rules import Rule, rules_of


class Category(StrEnum):
    PASSED = "passed"
    FAILED = "failed"  # an assertion about the student's result
    ERROR = "error"  # student code raised
    TIMEOUT = "timeout"
    CRASHED = "crashed"  # the process died: exit, segfault, out of memory
    NOT_ATTEMPTED = "not attempted"
    SKIPPED = "skipped"


class MalformedResult(ShardlabError, ValueError):
    """A result's JSON has a key its type does not know, or lacks one it needs."""


def _keys(cls, data: dict[str, Any], ignore: tuple[str, ...] = ()) -> dict[str, Any]:
    """`data`'s keys checked against the dataclass `cls`: unknown or missing required ones are an error."""
    if not isinstance(data, dict):
        raise MalformedResult(f"{cls.__name__}: expected an object, got {type(data).__name__}")
    fields = {f.name: f for f in dataclasses.fields(cls)}
    unknown = sorted(set(data) - set(fields) - set(ignore))
    if unknown:
        raise MalformedResult(f"{cls.__name__}: unknown key(s) {', '.join(unknown)}")
    missing = sorted(
        name
        for name, f in fields.items()
        if name not in data
        and f.default is dataclasses.MISSING
        and f.default_factory is dataclasses.MISSING
    )
    if missing:
        raise MalformedResult(f"{cls.__name__}: missing key(s) {', '.join(missing)}")
    return {k: v for k, v in data.items() if k in fields}


def _ints(values) -> tuple[int, ...]:
    return tuple(int(v) for v in values)


def _bound(fact, limit: int, *names: str) -> None:
    """Cut the text of `fact`'s fields `names` to `limit` characters each, keeping both ends (two axis names
    that differ at their end still differ): a string, the strings of a tuple, or a dict's keys. For frozen
    facts too: this runs as a fact is built (its __post_init__)."""

    def cut(text):
        return clipped(text, limit, keep_end=True) if isinstance(text, str) else text

    for name in names:
        value = getattr(fact, name)
        if isinstance(value, str):
            bounded = cut(value)
        elif isinstance(value, tuple):
            bounded = tuple(cut(v) for v in value)
        elif isinstance(value, dict):
            bounded = {cut(k): v for k, v in value.items()}
        else:
            continue
        if bounded != value:
            object.__setattr__(fact, name, bounded)


# -- layouts ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Block:
    """One block of an array and the devices holding a copy of it."""

    index: tuple[tuple[int, int], ...]  # (start, stop) in each dimension of the global array
    devices: tuple[int, ...]  # device ids, ascending

    def to_dict(self) -> dict[str, Any]:
        return {"index": [list(span) for span in self.index], "devices": list(self.devices)}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Block:
        data = _keys(cls, data)
        return cls(tuple(_ints(span) for span in data["index"]), _ints(data["devices"]))


@dataclass(frozen=True)
class Layout:
    """Where an array's blocks live: its global shape, its sharding, and each block's devices."""

    global_shape: tuple[int, ...]
    sharding: str  # the sharding's type: NamedSharding, SingleDeviceSharding...
    spec: str | None = None  # the PartitionSpec, as written: "PartitionSpec('data', None)"
    mesh_axes: tuple[str, ...] = ()  # a NamedSharding's mesh: its axis names
    mesh_sizes: tuple[int, ...] = ()  # ... their sizes
    mesh_devices: tuple[int, ...] = ()  # ... and its device ids, in the mesh's order (row-major)
    blocks: tuple[Block, ...] = ()  # in index order; none when the spec cannot split the shape

    def __post_init__(self):
        _bound(self, NAME_CHARS, "sharding", "spec", "mesh_axes")

    def describe(self) -> str:
        """ "P('data', None) on mesh (data=8)": the sharding, and its mesh's axes and sizes."""
        mesh = ", ".join(f"{axis}={size}" for axis, size in zip(self.mesh_axes, self.mesh_sizes))
        return (self.spec or self.sharding) + (f" on mesh ({mesh})" if mesh else "")

    def device_ids(self) -> dict[tuple[tuple[int, int], ...], tuple[int, ...]]:
        """{block index: devices}: what two layouts are compared by."""
        return {block.index: block.devices for block in self.blocks}

    def to_dict(self) -> dict[str, Any]:
        return {
            "global_shape": list(self.global_shape),
            "sharding": self.sharding,
            "spec": self.spec,
            "mesh_axes": list(self.mesh_axes),
            "mesh_sizes": list(self.mesh_sizes),
            "mesh_devices": list(self.mesh_devices),
            "blocks": [block.to_dict() for block in self.blocks],
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Layout:
        data = _keys(cls, data)
        return cls(
            _ints(data["global_shape"]),
            data["sharding"],
            data.get("spec"),
            tuple(str(a) for a in data.get("mesh_axes", ())),
            _ints(data.get("mesh_sizes", ())),
            _ints(data.get("mesh_devices", ())),
            tuple(Block.from_dict(b) for b in data.get("blocks", ())),
        )


@dataclass(frozen=True)
class LayoutCheck:
    """A sharding check: the layout it asked for and the one the array had (None: not a jax.Array)."""

    name: str  # what the check called the array: "output", "params['w1']"...
    expected: Layout
    actual: Layout | None
    passed: bool

    def __post_init__(self):
        _bound(self, NAME_CHARS, "name")

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "expected": self.expected.to_dict(),
            "actual": self.actual.to_dict() if self.actual is not None else None,
            "passed": self.passed,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> LayoutCheck:
        data = _keys(cls, data)
        actual = data["actual"]
        return cls(
            data["name"],
            Layout.from_dict(data["expected"]),
            Layout.from_dict(actual) if actual is not None else None,
            bool(data["passed"]),
        )


# -- collectives -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Collective:
    """One collective of a compiled program."""

    op: str  # all-reduce, all-gather, reduce-scatter, collective-permute, all-to-all
    group_size: int | None  # devices per replica group (pairs for a permute), if the op says
    # the mesh axes its groups run along; None: none found, or no mesh
    mesh_axes: tuple[str, ...] | None
    line: str  # the HLO instruction, its metadata left out
    # How many times it runs: the product of the static trip counts of the loops around it. None: not
    # counted by the check, or (with unknown_trip_count) inside a loop whose trip count is not static.
    executed: int | None = None
    unknown_trip_count: bool = False
    # A collective-permute's source -> target pairs, as positions in the mesh's device order.
    pairs: tuple[tuple[int, int], ...] = ()
    operand_shapes: tuple[tuple[int, ...], ...] = ()  # per device
    operand_bytes: int | None = None  # per device, every operand together

    def __post_init__(self):
        _bound(self, NAME_CHARS, "op", "mesh_axes")
        _bound(self, LINE_CHARS, "line")
        # a compiled program's pairs number at most its devices; more is not a program we grade
        object.__setattr__(self, "pairs", tuple(self.pairs[:MAX_PAIRS]))
        object.__setattr__(self, "operand_shapes", tuple(self.operand_shapes[:MAX_OPERANDS]))

    def to_dict(self) -> dict[str, Any]:
        return {
            "op": self.op,
            "group_size": self.group_size,
            "mesh_axes": list(self.mesh_axes) if self.mesh_axes is not None else None,
            "line": self.line,
        } | _given(
            executed=self.executed,
            unknown_trip_count=self.unknown_trip_count or None,
            pairs=[list(p) for p in self.pairs] or None,
            operand_shapes=[list(s) for s in self.operand_shapes] or None,
            operand_bytes=self.operand_bytes,
        )

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Collective:
        data = _keys(cls, data)
        axes = data["mesh_axes"]
        executed, size = data.get("executed"), data.get("operand_bytes")
        return cls(
            data["op"],
            data["group_size"],
            tuple(str(a) for a in axes) if axes is not None else None,
            data["line"],
            int(executed) if executed is not None else None,
            bool(data.get("unknown_trip_count", False)),
            tuple(_pair(p) for p in data.get("pairs", ())),
            tuple(_ints(s) for s in data.get("operand_shapes", ())),
            int(size) if size is not None else None,
        )


def _given(**fields) -> dict[str, Any]:
    """The fields that are set: the figures only some checks record stay out of the others' JSON."""
    return {name: value for name, value in fields.items() if value is not None}


def _pair(values) -> tuple[int, int]:
    source, target = _ints(values)
    return source, target


@dataclass(frozen=True)
class PipelineSchedule:
    """A pipeline a check expects: S stages, M microbatches, each going round the stages `repeats` times (a
    circular pipeline). Item i = r * M + m (microbatch m on its pass r) enters stage 0 at step i and reaches
    stage s at step i + s, so the whole takes repeats * M + S - 1 steps and a stage idles S - 1 of them."""

    stages: int
    microbatches: int
    repeats: int = 1

    @property
    def steps(self) -> int:
        return self.repeats * self.microbatches + self.stages - 1

    def work_items(self, steps: int) -> int:
        """The items (a microbatch on one of its passes) a pipeline of `steps` steps takes through every
        stage: R M when it has the steps for them, fewer when it has not. Steps past the schedule's carry
        no work: a program whose values were checked ran each item once, not again."""
        return min(max(steps - self.stages + 1, 0), self.repeats * self.microbatches)

    def grid(self, steps: int | None = None) -> list[list[int]]:
        """Stage s's row: the microbatch it works on at each step, -1 for a bubble. With `steps`, the grid
        of a pipeline that took that many steps through the same stages (what a count of sends implies):
        each item still passes each stage once, the steps past the schedule's own idle."""
        steps = self.steps if steps is None else steps
        items = self.work_items(steps)
        return [
            [
                (t - s) % self.microbatches if 0 <= t - s < items and self.microbatches else -1
                for t in range(steps)
            ]
            for s in range(self.stages)
        ]

    def to_dict(self) -> dict[str, Any]:
        return {"stages": self.stages, "microbatches": self.microbatches, "repeats": self.repeats}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> PipelineSchedule:
        data = _keys(cls, data)
        return cls(int(data["stages"]), int(data["microbatches"]), int(data.get("repeats", 1)))


@dataclass(frozen=True)
class ExecutedRule:
    """A rule on how many times collectives of one kind run per run of the program (a training step), as
    figures: the range it allows and what the check counted (grader.checks.executed.assert_executed)."""

    kind: str
    at_least: int | None = None
    at_most: int | None = None
    operands: bool = False  # it counts each run's operands, not its instructions
    # what the check counted; None: one of the kind runs in a loop with no static trip count
    actual: int | None = None
    per: str = (
        "run"  # what one run of the program is, as the pages say it: "step" for a training step
    )

    def __post_init__(self):
        _bound(self, NAME_CHARS, "kind", "per")

    def to_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "operands": self.operands} | _given(
            at_least=self.at_least,
            at_most=self.at_most,
            actual=self.actual,
            per=self.per if self.per != "run" else None,
        )

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ExecutedRule:
        data = _keys(cls, data)
        return cls(
            str(data["kind"]),
            _count(cls, data, "at_least"),
            _count(cls, data, "at_most"),
            bool(data.get("operands", False)),
            _count(cls, data, "actual"),
            str(data.get("per", "run")),
        )


def _count(cls, data: dict[str, Any], key: str, *, required: bool = False) -> int | None:
    """data[key]: a count of at least 0, or (unless `required`) absent: None. Anything else is named."""
    value = data.get(key)
    if value is None and not required:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise MalformedResult(f"{cls.__name__}: {key} must be a count of at least 0, got {value!r}")
    return value


@dataclass(frozen=True)
class CollectivesCheck:
    """A collectives check: what its rule asked for, and every collective the program compiled to."""

    what: str  # the program, as the message names it
    found: tuple[Collective, ...]
    passed: bool | None  # the rule held (the values are checked apart); None: the test judged
    # the collectives by a rule of its own (its message says which)
    exactly: dict[str, int] | None = None  # kind -> count (kinds not named: none)
    present: tuple[str, ...] = ()
    absent: tuple[str, ...] = ()
    only: tuple[str, ...] | None = None
    # A rule of the executed program, in words ("collective-permute runs 8 or 9 times"), when the check
    # judged one (grader.checks.executed); the figures the pages draw beside it:
    rule: str | None = None
    schedule: PipelineSchedule | None = None  # the pipeline it expects
    expected_pairs: tuple[tuple[int, int], ...] | None = None  # the permute pairs it expects
    buffer_bytes: int | None = None  # an exchange's buffer at the capacity, per device
    executed_rule: ExecutedRule | None = None  # the rule's kind, range and count, as figures
    program: str | None = (
        None  # the key of the program's account (ProgramAccount), when one was taken
    )

    def __post_init__(self):
        _bound(self, NAME_CHARS, "what", "exactly", "present", "absent", "only", "program")
        _bound(self, LINE_CHARS, "rule")
        if self.expected_pairs is not None:
            object.__setattr__(self, "expected_pairs", tuple(self.expected_pairs[:MAX_PAIRS]))

    def counts(self) -> dict[str, int]:
        counts: dict[str, int] = {}
        for collective in self.found:
            counts[collective.op] = counts.get(collective.op, 0) + 1
        return counts

    def to_dict(self) -> dict[str, Any]:
        return {
            "what": self.what,
            "found": [c.to_dict() for c in self.found],
            "passed": self.passed,
            "exactly": dict(self.exactly) if self.exactly is not None else None,
            "present": list(self.present),
            "absent": list(self.absent),
            "only": list(self.only) if self.only is not None else None,
        } | _given(
            rule=self.rule,
            schedule=self.schedule.to_dict() if self.schedule is not None else None,
            expected_pairs=(
                [list(p) for p in self.expected_pairs] if self.expected_pairs is not None else None
            ),
            buffer_bytes=self.buffer_bytes,
            executed_rule=self.executed_rule.to_dict() if self.executed_rule is not None else None,
            program=self.program,
        )

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> CollectivesCheck:
        data = _keys(cls, data)
        exactly, only = data.get("exactly"), data.get("only")
        passed = data["passed"]
        schedule, pairs = data.get("schedule"), data.get("expected_pairs")
        buffer, executed_rule = data.get("buffer_bytes"), data.get("executed_rule")
        return cls(
            data["what"],
            tuple(Collective.from_dict(c) for c in data["found"]),
            None if passed is None else bool(passed),
            {str(k): int(v) for k, v in exactly.items()} if exactly is not None else None,
            tuple(data.get("present", ())),
            tuple(data.get("absent", ())),
            tuple(only) if only is not None else None,
            data.get("rule"),
            PipelineSchedule.from_dict(schedule) if schedule is not None else None,
            tuple(_pair(p) for p in pairs) if pairs is not None else None,
            int(buffer) if buffer is not None else None,
            ExecutedRule.from_dict(executed_rule) if executed_rule is not None else None,
            data.get("program"),
        )


# -- what a program executed: its account, and the figures its rules were judged on -----------------------


@dataclass(frozen=True)
class Traffic:
    """One kind of collective over one set of mesh axes, as one device runs it in one run of a program."""

    kind: str  # all-reduce, all-gather, reduce-scatter, collective-permute, all-to-all
    # the mesh axes its groups run along; (): every device alone (a singleton group moves nothing); None:
    # the groups follow no set of axes, or the program states no mesh
    axes: tuple[str, ...] | None
    group_size: int | None  # devices per group (two for a permute's pair)
    instructions: int  # in the program's text
    # Executed figures, each run counted; None: one of them runs in a loop with no static trip count.
    runs: int | None
    operands: int | None
    operand_bytes: int | None
    sent_bytes: int | None  # what the device sends over the links (grader.checks.account says how)

    def __post_init__(self):
        _bound(self, NAME_CHARS, "kind", "axes")

    def to_dict(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "axes": list(self.axes) if self.axes is not None else None,
            "group_size": self.group_size,
            "instructions": self.instructions,
            "runs": self.runs,
            "operands": self.operands,
            "operand_bytes": self.operand_bytes,
            "sent_bytes": self.sent_bytes,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Traffic:
        data = _keys(cls, data)
        axes = data["axes"]
        return cls(
            str(data["kind"]),
            tuple(str(a) for a in axes) if axes is not None else None,
            _count(cls, data, "group_size"),
            _count(cls, data, "instructions", required=True),
            *(
                _count(cls, data, key)
                for key in ("runs", "operands", "operand_bytes", "sent_bytes")
            ),
        )


@dataclass(frozen=True)
class ProgramAccount:
    """What one device executes in one run of a compiled program (grader.checks.account makes it, once per
    program): its collectives by kind and mesh axes, the multiply-adds of its dots and convolutions and the
    other products it computes, each counted as many times as its loops run it, and XLA's bytes of its
    arguments, temporaries and outputs. A figure that is None is unknown: it counts something inside a
    loop with no static trip count (or, for memory, the compiler reports none)."""

    what: str  # the program, as the checks name it
    key: str  # the program's digest: the figures of the rules judged on it name it
    devices: int  # the devices the program runs on
    traffic: tuple[Traffic, ...]
    dot_work: int | None  # multiply-adds of dots and convolutions
    product_work: int | None  # elementwise products and quotients, and reductions by one
    argument_bytes: int | None = None
    temp_bytes: int | None = None
    output_bytes: int | None = None

    def __post_init__(self):
        _bound(self, NAME_CHARS, "what", "key")
        object.__setattr__(self, "traffic", tuple(self.traffic[:MAX_TRAFFIC_ROWS]))

    @property
    def work(self) -> int | None:
        """Multiply-adds in all: a dot's, and a product written out elementwise (which is a dot's work too)."""
        if self.dot_work is None or self.product_work is None:
            return None
        return self.dot_work + self.product_work

    @property
    def sent_bytes(self) -> int | None:
        sent = [row.sent_bytes for row in self.traffic]
        return None if None in sent else sum(sent)  # type: ignore[arg-type]

    def to_dict(self) -> dict[str, Any]:
        return {
            "what": self.what,
            "key": self.key,
            "devices": self.devices,
            "traffic": [row.to_dict() for row in self.traffic],
            "dot_work": self.dot_work,
            "product_work": self.product_work,
        } | _given(
            argument_bytes=self.argument_bytes,
            temp_bytes=self.temp_bytes,
            output_bytes=self.output_bytes,
        )

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ProgramAccount:
        data = _keys(cls, data)
        return cls(
            str(data["what"]),
            str(data["key"]),
            _count(cls, data, "devices", required=True),
            tuple(Traffic.from_dict(row) for row in data["traffic"]),
            _count(cls, data, "dot_work"),
            _count(cls, data, "product_work"),
            *(_count(cls, data, key) for key in ("argument_bytes", "temp_bytes", "output_bytes")),
        )


@dataclass(frozen=True)
class RuleFigure:
    """One rule judged on a program's account: what it measured, the figure it expects beside the one the
    program executed, and whether it held. Every check on a compiled program records one (how many times a
    collective runs, the bytes it moves, the work, the memory), so a test's rules read as one table."""

    program: str  # the ProgramAccount's key
    rule: str  # the kind of rule (grader.core.rules.Rule)
    measure: str  # what is counted: "multiply-adds", "bytes sent", "all-reduce operands"
    expected: str  # the bound, in words: "at most 40,960 (2 x its share, 20,480)"
    actual: (
        int | None
    )  # what the program executed; None: unknown (a loop with no static trip count)
    passed: bool
    bound: int | None = None  # the figure the rule compares with, where one number says it
    share: int | None = None  # a work rule's: the device's share, which the bound is a multiple of

    def __post_init__(self):
        _bound(self, NAME_CHARS, "program", "rule", "measure")
        _bound(self, LINE_CHARS, "expected")

    @property
    def ratio(self) -> float | None:
        """The executed figure over the share (work), for the page's "8.0 x its share"."""
        if self.share is None or self.share <= 0 or self.actual is None:
            return None
        return self.actual / self.share

    def to_dict(self) -> dict[str, Any]:
        return {
            "program": self.program,
            "rule": self.rule,
            "measure": self.measure,
            "expected": self.expected,
            "actual": self.actual,
            "passed": self.passed,
        } | _given(bound=self.bound, share=self.share)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> RuleFigure:
        data = _keys(cls, data)
        return cls(
            str(data["program"]),
            str(data["rule"]),
            str(data["measure"]),
            str(data["expected"]),
            _count(cls, data, "actual"),
            bool(data["passed"]),
            _count(cls, data, "bound"),
            _count(cls, data, "share"),
        )


# -- memory ----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class MemoryCheck:
    """A memory check (grader.checks.executed.assert_memory): XLA's bytes per device of the compiled
    program, the bounds they were judged by, and figures the test set beside them to compare ("the
    reference without remat": its temporaries), at most MAX_FIGURES of them."""

    what: str
    argument_bytes: int
    output_bytes: int
    temp_bytes: int
    passed: bool
    argument_below: int | None = None
    temp_below: int | None = None
    shown_against: dict[str, int] = field(default_factory=dict)  # label -> bytes per device

    def __post_init__(self):
        object.__setattr__(
            self, "shown_against", dict(list(self.shown_against.items())[:MAX_FIGURES])
        )
        _bound(self, NAME_CHARS, "what", "shown_against")

    def to_dict(self) -> dict[str, Any]:
        return {
            "what": self.what,
            "argument_bytes": self.argument_bytes,
            "output_bytes": self.output_bytes,
            "temp_bytes": self.temp_bytes,
            "passed": self.passed,
        } | _given(
            argument_below=self.argument_below,
            temp_below=self.temp_below,
            shown_against=dict(self.shown_against) or None,
        )

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> MemoryCheck:
        data = _keys(cls, data)
        against = data.get("shown_against", {})
        if not isinstance(against, dict):
            raise MalformedResult(f"MemoryCheck: shown_against must be an object, got {against!r}")
        return cls(
            str(data["what"]),
            _count(cls, data, "argument_bytes", required=True),
            _count(cls, data, "output_bytes", required=True),
            _count(cls, data, "temp_bytes", required=True),
            bool(data["passed"]),
            _count(cls, data, "argument_below"),
            _count(cls, data, "temp_below"),
            {str(label): _count(cls, against, label, required=True) for label in against},
        )


# -- speed -----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class SpeedMeasurement:
    """A speedup measurement (grader.checks.speedup.measure_speedup)."""

    label: str
    speedup: float  # median(baseline) / median(candidate)
    spread: tuple[float, float]  # interquartile range of the pairwise ratios
    baseline_s: float | None  # the medians, in seconds
    candidate_s: float | None
    repeats: int
    threshold: float
    devices: int
    cores: int
    platform: str
    near_threshold: bool = False  # the spread still straddled the threshold after the extra repeats
    # what the calibration kernel achieved, when the threshold is scaled
    calibration: float | None = None
    # what the timings count: "wall" (elapsed time) or "processor" (the process's processor time, all its
    # threads: the work done, whatever else the machine runs; grader.checks.speedup.Clock)
    clock: str = "wall"

    def __post_init__(self):
        _bound(self, NAME_CHARS, "label", "platform", "clock")

    @property
    def met(self) -> bool:
        return self.speedup >= self.threshold


class TimeoutBy(StrEnum):
    """Which of a test's two time rules ended it (grader.harness.time_limits)."""

    PROCESSOR_TIME = "processor time"  # it used up its limit of processor time
    # it ran or slept past its cap (time waiting for a processor not counted)
    WALL_CLOCK_CAP = "wall-clock cap"


@dataclass(frozen=True, kw_only=True)
class TimeoutFigures:
    """What a timeout was judged on, so that a strike can be checked after the fact (report.json's
    "timeout"): seconds, from the test's clock starting to the moment it was stopped. `cpu` is the processor
    time in user mode of the processes the judge watched (the worker's sandbox, the harness, a run's
    processes), summed over their threads, which the limit holds; `system` the kernel's time on their behalf
    (grader.core.processor_time); `waited` the most any one of their threads waited for a processor
    (grader.sandbox.processor_wait), which the cap forgives up to grader.core.wall_cap.WAIT_CREDIT x cap."""

    by: TimeoutBy
    limit: float  # the processor time (user) the test may use
    cap: float  # the wall-clock time it may take, waiting for a processor not counted
    cpu: float
    wall: float
    waited: float
    system: float = 0.0

    def __post_init__(self):
        try:
            object.__setattr__(self, "by", TimeoutBy(self.by))
        except ValueError:
            raise MalformedResult(f"TimeoutFigures: unknown rule {self.by!r}") from None

    @property
    def counted(self) -> float:
        """The wall-clock time the cap counted."""
        return wall_cap.counted(self.wall, self.waited, self.cap)

    @property
    def asleep(self) -> float:
        """At least this long neither running nor waiting (exact for one thread, whose wall = cpu +
        system + waited + asleep)."""
        return max(0.0, self.wall - self.waited - self.cpu - self.system)

    def to_dict(self) -> dict[str, Any]:
        return {
            "by": str(self.by),
            "limit": self.limit,
            "cap": self.cap,
            "cpu": self.cpu,
            "system": self.system,
            "wall": self.wall,
            "waited": self.waited,
            "asleep": self.asleep,
            "counted": self.counted,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> TimeoutFigures:
        # asleep and counted follow from the others
        return cls(**_keys(cls, data, ignore=("asleep", "counted")))


@dataclass(frozen=True, kw_only=True)
class SpeedFigures(SpeedMeasurement):
    """A speedup test's figures as its result records them: the measurement and the policy that judged it.
    Its keys are those report.json and results.json have always carried under "speedup"."""

    policy: str  # enforce or report: what a miss did

    def __post_init__(self):
        super().__post_init__()
        _bound(self, NAME_CHARS, "policy")

    def to_dict(self) -> dict[str, Any]:
        return {
            "label": self.label,
            "speedup": self.speedup,
            "spread": list(self.spread),
            "baseline_s": self.baseline_s,
            "candidate_s": self.candidate_s,
            "repeats": self.repeats,
            "threshold": self.threshold,
            "devices": self.devices,
            "cores": self.cores,
            "platform": self.platform,
            "near_threshold": self.near_threshold,
            "calibration": self.calibration,
            "clock": self.clock,
            "met": self.met,
            "policy": self.policy,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> SpeedFigures:
        data = _keys(cls, data, ignore=("met",))  # met follows from the speedup and the threshold
        low, high = data["spread"]
        return cls(
            **(
                {k: v for k, v in data.items() if k != "met"}
                | {"spread": (float(low), float(high))}
            )
        )


# -- the facts of one test -------------------------------------------------------------------------


@dataclass
class TestFacts:
    """What the checks of one test recorded, in the order they ran."""

    layouts: list[LayoutCheck] = field(default_factory=list)
    collectives: list[CollectivesCheck] = field(default_factory=list)
    speedup: SpeedFigures | None = None
    memory: list[MemoryCheck] = field(default_factory=list)
    programs: list[ProgramAccount] = field(default_factory=list)  # each program's account, once
    figures: list[RuleFigure] = field(default_factory=list)  # the rules judged on them

    __test__ = False  # not a pytest test class


def _fact_size(fact) -> int:
    """What one fact (a check, a collective found) may take in a report: its text and the room around it."""
    return text_size(fact.to_dict()) + AROUND_A_FACT


# -- test ids: "tests/exercises/ex04_sharded_layer/test_hidden.py::test_layer_values[4dev]" --------------


def function_id(nodeid: str) -> str:
    """The test function's id, without its parameters: "f.py::test_x[2dev]" -> "f.py::test_x"."""
    return nodeid.split("[", 1)[0]


def test_name(nodeid: str) -> str:
    """The test as a student reads it: "f.py::test_x[2dev]" -> "test_x[2dev]"."""
    function, bracket, parameters = nodeid.partition("[")
    return function.rsplit("::", 1)[-1] + bracket + parameters


test_name.__test__ = False  # not a pytest test, wherever it is imported


def function_name(nodeid: str) -> str:
    """The test function's name: "f.py::test_x[2dev]" -> "test_x"."""
    return function_id(nodeid).rsplit("::", 1)[-1]


@dataclass(frozen=True)
class TestMeta:
    """What the grader knows of a test before it runs (grader.harness.selection), sent to the grading
    process when the harness has collected."""

    nodeid: str
    exercise: str | None  # None: a test outside an exercise folder (dev-check reports it)
    hidden: bool
    slow: bool
    weight: float  # its points (grader.harness.selection)
    limit: float  # seconds it may run (grader.harness.time_limits)
    rules: tuple[Rule, ...] = ()  # the kinds of rule it grades (its `rules` marker)
    functions: tuple[str, ...] = ()  # the student functions it grades (grader.harness.graded)
    branches: tuple[str, ...] = ()  # their refusal/None/error branches it rewards (its marker's)

    __test__ = False  # not a pytest test class

    def result(
        self, category: Category, message: str = "", duration: float = 0.0, *, strike: bool = False
    ) -> TestResult:
        return TestResult(
            nodeid=self.nodeid,
            exercise=self.exercise,
            hidden=self.hidden,
            weight=self.weight,
            category=category,
            message=message,
            duration=duration,
            strike=strike,
            rules=self.rules,
        )

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self) | {"rules": [str(rule) for rule in self.rules]}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> TestMeta:
        data = _keys(cls, data)
        return cls(
            str(data["nodeid"]),
            data["exercise"],
            bool(data["hidden"]),
            bool(data["slow"]),
            float(data["weight"]),
            float(data["limit"]),
            rules_of(data.get("rules", ())),
            tuple(map(str, data.get("functions", ()))),
            tuple(map(str, data.get("branches", ()))),
        )


@dataclass
class TestResult:
    nodeid: str
    exercise: str | None  # None: a test in no exercise's folder (dev-check reports it)
    hidden: bool
    weight: float  # the test's points (see grader.harness.selection)
    category: Category  # a str given (a Category's value) is made one
    message: str = ""  # what the student should see
    duration: float = 0.0
    speedup: SpeedFigures | None = None  # the timing figures of a speedup test
    timeout: TimeoutFigures | None = None  # what a timeout was judged on
    output: str = ""  # what the student's code printed during the test, truncated
    score: float = 0.0
    max_score: float = 0.0
    strike: bool = False  # counts towards the exercise's timeouts (a timeout or a harness crash)
    # the student's function whose call timed out, which the strike is counted against (None: not known)
    strike_function: str | None = None
    layouts: list[LayoutCheck] = field(default_factory=list)  # its sharding checks
    collectives: list[CollectivesCheck] = field(default_factory=list)  # its collectives checks
    rules: tuple[Rule, ...] = ()  # the kinds of rule it grades (grader.core.rules)
    memory: list[MemoryCheck] = field(default_factory=list)  # its memory checks
    # what each program its checks read executed, once per program, and every rule judged on them
    programs: list[ProgramAccount] = field(default_factory=list)
    figures: list[RuleFigure] = field(default_factory=list)
    # what a known JAX error in the message means and what to do (grader.harness.jax_errors), kept apart so
    # that the terminal and the page say it once for the tests that met it
    explanation: str = ""

    __test__ = False  # not a pytest test class

    def __post_init__(self):
        """The bounds of grader.core.bounds: the facts that fit in a test's share, the message (saying what
        was left out) and the output cut. A result built again from a bounded one is the same."""
        try:
            self.category = Category(self.category)
        except ValueError:
            raise MalformedResult(f"TestResult: unknown category {self.category!r}") from None
        if self.strike_function is not None and not isinstance(self.strike_function, str):
            raise MalformedResult(
                f"TestResult: strike_function must be a name, got {type(self.strike_function).__name__}"
            )
        left_out = self._keep_facts_that_fit()
        if left_out:
            note = f"[{left_out}]"
            self.message = (
                clipped(self.message, MESSAGE_CHARS - len(note) - 1) + "\n" + note
                if self.message
                else note
            )
        self.message = clipped(self.message, MESSAGE_CHARS)
        self.explanation = clipped(self.explanation, MESSAGE_CHARS)
        self.output = clipped(self.output, OUTPUT_CHARS)

    def _keep_facts_that_fit(self) -> str:
        """Keep the facts, in the order they were recorded, while they fit in TEST_FACTS_CHARS (a speedup's
        figures always do); the programs' accounts and the rules judged on them first (at most MAX_PROGRAMS
        and MAX_RULE_FIGURES: the test's table), then the memory checks (at most MAX_FIGURES of them, a few
        figures each), then the layouts, then the collectives checks, each keeping the collectives that fit.
        What was left out, if any."""
        room = TEST_FACTS_CHARS - (
            text_size(self.speedup.to_dict()) if self.speedup is not None else 0
        )
        table: dict[str, list] = {"programs": [], "figures": []}
        for name, limit in (("programs", MAX_PROGRAMS), ("figures", MAX_RULE_FIGURES)):
            for fact in getattr(self, name)[:limit]:
                room -= _fact_size(fact)
                if room < 0:
                    break
                table[name].append(fact)
        memory = []
        for check in self.memory[:MAX_FIGURES]:
            room -= _fact_size(check)
            if room < 0:
                break
            memory.append(check)
        layouts = []
        for check in self.layouts if room >= 0 else ():
            room -= _fact_size(check)
            if room < 0:
                break
            layouts.append(check)
        collectives, found, kept = [], 0, 0
        for check in self.collectives if room >= 0 else ():
            room -= _fact_size(dataclasses.replace(check, found=()))
            if room < 0:
                break
            fitting = []
            for collective in check.found:
                room -= _fact_size(collective)
                if room < 0:
                    break
                fitting.append(collective)
            found, kept = found + len(check.found), kept + len(fitting)
            collectives.append(
                check
                if len(fitting) == len(check.found)
                else dataclasses.replace(check, found=tuple(fitting))
            )
            if room < 0:
                break
        found += sum(len(check.found) for check in self.collectives[len(collectives) :])
        left = [f"{len(layouts)} of {len(self.layouts)} sharding checks"] * (
            len(layouts) < len(self.layouts)
        )
        left += [f"{len(collectives)} of {len(self.collectives)} collectives checks"] * (
            len(collectives) < len(self.collectives)
        )
        left += [f"{kept} of {found} collectives found"] * (kept < found)
        left += [
            f"{len(memory)} of {len(self.memory)} memory checks"
            + (f", a test keeps at most {MAX_FIGURES}" if len(self.memory) > MAX_FIGURES else "")
        ] * (len(memory) < len(self.memory))
        left += [
            f"{len(table[name])} of {len(getattr(self, name))} {words}"
            for name, words in (("programs", "programs' accounts"), ("figures", "rules' figures"))
            if len(table[name]) < len(getattr(self, name))
        ]
        if not left:
            return ""
        self.layouts, self.collectives, self.memory = layouts, collectives, memory
        self.programs, self.figures = table["programs"], table["figures"]
        return (
            f"the grader recorded only part of what this test's checks found ({', '.join(left)}): the rest "
            f"would take more than the {TEST_FACTS_CHARS:,} characters a test's facts may take in its report"
        )

    def text_size(self) -> int:
        """What this result may take in a report, as grader.core.bounds counts it: its message, its output and
        its facts, each fact with the room around it."""
        facts = sum(map(_fact_size, self.layouts)) + sum(
            _fact_size(dataclasses.replace(check, found=())) + sum(map(_fact_size, check.found))
            for check in self.collectives
        )
        facts += sum(map(_fact_size, [*self.memory, *self.programs, *self.figures]))
        speed = text_size(self.speedup.to_dict()) if self.speedup is not None else 0
        said = text_size(self.message) + text_size(self.explanation) + text_size(self.output)
        return said + facts + speed

    @property
    def name(self) -> str:
        """ "test_hidden.py::test_layer_auto_values[4dev]" -> "test_layer_auto_values[4dev]"."""
        return test_name(self.nodeid)

    @property
    def function(self) -> str:
        """The test function's name, without its parameters: "test_layer_auto_values"."""
        return function_name(self.nodeid)

    @property
    def passed(self) -> bool:
        return self.category == Category.PASSED

    @property
    def earns(self) -> bool:
        """It earns its share: passed, or skipped by policy or platform (see score_exercise)."""
        return self.category in (Category.PASSED, Category.SKIPPED)

    def with_facts(self, facts: TestFacts) -> TestResult:
        return dataclasses.replace(
            self,
            layouts=list(facts.layouts),
            collectives=list(facts.collectives),
            speedup=facts.speedup,
            memory=list(facts.memory),
            programs=list(facts.programs),
            figures=list(facts.figures),
        )

    def to_dict(self) -> dict[str, Any]:
        data = {
            "nodeid": self.nodeid,
            "exercise": self.exercise,
            "hidden": self.hidden,
            "weight": self.weight,
            "category": str(self.category),
            "message": self.message,
            "explanation": self.explanation,
            "duration": self.duration,
            "speedup": self.speedup.to_dict() if self.speedup is not None else None,
            "output": self.output,
            "score": self.score,
            "max_score": self.max_score,
            "strike": self.strike,
            "strike_function": self.strike_function,
            "layouts": [check.to_dict() for check in self.layouts],
            "collectives": [check.to_dict() for check in self.collectives],
            "rules": [str(rule) for rule in self.rules],
        } | {
            name: [fact.to_dict() for fact in facts]
            for name, facts in (
                ("memory", self.memory),
                ("programs", self.programs),
                ("figures", self.figures),
            )
            if facts
        }
        if self.timeout is not None:
            data["timeout"] = self.timeout.to_dict()
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any], ignore: tuple[str, ...] = ()) -> TestResult:
        """ignore: keys a reader knows are there and not a TestResult's (report.json's derived "name")."""
        data = _keys(cls, data, ignore)
        speedup, timeout = data.get("speedup"), data.get("timeout")
        return cls(
            **data
            | {
                "speedup": SpeedFigures.from_dict(speedup) if speedup is not None else None,
                "timeout": TimeoutFigures.from_dict(timeout) if timeout is not None else None,
                "layouts": [LayoutCheck.from_dict(c) for c in data.get("layouts", ())],
                "collectives": [CollectivesCheck.from_dict(c) for c in data.get("collectives", ())],
                "rules": rules_of(data.get("rules", ())),
                "memory": [MemoryCheck.from_dict(c) for c in data.get("memory", ())],
                "programs": [ProgramAccount.from_dict(c) for c in data.get("programs", ())],
                "figures": [RuleFigure.from_dict(c) for c in data.get("figures", ())],
            }
        )


# -- where a grading ran: report.json's "environment" ----------------------------------------------


@dataclass(frozen=True)
class IsolationRecord:
    """environment.isolation: how the student's code was confined, as grader.sandbox.confinement.describe
    words it (its keys differ by level: "level", "user", "network", "not_applied", "memory"...)."""

    described: dict[str, Any]

    @property
    def level(self) -> str | None:
        return self.described.get("level")

    @property
    def not_applied(self) -> list[str]:
        return [str(item) for item in self.described.get("not_applied") or ()]

    def to_dict(self) -> dict[str, Any]:
        return dict(self.described)

    @classmethod
    def from_dict(cls, data: dict[str, Any] | str) -> IsolationRecord:
        """An older report.json's isolation was its level alone, a string."""
        return cls(dict(data) if isinstance(data, dict) else {"level": data})


@dataclass(frozen=True)
class Environment:
    """report.json's "environment": where a grading ran and the limits in force. A field that is None (an
    older report's, or `shardlab check`'s, which records less) is not written. The dicts are as their
    makers describe themselves: limits (grader.core.options, as applied), compile_cache, time_limits."""

    python: str | None = None
    platform: str | None = None
    versions: dict[str, str | None] | None = None  # package -> version (None: not installed)
    devices: int | None = None
    cores: int | None = None
    timing: str | None = None
    limits: dict[str, Any] | None = None
    hidden_visibility: str | None = None
    isolation: IsolationRecord | None = None
    compile_cache: dict[str, Any] | None = None
    time_limits: dict[str, Any] | None = None
    parallel: int | None = None  # harnesses at once
    # keys this version does not know, kept as they were
    other: dict[str, Any] = field(default_factory=dict)

    @property
    def worker_memory_bytes(self) -> int | None:
        return (self.limits or {}).get("worker_memory_bytes")

    @property
    def worker_memory_limited(self) -> bool | None:
        """Whether the worker's memory was limited (None: the report does not say)."""
        if self.limits is None or "worker_memory_bytes" not in self.limits:
            return None
        return bool(self.worker_memory_bytes)

    @property
    def test_timeout(self) -> float | None:
        return (self.limits or {}).get("test_timeout")

    @property
    def time_limits_source(self) -> str | None:
        return (self.time_limits or {}).get("source")

    def to_dict(self) -> dict[str, Any]:
        data = {
            f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.name != "other"
        }
        if self.isolation is not None:
            data["isolation"] = self.isolation.to_dict()
        return {k: v for k, v in data.items() if v is not None} | self.other

    @classmethod
    def from_dict(cls, data: dict[str, Any] | str | None) -> Environment:
        """This version's, or an older report.json's: any key may be missing, and an environment that was a
        string is kept (as "description"), not refused."""
        if data is None:
            return cls()
        if not isinstance(data, dict):
            return cls(other={"description": data})
        names = {f.name for f in dataclasses.fields(cls)} - {"other"}
        known = {k: v for k, v in data.items() if k in names}
        if known.get("isolation") is not None:
            known["isolation"] = IsolationRecord.from_dict(known["isolation"])
        return cls(**known, other={k: v for k, v in data.items() if k not in names})
