"""Traced programs crossing the boundary: what the harness refuses to compile in a worker's program, and
what it strips from the programs it sends a worker.

The harness compiles and runs the student's traced programs itself (grader.worker.stand_in), so a program
must be nothing but XLA's own operations on buffers of a sensible size (`checked_program` vets one before
the harness compiles it):

- no custom call beyond the partitioner's annotations: every other target is a native kernel trusting
  the program to size its buffers (`lapack_sgetrf_ffi` declared with a 1x1 result for a 512x512 operand
  corrupted the harness's heap), a host callback running code, or of no use to the course;
- no transfer to or from the host (infeed, outfeed, send, recv): nothing the course computes needs one;
- no array larger than MAX_ARRAY_BYTES, and no more than MAX_PROGRAM_BYTES in all its values: a
  1.5 GiB buffer in a traced program was allocated by the harness. The bounds are read from the types
  in the program, before anything is compiled;
- static shapes only (the worker traces on concrete shapes; a dynamic one has no size to check).

The other way, a test's function traced by the harness for a worker (a per-device function given to a
higher-order exercise) goes out with no source location, scope or function name: the student's code
can read the program it is given, and the hidden tests' file, lines and names are not theirs to see.
"""

from __future__ import annotations

import base64
import dataclasses
import math
from dataclasses import dataclass

from grader.worker.failures import UntrustedProgram

# The custom calls the course's programs need, measured over a whole reference grading: with Shardy
# (jax's default partitioner) none at all; with GSPMD (jax_use_shardy_partitioner off, as a student's
# module may set) shardings and shard_map's boundaries are these three annotations, which the partitioner
# consumes and which run nothing. (No shape_assertion: it comes only with symbolic shapes, refused below.)
ALLOWED_CUSTOM_CALLS = frozenset({"Sharding", "SPMDFullToShardShape", "SPMDShardToFullShape"})
HOST_TRANSFERS = frozenset(
    {"stablehlo.infeed", "stablehlo.outfeed", "stablehlo.send", "stablehlo.recv"}
)

# Measured over a whole reference grading (jax 0.10.2): the largest array of any traced program is 8 MiB
# (ex04's speedup layer), the most bytes in all of one program's values 167 MiB (ex08's timed training
# step). About 8 and 6 times that: room for an honest solution that works differently.
MAX_ARRAY_BYTES = 64 << 20
MAX_PROGRAM_BYTES = 1 << 30


@dataclass(frozen=True)
class ProgramFacts:
    """What a program holds, as far as the harness's checks go."""

    custom_calls: frozenset[str]
    host_transfers: frozenset[str]
    largest_bytes: int  # the largest array among the values the program makes
    largest_type: str
    total_bytes: int  # all those values' bytes (an upper bound: XLA reuses and fuses)
    dynamic_type: str | None  # a type with a dynamic dimension, if any


def _bytes(type_) -> int | None:
    """The bytes of a value of this MLIR type (tuples summed); None when a dimension is dynamic."""
    from jax.extend.mlir import ir

    if isinstance(type_, ir.TupleType):
        parts = [_bytes(type_.get_type(i)) for i in range(type_.num_types)]
        return None if None in parts else sum(parts)
    if not isinstance(type_, ir.ShapedType):
        return 0  # a token, an index
    if not type_.has_static_shape:
        return None
    element = type_.element_type
    bits = (
        2 * element.element_type.width
        if isinstance(element, ir.ComplexType)
        else getattr(element, "width", 64)
    )
    return math.prod(type_.shape) * max(bits, 8) // 8


def facts(module) -> ProgramFacts:
    """The facts of an MLIR module (an ir.Module, inside an MLIR context)."""
    from jax.extend.mlir import ir

    custom_calls, host_transfers, sizes = set(), set(), []  # sizes: (bytes or None, type text)

    def types_of(op):
        yield from (result.type for result in op.results)
        for region in op.regions:
            for block in region.blocks:
                yield from (argument.type for argument in block.arguments)

    def visit(op):
        name = op.name
        if name == "stablehlo.custom_call":
            custom_calls.add(ir.StringAttr(op.attributes["call_target_name"]).value)
        elif name in HOST_TRANSFERS:
            host_transfers.add(name)
        sizes.extend((_bytes(t), t) for t in types_of(op))
        return ir.WalkResult.ADVANCE

    module.operation.walk(visit)
    dynamic = next((str(t) for size, t in sizes if size is None), None)
    known = [(size, t) for size, t in sizes if size is not None]
    largest = max(known, key=lambda entry: entry[0], default=(0, ""))
    return ProgramFacts(
        frozenset(custom_calls),
        frozenset(host_transfers),
        largest[0],
        str(largest[1]),
        sum(size for size, _ in known),
        dynamic,
    )


def module_facts(text: str) -> ProgramFacts:
    """The facts of a module given as MLIR text."""
    from jax.extend.mlir import ir
    from jax.interpreters import mlir

    with mlir.make_ir_context():
        return facts(ir.Module.parse(text))


def exported_facts(exported) -> ProgramFacts:
    """The facts of a deserialized jax.export.Exported."""
    from jax.interpreters import mlir

    with mlir.make_ir_context():
        return facts(exported.mlir_module(serialized=False))


def _need(condition: bool, why: str) -> None:
    if not condition:
        raise UntrustedProgram(why)


def checked_program(artifact: str, derivative: bool = False):
    """Deserialize a worker's exported program and refuse anything the harness should not compile: see
    the module's docstring (custom calls, host transfers, huge buffers, dynamic shapes), and a program
    for another platform or for more devices than exist. derivative: the harness asked for the
    program's VJP (it differentiates the call), which must be there and pass the same checks, and carry
    no derivative of its own; otherwise a program carrying one is refused (jax.grad of it would compile
    it unchecked)."""
    import jax

    # its size: bounded as its message's
    _need(isinstance(artifact, str), "the traced program is missing")
    try:
        raw = base64.b64decode(artifact, validate=True)
    except ValueError:
        raise UntrustedProgram("the traced program is not base64") from None
    try:
        exported = jax.export.deserialize(bytearray(raw))
    except Exception as exc:
        raise UntrustedProgram(
            f"the traced program could not be read: {type(exc).__name__}: {exc}"
        ) from None
    _check(exported, "the traced program")
    if not derivative:
        _need(not exported.has_vjp(), "the traced program carries a derivative of its own")
        return exported
    _need(exported.has_vjp(), "the traced program carries no derivative, and the tests take one")
    try:
        vjp = exported.vjp()
    except Exception as exc:
        raise UntrustedProgram(
            f"the traced program's derivative could not be read: {type(exc).__name__}: {exc}"
        ) from None
    _check(vjp, "the traced program's derivative")
    _need(not vjp.has_vjp(), "the traced program's derivative carries a derivative of its own")
    # jax.grad calls exactly the derivative checked here, never a fresh copy of it
    return dataclasses.replace(exported, _get_vjp=lambda _exported: vjp)


def _check(exported, what: str) -> None:
    import jax

    try:
        found = exported_facts(exported)
    except Exception as exc:
        raise UntrustedProgram(f"{what} could not be read: {type(exc).__name__}: {exc}") from None
    _need(
        tuple(exported.platforms) == (jax.default_backend(),),
        f"{what} is for {exported.platforms}, not {jax.default_backend()}",
    )
    _need(exported.nr_devices <= jax.device_count(), f"{what} needs more devices than exist")
    why = refusal(found)
    _need(why is None, why or "")


REFUSED = "host callbacks and custom kernels are not allowed in graded functions"


def refusal(found: ProgramFacts) -> str | None:
    """Why the harness must not compile a program with these facts, or None."""
    if found.dynamic_type is not None:
        return (
            f"the traced program has an array of dynamic shape ({found.dynamic_type}): graded programs have "
            "static shapes"
        )
    unknown = sorted(found.custom_calls - ALLOWED_CUSTOM_CALLS)
    if unknown:
        return f"the traced program calls {', '.join(unknown)}: {REFUSED}"
    if found.host_transfers:
        return (
            f"the traced program transfers data to or from the host ({', '.join(sorted(found.host_transfers))}): "
            f"{REFUSED}"
        )
    if found.largest_bytes > MAX_ARRAY_BYTES:
        return (
            f"the traced program makes an array of {_size(found.largest_bytes)} ({found.largest_type}), more than "
            f"the {_size(MAX_ARRAY_BYTES)} the grader allows for one array (the course's programs need at most "
            "8 MiB): build only the arrays the computation needs"
        )
    if found.total_bytes > MAX_PROGRAM_BYTES:
        return (
            f"the traced program's values take {_size(found.total_bytes)} in all, more than the "
            f"{_size(MAX_PROGRAM_BYTES)} the grader allows for one program: build only the arrays the "
            "computation needs"
        )
    return None


def _size(count: int) -> str:
    return f"{count / (1 << 30):.2f} GiB" if count >= 1 << 30 else f"{count / (1 << 20):.1f} MiB"


def anonymous(exported):
    """The same program with no source location, scope or function name of the code that was traced:
    debug information stripped, private functions renamed f0, f1, ..., the module and the function
    called "program". Its computation, shardings and signature are unchanged."""
    # Private, with no public equivalent: serializing a module as jax.export does (its StableHLO target
    # version), which `mlir_module_serialized` must hold. Exported.serialize() writes the whole Exported.
    from jax._src.export import _export
    from jax.extend.mlir import ir, passmanager
    from jax.interpreters import mlir

    with mlir.make_ir_context():
        module = exported.mlir_module(serialized=False)
        passmanager.PassManager.parse("builtin.module(strip-debuginfo)").run(module.operation)
        functions = [
            op
            for op in module.body.operations
            if op.operation.name == "func.func"
            and ir.StringAttr(op.operation.attributes["sym_name"]).value != "main"
        ]
        taken = {
            ir.StringAttr(op.operation.attributes["sym_name"]).value
            for op in module.body.operations
            if "sym_name" in op.operation.attributes
        }
        fresh = (
            name
            for name in (f"f{i}" for i in range(len(taken) + len(functions) + 1))
            if name not in taken
        )
        for op, new in zip(functions, fresh):
            old = ir.StringAttr(op.operation.attributes["sym_name"]).value
            ir.SymbolTable.replace_all_symbol_uses(old, new, module.operation)
            ir.SymbolTable.set_symbol_name(op.operation, new)
        module.operation.attributes["sym_name"] = ir.StringAttr.get("program")
        serialized = _export._module_to_bytecode(module)
    return dataclasses.replace(exported, fun_name="program", mlir_module_serialized=serialized)
