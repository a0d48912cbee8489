"""`shardlab dev-check` on this repository, and what it finds in a broken one."""

import pytest

from grader.cli import main
from grader.commands import devcheck
from grader.course import paths


def test_layout_and_stubs_are_consistent():
    findings = devcheck.Findings()
    devcheck.check_layout(findings)
    devcheck.check_stubs_current(findings)
    assert findings.ok, findings.problems


def test_a_stale_stub_and_a_stray_module_are_reported(monkeypatch, tmp_path):
    for tree in ("solutions", "exercises"):
        (tmp_path / tree).mkdir()
        for path in getattr(paths, f"{tree.upper()}_DIR").glob("ex*.py"):
            (tmp_path / tree / path.name).write_text(path.read_text())
    (tmp_path / "exercises" / "ex04_sharded_layer.py").write_text("# edited by hand\n")
    (tmp_path / "solutions" / "ex99_extra.py").write_text("\n")
    monkeypatch.setattr(paths, "SOLUTIONS_DIR", tmp_path / "solutions")
    monkeypatch.setattr(paths, "EXERCISES_DIR", tmp_path / "exercises")
    findings = devcheck.dev_check(run_tests_too=False)
    text = "\n".join(findings.problems)
    assert "ex99_extra.py is not in the catalog" in text
    assert "ex04_sharded_layer.py differs from what solutions/ generates" in text


@pytest.mark.slow
def test_every_stub_fails_every_test_as_not_attempted():
    """dev-check's second run. Its first, the reference passing every test, is this session's own
    tests/exercises (which run against the reference, slow tests included in CI): run again here, it
    would only repeat them."""
    findings = devcheck.Findings()
    devcheck.check_stubs_not_attempted(findings)
    assert findings.ok, findings.problems[:10]
    (note,) = findings.notes
    assert note.startswith("stubs: ") and note.split()[1] == note.split()[3]   # "stubs: N of N tests ..."
    assert int(note.split()[1]) >= 400


def test_dev_check_runs_the_reference_and_the_stubs(monkeypatch, capsys):
    """The command's glue: both runs, their findings in the report, the exit status."""
    ran = []
    monkeypatch.setattr(devcheck, "check_reference_passes", lambda findings: ran.append("reference"))
    monkeypatch.setattr(devcheck, "check_stubs_not_attempted",
                        lambda findings: (ran.append("stubs"), findings.problems.append("a stub passed")))
    assert main(["dev-check"]) == 1
    assert ran == ["reference", "stubs"]
    assert "PROBLEM a stub passed" in capsys.readouterr().out
