"""Hostile submissions that earn rules on inputs they have seen or can read in the handout, graded as one
class by the real grader (`grade_batch`, every student module in a confined worker) beside an honest
copy of the reference, which must get full marks.

- Replaying a stream (ex04): a direct call runs in the worker on real arrays, so the worker sees what
  the tests drew. When every test that named seed 0 drew seed 0's stream, the hidden structure tests'
  smaller inputs were prefixes of what the visible tests had passed in the clear: the module below
  notes the arrays of its direct calls and, when a test traces it, returns the answer for the recorded
  prefix as a constant (and a dummy all-reduce where a rule asks for one). Measured before each test
  drew from a stream of its own (grader.checks.inputs): 3.56/20, for `auto_has_no_collectives` and
  `shard_map_has_no_collectives` at every size and `feature_sharded_uses_one_all_reduce` at 2 and 4
  devices. Now each test's stream is keyed by the secret and the test's identity: what one test shows
  the worker tells nothing of another's inputs.
- The worked example as constants (ex05): the visible test traced the docstring's fixed input, which
  no secret touches, and the module below returns the docstring's answers with the right sharding for
  that shape. Measured before: 1.5/15. Now the same program also runs on a secret input of that shape.

Both attacks are stub-based: where they do not fake, they raise the stub's error, so any point they get
is a point faked. Graded with --timing=skip (the speed tests still check their values): the question
here is which inputs the rules are earned on, not speed.
"""

from __future__ import annotations

import json
import textwrap

import pytest

from grader.course import catalog
from grader.grading.batch import REPORT, grade_batch, student_folder
from grader.grading.results import GradingResults

# one grading, shared by the tests below
pytestmark = pytest.mark.xdist_group("test_hostile_inputs")

EX04, EX05 = catalog.get("ex04"), catalog.get("ex05")
TEST_TIMEOUT = 60


def source(exercise, stub: bool = False) -> str:
    path = exercise.stub_path() if stub else exercise.solution_path()
    return "".join(
        line for line in path.read_text().splitlines(keepends=True) if "### " not in line
    )


def code(text: str) -> str:
    return "\n" + textwrap.dedent(text).strip("\n") + "\n"


# ex04: every direct call's (x, W, b) noted as the normal draws they were made of (the handout's
# generator: x, then W times sqrt(n_features), then b, from one stream), then the stub's error. A traced
# call takes its inputs' shapes, cuts them from the first stream noted, computes the layer at trace time
# and returns it as a constant, per device (no collective; a dummy all-reduce where one is asked for).
REPLAYS_THE_STREAM = source(EX04, stub=True) + code("""
    import numpy as _np
    from jax import numpy as _jnp

    _streams = []   # the normal draws behind each direct call's inputs, in the order they came

    def _noted(x, W, b, name):
        if not isinstance(x, jax.core.Tracer):
            x, W, b = (_np.asarray(v, _np.float64) for v in (x, W, b))
            _streams.append(_np.concatenate([x.ravel(), (W * _np.sqrt(W.shape[0])).ravel(), b.ravel()]))
            raise NotImplementedError(f"ex04: {name}")

    def _replayed(x, W):
        rows, features, out = x.shape[0], x.shape[1], W.shape[1]
        need = rows * features + features * out + out
        stream = next((s for s in _streams if len(s) >= need), None)
        if stream is None:
            return None
        px = stream[:rows * features].astype(_np.float32).reshape(rows, features)
        pW = stream[rows * features:rows * features + features * out].astype(_np.float32).reshape(features, out)
        pb = stream[need - out:need].astype(_np.float32)
        z = px.astype(_np.float64) @ (pW / _np.sqrt(features)) + pb
        e = _np.exp(z - z.max(axis=-1, keepdims=True))
        return (e / e.sum(axis=-1, keepdims=True)).astype(_np.float32)

    def _constant(x, W, b, mesh, in_specs, out_spec, reduce, name):
        _noted(x, W, b, name)
        answer = _replayed(x, W)
        if answer is None:
            raise NotImplementedError(f"ex04: {name}")
        def per_device(xb, Wb, bb):
            if reduce:   # one all-reduce, of nothing that matters
                return _jnp.asarray(answer) + 0.0 * jax.lax.psum(_jnp.sum(xb), "data")
            rows = answer.shape[0] // mesh.shape["data"]
            return jax.lax.dynamic_slice_in_dim(_jnp.asarray(answer), jax.lax.axis_index("data") * rows, rows)
        return jax.shard_map(per_device, mesh=mesh, in_specs=in_specs, out_specs=out_spec)(x, W, b)

    def layer_auto(x, W, b, mesh):
        return _constant(x, W, b, mesh, (P("data", None), P(), P()), P("data", None), False, "layer_auto")

    def layer_explicit(x, W, b, mesh):
        _noted(x, W, b, "layer_explicit")
        raise NotImplementedError("ex04: layer_explicit")

    def layer_shard_map(x, W, b, mesh):
        return _constant(x, W, b, mesh, (P("data", None), P(), P()), P("data", None), False, "layer_shard_map")

    def layer_feature_sharded(x, W, b, mesh):
        return _constant(x, W, b, mesh, (P(None, "data"), P("data", None), P()), P(), True, "layer_feature_sharded")
""")

# ex04's tests whose program the replay serves: its recorded stream (1194 draws) covers their inputs.
REPLAYED_EX04 = {
    f"{name}[{n}dev]"
    for name in ("test_layer_auto_has_no_collectives", "test_layer_shard_map_has_no_collectives")
    for n in (2, 4, 8)
} | {f"test_layer_feature_sharded_uses_one_all_reduce[{n}dev]" for n in (2, 4)}

# ex05: the docstring's worked example (x = [3 1 4 1 | 5 9 2 6 | 5 3 5 8 | 9 7 1 2] on 4 devices) answered
# from the docstring, as a constant with the right sharding; any other call raises the stub's error.
REPLICATED, SPLIT = "P()", "P('i')"
WORKED_ANSWERS = {  # the function's name: (its answer, the answer's spec, as code)
    "all_gather": ([3, 1, 4, 1, 5, 9, 2, 6, 5, 3, 5, 8, 9, 7, 1, 2], REPLICATED),
    "all_reduce": ([22, 20, 12, 17], REPLICATED),
    "reduce_scatter": ([22, 20, 12, 17], SPLIT),
    "all_reduce_via_scatter_gather": ([22, 20, 12, 17], REPLICATED),
    "all_to_all": ([3, 5, 5, 9, 1, 9, 3, 7, 4, 2, 5, 1, 1, 6, 8, 2], SPLIT),
    "ring_shift": ([9, 7, 1, 2, 3, 1, 4, 1, 5, 9, 2, 6, 5, 3, 5, 8], SPLIT),
    "ring_all_reduce": ([22, 20, 12, 17], REPLICATED),
}
ANSWERS_THE_WORKED_EXAMPLE = (
    source(EX05, stub=True)
    + code("""
    import numpy as _np
    from jax import numpy as _jnp

    def _from_the_docstring(x, mesh, name, answer, spec):
        if tuple(x.shape) != (16,) or mesh.shape["i"] != 4:
            raise NotImplementedError(f"ex05: {name}")
        answer = _np.asarray(answer, _np.float32)
        if spec == P():
            per_device = lambda xb: _jnp.asarray(answer)
        else:
            rows = len(answer) // 4
            per_device = lambda xb: jax.lax.dynamic_slice_in_dim(_jnp.asarray(answer),
                                                                 jax.lax.axis_index("i") * rows, rows)
        return jax.shard_map(per_device, mesh=mesh, in_specs=P("i"), out_specs=spec)(x)
""")
    + "".join(
        code(f"""
    def {name}(x, mesh{", k=1" if name == "ring_shift" else ""}):
        return _from_the_docstring(x, mesh, "{name}", {answer}, {spec})
""")
        for name, (answer, spec) in WORKED_ANSWERS.items()
    )
)

SUBMISSIONS = {
    "replays_the_stream": {EX04.module_file: REPLAYS_THE_STREAM},
    "answers_the_worked_example": {EX05.module_file: ANSWERS_THE_WORKED_EXAMPLE},
    "honest": {EX04.module_file: source(EX04), EX05.module_file: source(EX05)},
}


@pytest.fixture(scope="module")
def graded(tmp_path_factory) -> dict[str, GradingResults]:
    """The three submissions graded as one class, two at a time."""
    class_dir = tmp_path_factory.mktemp("class")
    for student, files in SUBMISSIONS.items():
        (class_dir / student).mkdir()
        for name, text in files.items():
            (class_dir / student / name).write_text(text)
    out = tmp_path_factory.mktemp("graded")
    summary = grade_batch(
        class_dir,
        out,
        jobs=2,
        exercises=[EX04.number, EX05.number],
        test_timeout=TEST_TIMEOUT,
        timing="skip",
    )
    assert sorted((o.student, o.status) for o in summary.outcomes) == sorted(
        (s, "graded") for s in SUBMISSIONS
    ), [(o.student, o.status, o.detail[:300]) for o in summary.outcomes]
    results = {
        student: GradingResults.from_dict(
            json.loads((student_folder(out, student) / REPORT).read_text())
        )
        for student in SUBMISSIONS
    }
    for student, result in results.items():
        for exercise_id, exercise in result.exercises.items():
            print(f"\n{student} {exercise_id}: {exercise.score:.4g}/{exercise.max_score:.4g}")
            for test in exercise.tests:
                print(f"  {test.name}: {test.category} {test.score:.3g} {test.message[:120]!r}")
    return results


@pytest.mark.slow
def test_the_honest_reference_earns_full_marks(graded):
    for exercise in (EX04, EX05):
        tests = graded["honest"].exercises[exercise.id].tests
        assert tests and all(t.earns for t in tests), [
            (t.name, t.category, t.message[:200]) for t in tests if not t.earns
        ]
        assert graded["honest"].exercises[exercise.id].score == pytest.approx(exercise.points)


@pytest.mark.slow
def test_replaying_a_direct_calls_stream_earns_no_rule(graded):
    """The replayed programs are served (their tests fail on the values, not for want of an answer), and
    computed for inputs no structure test draws; every direct call is the stub's."""
    tests = graded["replays_the_stream"].exercises[EX04.id].tests
    categories = {t.name: t.category for t in tests}
    assert REPLAYED_EX04 <= set(categories), sorted(categories)
    wrong = {
        t.name: (t.category, t.message[:300])
        for t in tests
        if t.name in REPLAYED_EX04 and (t.category != "failed" or "differ" not in t.message)
    }
    assert not wrong, wrong
    # The others: a direct call (the stub's error), a program too large for any stream noted (the same), or
    # a program served from a longer stream, computed for inputs no test drew; the report-only speed test
    # (no points) skips before it runs anything.
    others = {
        t.name: (t.category, t.message[:200])
        for t in tests
        if t.name not in REPLAYED_EX04
        and not (
            t.category == "not attempted"
            or (t.category == "failed" and "differ" in t.message)
            or (t.category == "skipped" and t.max_score == 0)
        )
    }
    assert not others, others
    assert graded["replays_the_stream"].exercises[EX04.id].score == 0


@pytest.mark.slow
def test_the_worked_example_as_constants_earns_nothing(graded):
    """The docstring's answers are served for the worked example's shape and pass on the example (each
    test fails on the input drawn for it, which the same program meets next)."""
    tests = graded["answers_the_worked_example"].exercises[EX05.id].tests
    worked = {
        t.name: (t.category, t.message[:300])
        for t in tests
        if t.name.startswith("test_worked_example")
    }
    assert len(worked) == len(WORKED_ANSWERS), worked
    assert all(
        category == "failed" and " of x = [" in message for category, message in worked.values()
    ), worked
    others = {t.name: t.category for t in tests if t.name not in worked}
    assert set(others.values()) == {"not attempted"}, others
    assert graded["answers_the_worked_example"].exercises[EX05.id].score == 0
