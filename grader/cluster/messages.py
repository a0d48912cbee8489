"""Every message of a multi-process run (ex12) that the grader itself writes, declared once, for the side that
writes it and the side that reads it.

    Spec        the harness -> the launcher (grader.cluster.launcher): every process's task, what they may touch
    Task        the launcher -> one process (grader.cluster.process), or the harness -> one srun task
    Hello       an srun task -> the harness: who it is (grader.cluster.srun)
    Relayed     the launcher -> the harness: what the launcher, the coordinator and the processes said

What a process reports of its steps stays a codec tree (grader.worker.codec.encode): the driver defines
what its steps return. Framed messages (Relayed, Hello, the srun Task) cross as grader.worker.framing's
frames, so a message is bounded as every framed message is (its size on its header, before it is read; its
structure and depth, before it is parsed) and then decoded into its type: one that is not a message of that
type raises Malformed (a protocol_errors.ProtocolError).
"""

from __future__ import annotations

from typing import Any, TypeVar

import msgspec

from grader.worker import framing, protocol_errors

Kind = TypeVar("Kind")


class Malformed(protocol_errors.ProtocolError):
    """A well-formed frame that is not a message of the type expected."""


class Message(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """A message of the grader's: immutable, nothing it does not declare."""


class DriverSource(Message):
    source: str  # the exercise's driver (grader.cluster.driver), course code no process can read
    name: str  # its name in tracebacks


class Task(Message):
    """What one process is given: who it is, its own inputs alone, and the driver it runs."""

    process_id: int
    processes: int
    devices: int
    coordinator: str | None  # None under srun: jax finds it in Slurm's environment
    inputs: Any  # the harness's draw for this process, a codec tree
    driver: DriverSource
    # the steps after which the harness looks at the process's connections
    census: tuple[str, ...] = ()


class Spec(Message):
    """The launcher's configuration: each process's task (its coordinator filled in by the launcher, which
    picks it), and what every process may read and write."""

    tasks: tuple[Task, ...]
    readable: tuple[str, ...]
    writable: tuple[str, ...]


class Hello(Message):
    """An srun task's first word: the run's token, its index, and where it runs (for the harness to stop it)."""

    token: str
    process: int
    job: str | None
    step: str | None
    host: str
    pid: int


# ---- relayed by the launcher to the harness, in the order it learns them ---------------------------------


class Relayed(Message, tag_field="kind"):
    """One message of the launcher's relay."""


class Coordinator(Relayed, tag="coordinator"):
    address: str  # "127.0.0.1:port", where the grader's coordinator listens


class Separated(Relayed, tag="separated"):
    landlock: bool  # each process got a Landlock ruleset of its own


class Service(Relayed, tag="service"):
    report: dict[str, Any]  # what the grader's coordinator reported (grader.cluster.coordinator)


class Started(Relayed, tag="started"):
    process: int
    pid: int  # in the sandbox (the launcher's pid namespace)


class Reported(Relayed, tag="reported"):
    process: int
    report: Any  # the process's report, a codec tree, as it sent it


class Exited(Relayed, tag="exited"):
    process: int
    code: int


class Finished(Relayed, tag="finished"):
    """Every process has finished: every report is relayed before it."""


RELAYED = Coordinator | Separated | Service | Started | Reported | Exited | Finished


def encode(message: Message) -> bytes:
    """JSON of `message` (an unframed message: the launcher's spec, a process's task on its stdin)."""
    return msgspec.json.encode(message)


def decode(data: bytes, kind: type[Kind]) -> Kind:
    return msgspec.json.decode(data, type=kind)


def send(fd: int, message: Message) -> None:
    """One framed message, written as every grader.worker.framing frame is (ASCII JSON, its size ahead)."""
    framing.send(fd, msgspec.to_builtins(message))


def receive(fd: int, kind: type[Kind] | Any, limit: int) -> Kind:
    """One framed message of `kind`, bounded as every frame is before it is parsed (framing.receive), then
    checked to be one: raises Malformed otherwise (protocol_errors.ProtocolError for a broken frame)."""
    raw = framing.receive(fd, limit)
    try:
        return msgspec.convert(raw, type=kind, strict=True)
    except msgspec.ValidationError as exc:
        raise Malformed(f"not a message of the run: {str(exc)[:200]}") from None
