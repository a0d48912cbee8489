"""`shardlab check` and `shardlab list` on small temporary trees: real pytest runs, rendered text."""

import json
import re
import shutil

import pytest
from rich.console import Console

from grader.commands import student
from grader.course import catalog, paths

# its module-scoped fixture does the heavy work once
pytestmark = pytest.mark.xdist_group("test_student")

EX01, EX02 = catalog.get("ex01"), catalog.get("ex02")


def console(width: int = 120) -> Console:
    return Console(record=True, width=width)


def make_tree(root, *, reference=(), stub=()):
    """A submission folder holding copies of reference and stub modules (the others are missing)."""
    folder = root / "work"
    folder.mkdir()
    for exercise in reference:
        shutil.copy(exercise.solution_path(), folder)
    for exercise in stub:
        shutil.copy(exercise.stub_path(), folder)
    return folder


def run_check(folder, exercise=None, *, all_exercises=False, width=120):
    out = console(width)
    code = student.check_command(exercise, impl=folder, all_exercises=all_exercises, console=out)
    return code, out.export_text()


@pytest.fixture(scope="module")
def tree(tmp_path_factory):
    """ex01 solved (the reference), ex02 untouched (its stub), ex03 and ex04 missing."""
    return make_tree(tmp_path_factory.mktemp("check"), reference=[EX01], stub=[EX02])


@pytest.fixture(scope="module")
def checked_ex01(tree):
    return run_check(tree, "ex01")


@pytest.fixture(scope="module")
def checked_next(tree, checked_ex01):
    """After ex01's check: ex01 passed and is unchanged, so it is not run again."""
    return run_check(tree)


@pytest.fixture(scope="module")
def checked_all(tree):
    return run_check(tree, all_exercises=True)


def test_check_passing_exercise_exits_0(checked_ex01):
    code, text = checked_ex01
    assert code == 0
    for name in (
        "test_make_mesh_2x4",
        "test_make_data_mesh",
        "test_place_rows_and_columns",
        "test_shard_table_rows",
    ):
        assert f"  ✓ {name}\n" in text
    assert re.search(
        r"✓ ex01_meshes: visible: [0-9.]+ of 10 points checked, all pass \(4 tests\)", text
    )
    assert "hidden tests check more: other mesh sizes, other inputs and more cases." in text


def test_check_stops_at_the_next_pending_exercise(checked_next):
    code, text = checked_next
    assert code == 1
    assert re.search(r"✓ ex01_meshes: passed at its last check \(.+\), unchanged since", text)
    assert "Next: ex02_sharding_properties (What a sharding says, 10 points)" in text
    assert "Hint: A dimension split over several mesh axes" in text
    assert "ex03" not in text  # stopped at ex02


def test_check_shows_stub_tests_as_not_attempted_with_brackets_intact(checked_next):
    _, text = checked_next
    assert "  ○ test_describe_rows_on_2x4  not attempted: ex02: describe\n" in text
    # pytest ids look like rich markup; they must come through as written
    assert (
        "○ test_shard_shape_examples[global_shape0-mesh_shape0-spec0-want0]  not attempted" in text
    )
    assert re.search(
        r"✗ ex02_sharding_properties: visible: [0-9.]+ of 10 points checked, 0 pass \(0 of (\d+) tests "
        r"pass: \1 not attempted\)",
        text,
    )


def test_check_all_runs_every_exercise_and_summarizes(checked_all):
    code, text = checked_all
    assert code == 1
    assert re.search(r"ex04_sharded_layer.py is missing: \d+ tests not attempted", text)
    summary = text[re.search(r"^exercise +visible tests", text, re.MULTILINE).start() :]
    assert re.search(
        r"✓ ex01_meshes +visible: [0-9.]+ of 10 points checked, all pass \(4 tests\)", summary
    )
    assert re.search(
        r"✗ ex03_computation_follows_data +visible: [0-9.]+ of 15 points checked, 0 pass \(0 of (\d+) "
        r"tests pass: \1 not attempted\)",
        summary,
    )
    assert f"1 of {len(catalog.EXERCISES)} exercises pass their visible tests." in summary
    assert "Next: ex02_sharding_properties" in summary


def test_check_records_outcome_and_hash(tree, checked_all):
    recorded = json.loads(student.status_file(tree).read_text())[tree.name]
    assert student.status_file(tree) == tree.parent / ".shardlab" / "status.json"
    assert recorded["ex01_meshes"]["ok"] is True
    assert recorded["ex01_meshes"]["sha256"] == student.module_hash(tree / EX01.module_file)
    assert list(recorded["ex02_sharding_properties"]["categories"]) == ["not attempted"]
    assert recorded["ex04_sharded_layer"]["sha256"] is None


def test_sharding_failure_keeps_its_layout(tmp_path):
    folder = make_tree(tmp_path)
    wrong = (
        EX01.solution_path()
        .read_text()
        .replace(
            "return jax.device_put(x, NamedSharding(mesh, spec))",
            "return jax.device_put(x, NamedSharding(mesh, jax.P()))   # forgot the spec",
        )
    )
    (folder / EX01.module_file).write_text(wrong)
    out = console(width=40)  # narrower than the grid: it must not be wrapped
    report = student.check("ex01", impl=folder, record=False)
    student.render_check(report, out)
    lines = out.export_text().splitlines()
    failed = next(t for t in report.checks[0].tests if t.category == "failed")
    assert "+---" in failed.message and "expected P('x', 'y')" in failed.message
    at = lines.index("  ✗ test_place_rows_and_columns  failed")
    expected = [("      " + line).rstrip() for line in failed.message.splitlines()]
    assert [line.rstrip() for line in lines[at + 1 : at + 1 + len(expected)]] == expected
    assert max(map(len, expected)) > 40
    assert report.exit_code == 1


def test_check_reports_a_crashed_run(tmp_path):
    folder = make_tree(tmp_path)
    (folder / EX01.module_file).write_text("import os\nos._exit(3)\n")
    code, text = run_check(folder, "ex01")
    assert code == 1
    assert "The tests stopped before they finished" in text
    assert "✗ ex01_meshes: the test run stopped before it finished" in text


@pytest.mark.parametrize(
    "exercise, all_exercises, impl, says",
    [
        ("ex99", False, None, "no exercise 'ex99' in the catalog (known: ex01_meshes,"),
        ("ex01", True, None, "give an exercise or --all, not both"),
        (None, False, "nowhere", "does not exist"),
    ],
)
def test_check_usage_errors_exit_2(tmp_path, exercise, all_exercises, impl, says):
    out = console()
    code = student.check_command(
        exercise,
        impl=tmp_path / impl if impl else tmp_path,
        all_exercises=all_exercises,
        console=out,
    )
    assert code == 2
    assert says in out.export_text().replace("\n", " ")


MISSING = {e.id: "missing" for e in catalog.EXERCISES}


def statuses(folder, **kwargs):
    return {e.id: s.value for e, s in student.exercise_statuses(impl=folder, **kwargs)}


def test_list_statuses_follow_the_files_and_the_last_check(tmp_path):
    folder = make_tree(tmp_path, reference=[EX01], stub=[EX02, catalog.get("ex03")])
    ex03 = folder / "ex03_computation_follows_data.py"
    ex03.write_text(ex03.read_text().replace("# YOUR CODE HERE", "# my code goes here", 1))
    assert statuses(folder) == {
        **MISSING,
        "ex01_meshes": "in progress",
        "ex02_sharding_properties": "not started",
        "ex03_computation_follows_data": "in progress",
    }
    student.check("ex01", impl=folder)
    assert statuses(folder)["ex01_meshes"] == "done"
    module = folder / EX01.module_file
    module.write_text(module.read_text() + "\n# changed after the check\n")
    assert statuses(folder)["ex01_meshes"] == "in progress"


def test_list_in_a_handout_without_solutions(tmp_path):
    folder = make_tree(tmp_path, reference=[EX01], stub=[EX02])
    no_solutions = tmp_path / "no-solutions"
    assert statuses(folder, solutions=no_solutions) == {
        **MISSING,
        "ex01_meshes": "in progress",
        "ex02_sharding_properties": "not started",
    }


def test_list_ignores_a_damaged_status_file(tmp_path):
    folder = make_tree(tmp_path, stub=[EX02])
    student.status_file(folder).parent.mkdir()
    student.status_file(folder).write_text("{not json")
    assert statuses(folder)["ex02_sharding_properties"] == "not started"


def test_list_renders_an_aligned_table(tmp_path):
    folder = make_tree(tmp_path, stub=[EX02])
    out = console()
    assert student.list_command(impl=folder, console=out) == 0
    text = out.export_text()
    assert re.search(r"ex02_sharding_properties +What a sharding says +10 +not started", text)
    assert re.search(r"ex04_sharded_layer +One layer, three ways +20 +missing", text)
    assert re.search(rf"total +bonus points on top +{catalog.total_points()}\b", text)
    columns = {line.index("10") for line in text.splitlines() if line.startswith(("ex01", "ex02"))}
    assert len(columns) == 1


def test_list_never_cuts_an_id_at_80_columns(tmp_path):
    out = console(80)
    assert student.list_command(impl=make_tree(tmp_path), console=out) == 0
    lines = out.export_text().splitlines()
    assert "…" not in "".join(lines) and max(map(len, lines)) <= 80
    for exercise in catalog.EXERCISES:
        assert any(line.startswith(f"{exercise.id} ") for line in lines), exercise.id


@pytest.mark.parametrize(
    "typed", ["2", "02", "ex2", "ex02", "ex02_sharding_properties", "ex02_sharding_properties.py"]
)
def test_an_exercise_is_found_however_its_number_is_typed(typed):
    assert catalog.get(typed) is EX02


def test_with_every_exercise_done_check_shows_the_table_at_once(tmp_path, monkeypatch):
    """Nothing run: every module passed at its last check and is unchanged; `--all` runs them again."""
    folder = make_tree(tmp_path, reference=catalog.EXERCISES)
    student.record_checks(
        student.CheckReport(
            folder,
            "all",
            [
                student.ExerciseCheck(e, [], student.module_hash(e.stub_path(folder)))
                for e in catalog.EXERCISES
            ],
        )
    )
    monkeypatch.setattr(student, "run_tests", lambda *a, **k: pytest.fail("check ran tests"))
    code, text = run_check(folder)
    assert code == 0
    assert re.search(r"ex13_comm_costs +Bonus: what communication costs +10 +done", text)
    assert (
        f"All {len(catalog.EXERCISES)} exercises passed their visible tests at their last check and are "
        "unchanged since."
    ) in text
    assert "--all` runs them all again." in text


def test_a_syntax_error_is_said_once_with_its_line_and_no_hint(tmp_path):
    folder = make_tree(tmp_path, stub=[EX02])
    module = folder / EX02.module_file
    lines = module.read_text().splitlines()
    at = next(i for i, line in enumerate(lines) if "raise NotImplementedError" in line)
    lines[at] = lines[at].replace("raise NotImplementedError", "return (")  # an unclosed bracket
    module.write_text("\n".join(lines) + "\n")
    code, text = run_check(folder, "2")
    assert code == 1
    assert text.count("does not parse") == 2  # under the exercise, and its outcome line
    assert f"{EX02.module_file}, line " in text and "'(' was never closed" in text
    assert "Hint:" not in text and "not attempted" not in text and "  ○ " not in text
    recorded = json.loads(student.status_file(folder).read_text())[folder.name][EX02.id]
    assert recorded["syntax_error"] is True and recorded["ok"] is False


def test_the_repos_status_file_is_at_the_repo_root():
    assert student.status_file(paths.EXERCISES_DIR) == paths.REPO_ROOT / ".shardlab" / "status.json"


def test_an_endless_loop_ends_the_check_with_a_reason(tmp_path):
    (tmp_path / "ex01_meshes.py").write_text("while True:\n    pass\n")
    (check,) = student.check_exercises([catalog.get("ex01_meshes")], tmp_path, seconds_each=8)
    assert not check.ok
    assert "ran longer than 8 s and were stopped" in check.crash


def test_a_handouts_help_shows_the_student_commands_only(monkeypatch, capsys):
    from grader import cli

    monkeypatch.setattr(paths, "SOLUTIONS_DIR", paths.REPO_ROOT / "no-solutions-here")
    with pytest.raises(SystemExit):
        cli.main(["--help"])
    shown = capsys.readouterr().out
    assert "{check,list,capstone,grade,grade-batch}" in shown
    assert not any(re.search(rf"^    {command}\b", shown, re.M) for command in cli.STAFF_ONLY)


@pytest.mark.parametrize(
    "argv",
    [
        ["stubs", "--check"],
        ["stubs"],
        ["calibrate"],
        ["release", "out"],
        ["nbgrader", "build", "course"],
        ["gradescope", "build", "a.zip"],
        ["dev-check"],
    ],
)
def test_a_staff_command_in_a_handout_exits_non_zero_saying_why(monkeypatch, capsys, argv):
    from grader import cli

    monkeypatch.setattr(paths, "SOLUTIONS_DIR", paths.REPO_ROOT / "no-solutions-here")
    assert cli.main(argv) == 2
    said = capsys.readouterr().err
    assert said.startswith(f"shardlab {argv[0]}: a course staff command") and "handout" in said


def test_a_failed_check_shows_the_tests_message_not_pytests_introspection(tmp_path):
    """ex13's asserts carry messages; pytest appended "assert False", "+  where False = <built-in function
    isclose>(...)" and, elsewhere, "Use -v to get more diff" (an option the check has not) to them."""
    folder = tmp_path / "work"
    shutil.copytree(paths.REPO_ROOT / "tests/grader/submissions/comm_costs_no_ring_factor", folder)
    code, text = run_check(folder, "13", width=400)
    assert code == 1 and "times the ring factor 3/4" in text, text
    for pytest_wording in ("assert False", "where False", "isclose", "-v to", "-vv"):
        assert pytest_wording not in text, (pytest_wording, text)


@pytest.mark.slow
def test_a_failed_work_rule_shows_its_programs_table_once(tmp_path):
    """`shardlab check ex04` on a layer that gathers the batch and computes all of it on every device: each
    failed test shows one table per program its checks read (each rule's expected figure beside the executed
    one, the work as a multiple of the share, the collectives with their bytes sent), its lines within the
    terminal's width; the collectives are not listed again per check."""
    folder = tmp_path / "work"
    folder.mkdir()
    shutil.copy(
        paths.REPO_ROOT / "tests/grader/submissions/replicates_work/ex04_sharded_layer.py", folder
    )
    code, text = run_check(folder, "04", width=100)
    assert code == 1
    blocks = re.split(r"^  [✓✗!○-] ", text, flags=re.M)[1:]
    failed = [block for block in blocks if block.split("\n", 1)[0].endswith("failed")]
    assert failed, text
    tables = 0
    for block in failed:  # a speed test's has none
        headings = re.findall(r"^      (.+?): the rules judged on one run of it", block, re.M)
        assert len(headings) == len(set(headings)), block
        tables += len(headings)
        assert "rule:" not in block and "runs: " not in block
        table = [line for line in block.splitlines() if line.startswith("        ")]
        assert all(len(line) <= 100 for line in table), block
    assert tables >= 3
    work = next(block for block in failed if "multiply-adds per device" in block)
    assert re.search(r"\d[\d,]* \(\d+\.\d x its\s", work) and "bytes sent" in work


def test_after_a_pass_the_line_names_what_the_hidden_tests_vary():
    """ex18's hidden tests keep 8 devices and change the mesh's shape: the line after a pass says so, with
    the shapes its hidden tests are parametrized over."""
    ex18 = catalog.get("ex18")
    hidden = (ex18.tests_dir() / "test_hidden.py").read_text()
    shapes = re.search(r'MESHES = pytest\.mark\.parametrize\("shape", .*ids=\[([^\]]*)\]', hidden)
    assert shapes, "ex18's hidden tests no longer name their meshes as MESHES"
    assert tuple(re.findall(r'"([^"]+)"', shapes[1])) == ex18.mesh_shapes
    assert student._graded_later(ex18) == (
        "When you are graded, hidden tests check more: other mesh shapes (1x8, 2x4 and 4x2), other "
        "inputs and more cases."
    )
    assert "other mesh sizes" in student._graded_later(catalog.get("ex01"))
    assert "mesh" not in student._graded_later(catalog.get("ex13"))
