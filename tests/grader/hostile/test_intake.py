"""What the trusted side reads of a submission runs none of it: a git clone whose own `.git/config` makes `git
log` run the student's script (`log.showSignature`, a signed HEAD, `gpg.program = ./script.sh`) is read
without git, its script never runs, and it earns nothing; an honest clone's commit time is still read.

The attack is checked to be live first (git, run as the grader once ran it, does run the script), so that
these tests cannot pass by building a clone that never attacked anything. The trusted side's readers (the
commit reader, folder and zip intake, similarity) run over the hostile clone with an audit hook watching: they
start no program but the commit reader (docs/trust-model.md lists every one) and import nothing of its.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import zipfile
from datetime import datetime
from pathlib import Path

import pytest

from grader.course import catalog
from grader.grading import git_clone, lateness

EX01 = catalog.get("ex01")
COMMITTED = "2026-10-06T08:30:00+02:00"
SIGNATURE = (
    "gpgsig -----BEGIN PGP SIGNATURE-----\n \n iQEzBAABCAAdFiEE\n -----END PGP SIGNATURE-----\n"
)
needs_git = pytest.mark.skipif(shutil.which("git") is None, reason="git is not installed")


def git(clone: Path, *args: str, stdin: str | None = None) -> str:
    env = {
        "GIT_AUTHOR_NAME": "a",
        "GIT_AUTHOR_EMAIL": "a@x",
        "GIT_COMMITTER_NAME": "a",
        "GIT_COMMITTER_EMAIL": "a@x",
        "GIT_COMMITTER_DATE": COMMITTED,
        "GIT_AUTHOR_DATE": COMMITTED,
        "PATH": os.defpath,
        "HOME": str(clone.parent),
    }
    done = subprocess.run(
        ["git", *args], cwd=clone, env=env, input=stdin, capture_output=True, text=True, check=True
    )
    return done.stdout


def honest_clone(root: Path, name: str = "alice") -> Path:
    """A clone holding ex01's stub, one commit at COMMITTED."""
    clone = root / name
    clone.mkdir()
    shutil.copy(EX01.stub_path(), clone / EX01.module_file)
    git(clone, "init", "-q")
    git(clone, "add", ".")
    git(clone, "commit", "-q", "-m", "ex01")
    return clone


def hostile_clone(root: Path, marker: Path) -> Path:
    """The held-out attack: HEAD re-signed, and the clone's config asking git to verify the signature with the
    student's script, which leaves `marker` and copies the reference over the stub."""
    clone = honest_clone(root, "mallory")
    head = git(clone, "cat-file", "commit", "HEAD")
    header, body = head.split("\n\n", 1)
    signed = git(
        clone,
        "hash-object",
        "-t",
        "commit",
        "-w",
        "--stdin",
        stdin=f"{header}\n{SIGNATURE}\n{body}",
    )
    git(clone, "update-ref", "HEAD", signed.strip())
    script = clone / "script.sh"
    script.write_text(
        f"#!/bin/sh\ntouch {marker}\ncp {EX01.solution_path()} {clone / EX01.module_file}\nexit 0\n"
    )
    script.chmod(0o755)
    git(clone, "config", "log.showSignature", "true")
    git(clone, "config", "gpg.program", "./script.sh")
    return clone


def attack_is_live(clone: Path, marker: Path) -> None:
    """git run on the clone as the grader used to run it runs the student's script; then the clone is put back."""
    subprocess.run(
        ["git", "-c", f"safe.directory={clone}", "-C", str(clone), "log", "-1", "--format=%cI"],
        capture_output=True,
        check=False,
        env={"PATH": os.defpath, "HOME": str(clone.parent)},
    )
    assert marker.exists(), "the attack no longer runs its script under git: rebuild it"
    marker.unlink()
    shutil.copy(EX01.stub_path(), clone / EX01.module_file)


@needs_git
def test_a_clones_config_runs_nothing_when_its_commit_time_is_read(tmp_path):
    marker = tmp_path / "ran"
    clone = hostile_clone(tmp_path, marker)
    attack_is_live(clone, marker)
    found = lateness.from_git(clone)
    assert not marker.exists()
    assert found is not None and found.at == datetime.fromisoformat(COMMITTED)
    assert EX01.stub_path().read_text() == (clone / EX01.module_file).read_text()


@needs_git
def test_an_honest_clones_commit_time_is_read_without_git(tmp_path, monkeypatch):
    clone = honest_clone(tmp_path)
    git(clone, "gc", "-q")  # its objects packed, as a fresh clone's are
    monkeypatch.setenv("PATH", str(tmp_path / "no-git-here"))
    found = lateness.from_git(clone)
    assert found.at == datetime.fromisoformat(COMMITTED) and "commit" in found.source
    assert lateness.from_git(tmp_path) is None


@needs_git
@pytest.mark.parametrize(
    "twist, problem",
    [
        ("symlink", "not a folder"),
        ("gitdir", "not a folder"),
        ("alternates", "outside the clone"),
        ("commondir", "outside the clone"),
        ("fifo", "not a regular file"),
        ("link inside", "not a regular file"),
        ("broken", "cannot be read"),
    ],
)
def test_a_clone_that_points_out_of_itself_or_is_broken_has_no_time_and_says_why(
    tmp_path, capsys, twist, problem
):
    clone = honest_clone(tmp_path)
    other = honest_clone(tmp_path, "bob")
    git_dir = clone / ".git"
    if twist == "symlink":
        shutil.rmtree(git_dir)
        git_dir.symlink_to(other / ".git")
    elif twist == "gitdir":
        shutil.rmtree(git_dir)
        git_dir.write_text(f"gitdir: {other / '.git'}\n")
    elif twist == "alternates":
        (git_dir / "objects" / "info" / "alternates").write_text(f"{other / '.git' / 'objects'}\n")
    elif twist == "commondir":
        (git_dir / "commondir").write_text(f"{other / '.git'}\n")
    elif twist == "fifo":
        os.mkfifo(git_dir / "packed-refs")
    elif twist == "link inside":
        shutil.rmtree(git_dir / "refs" / "heads")
        (git_dir / "refs" / "heads").symlink_to(other / ".git" / "refs" / "heads")
    else:
        shutil.rmtree(git_dir / "objects")
        (git_dir / "objects").mkdir()
    found = git_clone.last_commit_time(clone)
    assert found.at is None and problem in found.problem
    assert lateness.from_git(clone) is None
    assert "graded without a submission time" in capsys.readouterr().err


@needs_git
def test_a_reader_child_that_reads_too_much_is_stopped(tmp_path, monkeypatch):
    """A loose object that inflates past the reader's heap ends the child, not the grading."""
    import zlib

    clone = honest_clone(tmp_path)
    head = git(clone, "rev-parse", "HEAD").strip()
    loose = clone / ".git" / "objects" / head[:2] / head[2:]
    loose.chmod(0o644)
    bomb = zlib.compressobj(9)
    data = bomb.compress(b"commit 2000000000\0tree ")
    zeros = bytes(1 << 20)
    data += b"".join(bomb.compress(zeros) for _ in range(1024)) + bomb.flush()
    loose.write_bytes(data)  # 1 GiB inflated, a few MiB on disk
    monkeypatch.setattr(git_clone, "READER_DATA_BYTES", 256 << 20)
    found = git_clone.last_commit_time(clone)
    assert found.at is None and found.problem


# --- the trusted side's readers, watched --------------------------------------------------------------------------


class Watch:
    """An audit hook (it cannot be removed: it records only while `on`): programs started, and modules
    imported from under `root`."""

    def __init__(self, root: Path):
        self.root, self.on, self.started, self.imported = str(root), False, [], []
        sys.addaudithook(self)

    def __call__(self, event: str, args: tuple) -> None:
        if not self.on:
            return
        if event in ("subprocess.Popen", "os.posix_spawn", "os.exec", "os.system", "os.spawn"):
            self.started.append((event, repr(args)))
        elif event == "os.fork":
            self.started.append((event, ""))
        elif event == "import" and len(args) > 1 and str(args[1] or "").startswith(self.root):
            self.imported.append(args[1])


@needs_git
def test_the_trusted_readers_start_nothing_but_the_commit_reader_over_a_hostile_submission(
    tmp_path,
):
    from grader.grading import similarity
    from grader.grading.submission import prepare_submission

    marker = tmp_path / "ran"
    clone = hostile_clone(tmp_path, marker)
    # the rest of what a student can hand in beside modules: site hooks, a conftest, a notebook
    (clone / "sitecustomize.py").write_text(f"open({str(marker)!r}, 'w')\n")
    (clone / "conftest.py").write_text(f"open({str(marker)!r}, 'w')\n")
    (clone / "evil.pth").write_text(f"import os; open({str(marker)!r}, 'w')\n")
    archive = tmp_path / "bob.zip"
    with zipfile.ZipFile(archive, "w") as zf:
        for path in clone.rglob("*"):
            if path.is_file():
                zf.write(path, path.relative_to(clone))
    watch = Watch(tmp_path)
    watch.on = True
    try:
        when = lateness.from_git(clone)
        for submission in (clone, archive):
            prepare_submission(submission, tmp_path / f"work-{submission.stem}")
        similarity.compare_class({"mallory": clone, "bob": archive}, [EX01.id])
    finally:
        watch.on = False
    assert when is not None and not marker.exists()
    assert watch.imported == []
    # (matplotlib, which copydetect imports, runs fc-list over the system's fonts: not over the submission)
    over_it = [args for _, args in watch.started if str(tmp_path) in args]
    assert len(over_it) == 1 and "-m', 'grader.grading.git_clone'" in over_it[0], watch.started


@pytest.mark.slow
@needs_git
def test_the_git_config_attack_earns_nothing_when_graded(tmp_path):
    """`shardlab grade` of the hostile clone, as an instructor runs it without --submitted-at: its stub stays
    a stub (0 points, every test not attempted), its script never runs, and its commit time is recorded."""
    marker = tmp_path / "ran"
    clone = hostile_clone(tmp_path, marker)
    attack_is_live(clone, marker)
    out = tmp_path / "out"
    command = [sys.executable, "-m", "grader.cli", "grade", str(clone), "--out", str(out)]
    done = subprocess.run(
        [*command, "--exercise", "ex01", "--quiet"], capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert not marker.exists()
    report = json.loads((out / "report.json").read_text())
    ex01 = report["exercises"][EX01.id]
    assert ex01["score"] == 0
    assert {t["category"] for t in ex01["tests"]} == {"not attempted"}
    assert datetime.fromisoformat(report["term"]["submitted_at"]) == datetime.fromisoformat(
        COMMITTED
    )
