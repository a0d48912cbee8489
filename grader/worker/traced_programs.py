"""Traced programs as they cross: a function traced on abstract arrays and exported (its arrays' places in
its results kept as Slots), and an exported program called with its outputs put back in those places.

What the harness refuses in a program it is sent, and what it strips from one it sends, is
grader.worker.programs."""

from __future__ import annotations

import base64

import numpy as np

from grader.worker import programs
from grader.worker.codec import encode
from grader.worker.protocol_errors import need
from grader.worker.slots import Slot, map_leaves, slots


def export_traced(
    fn,
    args,
    kwargs,
    *,
    functions: list | None = None,
    anonymous: bool = False,
    vjp_order: int = 0,
) -> dict:
    """Trace fn on the abstract arrays (ShapeDtypeStructs) among args, the rest fixed, and export it:
    {"artifact": the serialized program, "out": the encoded layout of its results}. Arrays among the
    results become the program's outputs; everything else comes back as data, with a Slot where each
    output goes. anonymous: strip the program of every source location, scope and function name of the
    code traced (grader.worker.programs.anonymous), for a reader not to see them. vjp_order 1: the
    program carries its VJP, for a harness that differentiates through it."""
    import jax

    structs = []

    def to_slot(struct):
        structs.append(struct)
        return Slot(len(structs) - 1)

    slotted = map_leaves((args, kwargs), lambda v: isinstance(v, jax.ShapeDtypeStruct), to_slot)
    layout = {}

    def traced(*arrays):
        call_args, call_kwargs = map_leaves(
            slotted, lambda v: isinstance(v, Slot), lambda s: arrays[s.index]
        )
        outputs = []

        def to_output(array):
            outputs.append(array)
            return Slot(len(outputs) - 1)

        layout["out"] = map_leaves(
            fn(*call_args, **call_kwargs), lambda v: isinstance(v, jax.Array), to_output
        )
        return tuple(outputs)

    exported = jax.export.export(jax.jit(traced))(*structs)
    if anonymous:
        exported = programs.anonymous(exported)
    return {
        "artifact": base64.b64encode(exported.serialize(vjp_order=vjp_order)).decode("ascii"),
        "out": encode(layout["out"], functions=functions),
    }


def abstract_arrays(args, kwargs, describe):
    """(args, kwargs) with each array (concrete or traced) swapped by describe(array), and the arrays."""
    import jax

    arrays = []

    def to_abstract(value):
        arrays.append(value)
        return describe(value)

    is_array = lambda v: isinstance(v, (jax.Array, np.ndarray))  # noqa: E731
    return map_leaves((tuple(args), dict(kwargs)), is_array, to_abstract), arrays


def call_exported(exported, layout, arrays):
    """Run a traced program on `arrays` and put its outputs where the layout's Slots say."""
    outputs = exported.call(*arrays)
    need(
        all(s.index < len(outputs) for s in slots(layout)),
        "a traced program's results do not match its layout",
    )
    return map_leaves(layout, lambda v: isinstance(v, Slot), lambda s: outputs[s.index])
