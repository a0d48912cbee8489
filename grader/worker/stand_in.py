"""The harness's stand-in for a student's module, whose functions run in a worker (grader.worker.supervisor).

    worker = Worker(folder, isolation=Isolation.BUBBLEWRAP)
    impl = RemoteModule(folder / "ex01_meshes.py", worker)
    impl.place(x, mesh, spec)          # direct: the worker calls it on real arrays, data comes back
    jax.jit(lambda x: impl.f(x, mesh)) # traced: the worker exports the traced program, the harness runs it

A call whose arguments hold tracers (the test traces `impl.f` inside its own `jax.jit`, or a check
compiles it) is exported by the worker and called here with `Exported.call`, once the program passed
grader.worker.programs.checked_program, so values, shardings, collectives, memory and speed are measured
on the harness's own copy of the student's program. Every other call gets real arrays in the worker and
returns plain data. Exceptions come back as their type name and message and are raised here as a class
of that name deriving from the nearest builtin (grader.worker.error_reports.remote_exception). A test's
function passed to the student's goes by reference; when the worker calls it, it is traced here.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable
from pathlib import Path

from grader.checks.tracing import layout_hint
from grader.worker import codec, messages, traced_programs
from grader.worker.error_reports import remote_exception
from grader.worker.failures import FunctionStopped, WorkerFailure
from grader.worker.programs import checked_program
from grader.worker.protocol_errors import ProtocolError, UnsupportedValue
from grader.worker.supervisor import Worker


class HarnessFunctions:
    """The tests' functions passed to the student's (a per-device function given to a higher-order
    exercise): each crosses as its index here, and is traced here when the worker calls it."""

    def __init__(self):
        self.functions: list = []

    def answer(self, message: messages.Callback) -> messages.CallbackAnswer:
        """Trace the function the worker calls on the arrays it describes, and send the program (the
        tests' code is traced by the harness, never shipped as code), stripped of every location and
        name of the tests' code: the student's code can read it."""
        try:
            index = message.function
            if not 0 <= index < len(self.functions):
                raise ProtocolError(f"no function of the tests is numbered {str(index)[:20]}")
            args = codec.decode(message.args)
            kwargs = codec.decode(message.kwargs)
            return messages.Program(
                **traced_programs.export_traced(self.functions[index], args, kwargs, anonymous=True)
            )
        except Exception as exc:
            return messages.TraceFailed(f"{type(exc).__name__}: {str(exc)[:500]}")


# One numbering per worker, shared by the modules it serves: a function the student's code kept from
# one module's call still names the same test's function when called during another's.
_HARNESS_FUNCTIONS: weakref.WeakKeyDictionary[Worker, HarnessFunctions] = (
    weakref.WeakKeyDictionary()
)


def _harness_functions(worker: Worker) -> HarnessFunctions:
    return _HARNESS_FUNCTIONS.setdefault(worker, HarnessFunctions())


def _tracers(tree):
    import jax

    if isinstance(tree, jax.core.Tracer):
        yield tree
    elif type(tree) in (tuple, list):
        for v in tree:
            yield from _tracers(v)
    elif type(tree) is dict:
        for v in tree.values():
            yield from _tracers(v)


def _has_tracer(tree) -> bool:
    return any(True for _ in _tracers(tree))


def _differentiated(tree) -> bool:
    """Whether an argument is a tracer of JAX's differentiation (jax.grad, jax.vjp or jax.jvp around the
    call: JVPTracer and the linearize tracer beside it): the program must then carry its VJP."""
    from jax.interpreters.ad import JVPTracer

    return any(type(t).__module__ == JVPTracer.__module__ for t in _tracers(tree))


def _abstract(value):
    """What the worker traces with in place of an array: its shape, dtype and (explicit) sharding."""
    import jax
    from jax.sharding import AxisType, NamedSharding

    aval = jax.typeof(value)
    sharding = getattr(aval, "sharding", None)
    if isinstance(value, jax.Array) and not isinstance(value, jax.core.Tracer):
        sharding = value.sharding
    elif isinstance(sharding, NamedSharding) and any(
        t == AxisType.Explicit for t in sharding.mesh.axis_types
    ):
        sharding = _concrete(sharding)
    else:  # an Auto mesh's tracer carries no layout: the argument the check compiles for has it
        hint = layout_hint(aval.shape, aval.dtype)
        mesh = getattr(sharding, "mesh", None)
        sharding = (
            hint
            if isinstance(hint, NamedSharding)
            and mesh is not None
            and tuple(hint.mesh.axis_names) == tuple(mesh.axis_names)
            else None
        )
    return jax.ShapeDtypeStruct(aval.shape, aval.dtype, sharding=sharding)


def _concrete(sharding):
    """A tracer's sharding names an abstract mesh; the worker needs devices: the first ones, in order."""
    import jax
    import numpy as np
    from jax.sharding import Mesh, NamedSharding

    mesh = sharding.mesh
    if isinstance(mesh, Mesh):
        return sharding
    devices = np.array(jax.devices()[: mesh.size], dtype=object).reshape(mesh.axis_sizes)
    return NamedSharding(Mesh(devices, mesh.axis_names, axis_types=mesh.axis_types), sharding.spec)


class RemoteModule:
    """The student's module at `module_path`, served by `worker` (one worker serves a folder's modules).
    stopped(function): why a call of the module's `function` is not made (its earlier calls timed out:
    grader.harness.strikes), or None."""

    def __init__(
        self,
        module_path: Path,
        worker: Worker,
        stopped: Callable[[str], str | None] = lambda function: None,
    ):
        self._name = Path(module_path).name
        self._worker = worker
        self._stopped = stopped
        self._functions = _harness_functions(worker)
        # an import that failed, crashed or hung: every call fails alike
        self._fatal: BaseException | None = None
        self._programs: dict[str, tuple] = {}  # exported programs by request, traced once

    def __getattr__(self, name: str):
        # never an exercise function; asked for by tools (hypothesis' _repr_pretty_)
        if name.startswith("_"):
            raise AttributeError(name)
        return RemoteFunction(self, {"name": name}, origin=name)

    def __repr__(self) -> str:
        return f"<student module {self._name} (served by a worker)>"

    def request(self, message: messages.Request, origin: str | None = None) -> messages.FromWorker:
        """origin: the module's function the request calls (or that returned the function it calls)."""
        if self._fatal is not None:
            raise self._fatal.with_traceback(None)
        if origin is not None and (why := self._stopped(origin)):
            raise FunctionStopped(why, function=origin)
        try:
            answer = self._worker.request(message, answer_callback=self._functions.answer)
        except WorkerFailure as exc:
            if exc.importing:  # it would crash or hang again: every test of the module reports it
                self._fatal = exc
            else:  # a hang counts against the function called (an import's, against none)
                exc.function = origin
            raise
        if isinstance(answer, messages.ImportFailed):
            from grader.course.implementations import ImplementationImportError

            self._fatal = ImplementationImportError(answer.error)
            raise self._fatal
        return answer

    def call(self, target: dict, args: tuple, kwargs: dict, origin: str | None = None):
        """target: {"name": the module's function} or {"ref": a function the student returned};
        origin: the module's function it is, or that returned it."""
        if _has_tracer((args, kwargs)):
            return self._traced_call(target, args, kwargs, origin)
        message = messages.Call(self._name, **target, **self._encoded(target, args, kwargs))
        return self._decode(
            self._answer(
                self.request(message, origin), messages.Returned, "a malformed result"
            ).value,
            origin,
        )

    def _encoded(self, target: dict, args, kwargs) -> dict:
        try:
            return {
                "args": codec.encode(args, functions=self._functions.functions),
                "kwargs": codec.encode(kwargs, functions=self._functions.functions),
            }
        except UnsupportedValue as exc:
            raise TypeError(
                f"the grader cannot send {exc} to {target.get('name', 'your function')}"
            ) from None

    def _answer(self, response: messages.FromWorker, expected: type, malformed: str):
        """The answer of the `expected` kind; a student's exception raised again; anything else discards
        the worker."""
        if isinstance(response, messages.Raised):
            raise remote_exception(response.error)
        if not isinstance(response, (messages.Returned, messages.Program)):
            raise self._worker.broke_protocol(
                "this call", ProtocolError("the answer has neither a result nor an error")
            )
        if not isinstance(response, expected):
            raise self._worker.broke_protocol("this call", ProtocolError(malformed))
        return response

    def _decode(self, tree, origin: str | None = None):
        """What the worker sent, rebuilt; anything malformed discards the worker."""
        try:
            return codec.decode(
                tree, functions=lambda ref: RemoteFunction(self, {"ref": ref}, origin=origin)
            )
        except ProtocolError as exc:
            raise self._worker.broke_protocol("this call", exc) from None

    def _traced_call(self, target: dict, args: tuple, kwargs: dict, origin: str | None):
        abstract, arrays = traced_programs.abstract_arrays(args, kwargs, _abstract)
        derivative = _differentiated((args, kwargs))
        message = messages.Export(
            self._name, **target, **self._encoded(target, *abstract), derivative=derivative
        )
        key = repr(message)
        if key not in self._programs:
            answer = self._answer(
                self.request(message, origin), messages.Program, "a malformed program"
            )
            self._programs[key] = (
                checked_program(answer.artifact, derivative=derivative),
                self._decode(answer.out),
            )
        exported, layout = self._programs[key]
        return traced_programs.call_exported(exported, layout, arrays)


class RemoteFunction:
    """A student's function: one of the module's, by name, or one a call returned, by reference."""

    def __init__(self, module: RemoteModule, target: dict, origin: str | None = None):
        self._module, self._target, self._origin = module, target, origin
        self.__name__ = target.get("name", f"<function returned by your code #{target.get('ref')}>")

    def __call__(self, *args, **kwargs):
        return self._module.call(self._target, args, kwargs, self._origin)

    def __repr__(self) -> str:
        return f"<student function {self.__name__} (served by a worker)>"
