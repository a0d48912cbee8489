"""The time of a git clone's last commit, read without running git.

git obeys the repository's own `.git/config`, and a student writes that file: `log.showSignature` with
`gpg.program = ./script.sh` made `git log` run the student's script as the grader's user, before any sandbox
existed. No git switch ignores a repository's config, so the grader does not run git on a submission. It
reads HEAD's commit object with dulwich, which interprets no config that can run a program, and it does so:

- only inside the submission's own `.git`: a real folder (not a symlink, not a `gitdir:` file), holding no
  symlink, no file that is not a regular file or a folder, no alternates and no `commondir` (each would
  send the reader elsewhere on the machine), and at most MAX_ENTRIES entries;
- in a child process of its own (`python -I -m grader.grading.git_clone GIT_DIR`) whose heap, processor time
  and wall time are bounded, and which may write no file (a zlib bomb or a delta chain costs that child, not
  the grading).

Anything else, and any failure, is "no commit time", with the reason.
"""

from __future__ import annotations

import os
import resource
import stat
import subprocess
import sys
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from pathlib import Path

MAX_ENTRIES = 50_000  # files and folders under .git; a class's clones hold a few hundred
READER_SECONDS = 20  # wall time for the reader child
READER_CPU_SECONDS = 10
READER_DATA_BYTES = (
    512 << 20
)  # its heap (dulwich maps pack files, which RLIMIT_DATA does not count)
REDIRECTS = ("objects/info/alternates", "objects/info/http-alternates", "commondir")


@dataclass(frozen=True)
class CommitTime:
    at: datetime | None  # the committer time with its offset; None when it could not be read
    problem: str = ""  # why not, for the instructor


def refusal(git_dir: Path) -> str:
    """Why `git_dir` is not read (empty when it may be): it must hold nothing that points out of it."""
    if git_dir.is_symlink() or not git_dir.is_dir():
        return ".git is not a folder (a symlink, or a `gitdir:` file pointing elsewhere)"
    for name in REDIRECTS:
        if os.path.lexists(git_dir / name):
            return f".git/{name} points to objects outside the clone"
    entries = 0
    for folder, dirs, files in os.walk(git_dir, followlinks=False):
        for name in dirs + files:
            entries += 1
            if entries > MAX_ENTRIES:
                return f".git holds more than {MAX_ENTRIES} files and folders"
            mode = os.lstat(os.path.join(folder, name)).st_mode
            if not (stat.S_ISREG(mode) or stat.S_ISDIR(mode)):
                relative = os.path.relpath(os.path.join(folder, name), git_dir)
                return f".git/{relative} is not a regular file or folder"
    return ""


def last_commit_time(submission: Path) -> CommitTime | None:
    """The committer time of HEAD in `submission`/.git; None when the submission is not a clone."""
    git_dir = Path(submission) / ".git"
    if not os.path.lexists(git_dir):
        return None
    problem = refusal(git_dir)
    if problem:
        return CommitTime(None, problem)
    try:
        done = subprocess.run(
            [sys.executable, "-I", "-m", "grader.grading.git_clone", str(git_dir)],
            capture_output=True,
            text=True,
            timeout=READER_SECONDS,
            stdin=subprocess.DEVNULL,
            env={"PATH": os.defpath},
            check=False,
        )
    except subprocess.TimeoutExpired:
        return CommitTime(None, f"reading its last commit took over {READER_SECONDS} s")
    except OSError as exc:
        return CommitTime(None, f"cannot read its last commit: {exc.strerror or exc}")
    lines = done.stdout.strip().splitlines()
    if done.returncode != 0 or len(lines) != 1:
        reason = (done.stdout + done.stderr).strip().splitlines()
        return CommitTime(None, reason[-1][:300] if reason else f"exit {done.returncode}")
    return CommitTime(datetime.fromisoformat(lines[0]))


def bound_this_process() -> None:
    """The reader child's limits, set by itself before it reads anything (rather than in a preexec_fn, which
    is unsafe in a parent with threads)."""
    resource.setrlimit(resource.RLIMIT_DATA, (READER_DATA_BYTES, READER_DATA_BYTES))
    resource.setrlimit(resource.RLIMIT_CPU, (READER_CPU_SECONDS, READER_CPU_SECONDS))
    resource.setrlimit(resource.RLIMIT_FSIZE, (0, 0))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))


def read_head(git_dir: str) -> datetime:
    """HEAD's committer time, read by dulwich from `git_dir` alone (the child's work)."""
    from dulwich.objects import Commit
    from dulwich.repo import Repo

    repo = Repo(
        controldir=git_dir,
        commondir=git_dir,
        object_directory=os.path.join(git_dir, "objects"),
        worktree=os.path.dirname(git_dir),
    )
    commit = repo[repo.head()]
    if not isinstance(commit, Commit):
        raise ValueError("HEAD is not a commit")
    offset = timedelta(seconds=commit.commit_timezone)
    if abs(offset) >= timedelta(hours=24):
        raise ValueError(f"HEAD's commit has an impossible time zone ({commit.commit_timezone} s)")
    return datetime.fromtimestamp(commit.commit_time, timezone(offset))


def main() -> int:
    bound_this_process()
    try:
        print(read_head(sys.argv[1]).isoformat())
    except Exception as exc:  # a student's repository may be broken in any way: say how, exit 1
        print(f"its last commit cannot be read: {type(exc).__name__}: {exc}"[:300])
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
