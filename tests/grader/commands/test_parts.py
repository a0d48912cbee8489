"""Each command's --part (declared once, grader.core.options) on a catalog with a part 2 (`two_parts`, conftest:
ex13 moved there), run in this process through the command line's parser so that the patched catalog holds:
`list` groups the exercises under their part's heading, and list, check, grade, grade-batch, release, nbgrader
build and gradescope build each take one part's exercises only, refusing a part unknown with its name."""

import json
import os
import subprocess
import sys
import zipfile

import pytest

from grader import cli
from grader.commands.grading import course_and_options
from grader.core.options import GRADE, GradingOptions
from grader.course import catalog, paths
from grader.platforms import gradescope


def run(*argv: str) -> int:
    args = cli.build_parser().parse_args(list(argv))
    return args.func(args)


def test_list_groups_the_exercises_under_their_parts_headings(two_parts, capsys):
    assert run("list", "--impl", "solutions") == 0
    shown = capsys.readouterr().out
    first, second = (shown.index(f"{label}  ") for label in ("Part 1", "Part 2"))
    assert first < shown.index("meshes to multi-process JAX") < shown.index("ex01_meshes")
    assert (
        shown.index("ex12_multi")
        < second
        < shown.index("scaling a model")
        < shown.index(two_parts.id)
    )


def test_list_one_part(two_parts, capsys):
    assert run("list", "--impl", "solutions", "--part", "2") == 0
    shown = capsys.readouterr().out
    assert "scaling a model" in shown and two_parts.id in shown
    assert "Part 1" not in shown and "ex01_meshes" not in shown
    assert run("list", "--part", "3") == 2
    assert "shardlab list: --part 3: no part '3' in the catalog (its parts: 1, 2)" in (
        capsys.readouterr().err
    )


def test_check_takes_only_the_parts_exercises(two_parts, capsys):
    assert run("check", "ex13", "--part", "1", "--impl", "solutions") == 2
    assert (
        "shardlab check: ex13_comm_costs is not among this term's exercises of Part 1: meshes to "
        "multi-process JAX (--part 1)" in capsys.readouterr().err
    )


def test_grade_and_grade_batch_grade_one_part(two_parts, tmp_path, capsys):
    # the term stays whole (its other exercises' due dates and points); the part is what is graded
    course, options = course_and_options(GradingOptions(part=2))
    assert options.exercises == (two_parts.id,) and len(course.exercises) > 1
    # grade-batch grades each student with `shardlab grade` and these arguments
    assert "--part=2" in GradingOptions(part=2).arguments(GRADE)
    (tmp_path / "work").mkdir()
    for command, target in (("grade", "work"), ("grade-batch", ".")):
        assert (
            run(command, str(tmp_path / target), "--part", "3", "--out", str(tmp_path / "o")) == 2
        )
        assert f"shardlab {command}: " in (err := capsys.readouterr().err)
        assert "no part '3' in the catalog (its parts: 1, 2)" in err
    assert not (tmp_path / "o").exists()


def test_release_hands_out_one_part(two_parts, tmp_path, capsys):
    assert run("release", str(tmp_path / "second"), "--part", "2") == 0
    shipped = sorted(p.name for p in (tmp_path / "second" / "exercises").glob("ex*.py"))
    assert shipped == [two_parts.module_file]
    readme = (tmp_path / "second" / "README.md").read_text()
    assert f"| **{catalog.part(2).title}** |" in readme
    assert catalog.part(1).title not in readme
    # its course.toml keeps `shardlab list` and `check` in the handout to this part
    assert "ex01" not in (tmp_path / "second" / "course.toml").read_text()
    assert run("release", str(tmp_path / "both")) == 0
    readme = (tmp_path / "both" / "README.md").read_text()
    assert readme.index(catalog.part(1).title) < readme.index(catalog.part(2).title)
    assert run("release", str(tmp_path / "none"), "--part", "3") == 1
    assert "no part '3' in the catalog" in capsys.readouterr().err


def test_nbgrader_builds_one_part(two_parts, tmp_path, capsys):
    assert run("nbgrader", "build", str(tmp_path / "nb"), "--part", "2") == 0
    built = sorted(p.name for p in (tmp_path / "nb" / "source").rglob("*.ipynb"))
    assert built == [f"{two_parts.id}.ipynb"]
    assert run("nbgrader", "build", str(tmp_path / "x"), "--part", "2", "--exercise", "ex01") == 2
    assert "ex01_meshes (not in this term's course file)" in capsys.readouterr().err
    # without a course file, --group groups the part's exercises only
    assert (
        run("nbgrader", "build", str(tmp_path / "y"), "--part", "2", "--group", "g=ex01,ex13") == 2
    )
    assert "not in the course built (--part): ex01_meshes" in capsys.readouterr().err
    assert not (tmp_path / "y").exists()


def test_gradescope_zip_of_one_part(two_parts, tmp_path, capsys):
    out = tmp_path / "second.zip"
    assert run("gradescope", "build", str(out), "--part", "2") == 0
    with zipfile.ZipFile(out) as zf:
        assert zf.read(gradescope.PART_FILE) == b"2\n"
    assert gradescope.verify_autograder_zip(out) == []
    assert run("gradescope", "build", str(tmp_path / "x.zip"), "--part", "3") == 1
    assert "--part 3: no part '3' in the catalog" in capsys.readouterr().err
    assert not (tmp_path / "x.zip").exists()


def test_verification_catches_a_part_the_course_does_not_have(two_parts, tmp_path):
    good, broken = tmp_path / "good.zip", tmp_path / "broken.zip"
    gradescope.build_gradescope_zip(good, part=2)
    with zipfile.ZipFile(good) as source, zipfile.ZipFile(broken, "w") as target:
        for info in source.infolist():
            data = source.read(info)
            target.writestr(info, b"7\n" if info.filename == gradescope.PART_FILE else data)
    assert gradescope.verify_autograder_zip(broken) == [
        "part.txt: no part '7' in the catalog (its parts: 1, 2)"
    ]


def test_the_parts_split_the_default_course(two_parts):
    whole, _ = course_and_options(GradingOptions())
    split = [course_and_options(GradingOptions(part=p.number))[1].exercises for p in catalog.PARTS]
    assert [e for chosen in split for e in chosen] == [e.id for e in whole.exercises]
    assert sum(whole.keeping(chosen).max_score for chosen in split) == whole.max_score


def test_run_autograder_grades_the_zips_part_whatever_the_submission_holds(two_parts, tmp_path):
    """run_autograder passes the zip's part.txt as --part; a part.txt a student submits is not read."""
    zip_path = tmp_path / "second.zip"
    gradescope.build_gradescope_zip(zip_path, part=2)
    root = tmp_path / "autograder"
    for folder in ("source", "submission", "results"):
        (root / folder).mkdir(parents=True)
    with zipfile.ZipFile(zip_path) as zf:
        for name in ("run_autograder", gradescope.PART_FILE):
            (root / "source" / name).write_bytes(zf.read(name))
    (root / "submission" / gradescope.PART_FILE).write_text("1\n")  # the student's: ignored
    (root / "source" / "run_autograder").chmod(0o755)
    record, python = tmp_path / "arguments.json", tmp_path / "python"
    python.write_text(
        f"#!{sys.executable}\nimport json, sys\njson.dump(sys.argv[1:], open({str(record)!r}, 'w'))\n"
    )
    python.chmod(0o755)
    environment = os.environ | {"SHARDLAB_AUTOGRADER": str(root), "SHARDLAB_PYTHON": str(python)}
    for given, expected in (({}, "2"), ({"SHARDLAB_PART": ""}, None)):
        subprocess.run(
            [str(root / "source" / "run_autograder")],
            cwd=root,
            capture_output=True,
            timeout=60,
            env=environment | given,
            check=False,
        )
        arguments = json.loads(record.read_text())
        assert arguments[:4] == ["-I", "-m", "grader.cli", "grade"]
        found = arguments[arguments.index("--part") + 1] if "--part" in arguments else None
        assert found == expected


def test_check_goes_through_the_parts_exercises_only(two_parts, tmp_path):
    from grader.commands import student

    (
        tmp_path / "work"
    ).mkdir()  # no module: each exercise checked is reported missing, nothing runs
    every = student.check(impl=tmp_path / "work", all_exercises=True, record=False, part=2)
    assert [item.exercise.id for item in every.checks] == [two_parts.id]
    every = student.check(impl=tmp_path / "work", all_exercises=True, record=False, part=1)
    assert two_parts.id not in [item.exercise.id for item in every.checks]


@pytest.mark.slow
def test_grade_with_a_part_grades_end_to_end(tmp_path):
    """The real catalog, in a process of its own: --part reaches the grading (about 8 s here)."""
    done = subprocess.run(
        [sys.executable, "-m", "grader.cli", "grade", str(paths.SOLUTIONS_DIR), "--part", "1"]
        + ["--exercise", "ex01", "--out", str(tmp_path / "out"), "--quiet"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr
    report = json.loads((tmp_path / "out" / "report.json").read_text())
    assert list(report["exercises"]) == ["ex01_meshes"]
    assert report["score"] == report["max_score"] == catalog.get("ex01").points
