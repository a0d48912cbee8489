"""One process of a multi-controller run (ex12): it calls the student's functions in the exercise's
order and reports what each returned, as data, to the harness.

    python -I -B -m grader.worker.cluster_process REPORT_FD RELEASE_FD MODULE_PATH   (its task, JSON, on stdin)

The task: {"process_id", "processes", "devices", "coordinator", "rows" (this process's own rows, an
encoded array), "barrier_sleep" (how late this process comes to the barrier; 0 but for one)}. No
process is told another's rows, so a sum or a gather that is right in every process came through the
processes' collectives. Like the worker, this runs confined
and decides nothing: the student's code can rewrite it at run time, so the harness takes its reports
as "data that claims to be the answer" (see grader.worker.cluster).

Before each call the process reports {"step", "started"}, after it {"step", "ok" | "error", "seconds"}:
a run that hangs is killed by the harness, which then knows where each process stood. At the end it
says {"finished"} and waits until RELEASE_FD closes, when every process has finished.
"""

from __future__ import annotations

import json
import os
import sys
import time
import traceback
from pathlib import Path

STEPS = ("initialize", "process_summary", "global_from_local", "global_sum", "gather_to_host", "barrier")
BARRIER_NAME = "shardlab-ex12"


def _frames(exc: BaseException, module_path: Path) -> list[dict]:
    return [{"file": module_path.name, "line": f.lineno, "function": f.name, "code": (f.line or "").strip()[:200]}
            for f in traceback.extract_tb(exc.__traceback__) if Path(f.filename) == module_path]


def describe_global_array(arr, mesh) -> dict:
    """What global_from_local returned: its type, shape, sharding, and the blocks this process holds."""
    import jax
    import numpy as np
    from jax.sharding import NamedSharding, PartitionSpec

    if not isinstance(arr, jax.Array):
        return {"type": f"{type(arr).__module__}.{type(arr).__qualname__}"}
    expected = NamedSharding(mesh, PartitionSpec("d"))
    shards = []
    for shard in arr.addressable_shards:
        index = [[s.start or 0, dim if s.stop is None else s.stop] for s, dim in zip(shard.index, arr.shape)]
        shards.append({"device": int(shard.device.id), "index": index, "data": np.asarray(shard.data)})
    return {"type": "jax.Array", "shape": list(arr.shape), "dtype": np.dtype(arr.dtype).name,
            "sharding": str(arr.sharding), "equivalent": bool(arr.sharding.is_equivalent_to(expected, arr.ndim)),
            "fully_addressable": bool(arr.is_fully_addressable), "shards": shards}


def describe_host_array(value) -> dict:
    import jax
    import numpy as np

    if isinstance(value, np.ndarray):
        return {"type": "numpy.ndarray", "value": value}
    kind = "jax.Array" if isinstance(value, jax.Array) else f"{type(value).__module__}.{type(value).__qualname__}"
    return {"type": kind}


def describe_number(value) -> dict:
    import jax
    import numpy as np

    if isinstance(value, (int, float, np.integer, np.floating)) and not isinstance(value, (bool, np.bool_)):
        return {"type": type(value).__name__, "value": float(value)}
    kind = "jax.Array" if isinstance(value, jax.Array) else f"{type(value).__module__}.{type(value).__qualname__}"
    return {"type": kind}


def run(task: dict, module_path: Path, report) -> None:
    os.environ["XLA_FLAGS"] = f"--xla_force_host_platform_device_count={int(task['devices'])}"
    os.environ["JAX_PLATFORMS"] = "cpu"
    import jax
    import numpy as np
    from jax.sharding import Mesh, NamedSharding, PartitionSpec

    from grader.harness.implementations import load_file
    from grader.worker import protocol

    rows = protocol.decode(task["rows"])
    report({"ready": True})   # jax is imported: from here on, a silence is the student's code
    try:
        module = load_file(module_path)
    except BaseException as exc:   # reported once; the harness fails every step alike
        report({"import_error": str(exc)[:4000]})
        return

    def step(name: str, call, describe=lambda value: value, sleep: float = 0.0) -> bool:
        if sleep:
            time.sleep(sleep)
        report({"step": name, "started": True})
        begun = time.monotonic()
        try:
            value = call()
            seconds = time.monotonic() - begun
            answer = {"ok": describe(value)}
        except BaseException as exc:   # SystemExit included: an exit() is an error of this call
            seconds = time.monotonic() - begun
            answer = {"error": protocol.encode_error(exc, _frames(exc, module_path))}
        try:
            report({"step": name, "seconds": seconds, **answer})
        except protocol.UnsupportedValue as exc:
            report({"step": name, "seconds": seconds, "error": {
                "type": "TypeError", "base": "TypeError", "frames": [],
                "message": f"{name} returned {exc}, which cannot be sent to the grader"}})
        return "ok" in answer

    me, count = int(task["process_id"]), int(task["processes"])
    if not step("initialize", lambda: module.initialize(task["coordinator"], count, me)):
        return   # without the other processes nothing after this means anything
    step("process_summary", lambda: module.process_summary())
    # The grader's own mesh and array, so that each function is graded on correct inputs: devices in
    # process order, so process i's rows are block i of the global array.
    devices = sorted(jax.devices(), key=lambda d: (d.process_index, d.id))
    mesh = Mesh(np.array(devices), ("d",), axis_types=(jax.sharding.AxisType.Explicit,))
    given = jax.make_array_from_process_local_data(NamedSharding(mesh, PartitionSpec("d")), rows)
    step("global_from_local", lambda: module.global_from_local(rows.copy(), mesh),
         lambda arr: describe_global_array(arr, mesh))
    step("global_sum", lambda: module.global_sum(given), describe_number)
    step("gather_to_host", lambda: module.gather_to_host(given), describe_host_array)
    # One process (told only here) arrives late: a barrier that really waits holds the others until it comes.
    step("barrier", lambda: module.barrier(BARRIER_NAME), sleep=float(task["barrier_sleep"]))


def main(argv: list[str]) -> int:
    report_fd, release_fd, module_path = int(argv[0]), int(argv[1]), Path(argv[2])
    task = json.loads(sys.stdin.read())
    sys.stdin.close()

    from grader.worker import protocol

    def report(message: dict) -> None:
        sys.stdout.flush()
        sys.stderr.flush()
        protocol.send(report_fd, protocol.encode(message))

    run(task, module_path, report)
    protocol.send(report_fd, {"finished": True})
    sys.stdout.flush()
    os.read(release_fd, 1)   # until every process has finished: process 0 hosts the coordinator
    # Leave without jax.distributed's shutdown handshake: every report is sent, and a process that
    # died must not keep this one waiting.
    os._exit(0)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
