"""Speedup measured so that it means something on shared host devices (docs/design.md, "Speedup on
forced host devices").

Compilation and warm-up are excluded, every call is waited for with block_until_ready, baseline and
candidate alternate (ABBA) so that drift in the machine hits both, the statistic is the ratio of
medians with the interquartile range of the pairwise ratios as its spread, and a result near the
threshold is re-measured with more repeats before the verdict. Thresholds against one device are
scaled by what a calibration kernel achieves on the same machine in the same run.

Which clock (Clock): a comparison against replicated work on the same devices asks how much work each
device does, and the process's processor time (every thread's: XLA's devices are threads of this
process) answers that whatever else the machine runs. Measured with ex08's reference against every device
training on the whole batch (8 devices, 2 cores): in elapsed time 4x and more on a quiet machine but
1.2x to 1.9x beside four busy loops (threshold 3.2x: a correct program failed), in processor time 5.4x to
5.6x quiet and 5.3x to 5.4x beside them. A comparison against one device asks what parallelism gives,
which only elapsed time shows (the same work spread over more cores costs as much processor time); those
are reported, never graded, beside the calibration kernel's figure.
"""

from __future__ import annotations

import statistics
import time
from dataclasses import asdict, dataclass
from enum import StrEnum
from typing import Any, Callable

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import NamedSharding, PartitionSpec as P

from grader.core import facts
from grader.core.results import SpeedFigures, SpeedMeasurement
from grader.course.devices import cores


class Clock(StrEnum):
    WALL = "wall"  # elapsed time: what parallelism gives, at the machine's load
    PROCESSOR = "processor"  # this process's processor time, all threads: the work done


_CLOCKS = {Clock.WALL: time.perf_counter, Clock.PROCESSOR: time.process_time}


class TimingPolicy(StrEnum):
    ENFORCE = "enforce"  # below the threshold fails the test
    REPORT = "report"  # measure and show the figures, never fail
    SKIP = "skip"  # do not measure


@dataclass(frozen=True)
class SpeedupResult(SpeedMeasurement):
    """A measurement as the check works with it: its summary, and its figures under a policy."""

    def summary(self) -> str:
        calibrated = (
            f", calibrated: the machine gives {self.calibration:.2f}x on a kernel that scales"
            if self.calibration is not None
            else ""
        )
        near = (
            " (near the threshold: decided on the median after extra repeats)"
            if self.near_threshold
            else ""
        )
        of = " of processor time" if self.clock == Clock.PROCESSOR else ""
        return (
            f"{self.label}: speedup {self.speedup:.2f}x (IQR {self.spread[0]:.2f}-{self.spread[1]:.2f}), "
            f"{self.baseline_s * 1e3:.2f} ms -> {self.candidate_s * 1e3:.2f} ms{of} over {self.repeats} "
            f"interleaved repeats; threshold {self.threshold:.2f}x{calibrated}; {self.devices} devices on "
            f"{self.cores} cores ({self.platform}){near}"
        )

    def as_dict(self) -> dict[str, Any]:
        return asdict(self) | {"met": self.met}

    def figures(self, policy: TimingPolicy) -> SpeedFigures:
        """The figures as a fact of the test's result, with the policy that judged them."""
        return SpeedFigures(**asdict(self), policy=policy.value)


def record(result: SpeedupResult, policy: TimingPolicy) -> SpeedFigures:
    """Record the measurement for the running test's result (whatever the verdict): its figures."""
    figures = result.figures(policy)
    facts.record_speedup(figures)
    return figures


def _timed(fn: Callable[[], Any], clock: Clock = Clock.WALL) -> float:
    now = _CLOCKS[clock]
    start = now()
    jax.block_until_ready(fn())
    return now() - start


def time_interleaved(
    baseline: Callable[[], Any],
    candidate: Callable[[], Any],
    repeats: int,
    clock: Clock = Clock.WALL,
):
    """Pairs of timings, alternating which runs first (ABBA) so that a drifting machine hits both."""
    base, cand = [], []
    for i in range(repeats):
        if i % 2 == 0:
            base.append(_timed(baseline, clock))
            cand.append(_timed(candidate, clock))
        else:
            cand.append(_timed(candidate, clock))
            base.append(_timed(baseline, clock))
    return base, cand


def _quartiles(values: list[float]) -> tuple[float, float]:
    q = np.percentile(values, [25, 75])
    return float(q[0]), float(q[1])


def measure_speedup(
    baseline: Callable[[], Any],
    candidate: Callable[[], Any],
    *,
    threshold: float,
    label: str,
    devices: int,
    warmup: int = 2,
    repeats: int = 9,
    max_repeats: int = 45,
    margin: float = 0.15,
    calibration: float | None = None,
    clock: Clock = Clock.WALL,
) -> SpeedupResult:
    """How many times faster `candidate()` runs than `baseline()` (both take no arguments), on `clock`.

    More repeats are taken, in batches of `repeats` up to `max_repeats`, while the interquartile range
    of the pairwise ratios straddles the threshold or the median lies within `margin` of it."""
    clock = Clock(clock)
    for _ in range(warmup):  # compile, and let caches and thread pools settle
        jax.block_until_ready(baseline())
        jax.block_until_ready(candidate())
    base, cand = time_interleaved(baseline, candidate, repeats, clock)
    while True:
        speedup = statistics.median(base) / statistics.median(cand)
        low, high = _quartiles([b / c for b, c in zip(base, cand)])
        near = low <= threshold <= high or abs(speedup / threshold - 1) < margin
        if not near or len(base) >= max_repeats:
            break
        more_base, more_cand = time_interleaved(baseline, candidate, repeats, clock)
        base += more_base
        cand += more_cand
    return SpeedupResult(
        label=label,
        speedup=speedup,
        spread=(low, high),
        baseline_s=statistics.median(base),
        candidate_s=statistics.median(cand),
        repeats=len(base),
        threshold=threshold,
        devices=devices,
        cores=cores(),
        platform=jax.default_backend(),
        near_threshold=near,
        calibration=calibration,
        clock=clock.value,
    )


_CALIBRATIONS: dict[int, float] = {}


def _calibration_kernel(block):
    def body(_, v):
        return jnp.sin(v) * 0.9 + 0.1

    return jax.lax.fori_loop(0, 300, body, block)


def calibration_speedup(n_devices: int, *, rows_per_device: int = 16, cols: int = 128) -> float:
    """What n devices give over one on this machine for work XLA does not multithread inside a device
    (an elementwise loop on a small block each): the ceiling a sharded computation can reach here.
    The blocks are small on purpose: with 32x256 per device the one-device run (8 times larger) was
    already spread over the cores by XLA and the figure read 1.1x on 2 cores; with 16x128 it reads
    1.9x. Measured once per device count and process."""
    if n_devices in _CALIBRATIONS:
        return _CALIBRATIONS[n_devices]
    devices = jax.devices()[:n_devices]
    many = jax.make_mesh(
        (n_devices,), ("c",), axis_types=(jax.sharding.AxisType.Explicit,), devices=devices
    )
    one = jax.make_mesh(
        (1,), ("c",), axis_types=(jax.sharding.AxisType.Explicit,), devices=devices[:1]
    )
    data = np.linspace(0, 1, n_devices * rows_per_device * cols, dtype=np.float32).reshape(-1, cols)

    def runner(mesh):
        x = jax.device_put(data, NamedSharding(mesh, P("c")))
        f = jax.jit(
            jax.shard_map(_calibration_kernel, mesh=mesh, in_specs=P("c"), out_specs=P("c"))
        )
        return lambda: f(x)

    result = measure_speedup(
        runner(one),
        runner(many),
        threshold=1.0,
        label="calibration",
        devices=n_devices,
        repeats=7,
        max_repeats=7,
    )
    _CALIBRATIONS[n_devices] = result.speedup
    return result.speedup


def judge(result: SpeedupResult, policy: TimingPolicy) -> None:
    """Under ENFORCE a result below its threshold fails, with the figures; otherwise nothing happens."""
    if policy is TimingPolicy.ENFORCE and not result.met:
        raise AssertionError(
            f"not fast enough: {result.summary()}.\nThe measured speedup is below the threshold: is "
            "every device doing only its own share of the work?"
        )
