"""What the harness records of a multi-process run's reports (grader.cluster.run's ClusterRun), checked: anything
malformed is ignored, as it can only cost the student."""

from __future__ import annotations

from grader.cluster.run import ClusterRun, GlooRecord
from grader.worker import codec, protocol_errors


def _ints(value) -> bool:
    return isinstance(value, list) and all(type(v) is int for v in value)


def observe_gate(run: ClusterRun, seen: dict) -> None:
    """A report of the grader's gate (grader.cluster.gate), relayed by the coordinator and the launcher:
    they run outside every process's reach, so it is the grader's own view."""
    process, connection, port = seen.get("process"), seen.get("connection"), seen.get("port")
    if type(seen.get("registered")) is int and type(connection) is int and type(port) is int:
        run.gate.registered[connection] = (seen["registered"], port)
    elif isinstance(seen.get("refused"), str) and len(run.gate.refused) < 50:
        run.gate.refused.append(
            (
                process if type(process) is int else None,
                port if type(port) is int else None,
                seen["refused"][:500],
            )
        )
    elif (
        isinstance(seen.get("wrote"), dict)
        and type(process) is int
        and 0 <= process < run.processes
    ):
        wrote = seen["wrote"]
        if wrote.get("topology") == process and _ints(wrote.get("devices")):
            run.published[process] = wrote["devices"]
        elif isinstance(wrote.get("global"), list) and all(_ints(node) for node in wrote["global"]):
            run.gate.global_topology = wrote["global"]
        elif (
            isinstance(gloo := wrote.get("gloo"), dict)
            and _ints(gloo.get("clique"))
            and all(type(gloo.get(k)) is int for k in ("rank", "port"))
            and 0 <= gloo["rank"] < len(gloo["clique"])
        ):
            run.gate.gloo.append(
                GlooRecord(process, tuple(gloo["clique"]), gloo["rank"], gloo["port"])
            )


def observe_service(run: ClusterRun, message: dict) -> None:
    """A report of the grader's coordinator (relayed by the launcher)."""
    if message.get("registered") is True:
        run.registered = True
    elif (
        isinstance(message.get("failed"), str) and not run.registered and run.service_error is None
    ):
        run.service_error = message["failed"][:500]
    elif isinstance(message.get("gate"), dict):
        observe_gate(run, message["gate"])


def record_report(run: ClusterRun, process: int, report, when: float) -> str | None:
    """One report of `process` (a codec tree, as it sent it), received `when` seconds into the run. The step
    when it says that step returned: the process may then wait for the harness's look (grader.cluster.process)."""
    if not 0 <= process < run.processes:
        return None
    try:
        message = codec.decode(report)
    except (protocol_errors.ProtocolError, TypeError, ValueError, RecursionError):
        return None
    if not isinstance(message, dict):
        return None
    if message.get("ready") is True:
        run.ready.add(process)
        return None
    devices = message.get("devices")
    if (
        not run.observed_joins
        and isinstance(devices, list)
        and all(type(d) is int for d in devices)
    ):
        # its own word: only where no coordinator of the grader's saw them
        run.published[process] = devices
        return None
    if isinstance(message.get("import_error"), str) and run.import_error is None:
        run.import_error = message["import_error"]
    step = message.get("step")
    if step not in run.steps:
        return None
    if message.get("started") is True:
        run.started[process] = step
        run.seen[(process, step, "started")] = when
    elif ("ok" in message or isinstance(message.get("error"), dict)) and isinstance(
        message.get("seconds"), float
    ):
        run.reports[(process, step)] = message
        run.seen[(process, step, "done")] = when
        return step if "ok" in message else None
    return None
