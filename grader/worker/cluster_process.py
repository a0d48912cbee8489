"""One process of a multi-controller run (ex12): it calls the student's functions in the exercise's
order and reports what each returned, as data, to the harness.

    python -I -B -m grader.worker.cluster_process REPORT_FD RELEASE_FD MODULE_PATH   (its task, JSON, on stdin)

Started by grader.worker.cluster_launch, with its host devices in XLA_FLAGS: it imports jax first, then
waits for its task: {"process_id", "processes", "devices", "coordinator", "rows" (this process's own rows
for global_from_local), "given" (its own rows of the grader's array for global_sum and gather_to_host;
other rows), "barrier_sleep" (how late this process comes to the barrier; 0 but for one)}. No process
is told another's rows, so a sum or a gather that is right in every process came through the processes'
collectives. Like the worker, this runs confined and decides nothing: the student's code can rewrite it
at run time, so the harness takes its reports as "data that claims to be the answer" and checks them
against what it sees itself (see grader.worker.cluster).

Before each call the process reports {"step", "started"}, after it {"step", "ok" | "error", "seconds"}:
a run that hangs is killed by the harness, which then knows where each process stood. Last comes the
grader's own use of the array global_from_local returned (USE_STEP): every process gathers it whole.
At the end it says {"finished"} and waits until RELEASE_FD closes, when every process has finished.
"""

from __future__ import annotations

import json
import os
import sys
import time
import traceback
from pathlib import Path

STEPS = ("initialize", "process_summary", "global_from_local", "global_sum", "gather_to_host", "barrier")
# The grader's own step, after the student's: the rows of the array global_from_local built, gathered in
# every process. They are rows the processes are given for that call only, so they reach a process only
# through that array (the grader's array for global_sum and gather_to_host holds other rows).
USE_STEP = "use_global_array"
BARRIER_NAME = "shardlab-ex12"


def _frames(exc: BaseException, module_path: Path) -> list[dict]:
    return [{"file": module_path.name, "line": f.lineno, "function": f.name, "code": (f.line or "").strip()[:200]}
            for f in traceback.extract_tb(exc.__traceback__) if Path(f.filename) == module_path]


def describe_global_array(arr) -> dict:
    """What global_from_local returned: its type, shape, sharding, and the blocks this process holds (with
    the global ids of their devices). The harness judges the layout from the blocks of every process."""
    import jax
    import numpy as np

    if not isinstance(arr, jax.Array):
        return {"type": f"{type(arr).__module__}.{type(arr).__qualname__}"}
    shards = []
    for shard in arr.addressable_shards:
        index = [[s.start or 0, dim if s.stop is None else s.stop] for s, dim in zip(shard.index, arr.shape)]
        shards.append({"device": int(shard.device.id), "index": index, "data": np.asarray(shard.data)})
    return {"type": "jax.Array", "shape": list(arr.shape), "dtype": np.dtype(arr.dtype).name,
            "sharding": str(arr.sharding), "shards": shards}


def use_global_array(arr):
    """The grader's use of the array global_from_local returned: all of it, gathered in every process."""
    import jax
    import numpy as np
    from jax.experimental import multihost_utils

    if not isinstance(arr, jax.Array):
        raise TypeError(f"global_from_local returned a {type(arr).__qualname__}, not a jax.Array")
    whole = multihost_utils.process_allgather(arr, tiled=True)
    return np.asarray(whole)


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
    import jax
    import numpy as np
    from jax.sharding import Mesh, NamedSharding, PartitionSpec

    from grader.course.implementations import load_file
    from grader.worker import protocol

    rows, given_rows = protocol.decode(task["rows"]), protocol.decode(task["given"])
    report({"ready": True})   # jax is imported: from here on, a silence is the student's code
    try:
        module = load_file(module_path)
    except BaseException as exc:   # reported once; the harness fails every step alike
        report({"import_error": str(exc)[:4000]})
        return

    def step(name: str, call, describe=lambda value: value, sleep: float = 0.0) -> tuple[bool, object]:
        if sleep:
            time.sleep(sleep)
        report({"step": name, "started": True})
        begun = time.monotonic()
        value = None
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
        return "ok" in answer, value

    me, count = int(task["process_id"]), int(task["processes"])
    initialized, _ = step("initialize", lambda: module.initialize(task["coordinator"], count, me))
    if not initialized:
        return   # without the other processes nothing after this means anything
    # jax's backend starts here (unless initialize started it): once joined, it publishes this process's
    # devices to the coordinator, where the grader sees them.
    devices = sorted(jax.devices(), key=lambda d: (d.process_index, d.id))
    step("process_summary", lambda: module.process_summary())
    # The grader's own mesh and array, so that each function is graded on correct inputs: devices in
    # process order, so process i's rows are block i of the global array.
    mesh = Mesh(np.array(devices), ("d",), axis_types=(jax.sharding.AxisType.Explicit,))
    given = jax.make_array_from_process_local_data(NamedSharding(mesh, PartitionSpec("d")), given_rows)
    _, built = step("global_from_local", lambda: module.global_from_local(rows.copy(), mesh), describe_global_array)
    step("global_sum", lambda: module.global_sum(given), describe_number)
    step("gather_to_host", lambda: module.gather_to_host(given), describe_host_array)
    # One process (told only here) arrives late: a barrier that really waits holds the others until it comes.
    step("barrier", lambda: module.barrier(BARRIER_NAME), sleep=float(task["barrier_sleep"]))
    step(USE_STEP, lambda: use_global_array(built), describe_host_array)


def main(argv: list[str]) -> int:
    report_fd, release_fd, module_path = int(argv[0]), int(argv[1]), Path(argv[2])
    import jax  # noqa: F401  (imported while the coordinator starts: the task comes once it listens)

    from grader.worker import protocol

    task = json.loads(sys.stdin.read())
    sys.stdin.close()

    def report(message: dict) -> None:
        sys.stdout.flush()
        sys.stderr.flush()
        protocol.send(report_fd, protocol.encode(message))

    run(task, module_path, report)
    protocol.send(report_fd, {"finished": True})
    sys.stdout.flush()
    os.read(release_fd, 1)   # until every process has finished
    # Leave without jax.distributed's shutdown handshake: every report is sent, and a process that
    # died must not keep this one waiting.
    os._exit(0)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
