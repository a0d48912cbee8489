"""Hostile submissions aimed at what the trusted harness runs for them: the student's traced programs.

The harness compiles, runs and times its own copy of a student's program, so a program is the student's
one way to make the harness do something. Two attacks, each graded for real (`grade_submission`, one
exercise, every module in a confined worker):

- Predicted inputs: the handout ships the tests' generators and seeds, so a program can be traced to
  look up answers computed at trace time for the inputs the tests would draw, and to skip the work the
  structure and speed rules measure. While grading, inputs come from a secret the worker never sees
  (grader.checks.inputs): the lookup misses, and no rule is earned.
- Work left running: a program that loops forever on one test's inputs and has the wrong output
  sharding fails that test at once, but jax dispatches asynchronously, so the loop went on in the
  harness and the next test was blamed. The harness now waits for the devices after every test: the
  test that started the loop is the one that times out, and the rest are graded as usual.
"""

from __future__ import annotations

import textwrap

import pytest

from grader.core.results import function_name
from grader.course import catalog
from grader.grading.collection import collect_tests
from grader.grading.compile_cache import CompileCache
from grader.grading.engine import grade_submission

EX05, EX08 = catalog.get("ex05"), catalog.get("ex08")
TEST_TIMEOUT = 10
TRACED_EX08 = (
    "test_compiled_step",
    "test_train_step_program",
    "test_train_step_shard_map_program",
    "test_train_step_speedup",
    "test_train_step_shard_map_speedup",
)


def source(exercise, stub: bool = False) -> str:
    path = exercise.stub_path() if stub else exercise.solution_path()
    return "".join(
        line for line in path.read_text().splitlines(keepends=True) if "### " not in line
    )


# ex08's step, looked up: its params, batch and targets are predicted with the tests' own generator
# (grader.checks.training.make_problem, which the worker can import: it only lacks the secret) for the
# traced shapes and the seeds the handout's tests use; the step is run at trace time and the program
# returns the stored answer, plus a reduction of the batch times zero so that the all-reduce the tests
# ask for is there. Direct calls raise the stub's error.
PREDICTS_THE_TRAINING_INPUTS = textwrap.dedent("""
    import numpy as _np
    from jax import numpy as _jnp
    from grader.checks.training import make_problem as _make_problem, sgd_step as _sgd_step

    def _looked_up(params, x, y, lr):
        if not isinstance(x, jax.core.Tracer):
            raise NotImplementedError("ex08: not attempted")
        sizes = (params[0][0].shape[0], *(W.shape[1] for W, _ in params))
        for seed in (5, 0, 1, 2, 3, 4, 6, 7, 8, 9):
            p, px, py = _make_problem(x.shape[0], sizes, seed)
            with jax.ensure_compile_time_eval():
                new, loss = _sgd_step(p, px, py, lr)
            new, loss = jax.tree.map(_np.asarray, new), _np.asarray(loss)
            break
        touch = 0 * _jnp.sum(x)   # an all-reduce over the batch's axis, and nothing else
        return jax.tree.map(lambda leaf: _jnp.asarray(leaf) + touch, new), _jnp.asarray(loss) + touch

    def train_step(params, x, y, lr):
        return _looked_up(params, x, y, lr)

    def train_step_shard_map(params, x, y, lr, mesh):
        return _looked_up(params, x, y, lr)
""")

# ex05's ring_shift, correct but for one test's input (8 devices, k = 9): there its program loops for
# ever and returns a replicated array, so the test's sharding check fails before it waits for values.
LEAVES_A_LOOP_RUNNING = textwrap.dedent("""
    _ring_shift = ring_shift

    def ring_shift(x, mesh, k: int = 1):
        out = _ring_shift(x, mesh, k)
        if mesh.shape["i"] == 8 and k == 9:
            # A float32 counter stops growing at 2**24, so it never reaches the bound (and the carried
            # array changes, so XLA cannot drop the loop).
            forever = jax.lax.while_loop(lambda c: c[0] < 1e30, lambda c: (c[0] + 1.0, c[1] * 1.0000001),
                                         (0.0, out))[1]
            return jax.reshard(forever, jax.NamedSharding(mesh, P()))
        return out
""")


def graded(tmp_path, exercise, text: str, test_timeout: float = TEST_TIMEOUT):
    folder = tmp_path / "submission"
    folder.mkdir()
    (folder / exercise.module_file).write_text(text)
    return grade_submission(
        folder,
        exercises=[exercise.id],
        test_timeout=test_timeout,
        cache=CompileCache(None),
        time_limit=600,
    )


@pytest.mark.slow
def test_a_program_that_looks_up_predicted_answers_earns_nothing(tmp_path):
    # Its trace-time training takes seconds in the worker: a limit that leaves it time to reach the checks.
    results = graded(
        tmp_path, EX08, source(EX08, stub=True) + PREDICTS_THE_TRAINING_INPUTS, test_timeout=60
    ).exercises[EX08.id]
    categories = {t.name: t.category for t in results.tests}
    traced = [name for name in categories if name.startswith(TRACED_EX08)]
    # every test of ex08 that runs the traced step (the course's count, not a number that goes stale)
    expected = [t for t in collect_tests([EX08]) if function_name(t.nodeid).startswith(TRACED_EX08)]
    assert len(traced) == len(expected) > 10, categories
    assert {categories[name] for name in traced} == {"failed"}, categories
    assert all("differs from the reference" in t.message for t in results.tests if t.name in traced)
    assert {c for name, c in categories.items() if name not in traced} == {"not attempted"}, (
        categories
    )
    assert results.score == 0


@pytest.mark.slow
def test_a_program_left_running_costs_the_test_that_started_it(tmp_path):
    results = graded(tmp_path, EX05, source(EX05) + LEAVES_A_LOOP_RUNNING)
    tests = results.exercises[EX05.id].tests
    lost = {t.name: (t.category, t.message) for t in tests if t.category != "passed"}
    assert list(lost) == ["test_ring_shift_any_k[8dev]"], lost
    assert lost["test_ring_shift_any_k[8dev]"][0] == "timeout", lost
    # The loop was abandoned with its test: the tests after it ran at their usual pace.
    assert max(t.duration for t in tests if t.name != "test_ring_shift_any_k[8dev]") < TEST_TIMEOUT
