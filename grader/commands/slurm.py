"""Grading a class on a Slurm cluster: `shardlab grade-batch SUBS --out OUT --slurm`.

One job array grades the students not graded yet, one `shardlab grade` per array task (at most
`--slurm-array-limit` at a time), exactly as `grade-batch` grades each student on one machine (the same
`grade_one`, the same options, the same report files); a dependent collect job then writes grades.csv and
the class page from what the tasks left in OUT. Before them, when OUT's cache holds no calibration and the
course's solutions are here, a calibrate job times the reference on a compute node, so that the tasks' time
limits are the cluster's own.

The client is plain `sbatch --array`, generated here: no dependency, and nothing between shardlab and Slurm
that could hide a failed task. Job state comes from `squeue` and `scontrol`, which every cluster has
(`sacct` needs slurmdbd, which a small or local cluster may not run).

Everything a task needs travels in OUT/.slurm/<batch>/: the manifest (the students, each array index's
student, the grading options as `shardlab grade` arguments, the Python to run, the course's digest) and
the scripts. A task checks the course's digest before grading: a course changed since submission grades
no one with the wrong tests. A task that could not write a report leaves an outcome saying why; the
collect job gives every student a row, with the status of a task that never ran or was cancelled. Running
the command again grades (in a new array) every student who has no report yet: a cancelled or failed task
is resumed that way, and a student already graded is skipped as on one machine.

Fair timing on shared nodes: each task asks for `--slurm-cpus-per-task` cores (default 2, the cores the
course's speedup thresholds were set on) and is bound to them by the cluster's task plugin (task/affinity or
task/cgroup; task/none binds nothing); its harnesses follow the cores it was given; and every task on
one node shares that node's timing lock (OUT/.timing-lock/<node>, on the shared filesystem, since a job's
/tmp may be private), so no two speed measurements on one node overlap.

OUT is laid out as on one machine (grader.grading.batch): each student's report and outcome in
OUT/students/<student>/, the batch's own files at the top. The jobs run the Python that submitted them
(`python -m grader...`, never a `shardlab` looked up on PATH), so a venv need not be activated on the nodes.
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import json
import os
import shlex
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path

from grader.commands.slurm_request import SlurmRequest
from grader.core.errors import ShardlabError
from grader.core.options import CALIBRATE, GRADE, GradingOptions
from grader.course import paths, term
from grader.grading import batch
from grader.grading.lateness import Times
from grader.grading.results import read_report
from grader.harness import time_limits, timing_lock
from grader.reports.text import printable

FOLDER = ".slurm"
OUTCOME = "outcome.json"  # a task's word on its student, beside the student's report
TASK_MARGIN_SECONDS = 600  # a task's Slurm time beyond the grading's own --time-limit
POLL_SECONDS = 2.0
ACTIVE_STATES = (
    "PENDING",
    "RUNNING",
    "CONFIGURING",
    "COMPLETING",
    "SUSPENDED",
    "REQUEUED",
    "RESIZING",
)


class SlurmError(ShardlabError, RuntimeError):
    """Slurm refused or could not be reached; the message says what it said."""


# -- the batch, as it travels with the jobs -----------------------------------------------------------------


def course_digest() -> str:
    """The course as the tasks will grade it: its tests, its grader and the shardlab version."""
    digest = hashlib.sha256(metadata.version("shardlab").encode())
    for folder in (paths.EXERCISE_TESTS_DIR, paths.REPO_ROOT / "grader"):
        for path in sorted(folder.rglob("*")) if folder.is_dir() else []:
            if path.is_file() and path.suffix in (".py", ".json", ".css"):
                digest.update(
                    str(path.relative_to(paths.REPO_ROOT)).encode() + b"\0" + path.read_bytes()
                )
    return digest.hexdigest()[:16]


@dataclass
class SlurmBatch:
    """The manifest: OUT/.slurm/<name>/manifest.json."""

    name: str
    out: str
    # every student of the class -> their submission (the collect job's rows)
    students: dict[str, str]
    todo: list[str]  # array index -> student
    grade_arguments: list[str]  # `shardlab grade` options, as on one machine
    timeout: float  # one grading, before grade_one kills it
    python: str
    course: str  # course_digest() where the batch was submitted
    cwd: str
    # "calibrate" / "array" / "collect" -> job id
    jobs: dict[str, str] = field(default_factory=dict)
    # students not graded -> why (batch.ClassFolder)
    refused: dict[str, str] = field(default_factory=dict)
    # student -> their submission times, as grade's --submitted-at takes them (TIME, ASSIGNMENT=TIME)
    submitted_at: dict[str, list[str]] = field(default_factory=dict)
    # student -> the exercises left to grade, when not all those chosen (batch.pending), and why
    only: dict[str, list[str]] = field(default_factory=dict)
    why: dict[str, str] = field(default_factory=dict)

    def grade_options(self) -> GradingOptions:
        """The options each student is graded with, as `shardlab grade` parses its arguments."""
        return GradingOptions.from_args(_grade_parser().parse_args(self.grade_arguments), GRADE)

    def class_term(self) -> batch.ClassTerm:
        """The course the grade arguments name, its adjustments, and the submission times."""
        from grader.commands.publish import class_term

        # the whole term, whatever part or assignment is graded: no other assignment is judged again
        course = term.load(self.grade_options().course)
        times = {
            # an older manifest's: one time, a string
            student: Times.parse(
                [values] if isinstance(values, str) else values, course, "--submitted-at"
            )
            for student, values in self.submitted_at.items()
        }
        return class_term(course, times)

    @property
    def folder(self) -> Path:
        return Path(self.out) / FOLDER / self.name

    def save(self) -> Path:
        self.folder.mkdir(parents=True, exist_ok=True)
        path = self.folder / "manifest.json"
        path.write_text(json.dumps(dataclasses.asdict(self), indent=1) + "\n")
        return path

    @classmethod
    def load(cls, path: Path) -> SlurmBatch:
        return cls(**json.loads(Path(path).read_text()))


def _script(batch_: SlurmBatch, job: str, directives: list[str], command: list[str]) -> str:
    lines = [
        "#!/bin/bash",
        f"#SBATCH --job-name=shardlab-{job}",
        *directives,
        f"#SBATCH --output={batch_.folder / (job + '-%A_%a.log' if job == 'grade' else job + '-%j.log')}",
        "#SBATCH --open-mode=append",
        f"# shardlab grade-batch --slurm: the {job} job of batch {batch_.name} ({len(batch_.todo)} to grade)",
        "set -u",
        f"cd {shlex.quote(batch_.cwd)}",
        "exec " + " ".join(map(shlex.quote, command)),
    ]
    return "\n".join(lines) + "\n"


@dataclass
class SlurmPlan:
    batch: SlurmBatch
    scripts: dict[str, str]  # job -> its script, in submission order
    skipped: list[str]  # students already graded
    # students graded again although graded already -> why (their submission changed)
    changed: dict[str, str] = field(default_factory=dict)


def plan(
    submissions_dir: Path,
    out: Path,
    options: GradingOptions,
    slurm: SlurmRequest,
    *,
    force: bool = False,
    timeout: float | None = None,
    times: dict[str, Times] | None = None,
) -> SlurmPlan:
    """The batch and its job scripts: nothing is submitted (submit does that). times: each student's
    submission time (grade-batch --submitted-at)."""
    out = Path(out).resolve()
    klass = batch.find_submissions(Path(submissions_dir))
    chosen = batch.chosen_ids(
        options, term.load(options.course) if options.course else term.default_course()
    )
    left = {
        s: batch.pending(
            None if force else read_report(batch.student_folder(out, s) / batch.REPORT),
            path,
            chosen,
        )
        for s, path in klass.to_grade.items()
    }
    skipped = [s for s, pending in left.items() if not pending.exercises]
    changed = {s: pending.why for s, pending in left.items() if pending.why}
    todo = [s for s in klass.to_grade if s not in skipped]
    cache = (options.cache or out / batch.CACHE).resolve()
    options = dataclasses.replace(
        options, cache=cache, parallel=options.parallel or slurm.cpus_per_task
    )
    name = stamp = time.strftime("%Y%m%d-%H%M%S")
    while (out / FOLDER / name).exists():  # two batches in one second
        name = f"{stamp}-{len(name)}"
    made = SlurmBatch(
        name=name,
        out=str(out),
        students={s: str(p.resolve()) for s, p in klass.students.items()},
        todo=todo,
        grade_arguments=options.arguments(GRADE),
        timeout=timeout or options.time_limit + 300,
        python=sys.executable,
        course=course_digest(),
        cwd=str(paths.REPO_ROOT),
        refused=klass.refused,
        submitted_at={s: t.arguments() for s, t in (times or {}).items()},
        only={s: list(left[s].exercises) for s in todo if not left[s].whole},
        why={s: left[s].why for s in todo if left[s].why},
    )
    minutes = int((options.time_limit + TASK_MARGIN_SECONDS) // 60)
    directives = slurm.directives(f"{minutes // 60:02d}:{minutes % 60:02d}:00")
    task = [made.python, "-m", "grader.commands.slurm"]
    scripts = {}
    # those graded of the term (the course file grade-batch read, passed on to calibrate as --course; its
    # --assignment and --part are options.exercises already)
    course = term.load(options.course) if options.course else term.default_course()
    graded = time_limits.graded_ids(tuple(e.id for e in course.exercises), options.exercises)
    if time_limits.batch_should_calibrate(cache, options.test_timeout, graded):
        # only those without limits: the calibration keeps the others'
        timed = dataclasses.replace(
            options.for_command(CALIBRATE), exercises=time_limits.uncalibrated(cache, graded)
        )
        calibrate = [made.python, "-m", "grader.cli", "calibrate", *timed.arguments(CALIBRATE)]
        scripts["calibrate"] = _script(made, "calibrate", directives, calibrate)
    if todo:
        array = [
            *directives,
            f"#SBATCH --array=0-{len(todo) - 1}"
            + (f"%{slurm.array_limit}" if slurm.array_limit else ""),
        ]
        scripts["grade"] = _script(
            made, "grade", array, [*task, "task", str(made.folder / "manifest.json")]
        )
    collect = [
        d for d in directives if not d.startswith(("#SBATCH --cpus-per-task", "#SBATCH --mem"))
    ]
    scripts["collect"] = _script(
        made,
        "collect",
        [*collect, "#SBATCH --cpus-per-task=1", "#SBATCH --mem=1G"],
        [*task, "collect", str(made.folder / "manifest.json")],
    )
    return SlurmPlan(made, scripts, skipped, changed)


# -- submitting and following ---------------------------------------------------------------------------------


def _slurm(command: list[str], *, not_found: str | None = None) -> str:
    """A Slurm command's output. not_found: what it says of a job it no longer knows, taken as no output."""
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=60)
    except FileNotFoundError:
        raise SlurmError(
            f"{command[0]} is not on this machine's PATH: run this from a node of the cluster "
            "(a login node), where Slurm's commands are"
        ) from None
    except subprocess.TimeoutExpired:
        raise SlurmError(
            f"{' '.join(command[:2])} did not answer in 60 s: is slurmctld up?"
        ) from None
    if done.returncode != 0 and not_found is not None and not_found in done.stderr:
        return ""
    if done.returncode != 0:
        raise SlurmError(
            f"{' '.join(command[:2])} failed (exit {done.returncode}): {done.stderr.strip()[-500:]}"
        )
    return done.stdout


def still_active(out: Path) -> dict[str, str]:
    """Jobs of earlier batches into `out` that Slurm still holds: {job id: state}."""
    ids = []
    for manifest in sorted((Path(out) / FOLDER).glob("*/manifest.json")):
        ids += SlurmBatch.load(manifest).jobs.values()
    return job_states(ids) if ids else {}


def job_states(ids: list[str]) -> dict[str, str]:
    """{job id (array tasks as 12_3): state} of the jobs squeue still lists."""
    found = {}
    # A job Slurm has forgotten (MinJobAge after it ended) is not active; asked alone, squeue calls it invalid.
    text = _slurm(
        ["squeue", "--noheader", "--array", "--jobs", ",".join(ids), "--format", "%i %T"],
        not_found="Invalid job id",
    )
    for line in text.splitlines():
        if line.strip():
            job, state = line.split()
            found[job] = state
    return found


def final_state(job: str) -> str:
    """A job's state once squeue no longer lists it (scontrol keeps it for MinJobAge, 300 s by default; after
    that, "GONE")."""
    text = _slurm(["scontrol", "show", "job", job, "--oneliner"], not_found="Invalid job id")
    for word in text.split():
        if word.startswith("JobState="):
            return word.split("=", 1)[1]
    return "GONE"


def submit(made: SlurmPlan) -> SlurmBatch:
    """sbatch every script, each depending on the one before (afterany: a failed calibration falls back to the
    shipped time limits; a failed task still gets its row), and record the job ids in the manifest."""
    batch_ = made.batch
    busy = {
        job: state
        for job, state in still_active(Path(batch_.out)).items()
        if state in ACTIVE_STATES
    }
    if busy:
        raise SlurmError(
            f"jobs of an earlier batch into {batch_.out} are still queued or running "
            f"({', '.join(f'{j} {s}' for j, s in sorted(busy.items()))}): wait for them, or scancel "
            "them, before grading the rest"
        )
    for student in batch_.todo:  # an earlier batch's word on a student is not this one's
        (batch.student_folder(Path(batch_.out), student) / OUTCOME).unlink(missing_ok=True)
    manifest = batch_.save()
    previous = None
    for job, text in made.scripts.items():
        script = batch_.folder / f"{job}.sbatch"
        script.write_text(text)
        command = [
            "sbatch",
            "--parsable",
            *([f"--dependency=afterany:{previous}"] if previous else []),
            str(script),
        ]
        previous = _slurm(command).strip().split(";", 1)[0]
        batch_.jobs[job] = previous
        manifest.write_text(json.dumps(dataclasses.asdict(batch_), indent=1) + "\n")
    return batch_


def follow(batch_: SlurmBatch, progress=print, poll: float = POLL_SECONDS) -> str:
    """Wait until the collect job has ended, reporting each student as their task ends; its final state."""
    told: set[str] = set()
    ids = list(batch_.jobs.values())
    while True:
        active = job_states(ids)
        for student in batch_.todo:
            if (
                student not in told
                and (batch.student_folder(Path(batch_.out), student) / OUTCOME).is_file()
            ):
                told.add(student)
                outcome = read_outcome(Path(batch_.out), student)
                # Names and details come from students: printed as text, without their escape sequences.
                progress(
                    printable(f"{student}: {outcome.status} {outcome.detail[:200]}".rstrip())
                    + f" ({len(told)} of {len(batch_.todo)})"
                )
        if batch_.jobs["collect"] not in active:
            return final_state(batch_.jobs["collect"])
        time.sleep(poll)


# -- in the jobs -------------------------------------------------------------------------------------------------


def read_outcome(out: Path, student: str) -> batch.StudentOutcome:
    try:
        data = json.loads((batch.student_folder(out, student) / OUTCOME).read_text())
        return batch.StudentOutcome(
            data["student"], data["status"], data["seconds"], data["detail"]
        )
    except (OSError, ValueError, KeyError, TypeError):
        return batch.StudentOutcome(
            student,
            "failed",
            detail="its task did not finish: cancelled, failed, out of "
            "time or still queued (run the command again)",
        )


def run_task(manifest: Path, index: int) -> batch.StudentOutcome:
    """One array task: grade its student as grade-batch would on one machine, and leave the outcome."""
    made = SlurmBatch.load(manifest)
    student = made.todo[index]
    out = Path(made.out)
    folder = batch.student_folder(out, student)
    folder.mkdir(parents=True, exist_ok=True)
    if course_digest() != made.course:
        outcome = batch.StudentOutcome(
            student,
            "failed",
            detail="the course on this node differs from the one the "
            "batch was submitted with: not graded (install the same course everywhere)",
        )
    else:
        options = made.grade_options()
        if (
            student in made.only
        ):  # the exercises left of those chosen: graded into the earlier report
            options = dataclasses.replace(options, exercises=tuple(made.only[student]))
        node = node_name()
        env = dict(os.environ) | {
            "PYTHONDONTWRITEBYTECODE": "1",
            timing_lock.LOCK_DIR: str(out / batch.TIMING_LOCK / node),
        }
        (out / batch.TIMING_LOCK / node).mkdir(parents=True, exist_ok=True)
        outcome = batch.grade_one(
            student,
            Path(made.students[student]),
            out,
            options=options,
            timeout=made.timeout,
            env=env,
            class_term=made.class_term(),
            why=made.why.get(student, ""),
        )
    (folder / OUTCOME).write_text(
        json.dumps(
            {
                "student": outcome.student,
                "status": outcome.status,
                "seconds": outcome.seconds,
                "detail": outcome.detail,
                "job": f"{os.environ.get('SLURM_ARRAY_JOB_ID', '')}_{os.environ.get('SLURM_ARRAY_TASK_ID', '')}",
                "node": node_name(),
            }
        )
        + "\n"
    )
    return outcome


def node_name() -> str:
    """The node this task runs on, as Slurm names it."""
    return os.environ.get("SLURMD_NODENAME") or socket.gethostname()


def _grade_parser() -> argparse.ArgumentParser:
    from grader.core.options import add_arguments

    parser = argparse.ArgumentParser(prog="shardlab grade")
    add_arguments(parser, GRADE)
    return parser


def collect(manifest: Path) -> Path:
    """The collect job: published as grade-batch publishes on one machine (grader.commands.publish): every
    student's page and results.json, grades.csv and the class page, a row for every student of the class."""
    from grader.commands.publish import publish_class

    made = SlurmBatch.load(manifest)
    out = Path(made.out)
    outcomes = []
    for student in made.students:
        if student in made.refused:
            outcomes.append(
                batch.StudentOutcome(student, batch.REFUSED, detail=made.refused[student])
            )
        elif student in made.todo:
            outcome = read_outcome(out, student)
            outcomes.append(
                outcome if outcome.status == "failed" else batch.StudentOutcome(student, "graded")
            )
        else:
            outcomes.append(batch.StudentOutcome(student, "skipped", detail="already graded"))
    return publish_class(
        out, outcomes, made.class_term(), hidden_visibility=made.grade_options().hidden_visibility
    ).page


def main(argv: list[str] | None = None) -> int:
    """python -m grader.commands.slurm task MANIFEST | collect MANIFEST (what the job scripts run)."""
    parser = argparse.ArgumentParser(prog="python -m grader.commands.slurm")
    parser.add_argument("job", choices=("task", "collect"))
    parser.add_argument("manifest", type=Path)
    args = parser.parse_args(argv)
    if args.job == "task":
        outcome = run_task(args.manifest, int(os.environ["SLURM_ARRAY_TASK_ID"]))
        print(
            printable(
                f"{outcome.student}: {outcome.status} in {outcome.seconds:.0f} s {outcome.detail}".rstrip()
            )
        )
        return 0
    print(f"wrote {collect(args.manifest)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
