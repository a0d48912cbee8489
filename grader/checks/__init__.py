"""The checks the exercise tests are written with. Each failure message is meant for a student."""

from grader.checks.account import (
    UnknownCount,
    account_of,
    between_devices,
    recorded_account,
)
from grader.checks.collectives import assert_collectives, inspect_collectives
from grader.checks.executed import (
    ExecutedCollective,
    assert_executed,
    assert_memory,
    assert_operand_bytes,
    assert_permute_pairs,
    executed_collectives,
)
from grader.checks.hlo import (
    COLLECTIVES,
    NotReported,
    collective_ops,
    collectives_in,
    compiled,
    flops_per_device,
    hlo_text,
    memory_per_device,
)
from grader.checks.meshes import test_mesh
from grader.checks.numerics import assert_close, assert_computes, compare
from grader.checks.per_device import written_per_device
from grader.checks.sharding import (
    assert_shard_values,
    assert_sharded_like,
    assert_sharding,
    layout_text,
    side_by_side,
)
from grader.checks.shares import assert_traffic, assert_work
from grader.checks.speedup import (
    Clock,
    SpeedupResult,
    TimingPolicy,
    calibration_speedup,
    judge,
    measure_speedup,
)
from grader.checks.variants import Variant, assert_close_or_named, named_mistake

__all__ = [
    "COLLECTIVES",
    "Clock",
    "ExecutedCollective",
    "NotReported",
    "SpeedupResult",
    "TimingPolicy",
    "UnknownCount",
    "Variant",
    "account_of",
    "assert_close",
    "assert_close_or_named",
    "assert_collectives",
    "assert_computes",
    "assert_executed",
    "assert_memory",
    "assert_operand_bytes",
    "assert_permute_pairs",
    "assert_shard_values",
    "assert_sharded_like",
    "assert_sharding",
    "assert_traffic",
    "assert_work",
    "between_devices",
    "calibration_speedup",
    "collective_ops",
    "collectives_in",
    "compare",
    "compiled",
    "executed_collectives",
    "flops_per_device",
    "hlo_text",
    "inspect_collectives",
    "judge",
    "layout_text",
    "measure_speedup",
    "memory_per_device",
    "named_mistake",
    "recorded_account",
    "side_by_side",
    "test_mesh",
    "written_per_device",
]
