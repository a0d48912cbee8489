"""The nbgrader course: notebooks built from the references and the tests, the in-kernel test runner,
and (slow) the real nbgrader pipeline on a course of two exercises: generate_assignment, autograde of a
reference, an untouched stub and a partly broken submission, generate_feedback and export."""

import ast
import csv
import html
import os
import re
import subprocess
import sys
import time

import nbformat
import pytest
from nbgrader.api import Gradebook
from nbgrader.nbgraderformat import MetadataValidator
from traitlets.config.loader import PyFileConfigLoader

from grader.core.results import TestResult, function_id
from grader.course import catalog
from grader.grading.collection import collect_tests
from grader.platforms import notebooks
from grader.platforms.nbgrader_course import (
    NOISE_PATTERN,
    HideHiddenTestCode,
    assignments,
    build_course,
    parse_groups,
)

# its module-scoped fixture does the heavy work once
pytestmark = pytest.mark.xdist_group("test_nbgrader")

EX01, EX04 = catalog.get("ex01_meshes"), catalog.get("ex04_sharded_layer")
EX09, EX12 = catalog.get("ex09_fsdp"), catalog.get("ex12_multi_controller")
EXERCISES = (EX01, EX04, EX09, EX12)  # built into notebooks and checked here
# Run through real nbgrader (slow: a kernel per notebook). ex12's test cells run the notebook's code
# in processes of their own (grader.platforms.notebooks.notebook_module).
AUTOGRADED = (EX09, EX12)
# The function the "partial" student leaves as a stub, and how the tests reach it (ex12's through a check).
BROKEN = (EX12, "barrier", "check.barrier(")
GRADE_ID = re.compile(r"[A-Za-z0-9_-]+")
OWN_TOOLS = os.path.dirname(sys.executable)  # the venv's bin/, where nbgrader's `alembic` is


def unactivated() -> dict[str, str]:
    """This environment as a user's who runs the venv's nbgrader or shardlab without activating the venv:
    its bin/ not on PATH (.ci/run runs the suite so, as a fresh machine would)."""
    path = [
        entry
        for entry in os.environ.get("PATH", os.defpath).split(os.pathsep)
        if entry != OWN_TOOLS
    ]
    return dict(os.environ) | {"PATH": os.pathsep.join(path)}


@pytest.fixture(scope="module")
def collected():
    return collect_tests(list(EXERCISES))


@pytest.fixture(scope="module")
def built(collected):
    return {e.id: notebooks.exercise_notebook(e, collected) for e in EXERCISES}


def cells_of(notebook, *roles):
    return [c for c in notebook.cells if notebooks.role_of(c)[0] in roles]


def body(cell) -> str:
    """A test cell's code, without its magic line."""
    return cell.source.split("\n", 1)[1]


def module_from_cells(notebook) -> str:
    return "\n\n\n".join(c.source for c in cells_of(notebook, "given", "solution"))


def solution_lines(exercise) -> set[str]:
    """The lines inside the reference's solution blocks."""
    inside, found = False, set()
    for line in exercise.solution_path().read_text().splitlines():
        if line.strip() in ("### BEGIN SOLUTION", "### END SOLUTION"):
            inside = line.strip() == "### BEGIN SOLUTION"
        elif inside and line.strip():
            found.add(line.strip())
    return found


def hidden_lines(exercise) -> set[str]:
    """Lines of the hidden tests that appear nowhere a student may look (visible tests, conftest, reference)."""
    public = "\n".join(
        p.read_text() for p in exercise.tests_dir().glob("*.py") if p.name != "test_hidden.py"
    )
    public += exercise.solution_path().read_text()
    return {
        line.strip()
        for line in (exercise.tests_dir() / "test_hidden.py").read_text().splitlines()
        if len(line.strip()) > 12 and line.strip() not in public
    }  # not even as part of a public line


def calls(exercise, function, *also) -> set[str]:
    """Grade ids of the test cells whose test function calls `function` of the implementation (or
    mentions one of `also`)."""
    found = set()
    for file, role in (("test_visible.py", "test"), ("test_hidden.py", "hidden")):
        parts = notebooks.test_file_parts((exercise.tests_dir() / file).read_text())
        found |= {
            notebooks.grade_id(exercise, role, name)
            for name, code in parts.functions.items()
            if any(token in code for token in (f"impl.{function}(", *also))
        }
    return found


# ---- the notebooks ---------------------------------------------------------------------------------


@pytest.mark.parametrize("exercise", EXERCISES, ids=lambda e: e.id)
def test_notebook_is_valid_for_nbformat_and_nbgrader(built, exercise):
    notebook = built[exercise.id]
    nbformat.validate(notebook)
    MetadataValidator().validate_nb(notebook)
    assert all(c.metadata.nbgrader["schema_version"] == 3 for c in notebook.cells)


@pytest.mark.parametrize("exercise", EXERCISES, ids=lambda e: e.id)
def test_grade_ids_are_unique_well_formed_and_in_order(built, exercise):
    notebook = built[exercise.id]
    ids = [c.metadata.nbgrader["grade_id"] for c in notebook.cells]
    assert len(ids) == len(set(ids)) and all(GRADE_ID.fullmatch(i) for i in ids)
    assert all(i.startswith(f"{exercise.id}--") for i in ids)
    roles = [notebooks.role_of(c)[0] for c in notebook.cells]
    assert roles[:3] == ["setup", "text", "given"] and roles.count("tests-setup") == 1
    order = ["setup", "text", "given", "solution", "tests-setup", "test", "hidden"]
    first = {role: roles.index(role) for role in order}
    assert (
        max(i for i, r in enumerate(roles) if r in ("given", "solution"))
        < first["tests-setup"]
        < first["test"]
    )
    assert max(i for i, r in enumerate(roles) if r == "test") < first["hidden"]
    solutions = [c for c in notebook.cells if c.metadata.nbgrader["solution"]]
    assert {notebooks.role_of(c)[0] for c in solutions} == {"solution"}
    assert all(c.metadata.nbgrader["locked"] for c in notebook.cells if c not in solutions)


@pytest.mark.parametrize("exercise", EXERCISES, ids=lambda e: e.id)
def test_points_add_up_to_the_catalog_points(built, collected, exercise):
    graded = [c for c in built[exercise.id].cells if c.metadata.nbgrader["grade"]]
    assert {notebooks.role_of(c)[0] for c in graded} == {"test", "hidden"}
    assert sum(c.metadata.nbgrader["points"] for c in graded) == pytest.approx(exercise.points)
    functions = {function_id(t.nodeid) for t in collected if t.exercise == exercise.id}
    assert len(graded) == len(functions)  # one cell per test function
    for cell in graded:
        assert f"--points {cell.metadata.nbgrader['points']!r}" in cell.source.split("\n", 1)[0]


def test_setup_cell_forces_the_devices_before_anything_imports_jax(built):
    for notebook in built.values():
        setup = notebook.cells[0]
        assert notebooks.role_of(setup)[0] == "setup"
        code = [line for line in setup.source.splitlines() if line and not line.startswith("#")]
        assert code[1] == "force_host_devices()" and "import jax" not in setup.source


@pytest.mark.parametrize("exercise", EXERCISES, ids=lambda e: e.id)
def test_given_and_solution_cells_are_the_reference_module(built, exercise):
    source = module_from_cells(built[exercise.id])
    reference = ast.parse(exercise.solution_path().read_text())
    reference.body = reference.body[1:]  # the docstring is the text cell
    assert ast.dump(ast.parse(source)) == ast.dump(reference)
    assert built[exercise.id].cells[1].source == ast.get_docstring(
        ast.parse(exercise.solution_path().read_text())
    )


@pytest.mark.parametrize("exercise", EXERCISES, ids=lambda e: e.id)
def test_hidden_code_is_only_inside_hidden_blocks(built, exercise):
    secret = hidden_lines(exercise)
    assert secret, "the check needs lines of the hidden tests that students never see"
    for cell in built[exercise.id].cells:
        kept = cell.source
        if notebooks.role_of(cell)[0] == "hidden":
            head, block = body(cell).split(notebooks.HIDDEN_BEGIN + "\n", 1)
            assert head == "" and block.endswith(notebooks.HIDDEN_END)
            kept = cell.source.split("\n", 1)[0]
        assert not {line.strip() for line in kept.splitlines()} & secret, notebooks.role_of(cell)


def test_test_cells_carry_the_test_functions_pytest_runs(built):
    notebook = built[EX04.id]
    sections = notebooks.split_sections(body(cells_of(notebook, "tests-setup")[0]))
    assert sections["conftest.py"] == (EX04.tests_dir() / "conftest.py").read_text()
    assert "SPEED_SHAPES = dict(n_data=8192" in sections["test_visible.py"]
    assert list(notebooks.split_sections(body(cells_of(built[EX01.id], "tests-setup")[0]))) == [
        *(path.name for path in EX01.support_files()),
        "test_visible.py",
    ]
    for file, role in (("test_visible.py", "test"), ("test_hidden.py", "hidden")):
        parts = notebooks.test_file_parts((EX04.tests_dir() / file).read_text())
        cells = {notebooks.role_of(c)[1]: c for c in cells_of(notebook, role)}
        assert list(cells) == list(parts.functions)
        for name, code in parts.functions.items():
            assert code in body(cells[name])
    speed = cells_of(notebook, "hidden")[-2]
    assert (
        '@pytest.mark.rules("speedup", "values", functions=("layer_shard_map",))\n'
        "@pytest.mark.points(2)\n"
        "def test_layer_shard_map_speedup_over_replicated"
    ) in speed.source


# ---- the runner, in this process -------------------------------------------------------------------


def grading_cells(notebook) -> dict:
    """Run the notebook's tests-setup cell here; its test cells by function name."""
    setup = cells_of(notebook, "tests-setup")[0]
    notebooks.tests_setup_magic(setup.source.split("\n", 1)[0].split(" ", 1)[1], body(setup))
    return {notebooks.role_of(c)[1]: c for c in cells_of(notebook, "test", "hidden")}


@pytest.fixture
def ex01_tests(built):
    return grading_cells(built[EX01.id])


def run_cell(cell, namespace):
    return notebooks.test_magic(
        cell.source.split("\n", 1)[0].split(" ", 1)[1], body(cell), namespace
    )


def reference_namespace(exercise):
    namespace = {}
    exec(
        compile(exercise.solution_path().read_text(), str(exercise.solution_path()), "exec"),
        namespace,
    )
    return namespace


def test_the_module_rebuilt_from_cells_passes_the_visible_tests(built):
    namespace = {}
    exec(compile(module_from_cells(built[EX04.id]), "ex04_from_cells.py", "exec"), namespace)
    for name, cell in grading_cells(built[EX04.id]).items():
        if notebooks.role_of(cell)[0] == "test":
            assert run_cell(cell, namespace) == cell.metadata.nbgrader["points"], name


def test_runner_gives_partial_credit_by_case_and_runs_again_and_again(ex01_tests, capsys):
    """make_data_mesh right on 8 devices only: one of the three cases of test_data_mesh_sizes passes."""
    namespace = reference_namespace(EX01)
    right = namespace["make_data_mesh"]
    namespace["make_data_mesh"] = lambda n, name="data": right(n if n == 8 else 1, name)
    cell = ex01_tests["test_data_mesh_sizes"]
    points = cell.metadata.nbgrader["points"]
    for _ in range(2):  # pytest runs again in the same process, on fresh modules
        assert run_cell(cell, namespace) == pytest.approx(points / 3)
    report = capsys.readouterr().out
    assert "test_data_mesh_sizes[8dev]: passed" in report
    assert (
        "test_data_mesh_sizes[2dev]: failed\n    make_data_mesh(2): expected the axis sizes"
        in report
    )
    namespace["make_data_mesh"] = right
    assert run_cell(cell, namespace) == points


def test_runner_raises_when_nothing_passed_and_skips_released_hidden_cells(ex01_tests, capsys):
    def place(x, mesh, spec):
        raise NotImplementedError()

    namespace = reference_namespace(EX01) | {"place": place}
    with pytest.raises(notebooks.TestCellFailed) as failure:
        run_cell(ex01_tests["test_place_rows_and_columns"], namespace)
    assert (
        "test_place_rows_and_columns: not attempted\n    not attempted (NotImplementedError)"
        in str(failure.value)
    )
    assert failure.value._render_traceback_()[1] == str(failure.value)  # IPython shows no code
    released = ex01_tests["test_place_layouts"].source.split("\n", 1)[0] + "\n"
    assert run_cell(nbformat.v4.new_code_cell(released), namespace) is None
    assert (
        "test_place_layouts: hidden test, run when your notebook is graded"
        in capsys.readouterr().out
    )


def cases(categories: list[str]) -> list[TestResult]:
    return [
        TestResult(nodeid=f"t::f[{i}]", exercise=None, hidden=False, weight=0.1, category=c)
        for i, c in enumerate(categories)
    ]


def test_cell_result_earns_by_weight_and_never_more_than_the_cell():
    result = notebooks.CellResult(cases(["passed"] * 9 + ["failed"]), points=1.5)
    assert result.earned == pytest.approx(1.35) and result.earned <= 1.5
    result = notebooks.CellResult(cases(["passed"] * 10), points=1.5)
    assert result.earned == 1.5  # exactly: nbgrader refuses partial credit above the cell's points


# ---- the course folder and its configuration -------------------------------------------------------


def test_groups_put_exercises_into_one_assignment():
    assert parse_groups(["lab1=ex01,ex04_sharded_layer", "lab2=ex03"]) == {
        "lab1": [EX01, EX04],
        "lab2": [catalog.get("ex03")],
    }
    plan = assignments(list(catalog.EXERCISES), {"lab1": [EX04, EX01]})
    assert plan == {
        "lab1": [EX01, EX04],
        **{e.id: [e] for e in catalog.EXERCISES if e not in (EX01, EX04)},
    }
    assert list(plan)[:3] == ["lab1", "ex02_sharding_properties", "ex03_computation_follows_data"]
    for bad in (["lab1"], ["lab 1=ex01"], ["lab1="], ["lab1=ex99"], ["a=ex01", "a=ex02"]):
        with pytest.raises((ValueError, KeyError)):
            parse_groups(bad)
    with pytest.raises(ValueError, match="more than one group"):
        assignments([EX01], {"a": [EX01], "b": [EX01]})


def test_build_writes_the_course_and_a_config_nbgrader_reads(tmp_path, collected):
    written = build_course(
        tmp_path, exercises=["ex01"], groups={"lab": [EX04]}, course_id="jax101", tests=collected
    )
    assert written == [
        tmp_path / "source/ex01_meshes/ex01_meshes.ipynb",
        tmp_path / "source/lab/ex04_sharded_layer.ipynb",
        tmp_path / "nbgrader_config.py",
    ]
    config = PyFileConfigLoader("nbgrader_config.py", str(tmp_path)).load_config()
    assert config.CourseDirectory.course_id == "jax101"
    assert config.CourseDirectory.db_url == f"sqlite:///{tmp_path / 'gradebook.db'}"
    assert config.Execute.timeout >= 600 and config.Execute.interrupt_on_timeout
    assert config.IgnorePattern.enabled and config.IgnorePattern.pattern == NOISE_PATTERN
    assert config.ClearSolutions.code_stub == {
        "python": "# YOUR CODE HERE\nraise NotImplementedError()"
    }
    assert (
        "grader.platforms.nbgrader_course.HideHiddenTestCode"
        in config.GenerateFeedback.preprocessors
    )
    (tmp_path / "nbgrader_config_local.py").write_text("c.Execute.timeout = 900\n")
    assert (
        PyFileConfigLoader("nbgrader_config.py", str(tmp_path)).load_config().Execute.timeout == 900
    )


@pytest.mark.parametrize(
    "line, noise",
    [
        ("E0000 00:00:1763800000.123456   12345 cpu_client.cc:123] something", True),
        (
            "WARNING: All log messages before absl::InitializeLog() is called are written to STDERR",
            True,
        ),
        ("WARNING:absl:a message", True),
        ("[Gloo] Rank 0 is connected to 1 peer ranks", True),
        ("Traceback (most recent call last):", False),
        ("my own debugging output", False),
    ],
)
def test_noise_pattern_drops_jax_warnings_only(line, noise):
    assert bool(re.search(NOISE_PATTERN, f"first line\n{line}\n")) is noise


def test_feedback_preprocessor_hides_hidden_code_and_keeps_outputs(built):
    notebook = nbformat.from_dict(built[EX04.id])
    output = nbformat.v4.new_output(
        "stream", name="stdout", text="test_layer_auto_values[2dev]: passed\n"
    )
    for cell in cells_of(notebook, "test", "hidden"):
        cell.outputs = [output]
    HideHiddenTestCode().preprocess(notebook, {})
    for cell in cells_of(notebook, "hidden"):
        assert cell.source == f"# hidden test: {notebooks.role_of(cell)[1]} (code not shown)"
        assert cell.outputs == [output]
    assert all(c.source.startswith("%%shardlab_test") for c in cells_of(notebook, "test"))


# ---- slow: real nbgrader on a real gradebook -------------------------------------------------------


def nbgrader(course, *args, timeout=900):
    start = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-m", "nbgrader", *args],
        cwd=course,
        capture_output=True,
        text=True,
        timeout=timeout,
        env=unactivated(),
    )  # the course's config finds alembic
    assert done.returncode == 0, (
        f"nbgrader {' '.join(args)} failed:\n{done.stdout[-3000:]}\n{done.stderr[-5000:]}"
    )
    return time.monotonic() - start


def with_stub(notebook, exercise, function):
    notebook = nbformat.from_dict(notebook)
    for cell in notebook.cells:
        if cell.metadata.nbgrader["grade_id"] == notebooks.grade_id(exercise, "solution", function):
            cell.source = f"def {function}(*args, **kwargs):\n    # YOUR CODE HERE\n    raise NotImplementedError()"
            return notebook
    raise LookupError(function)


@pytest.fixture(scope="module")
def course(tmp_path_factory, collected):
    """The course built, released, and three students autograded: ref (the source notebooks), stub (the
    released notebooks untouched) and partial (ex08 with one function left as a stub)."""
    root = tmp_path_factory.mktemp("course")
    build_course(root, exercises=[e.id for e in AUTOGRADED], tests=collected)
    for exercise in AUTOGRADED:
        nbgrader(root, "generate_assignment", exercise.id, "--force")
    source = {e.id: nbformat.read(root / "source" / e.id / f"{e.id}.ipynb", 4) for e in AUTOGRADED}
    released = {
        e.id: nbformat.read(root / "release" / e.id / f"{e.id}.ipynb", 4) for e in AUTOGRADED
    }
    students = {
        "ref": source,
        "stub": released,
        "partial": {BROKEN[0].id: with_stub(source[BROKEN[0].id], *BROKEN[:2])},
    }
    seconds = {}
    for student, notebooks_of in students.items():
        for exercise_id, notebook in notebooks_of.items():
            folder = root / "submitted" / student / exercise_id
            folder.mkdir(parents=True)
            nbformat.write(notebook, folder / f"{exercise_id}.ipynb")
            seconds[(student, exercise_id)] = nbgrader(
                root, "autograde", exercise_id, "--student", student, "--force"
            )
    return {"root": root, "source": source, "released": released, "seconds": seconds}


def gradebook_scores(root) -> dict[tuple[str, str], tuple[float, float]]:
    with Gradebook(f"sqlite:///{root / 'gradebook.db'}", "shardlab") as gradebook:
        return {
            (s.student.id, s.assignment.name): (s.score, s.max_score)
            for assignment in gradebook.assignments
            for s in assignment.submissions
        }


@pytest.mark.slow
def test_released_notebooks_have_no_solutions_and_no_hidden_tests(course):
    for exercise in AUTOGRADED:
        released = "\n".join(c.source for c in course["released"][exercise.id].cells)
        source_text = "\n".join(
            c.source
            for c in course["source"][exercise.id].cells
            if notebooks.role_of(c)[0] != "solution"
        )
        answers = {line for line in solution_lines(exercise) if line not in source_text}
        assert answers and not [line for line in answers if line in released]
        assert hidden_lines(exercise) and not [
            line for line in hidden_lines(exercise) if line in released
        ]
        for name, code in notebooks.test_file_parts(
            (exercise.tests_dir() / "test_visible.py").read_text()
        ).functions.items():
            assert code in released, name
        assert released.count("raise NotImplementedError()") == len(
            cells_of(course["released"][exercise.id], "solution")
        )


@pytest.mark.slow
def test_autograde_gives_full_none_and_exactly_the_partial_score(course, capsys):
    scores = gradebook_scores(course["root"])
    for exercise in AUTOGRADED:
        assert scores[("ref", exercise.id)] == pytest.approx((exercise.points, exercise.points))
        assert scores[("stub", exercise.id)] == (0.0, pytest.approx(exercise.points))
    exercise = BROKEN[0]
    broken = calls(*BROKEN)
    assert len(broken) == 2  # 1 visible, 1 hidden
    lost = sum(
        c.metadata.nbgrader["points"]
        for c in course["source"][exercise.id].cells
        if c.metadata.nbgrader["grade_id"] in broken
    )
    assert scores[("partial", exercise.id)][0] == pytest.approx(exercise.points - lost)
    # The reference's every test cell shows its points as its value, and nothing on stderr.
    for exercise in AUTOGRADED:
        graded = nbformat.read(
            course["root"] / "autograded/ref" / exercise.id / f"{exercise.id}.ipynb", 4
        )
        for cell in cells_of(graded, "test", "hidden"):
            kinds = [o.output_type if o.output_type != "stream" else o.name for o in cell.outputs]
            # A loaded kernel may send one print in two stdout messages: what matters is no stderr.
            kinds = [k for i, k in enumerate(kinds) if i == 0 or k != kinds[i - 1]]
            assert kinds == ["stdout", "execute_result"], (
                cell.metadata.nbgrader["grade_id"],
                cell.outputs,
            )
            assert float(cell.outputs[-1].data["text/plain"]) == cell.metadata.nbgrader["points"]
    with capsys.disabled():
        print(
            "\nnbgrader autograde, seconds per notebook (nbgrader's own start included): "
            + ", ".join(
                f"{student}/{exercise_id} {s:.1f}"
                for (student, exercise_id), s in course["seconds"].items()
            )
        )


@pytest.mark.slow
def test_feedback_hides_hidden_test_code_and_export_has_the_scores(course):
    root = course["root"]
    for exercise in AUTOGRADED:
        nbgrader(root, "generate_feedback", exercise.id, "--force")
    nbgrader(root, "export")
    with open(root / "grades.csv") as f:
        rows = {(r["student_id"], r["assignment"]): float(r["score"]) for r in csv.DictReader(f)}
    scores = gradebook_scores(root)
    assert {key: rows[key] for key in scores} == {
        key: pytest.approx(score) for key, (score, _) in scores.items()
    }
    assert rows[("ref", EX09.id)] == pytest.approx(EX09.points) and rows[("stub", EX09.id)] == 0
    assert rows[("partial", EX09.id)] == 0  # no submission, no score

    exercise = BROKEN[0]
    autograded = (root / "autograded/partial" / exercise.id / f"{exercise.id}.ipynb").read_text()
    page = (root / "feedback/partial" / exercise.id / f"{exercise.id}.html").read_text()
    text = html.unescape(re.sub(r"<[^>]+>", "", page))
    secret = hidden_lines(exercise)
    # nbgrader's own feedback would show them
    assert [line for line in secret if line in autograded]
    assert not [line for line in secret if line in text]
    for name in notebooks.test_file_parts(
        (exercise.tests_dir() / "test_hidden.py").read_text()
    ).functions:
        assert f"# hidden test: {name} (code not shown)" in text
    assert (
        "test_barrier_4_processes: not attempted\n    not attempted (NotImplementedError)" in text
    )
    assert "test_global_sum_4_processes: passed" in text


@pytest.mark.slow
def test_the_fast_path_records_the_grades_autograde_gives(course, tmp_path, capsys):
    """`shardlab grade` on the same submitted notebooks, recorded through nbgrader's API under other
    student ids, gives every test cell the auto score nbgrader autograde gave it. (With --timing=skip:
    a skipped speed test keeps its points, as autograde's enforced one earns them for these three.)"""
    root = course["root"]
    start = time.monotonic()
    # The three at once, as a batch would record them: each writes its own student's rows.
    running = {
        student: subprocess.Popen(
            [
                sys.executable,
                "-m",
                "grader.cli",
                "grade",
                str(root / "submitted" / student),
                "--out",
                str(tmp_path / student),
                "--gradebook",
                f"sqlite:///{root / 'gradebook.db'}",
                "--student",
                f"fast-{student}",
                "--quiet",
                "--timing=skip",
                *(f"--exercise={e.id}" for e in AUTOGRADED),
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for student in ("ref", "stub", "partial")
    }
    for student, process in running.items():
        _, stderr = process.communicate(timeout=900)
        assert process.returncode == 0 and "gradebook" not in stderr, f"{student}: {stderr[-3000:]}"
    seconds = time.monotonic() - start
    with Gradebook(f"sqlite:///{root / 'gradebook.db'}", "shardlab") as gradebook:
        cells = {}
        for assignment in gradebook.assignments:
            for submission in assignment.submissions:
                for notebook in submission.notebooks:
                    for grade in notebook.grades:
                        cells[(submission.student.id, notebook.name, grade.name)] = grade.auto_score
    compared = 0
    for (student, notebook, cell), score in cells.items():
        if student in ("ref", "stub", "partial"):
            assert cells[(f"fast-{student}", notebook, cell)] == pytest.approx(score), (
                student,
                notebook,
                cell,
            )
            compared += 1
    assert compared == sum(1 for key in cells if not key[0].startswith("fast-"))
    # never submitted
    assert not [key for key in cells if key[0] == "fast-partial" and key[1] == EX09.id]
    with capsys.disabled():
        print(f"\nfast path (shardlab grade --gradebook), three students at once: {seconds:.1f} s")


@pytest.mark.slow
def test_a_new_gradebook_is_made_without_the_venv_activated(tmp_path):
    """`.venv/bin/shardlab grade --gradebook` into a gradebook that does not exist yet: nbgrader makes it and runs
    `alembic` by name, which shardlab finds beside its own Python, the venv not activated."""
    assert not [
        entry
        for entry in unactivated()["PATH"].split(os.pathsep)
        if os.path.isfile(os.path.join(entry, "alembic"))
    ], "an alembic outside the venv proves nothing"
    submission = tmp_path / "submission"
    submission.mkdir()
    (submission / EX01.module_file).write_text(EX01.solution_path().read_text())
    database = tmp_path / "new" / "gradebook.db"
    database.parent.mkdir()
    done = subprocess.run(
        [
            os.path.join(OWN_TOOLS, "shardlab"),
            "grade",
            str(submission),
            "--out",
            str(tmp_path / "out"),
            "--gradebook",
            f"sqlite:///{database}",
            "--student",
            "alice",
            "--exercise",
            EX01.id,
            "--timing=skip",
            "--quiet",
        ],
        env=unactivated(),
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    # The gradebook was made (its alembic version set), and it has no notebook for ex01 until generate_assignment.
    assert f"gradebook: {EX01.id}: no such notebook in the gradebook" in done.stderr, done.stderr[
        -3000:
    ]
    with Gradebook(f"sqlite:///{database}") as gradebook:
        assert [student.id for student in gradebook.students] == ["alice"]
