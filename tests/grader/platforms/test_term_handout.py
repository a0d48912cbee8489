"""The handout as the term has it: a 5-exercise, 2-assignment term without ex12 or a bonus gets a README of
those exercises only (points, assignment, due date, the late policy in words, no bonus wording, no cluster
section), and its own grader's `shardlab list` and help say the same; a term with ex12 and the bonus keeps
their sections. The handout's grader runs as a student runs it: from the handout, importing its own copy."""

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from grader.course import catalog, term
from grader.platforms.handout import build_handout

pytestmark = pytest.mark.xdist_group("test_term_handout")  # module-scoped builds, done once

TERM = """
name = "JAX term, two assignments"
timezone = "Europe/Paris"

[points]
ex01 = 10
ex02 = 10
ex03 = 20
ex04 = 20
ex05 = 25

[late]
percent = 10
per = "day"
cap = 50
grace = "15m"

[[assignment]]
name = "HW1"
due = 2026-10-05T23:59:00
exercises = ["ex01", "ex02", "ex03"]

[[assignment]]
name = "HW2"
due = 2026-10-19T23:59:00
exercises = ["ex04", "ex05"]
"""
# (id, title, points, assignment, due as the README and `list` write it)
ROWS = [
    ("ex01_meshes", "Devices and meshes", "10", "HW1", "2026-10-05 23:59 (UTC+02:00)"),
    (
        "ex02_sharding_properties",
        "What a sharding says",
        "10",
        "HW1",
        "2026-10-05 23:59 (UTC+02:00)",
    ),
    (
        "ex03_computation_follows_data",
        "Computation follows data",
        "20",
        "HW1",
        "2026-10-05 23:59 (UTC+02:00)",
    ),
    ("ex04_sharded_layer", "One layer, three ways", "20", "HW2", "2026-10-19 23:59 (UTC+02:00)"),
    ("ex05_collectives", "The collective zoo", "25", "HW2", "2026-10-19 23:59 (UTC+02:00)"),
]
POLICY = "10% per day started, at most 50%; 15 min of grace"
WITH_EXTRAS = """
name = "JAX term with the cluster and the bonus"

[points]
ex01 = 10
ex12 = 15
ex13 = 5

[[assignment]]
name = "all"
exercises = ["ex01", "ex12", "ex13"]
"""


def handout_of(folder: Path, text: str) -> Path:
    folder.mkdir(parents=True)
    (folder / "course.toml").write_text(text)
    return build_handout(folder / "handout", course=term.load(folder / "course.toml"))


@pytest.fixture(scope="module")
def handout(tmp_path_factory) -> Path:
    return handout_of(tmp_path_factory.mktemp("five") / "instructor", TERM)


@pytest.fixture(scope="module")
def extras(tmp_path_factory) -> Path:
    return handout_of(tmp_path_factory.mktemp("extras") / "instructor", WITH_EXTRAS)


def test_the_policy_text_is_the_terms(tmp_path):
    (tmp_path / "course.toml").write_text(TERM)
    assert term.load(tmp_path / "course.toml").late.describe() == POLICY


def shardlab(handout: Path, *argv: str) -> subprocess.CompletedProcess:
    """The handout's own grader, as a student runs it from the handout (its folder first on sys.path)."""
    code = (
        "import sys, grader; print(grader.__file__, file=sys.stderr); "
        f"from grader.cli import main; sys.exit(main({list(argv)!r}))"
    )
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"} | {"COLUMNS": "160"}
    done = subprocess.run(
        [sys.executable, "-c", code],
        cwd=handout,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.stderr.splitlines()[0] == str(handout / "grader" / "__init__.py"), done.stderr
    return done


def test_the_readme_names_exactly_the_terms_exercises_with_points_and_due_dates(handout):
    text = (handout / "README.md").read_text()
    assert "| exercise | title | points | assignment | due |" in text
    for exercise_id, title, points, assignment, due in ROWS:
        assert f"| `{exercise_id}` | {title} | {points} | {assignment} | {due} |" in text
    named = set(re.findall(r"\bex\d\d_[a-z_]+", text))
    assert named == {row[0] for row in ROWS}
    # in the term's order
    assert [text.index(f"`{row[0]}`") for row in ROWS] == sorted(
        text.index(f"`{row[0]}`") for row in ROWS
    )
    assert "| | total | 85 | | |" in text
    assert f"Late work: {POLICY}." in text
    assert "this term's 5 exercises" in text


def test_the_readme_says_nothing_of_what_the_term_does_not_have(handout):
    text = (handout / "README.md").read_text()
    assert "bonus" not in text.lower()
    assert "ex12" not in text and "Several processes on a cluster" not in text
    assert "srun" not in text and "SLURM" not in text
    assert "shardlab check ex04" in text and "!shardlab check ex04" in text
    assert "4, 04, ex4" in text
    assert (
        "$" not in text
    )  # every placeholder filled, and no shell left from a section that is not here


def test_list_in_the_handout_prints_each_exercises_assignment_due_date_and_the_policy(handout):
    done = shardlab(handout, "list")
    assert done.returncode == 0, done.stdout + done.stderr
    for exercise_id, title, points, assignment, due in ROWS:
        assert re.search(
            rf"^{exercise_id} +{re.escape(title)} +{assignment} +{re.escape(due)} +{points} +not started",
            done.stdout,
            re.MULTILINE,
        ), done.stdout
    assert re.search(r"^total +85\b", done.stdout, re.MULTILINE)
    assert f"Late work: {POLICY}." in done.stdout
    assert "bonus" not in done.stdout
    assert not [
        e.id for e in catalog.EXERCISES if e.id not in {r[0] for r in ROWS} and e.id in done.stdout
    ]


def test_the_handouts_help_names_the_terms_exercises_only(handout):
    done = shardlab(handout, "check", "--help")
    assert done.returncode == 0, done.stderr
    assert '"ex01_meshes"' in done.stdout
    assert "ex12" not in done.stdout and "--launcher" not in done.stdout
    listed = shardlab(handout, "--help")
    assert not re.search(r"\bex\d\d", listed.stdout) or set(
        re.findall(r"\bex\d\d", listed.stdout)
    ) <= {row[0][:4] for row in ROWS}


def test_a_term_with_the_cluster_exercise_and_a_bonus_keeps_their_sections(extras):
    text = (extras / "README.md").read_text()
    assert "| `ex13_comm_costs` | Bonus: what communication costs | 5 bonus |" in text
    assert "| | total (bonus points come on top) | 25 |" in text
    assert "## Several processes on a cluster (ex12)" in text
    # the section's shell, as bash reads it (the template's $$ written once)
    assert 'export COORDINATOR="$(scontrol show hostnames "$SLURM_JOB_NODELIST"' in text
    assert "Late work: no penalty for late work." in text
    done = shardlab(extras, "check", "--help")
    assert "--launcher" in done.stdout and "ex12's processes" in done.stdout
    listed = shardlab(extras, "list")
    assert re.search(r"^total +bonus points on top +25\b", listed.stdout, re.MULTILINE)
    assert re.search(r"^ex13_comm_costs +Bonus: .* 5 +not started", listed.stdout, re.MULTILINE)


def test_an_assignment_named_with_a_bar_stays_in_its_cell(tmp_path):
    text = WITH_EXTRAS.replace('name = "all"', 'name = "part 1 | all"')
    readme = (handout_of(tmp_path / "instructor", text) / "README.md").read_text()
    assert "| `ex01_meshes` | Devices and meshes | 10 | part 1 \\| all | no due date |" in readme
