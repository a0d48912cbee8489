"""The worker: imports the student's modules and answers the harness's requests, one at a time.

    python -I -m grader.worker.request_loop REQUEST_FD RESPONSE_FD MODULES_FOLDER

or, as the harness starts it, forked ready-made from a zygote (grader.worker.zygote) into `serve`.
It imports each of the student's modules in the folder when first asked about it. It runs confined
(grader.sandbox.confinement) and decides nothing: a "call" runs a function on real arrays and sends
back what it returned, as data; an "export" traces a function on abstract arrays and sends back the
traced program as a `jax.export` artifact, which the harness checks, compiles, runs and times itself.
Everything here can be rewritten by the student's code at run time, so the harness trusts none of it
beyond "data that claims to be the answer".

Functions cross as references both ways. A function the student returns stays here, in `returned`,
and the harness can ask to call or export it. A function the harness passes (a test's per-device
function given to a higher-order exercise) arrives as a `HarnessFunction`: calling it asks the
harness, mid-request, to export that function for the arrays at hand, and runs the program it sends.
"""

from __future__ import annotations

import base64
import os
import sys
import traceback
from pathlib import Path

from grader.course.devices import force_host_devices
from grader.worker import codec, error_reports, messages, traced_programs
from grader.worker.protocol_errors import UnsupportedValue


class Channel:
    def __init__(self, request_fd: int, response_fd: int):
        self.request_fd, self.response_fd = request_fd, response_fd
        self.returned: list = []  # functions the student returned, by reference id

    def ask_harness(self, message: messages.Callback) -> messages.Program | messages.TraceFailed:
        messages.write(self.response_fd, message)
        return messages.read(self.request_fd, messages.CallbackAnswer)


class HarnessFunction:
    """A function of the tests, run as the program the harness traces for the arrays it is given."""

    def __init__(self, channel: Channel, ref: int):
        self.channel, self.ref, self.programs = channel, ref, {}

    def __call__(self, *args, **kwargs):
        import jax

        describe = lambda a: jax.ShapeDtypeStruct(a.shape, a.dtype)  # noqa: E731
        (abstract, arrays) = traced_programs.abstract_arrays(args, kwargs, describe)
        message = messages.Callback(self.ref, codec.encode(abstract[0]), codec.encode(abstract[1]))
        key = repr(message)
        if key not in self.programs:
            answer = self.channel.ask_harness(message)
            if isinstance(answer, messages.TraceFailed):
                raise RuntimeError(
                    f"the grader could not trace its function for your call: {answer.error}"
                )
            exported = jax.export.deserialize(bytearray(base64.b64decode(answer.artifact)))
            self.programs[key] = (exported, codec.decode(answer.out))
        exported, layout = self.programs[key]
        return traced_programs.call_exported(exported, layout, arrays)


def _student_frames(exc: BaseException, module_path: Path) -> list[dict]:
    return [
        {
            "file": module_path.name,
            "line": f.lineno,
            "function": f.name,
            "code": (f.line or "").strip()[:200],
        }
        for f in traceback.extract_tb(exc.__traceback__)
        if Path(f.filename) == module_path
    ]


def _unsendable(what: str, exc: UnsupportedValue) -> messages.Raised:
    message = f"{what} returned {exc}, which cannot be sent to the grader"
    return messages.Raised(
        {"type": "TypeError", "base": "TypeError", "message": message, "frames": []}
    )


def handle(
    module, module_path: Path, channel: Channel, request: messages.Request
) -> messages.Message:
    """One call or export of a function of `module` (or of one the student returned)."""
    what = request.name or "a function your code returned"
    harness_function = lambda i: HarnessFunction(channel, i)  # noqa: E731
    try:
        fn = (
            channel.returned[request.ref]
            if request.ref is not None
            else getattr(module, request.name)
        )
        args = codec.decode(request.args, functions=harness_function)
        kwargs = codec.decode(request.kwargs, functions=harness_function)
        if isinstance(request, messages.Export):
            return messages.Program(
                **traced_programs.export_traced(
                    fn,
                    args,
                    kwargs,
                    functions=channel.returned,
                    vjp_order=1 if request.derivative else 0,
                )
            )
        result = fn(*args, **kwargs)
    except UnsupportedValue as exc:
        return _unsendable(what, exc)
    except BaseException as exc:  # SystemExit included: a student's exit() is an error of this call
        return messages.Raised(error_reports.encode_error(exc, _student_frames(exc, module_path)))
    try:
        return messages.Returned(codec.encode(result, functions=channel.returned))
    except UnsupportedValue as exc:
        return _unsendable(what, exc)


def main(argv: list[str]) -> int:
    force_host_devices()
    import jax  # noqa: F401  (started before any student module, as in the harness)

    from grader.course import implementations  # noqa: F401

    return serve(int(argv[0]), int(argv[1]), Path(argv[2]))


def serve(request_fd: int, response_fd: int, folder: Path) -> int:
    """Say "ready", then answer requests on these pipes until the harness closes them. jax and the
    grader's modules are imported already: here (main) or in the zygote this worker was forked from."""
    from grader.checks.compile_policy import compile_quickly
    from grader.course.implementations import ImplementationImportError, load_file

    compile_quickly()  # the worker's programs are checked for their values, never timed
    # a program the student's code runs must not keep the pipes open
    for fd in (request_fd, response_fd):
        os.set_inheritable(fd, False)
    channel = Channel(request_fd, response_fd)
    messages.write(channel.response_fd, messages.Ready())
    modules: dict[str, object] = {}
    while True:
        try:
            request = messages.read(channel.request_fd, messages.Request)
        except EOFError:
            return 0
        name = request.module
        path = folder / name
        if name not in modules:
            try:
                if path.parent != folder or not path.is_file():
                    raise ImplementationImportError(f"{name} is not in the submission")
                modules[name] = load_file(path)
                # what fails from here on is the call
                messages.write(channel.response_fd, messages.Imported(name))
            except ImplementationImportError as exc:
                modules[name] = exc
        if isinstance(modules[name], ImplementationImportError):
            response = messages.ImportFailed(str(modules[name]))
        else:
            response = handle(modules[name], path, channel, request)
        sys.stdout.flush()
        sys.stderr.flush()
        messages.write(channel.response_fd, response)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
