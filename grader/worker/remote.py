"""The harness's side of a worker: a stand-in for the student's module whose functions run elsewhere.

    worker = Worker(folder, isolation=Isolation.BUBBLEWRAP)
    impl = RemoteModule(folder / "ex01_meshes.py", worker)
    impl.place(x, mesh, spec)          # direct: the worker calls it on real arrays, data comes back
    jax.jit(lambda x: impl.f(x, mesh)) # traced: the worker exports the traced program, the harness runs it

A call whose arguments hold tracers (the test traces `impl.f` inside its own `jax.jit`, or a check
compiles it) is exported by the worker and called here with `Exported.call`, so values, shardings,
collectives, memory and speed are measured on the harness's own copy of the student's program. Every
other call gets real arrays in the worker and returns plain data. Exceptions come back as their type
name and message and are raised here as a class of that name deriving from the nearest builtin.
"""

from __future__ import annotations

import base64
import os
import re
import select
import shutil
import sys
import tempfile
import time
from pathlib import Path

import psutil

from grader.checks.tracing import layout_hint
from grader.worker import confinement, protocol

STARTUP_SECONDS = 120.0          # a confined Python importing jax
MAX_ARTIFACT_BYTES = 64 << 20
OUTPUT_CHARS_PER_CALL = 4000


class WorkerFailure(RuntimeError):
    """The worker failed a request; `importing`: while it imported the module (it would again)."""

    def __init__(self, message: str, importing: bool = False):
        super().__init__(message)
        self.importing = importing


class WorkerCrashed(WorkerFailure):
    """The worker process died (exit, signal, out of memory) while serving a call."""


class WorkerTimeout(WorkerFailure):
    """The worker did not answer before the test's time ran out."""


class WorkerBrokeProtocol(WorkerFailure):
    """The worker sent something that is not the protocol (graded as an error)."""


class UntrustedProgram(RuntimeError):
    """A traced program the harness refuses to compile (unknown custom calls, wrong platform)."""


class RemoteError:
    """Mixed into every exception raised again from a worker's error report (beside its builtin base)."""
    student_frames: list[dict] = []


_ERROR_CLASSES: dict[tuple[str, str], type] = {}


def remote_exception(report: dict) -> BaseException:
    """The student's exception, rebuilt: a class named like theirs, deriving from the nearest builtin."""
    name = report.get("type") if isinstance(report.get("type"), str) else "Exception"
    base = protocol.BUILTIN_ERRORS.get(report.get("base"), Exception)
    if not name.isidentifier():
        name = base.__name__
    key = (name, base.__name__)
    if key not in _ERROR_CLASSES:
        _ERROR_CLASSES[key] = type(name, (base, RemoteError), {"__module__": "student"})
    message = report.get("message") if isinstance(report.get("message"), str) else ""
    exc = _ERROR_CLASSES[key](message)
    frames = report.get("frames")
    exc.student_frames = [f for f in frames if isinstance(f, dict)][-5:] if isinstance(frames, list) else []
    return exc


# The custom calls jax itself guarantees stable in exported programs; any other target (a host
# callback, say) could run code in the harness, so a program naming one is refused.
_CUSTOM_CALL = re.compile(r'custom_call\s*@([\w.$-]+)|call_target_name\s*=\s*"([^"]*)"')


def _allowed_custom_calls() -> frozenset[str]:
    from jax._src.export import _export

    return frozenset(t for t in _export._CUSTOM_CALL_TARGETS_GUARANTEED_STABLE if "callback" not in t.lower())


def _need(condition: bool, why: str) -> None:
    if not condition:
        raise UntrustedProgram(why)


def checked_program(artifact: str):
    """Deserialize a worker's exported program and refuse anything the harness should not compile."""
    import jax

    _need(isinstance(artifact, str), "the traced program is missing")
    try:
        raw = base64.b64decode(artifact, validate=True)
    except ValueError:
        raise UntrustedProgram("the traced program is not base64") from None
    _need(len(raw) <= MAX_ARTIFACT_BYTES, f"the traced program is larger than {MAX_ARTIFACT_BYTES} bytes")
    try:
        exported = jax.export.deserialize(bytearray(raw))
    except Exception as exc:
        raise UntrustedProgram(f"the traced program could not be read: {type(exc).__name__}: {exc}") from None
    _need(tuple(exported.platforms) == (jax.default_backend(),),
          f"the traced program is for {exported.platforms}, not {jax.default_backend()}")
    _need(exported.nr_devices <= jax.device_count(), "the traced program needs more devices than exist")
    targets = {a or b for a, b in _CUSTOM_CALL.findall(exported.mlir_module())}
    unknown = sorted(targets - _allowed_custom_calls())
    _need(not unknown, f"the traced program calls {', '.join(unknown)}: host callbacks and custom kernels are "
                       "not allowed in graded functions")
    return exported


def _has_tracer(tree) -> bool:
    import jax

    if isinstance(tree, jax.core.Tracer):
        return True
    if type(tree) in (tuple, list):
        return any(_has_tracer(v) for v in tree)
    if type(tree) is dict:
        return any(_has_tracer(v) for v in tree.values())
    return False


def _abstract(value):
    """What the worker traces with in place of an array: its shape, dtype and (explicit) sharding."""
    import jax
    from jax.sharding import AxisType, NamedSharding

    aval = jax.typeof(value)
    sharding = getattr(aval, "sharding", None)
    if isinstance(value, jax.Array) and not isinstance(value, jax.core.Tracer):
        sharding = value.sharding
    elif isinstance(sharding, NamedSharding) and any(t == AxisType.Explicit for t in sharding.mesh.axis_types):
        sharding = _concrete(sharding)
    else:   # an Auto mesh's tracer carries no layout: the argument the check compiles for has it
        hint = layout_hint(aval.shape, aval.dtype)
        mesh = getattr(sharding, "mesh", None)
        sharding = hint if isinstance(hint, NamedSharding) and mesh is not None \
            and tuple(hint.mesh.axis_names) == tuple(mesh.axis_names) else None
    return jax.ShapeDtypeStruct(aval.shape, aval.dtype, sharding=sharding)


def _concrete(sharding):
    """A tracer's sharding names an abstract mesh; the worker needs devices: the first ones, in order."""
    import jax
    import numpy as np
    from jax.sharding import Mesh, NamedSharding

    mesh = sharding.mesh
    if isinstance(mesh, Mesh):
        return sharding
    devices = np.array(jax.devices()[:mesh.size], dtype=object).reshape(mesh.axis_sizes)
    return NamedSharding(Mesh(devices, mesh.axis_names, axis_types=mesh.axis_types), sharding.spec)


class Worker:
    """One confined worker process serving the student's modules in one folder, started on first use
    (or early, with prestart) and started again after it crashed or hung."""

    def __init__(self, folder: Path, *, isolation: confinement.Isolation,
                 limits: confinement.WorkerLimits | None = None, scratch: Path | None = None):
        self.folder = Path(folder).resolve()
        self.isolation = isolation
        self._limits = limits or confinement.WorkerLimits()
        self._scratch = Path(scratch or tempfile.gettempdir())
        self._process = None
        self._ready = False
        self._output = None                        # what the worker prints, read back after each call
        self.callbacks: list = []                  # the tests' functions passed to the student's, by reference
        self.deadline = float("inf")               # time.monotonic() by which the current test must end

    # --- the process -------------------------------------------------------------------------

    def prestart(self) -> None:
        """Start the worker now, without waiting: it imports jax while the harness works."""
        if self._process is None:
            self._spawn()

    def _spawn(self) -> None:
        workdir = Path(tempfile.mkdtemp(prefix="worker-", dir=self._scratch))
        request_r, request_w = os.pipe()
        response_r, response_w = os.pipe()
        output_path = workdir.parent / f"{workdir.name}.out"
        output = open(output_path, "ab")    # the worker appends; we read from our own offset
        self._output, self._read = open(output_path, "rb"), 0
        env = {"PATH": "/usr/bin:/bin", "HOME": str(workdir), "TMPDIR": str(workdir), "LANG": "C.UTF-8",
               "XLA_FLAGS": os.environ.get("XLA_FLAGS", ""), "JAX_PLATFORMS": os.environ.get("JAX_PLATFORMS", "cpu"),
               "PYTHONDONTWRITEBYTECODE": "1"}
        argv = [sys.executable, "-I", "-B", "-m", "grader.worker.main", str(request_r), str(response_w),
                str(self.folder)]
        try:
            process = confinement.spawn_confined(argv, level=self.isolation, workdir=workdir, readable=[self.folder],
                                                 env=env, pass_fds=(request_r, response_w), limits=self._limits,
                                                 stdout=output)
        finally:
            output.close()
            os.close(request_r)
            os.close(response_w)
        self._process, self._request_w, self._response_r = process, request_w, response_r
        self._workdir, self._ready, self._started_at = workdir, False, time.monotonic()
        self._imported: set[str] = set()

    def stop(self) -> None:
        if self._process is None:
            return
        process, self._process = self._process, None
        for fd in (self._request_w, self._response_r):
            os.close(fd)
        process.kill_tree()
        self._relay_output()
        self._output.close()
        os.unlink(self._output.name)
        self._output = None
        shutil.rmtree(self._workdir, ignore_errors=True)

    def suspend(self) -> None:
        """Stop the worker's processes (while a test measures speed in the harness), until resume()."""
        self._signal_tree("suspend")

    def resume(self) -> None:
        self._signal_tree("resume")

    def _signal_tree(self, action: str) -> None:
        if self._process is None:
            return
        try:
            root = psutil.Process(self._process.pid)
            for process in [root, *root.children(recursive=True)]:
                getattr(process, action)()
        except psutil.Error:
            pass

    # --- messages ----------------------------------------------------------------------------

    def request(self, message: dict, *, module: str) -> dict:
        """Send one request about `module` (a file name) and return the answer. A crash or a hang raises
        WorkerCrashed or WorkerTimeout saying whether the module was being imported (`.importing`)."""
        if self._process is None:
            self._spawn()
        if not self._ready:
            answer = self._receive(min(self.deadline, self._started_at + STARTUP_SECONDS), "starting the worker")
            if answer.get("ready") is not True:
                self.stop()
                raise protocol.ProtocolError("the worker did not start as expected")
            self._ready = True
        try:
            protocol.send(self._request_w, message | {"module": module})
        except BrokenPipeError:
            self.stop()
            raise WorkerCrashed("crashed: the worker ended before it was asked") from None
        what = "this call" if module in self._imported else f"importing {module}"
        try:
            answer = self._receive(self.deadline, what)
            if "imported" in answer:   # the worker imported the module (first use): now the call runs
                self._imported.add(module)
                answer = self._receive(self.deadline, "this call")
        finally:
            self._relay_output()
        return answer

    def _receive(self, deadline: float, what: str) -> dict:
        """The worker's answer, serving its callbacks (a test's function to trace) meanwhile."""
        while True:
            message = self._next_message(deadline, what)
            if "callback" not in message:
                return message
            protocol.send(self._request_w, self._serve_callback(message))

    def _next_message(self, deadline: float, what: str) -> dict:
        importing = what.startswith("importing")
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                self.stop()
                raise WorkerTimeout(f"timeout: your code did not finish {what} within the test's time limit "
                                    "(an endless loop, or far too much work?)", importing)
            readable, _, _ = select.select([self._response_r], [], [], min(left, 0.5))
            if readable:
                break
        try:
            return protocol.receive(self._response_r)
        except protocol.ProtocolError as exc:
            self.stop()   # a worker that breaks the protocol is not asked again
            raise WorkerBrokeProtocol(f"the worker broke the protocol while {what} (did your code write to its "
                                      f"pipes?): {exc}", importing) from None
        except EOFError:
            returncode = self._process.popen.wait()
            self.stop()
            raise WorkerCrashed(f"crashed: {describe_death(returncode)} while {what}", importing) from None

    def _serve_callback(self, message: dict) -> dict:
        """The worker calls a function of the tests: trace it here, on the arrays described, and send the
        program (the tests' code is traced by the harness, never shipped as code)."""
        try:
            fn = self.callbacks[message["callback"]]
            args = protocol.decode(message.get("args"))
            kwargs = protocol.decode(message.get("kwargs"))
            return protocol.export_traced(fn, args, kwargs)
        except Exception as exc:
            return {"error": f"{type(exc).__name__}: {str(exc)[:500]}"}

    def _relay_output(self) -> None:
        """What the student's code printed during the call, into the test's captured output."""
        if self._output is None:
            return
        self._output.seek(self._read)
        text = self._output.read(OUTPUT_CHARS_PER_CALL + 1)
        self._read = self._output.seek(0, os.SEEK_END)
        if text:
            cut = len(text) > OUTPUT_CHARS_PER_CALL
            sys.stdout.write(text[:OUTPUT_CHARS_PER_CALL].decode(errors="replace") + ("\n... (cut)\n" if cut else ""))


class RemoteModule:
    """The student's module at `module_path`, served by `worker` (one worker serves a folder's modules)."""

    def __init__(self, module_path: Path, worker: Worker):
        self._name = Path(module_path).name
        self._worker = worker
        self._fatal: BaseException | None = None   # an import that failed, crashed or hung: every call fails alike
        self._programs: dict[str, tuple] = {}      # exported programs by request, traced once

    def __getattr__(self, name: str):
        if name.startswith("_"):   # never an exercise function; asked for by tools (hypothesis' _repr_pretty_)
            raise AttributeError(name)
        return RemoteFunction(self, {"name": name})

    def __repr__(self) -> str:
        return f"<student module {self._name} (served by a worker)>"

    def request(self, message: dict) -> dict:
        if self._fatal is not None:
            raise self._fatal.with_traceback(None)
        try:
            answer = self._worker.request(message, module=self._name)
        except WorkerFailure as exc:
            if exc.importing:   # it would crash or hang again: every test of the module reports it
                self._fatal = exc
            raise
        if "import_error" in answer:
            from grader.harness.implementations import ImplementationImportError

            self._fatal = ImplementationImportError(str(answer["import_error"]))
            raise self._fatal
        return answer

    def call(self, target: dict, args: tuple, kwargs: dict):
        """target: {"name": the module's function} or {"ref": a function the student returned}."""
        if _has_tracer((args, kwargs)):
            return self._traced_call(target, args, kwargs)
        message = {"op": "call", **target, **self._encoded(target, args, kwargs)}
        return self._answer(self.request(message))

    def _encoded(self, target: dict, args, kwargs) -> dict:
        try:
            return {"args": protocol.encode(args, functions=self._worker.callbacks),
                    "kwargs": protocol.encode(kwargs, functions=self._worker.callbacks)}
        except protocol.UnsupportedValue as exc:
            raise TypeError(f"the grader cannot send {exc} to {target.get('name', 'your function')}") from None

    def _answer(self, response: dict, *, encoded: bool = True):
        if "error" in response:
            raise remote_exception(response["error"] if isinstance(response["error"], dict) else {})
        if "ok" not in response:
            raise protocol.ProtocolError("the worker's answer has neither a result nor an error")
        return self._decode(response["ok"]) if encoded else response["ok"]

    def _decode(self, tree):
        return protocol.decode(tree, functions=lambda ref: RemoteFunction(self, {"ref": ref}))

    def _traced_call(self, target: dict, args: tuple, kwargs: dict):
        abstract, arrays = protocol.abstract_arrays(args, kwargs, _abstract)
        message = {"op": "export", **target, **self._encoded(target, *abstract)}
        key = repr(message)
        if key not in self._programs:
            answer = self._answer(self.request(message), encoded=False)
            if not isinstance(answer, dict) or "artifact" not in answer:
                raise protocol.ProtocolError("the worker's traced program is malformed")
            self._programs[key] = (checked_program(answer["artifact"]), self._decode(answer.get("out")))
        exported, layout = self._programs[key]
        return protocol.call_exported(exported, layout, arrays)


class RemoteFunction:
    """A student's function: one of the module's, by name, or one a call returned, by reference."""

    def __init__(self, module: RemoteModule, target: dict):
        self._module, self._target = module, target
        self.__name__ = target.get("name", f"<function returned by your code #{target.get('ref')}>")

    def __call__(self, *args, **kwargs):
        return self._module.call(self._target, args, kwargs)

    def __repr__(self) -> str:
        return f"<student function {self.__name__} (served by a worker)>"


def describe_death(returncode: int | None) -> str:
    if returncode is None:
        return "the process did not report how it ended"
    if returncode < 0:
        name = {9: "SIGKILL (out of memory, or killed)", 11: "SIGSEGV (segmentation fault)",
                6: "SIGABRT (aborted)"}.get(-returncode, f"signal {-returncode}")
        return f"the process was killed by {name}"
    return f"the process exited with status {returncode} (does the code call exit()?)"
