"""The worker channel's messages, each kind declared once: the harness's requests, the worker's answers, and
the calls back to the harness's functions with their answers. Writer and reader both use these classes.

Each is a tagged msgspec Struct: its tag, in the field "kind", says which it is, and a field it does not
declare makes the message malformed. Values (arguments, results, layouts) stay the codec's tagged trees
(grader.worker.codec), typed Any here and decoded, with every check, by whoever reads them.

A message is written and read through the framing (grader.worker.framing), whose bounds are all checked
before it is parsed; only then is it checked against the kinds its reader expects.
"""

from __future__ import annotations

import math
from typing import Any

import msgspec

from grader.worker import framing
from grader.worker.message_limits import MAX_MESSAGE_BYTES
from grader.worker.protocol_errors import ProtocolError


class Message(
    msgspec.Struct, frozen=True, forbid_unknown_fields=True, omit_defaults=True, tag_field="kind"
):
    """Every message of the worker channel."""


# --- the harness's requests (harness -> worker) ------------------------------------------------------------


class FunctionRequest(Message, frozen=True):
    """About a function of the student's `module` (a file name): one of its own, by name, or one a call
    returned, by reference. args and kwargs: the encoded tuple and dict to call it with."""

    module: str
    args: Any
    kwargs: Any
    name: str | None = None
    ref: int | None = None


class Call(FunctionRequest, frozen=True, tag="call"):
    """Call the function on real arrays; the answer is Returned (or Raised, ImportFailed)."""


class Export(FunctionRequest, frozen=True, tag="export"):
    """Trace the function on the abstract arrays among its arguments; the answer is a Program.
    derivative: the harness differentiates the call (jax.grad of a test's function around it), so the
    program carries its first-order VJP too."""

    derivative: bool = False


# --- the worker's answers (worker -> harness) ------------------------------------------------------------


class Ready(Message, frozen=True, tag="ready"):
    """A worker just started, waiting for requests."""


class Imported(Message, frozen=True, tag="imported"):
    """The module was imported (its first request): what fails from here on is the call."""

    module: str


class ImportFailed(Message, frozen=True, tag="import_error"):
    """The module could not be imported; every request about it gets this answer."""

    error: str


class Returned(Message, frozen=True, tag="ok"):
    """What a call returned (encoded)."""

    value: Any


class Raised(Message, frozen=True, tag="error"):
    """What the student's code raised, as grader.worker.error_reports.encode_error reports it (read by
    remote_exception, which takes nothing in it for granted)."""

    error: dict[str, Any]


class Program(Message, frozen=True, tag="program"):
    """A traced program (grader.worker.traced_programs.export_traced): the answer to an Export, and the
    harness's answer to a Callback."""

    artifact: str  # the serialized jax.export.Exported, base64
    out: Any  # the encoded layout of its results, a Slot where each output goes


# --- calls back to the harness's functions (worker -> harness -> worker) -------------------------------


class Callback(Message, frozen=True, tag="callback"):
    """Trace the harness's function numbered `function` for these (abstract) arguments; the answer is a
    Program or TraceFailed."""

    function: int
    args: Any
    kwargs: Any


class TraceFailed(Message, frozen=True, tag="trace_failed"):
    """The harness could not trace its function for the worker."""

    error: str


Request = Call | Export
FromWorker = Ready | Imported | ImportFailed | Returned | Raised | Program | Callback
CallbackAnswer = Program | TraceFailed


def write(fd: int, message: Message, deadline: float = math.inf) -> None:
    """Send one message (framing.send: see its deadline)."""
    framing.send(fd, msgspec.to_builtins(message), deadline)


def read(fd: int, kinds, budget: framing.Budget | None = None, limit: int = MAX_MESSAGE_BYTES):
    """The next message, one of `kinds` (a Message class or a union of them): bounded and parsed by the
    framing, then checked against `kinds`. Anything else is a ProtocolError."""
    data = framing.receive(fd, limit, budget)
    try:
        return msgspec.convert(data, type=kinds)
    except msgspec.ValidationError as exc:
        raise ProtocolError(f"a malformed message: {str(exc)[:300]}") from None
