"""What ex03's visible and hidden tests share: the check that column_sum's compiled program all-reduces
(and computes the column sums), every 2-D spec over the mesh's axes, asking JAX which sharding an operation
gives, and comparing a student's predictions with it. No answer is written here: JAX is asked every time."""

import itertools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import NamedSharding, PartitionSpec as P

from grader.checks import Variant, assert_collectives, test_mesh


def check_all_reduce(impl, mesh, data):
    """column_sum of `data` placed P("x", "y") on `mesh` (Auto axes): its compiled program contains an
    all-reduce, and running it gives the column sums."""
    x = jax.device_put(data, NamedSharding(mesh, P("x", "y")))
    assert_collectives(
        impl.column_sum,
        x,
        present=("all-reduce",),
        expected=data.astype(np.float64).sum(axis=0),
        rtol=1e-5,
        atol=1e-4,
        what=f"column_sum on a {mesh.shape['x']}x{mesh.shape['y']} mesh",
    )


@pytest.fixture(name="check_all_reduce")
def check_all_reduce_fixture():
    """check_all_reduce(impl, mesh, data): column_sum's compiled program all-reduces, and gives the column sums."""
    return check_all_reduce


def column_sum_mistakes(data, rows_per_device):
    """The wrong column sums the course knows, each with its story (grader.checks.Variant)."""
    data = np.asarray(data, np.float64)
    return [
        Variant(
            lambda: np.zeros(data.shape[1]),
            "is all zeros: it computes nothing from x. Sum x over its rows (axis 0): under jit the "
            "compiler adds the all-reduce the sum needs.",
        ),
        Variant(
            lambda: data[:rows_per_device].sum(axis=0),
            "matches the sums of one device's rows only: each column's sum needs the rows held on "
            "every device along 'x'. Sum the whole global array (x.sum(axis=0) under jit), not a block.",
        ),
        Variant(
            lambda: data.mean(axis=0),
            "matches the column means, not the sums: use sum, not mean.",
        ),
        Variant(
            lambda: data[0],
            "matches x's first row: sum over all the rows (axis 0).",
        ),
    ]


@pytest.fixture(name="column_sum_mistakes")
def column_sum_mistakes_fixture():
    """column_sum_mistakes(data, rows_per_device) -> the known wrong column sums."""
    return column_sum_mistakes


# Every 2-D spec over the mesh axes ("x", "y") that names no axis twice: 11 of them.
ENTRIES = (None, "x", "y", ("x", "y"), ("y", "x"))


def axes(entry):
    return () if entry is None else (entry,) if isinstance(entry, str) else tuple(entry)


SPECS = [P(a, b) for a, b in itertools.product(ENTRIES, ENTRIES) if not set(axes(a)) & set(axes(b))]


def normalized(spec):
    """How predictions are compared: ("x",) written "x", trailing Nones dropped."""
    entries = [e[0] if isinstance(e, tuple) and len(e) == 1 else e for e in spec]
    entries = [None if e == () else e for e in entries]
    while entries and entries[-1] is None:
        entries.pop()
    return P(*entries)


def what_jax_gives(op, *specs_and_shapes):
    """(normalized result spec, None) when JAX accepts `op` on a 2x4 Explicit mesh, (None, reason) when it refuses."""
    mesh = test_mesh((2, 4), ("x", "y"), "explicit")
    args = [
        jax.ShapeDtypeStruct(shape, jnp.float32, sharding=NamedSharding(mesh, spec))
        for spec, shape in specs_and_shapes
    ]
    with jax.set_mesh(mesh):
        try:
            out = jax.eval_shape(op, *args)
        except Exception as exc:
            if type(exc).__name__ != "ShardingTypeError":  # anything else is a bug in this test
                raise
            reason = str(exc).splitlines()[0]
            return None, reason if len(reason) <= 120 else reason[:117] + "..."
    return normalized(out.sharding.spec), None


def check_predictions(name, predict, op, cases, max_shown=12):
    """cases: ((spec, shape), (spec, shape)) pairs; every prediction must match what JAX gives."""
    wrong = []
    for (spec1, shape1), (spec2, shape2) in cases:
        predicted = predict(spec1, spec2)
        if predicted is not None and not isinstance(predicted, P):
            raise AssertionError(
                f"{name}({spec1}, {spec2}) returned {predicted!r}: expected a "
                "PartitionSpec (jax.P(...)) or None"
            )
        truth, refusal = what_jax_gives(op, (spec1, shape1), (spec2, shape2))
        got = None if predicted is None else normalized(predicted)
        if got != truth:
            says = f"JAX gives {truth}" if refusal is None else f"JAX refuses ({refusal})"
            wrong.append(f"  {name}({spec1}, {spec2}): you predicted {got}, {says}")
    if wrong:
        more = f"\n  ... and {len(wrong) - max_shown} more" if len(wrong) > max_shown else ""
        raise AssertionError(
            f"{name} is wrong on {len(wrong)} of {len(cases)} cases:\n"
            + "\n".join(wrong[:max_shown])
            + more
        )


@pytest.fixture(name="check_predictions")
def check_predictions_fixture():
    """check_predictions(name, predict, op, cases): every prediction must match what JAX gives."""
    return check_predictions


@pytest.fixture
def every_spec():
    """Every 2-D spec over the mesh axes ("x", "y") that names no axis twice (11): the predictions' domain."""
    return SPECS
