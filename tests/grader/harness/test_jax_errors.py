"""The common JAX errors of the shard_map exercises, raised for real by a student-like module on the forced
host devices, reach the student with JAX's own message and, beside it, three lines in the course's words; an
error the course does not know gets none. Both routes: in-process (`shardlab check`) and rebuilt from a
worker's report (grading). The terminal, the page and a notebook's report say the explanation once for the
tests of an exercise that met the same error; a test case on its own (Gradescope, JUnit) carries it whole."""

import re
import textwrap
from pathlib import Path

import pytest

from grader.core.bounds import MESSAGE_CHARS
from grader.core.results import Category, TestResult
from grader.harness import jax_errors
from grader.harness.outcomes import categorize, student_explanation, student_message
from grader.reports.feedback_page import exercise_section, one_error
from grader.worker.error_reports import encode_error, remote_exception

MODULE = textwrap.dedent('''
    import jax, jax.numpy as jnp
    from jax.sharding import NamedSharding, PartitionSpec as P


    def split(mesh, shape, spec):
        return jax.device_put(jnp.ones(shape), NamedSharding(mesh, spec))


    def pmean_into_varying_accumulator(mesh):
        """ex17's accumulation: each microbatch's gradient pmean'd, then added to a per-device sum."""
        def per_device(xs):
            total = jax.lax.pcast(jnp.zeros(xs.shape[2:]), "data", to="varying")
            for i in range(xs.shape[0]):
                total = total + jax.lax.pmean(xs[i].sum(0), "data")
            return total
        xs = split(mesh, (2, 8, 3), P(None, "data"))
        return jax.shard_map(per_device, mesh=mesh, in_specs=P(None, "data"), out_specs=P())(xs)


    def pmean_into_varying_accumulators_of_a_pytree(mesh):
        """The same mistake on every leaf, traced: JAX says it once per leaf."""
        def per_device(xs):
            total = jax.lax.pcast([jnp.zeros(3)] * 3, "data", to="varying")
            for i in range(xs.shape[0]):
                total = [t + jax.lax.pmean(xs[i].sum(0), "data") for t in total]
            return total
        xs = split(mesh, (2, 8, 3), P(None, "data"))
        return jax.jit(jax.shard_map(per_device, mesh=mesh, in_specs=P(None, "data"), out_specs=P()))(xs)


    def moments_assumed_replicated(mesh):
        """ex17's Adam step: m arrives split over "data", the in_specs say replicated."""
        m = split(mesh, (8, 3), P("data"))
        return jax.shard_map(lambda m: 0.9 * m, mesh=mesh, in_specs=P(), out_specs=P())(m)


    def in_spec_too_long(mesh):
        x = split(mesh, (8, 3), P("data"))
        return jax.shard_map(lambda b: b, mesh=mesh, in_specs=P("data", None, None), out_specs=P("data"))(x)


    def loss_spec_too_long(mesh):
        x = split(mesh, (8, 3), P("data"))
        loss = lambda b: jax.lax.pmean(jnp.mean(b), "data")
        return jax.jit(jax.shard_map(loss, mesh=mesh, in_specs=P("data"), out_specs=P("data")))(x)


    def rows_not_divisible(mesh):
        x = jnp.ones((6, 3))
        return jax.shard_map(lambda b: b, mesh=mesh, in_specs=P("data"), out_specs=P("data"))(x)


    def placed_rows_not_divisible(mesh):
        return split(mesh, (6, 3), P("data"))


    def spec_names_another_axis(mesh):
        x = split(mesh, (8, 3), P("data"))
        return jax.shard_map(lambda b: b, mesh=mesh, in_specs=P("batch"), out_specs=P("batch"))(x)


    def sharding_names_another_axis(mesh):
        return split(mesh, (8, 3), P("batch"))


    def psum_over_another_axis(mesh):
        x = split(mesh, (8, 3), P("data"))
        body = lambda b: jax.lax.psum(b, "batch")
        return jax.jit(jax.shard_map(body, mesh=mesh, in_specs=P("data"), out_specs=P("data")))(x)


    def gather_over_another_axis(mesh):
        x = split(mesh, (8, 3), P("data"))
        body = lambda b: jax.lax.all_gather(b, "batch", tiled=True)
        return jax.jit(jax.shard_map(body, mesh=mesh, in_specs=P("data"), out_specs=P("data")))(x)


    def psum_outside_shard_map(mesh):
        return jax.lax.psum(jnp.ones(3), "data")


    def traced_psum_outside_shard_map(mesh):
        return jax.jit(lambda x: jax.lax.psum(x, "data"))(jnp.ones(3))


    def replicated_loop_carry(mesh):
        def per_device(b):
            return jax.lax.fori_loop(0, 2, lambda i, total: total + b.sum(0), jnp.zeros(3))
        x = split(mesh, (8, 3), P("data"))
        return jax.shard_map(per_device, mesh=mesh, in_specs=P("data"), out_specs=P("data"))(x)


    def unknown_jax_error(mesh):
        """A JAX error the course does not explain: psum over a tuple of axes in different states."""
        x = split(mesh, (8, 3), P("data"))
        body = lambda b: jax.lax.psum(b, ("data", "batch"))
        return jax.shard_map(body, mesh=mesh, in_specs=P("data"), out_specs=P("data"))(x)


    def own_bare_assert(mesh):
        x = jnp.ones(3)
        assert jax.lax.psum is None
''')

# Each function of MODULE, and the known error it raises (None: none the course explains).
CASES = {
    "pmean_into_varying_accumulator": "replication not inferred",
    "pmean_into_varying_accumulators_of_a_pytree": "replication not inferred",
    "moments_assumed_replicated": "in_specs do not match the argument",
    "in_spec_too_long": "spec longer than the array's rank",
    "loss_spec_too_long": "spec longer than the array's rank",
    "rows_not_divisible": "dimension not divisible by the mesh axis",
    "placed_rows_not_divisible": "dimension not divisible by the mesh axis",
    "spec_names_another_axis": "axis not in the mesh",
    "sharding_names_another_axis": "axis not in the mesh",
    "psum_over_another_axis": "collective axis not in the mesh",
    "gather_over_another_axis": "unbound axis name",
    "psum_outside_shard_map": "unbound axis name",
    "traced_psum_outside_shard_map": "unbound axis name",
    "replicated_loop_carry": "loop carry changes from replicated to per-device",
    "unknown_jax_error": None,
    "own_bare_assert": None,
}
# A robust part of JAX 0.10's own message for each, which the student still reads.
JAX_SAYS = {
    "replication not inferred": "out_specs which require replication which can't be statically inferred",
    "in_specs do not match the argument": "P(None, None) does not match the specs of the input: "
    "P('data', None)",
    "spec longer than the array's rank": "entry which is too long",
    "dimension not divisible by the mesh axis": "evenly divi",
    "axis not in the mesh": "batch",
    "collective axis not in the mesh": "raised at ex17_demo.py",
    "unbound axis name": "unbound axis name",
    "loop carry changes from replicated to per-device": "manual axis types do not match",
}
BY_NAME = {known.name: known for known in jax_errors.KNOWN_ERRORS}


@pytest.fixture(scope="module")
def student(tmp_path_factory):
    """MODULE as a student's exNN module in its folder: (its functions, the folder)."""
    folder = tmp_path_factory.mktemp("submission")
    module = folder / "ex17_demo.py"
    module.write_text(MODULE)
    namespace = {}
    exec(compile(MODULE, str(module), "exec"), namespace)
    return namespace, folder


@pytest.fixture(scope="module")
def mesh():
    from grader.checks import test_mesh

    return test_mesh((4,), ("data",), "explicit")


def raised(fn, *args) -> BaseException:
    try:
        fn(*args)
    except Exception as exc:  # noqa: BLE001 - the point is to catch what JAX raises
        return exc
    raise AssertionError(f"{fn.__name__} did not raise")


def rebuilt(exc: BaseException, folder: Path) -> BaseException:
    """`exc` as grading's harness sees it: reported by the worker, raised again (grader.worker)."""
    from grader.worker.request_loop import _student_frames

    return remote_exception(encode_error(exc, _student_frames(exc, folder / "ex17_demo.py")))


@pytest.mark.parametrize("function", CASES)
def test_each_common_error_is_explained_below_jaxs_message_on_both_routes(student, mesh, function):
    namespace, folder = student
    exc = raised(namespace[function], mesh)
    expected = BY_NAME.get(CASES[function])
    for route, seen in (("in-process", exc), ("worker", rebuilt(exc, folder))):
        assert categorize(seen, folder) is Category.ERROR, route
        message, explanation = student_message(seen, folder), student_explanation(seen, folder)
        assert message.startswith(f"{type(exc).__name__}"), (route, message)
        assert "raised at ex17_demo.py:" in message, (route, message)
        assert "What it means:" not in message, (route, message)
        if expected is None:
            assert explanation == "", (route, explanation)
            continue
        assert explanation == expected.explanation(), (route, explanation)
        assert JAX_SAYS[expected.name] in message, (route, message)


def test_every_known_error_is_raised_by_a_case():
    assert set(BY_NAME) == {name for name in CASES.values() if name}


@pytest.mark.parametrize("known", jax_errors.KNOWN_ERRORS, ids=lambda known: known.name)
def test_each_explanation_is_three_short_lines_in_plain_sentences(known):
    lines = known.explanation().splitlines()
    assert len(lines) == 3 and all(len(line) <= 110 for line in lines), lines
    for line in lines:
        assert line.rstrip().endswith((".", ")")), line
        # A sentence after a period starts with a capital.
        assert not re.search(r"\. [a-z]", line), line


def test_a_huge_jax_message_is_cut_to_its_first_lines_and_the_explanation_survives():
    jax_says = (
        "out_specs which require replication which can't be statically inferred\n"
        + "\n".join(f"{i}: " + "x" * 300 for i in range(200))
    )
    exc = remote_exception(
        {
            "type": "ValueError",
            "base": "ValueError",
            "message": jax_says,
            "frames": [{"file": "ex17_zero1.py", "line": 9, "function": "f", "code": "return x"}],
        }
    )
    message = student_message(exc)
    assert len(message) <= MESSAGE_CHARS
    assert message.startswith("ValueError: out_specs which require replication")
    assert "more lines of JAX's message cut" in message or "characters cut" in message
    assert message.endswith("raised at ex17_zero1.py:9 in f: return x")
    assert student_explanation(exc) == BY_NAME["replication not inferred"].explanation()


def test_a_line_jax_repeats_for_every_leaf_is_said_once(student, mesh):
    namespace, folder = student
    exc = raised(namespace["pmean_into_varying_accumulators_of_a_pytree"], mesh)
    repeated = "out_specs is P() which implies that the corresponding output value is replicated"
    assert str(exc).count(repeated) == 3
    message = student_message(rebuilt(exc, folder), folder)
    assert message.count(repeated) == 1 and "(said 3 times)" in message, message
    # JAX's last advice stays
    assert "check_vma=False argument" in message


def test_a_students_own_empty_assertion_or_error_is_not_explained():
    """The empty AssertionError is only JAX's when the student's line calls a collective."""
    for code in ("assert jax.lax.psum(x, 'data') is None", "check(x)"):
        exc = remote_exception(
            {
                "type": "AssertionError",
                "base": "AssertionError",
                "message": "",
                "frames": [{"file": "ex17_zero1.py", "line": 9, "function": "f", "code": code}],
            }
        )
        assert student_explanation(exc) == "", code
    own = ValueError("in_specs must be a PartitionSpec")
    assert jax_errors.known_error(own) is None


def result(name: str, message: str, explanation: str) -> TestResult:
    return TestResult(
        nodeid=f"tests/exercises/ex17_zero1_accumulation/test_visible.py::{name}",
        exercise="ex17_zero1_accumulation",
        hidden=False,
        weight=1.0,
        category=Category.ERROR,
        message=message,
        explanation=explanation,
        max_score=1.0,
    )


def graded(namespace, folder, mesh, function: str) -> tuple[str, str]:
    """The message and the explanation grading records for `function`'s error."""
    exc = rebuilt(raised(namespace[function], mesh), folder)
    return student_message(exc, folder), student_explanation(exc, folder)


def test_one_explained_error_that_stops_every_test_is_said_once_on_the_page(student, mesh):
    from grader.grading.results import ExerciseResult

    namespace, folder = student
    message, explanation = graded(namespace, folder, mesh, "pmean_into_varying_accumulator")
    tests = [result(f"test_{i}", message, explanation) for i in range(3)]
    assert one_error(tests) == message.strip()
    exercise = ExerciseResult(
        id="ex17_zero1_accumulation", title="ZeRO-1", max_score=3.0, tests=tests
    )
    page = str(exercise_section(exercise, "visible"))
    known = BY_NAME["replication not inferred"]
    assert page.count("What it means:") == 1 and page.count("Usual cause:") == 1
    assert known.meaning in page


def test_one_mistake_met_by_several_tests_is_explained_once_wherever_they_are_listed(student, mesh):
    """Two functions making the same mistake (their messages differ: their lines do), a third another: the
    terminal, the page and a notebook's report explain each error under the first test that met it and
    name that test under the later one; a test case read on its own (Gradescope, JUnit) carries it whole."""
    from rich.console import Console

    from grader.commands.student import ExerciseCheck, render_exercise
    from grader.course import catalog
    from grader.grading.results import ExerciseResult
    from grader.platforms.notebooks import CellResult
    from grader.reports.text import feedback

    namespace, folder = student
    first = graded(namespace, folder, mesh, "pmean_into_varying_accumulator")
    again = graded(namespace, folder, mesh, "pmean_into_varying_accumulators_of_a_pytree")
    other = graded(namespace, folder, mesh, "moments_assumed_replicated")
    assert first[0] != again[0] and first[1] == again[1] != other[1]
    tests = [
        result("test_sum", *first),
        result("test_adam", *other),
        result("test_tree", *again),
    ]
    pointer = "What this JAX error means is said under test_sum above."
    replication, in_specs = (
        BY_NAME["replication not inferred"],
        BY_NAME[CASES["moments_assumed_replicated"]],
    )

    console = Console(record=True, width=200)
    render_exercise(ExerciseCheck(catalog.get("ex17_zero1_accumulation"), tests, "hash"), console)
    page = str(
        exercise_section(
            ExerciseResult(
                id="ex17_zero1_accumulation", title="ZeRO-1", max_score=3.0, tests=tests
            ),
            "visible",
        )
    )
    notebook = CellResult(tests, points=3.0).report()
    for where, text in (
        ("terminal", console.export_text()),
        ("page", page),
        ("notebook", notebook),
    ):
        assert text.count(replication.meaning) == 1 and text.count(in_specs.meaning) == 1, where
        assert text.count("What it means:") == 2 and text.count(pointer) == 1, where
        # said under the first test that met it, the pointer under the later one
        assert text.index("test_sum") < text.index(replication.meaning) < text.index("test_adam"), (
            where
        )
        assert text.index("test_tree") < text.index(pointer), where
    for test in tests:
        assert test.explanation in feedback(test) and pointer not in feedback(test)
