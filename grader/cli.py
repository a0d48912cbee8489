"""The `shardlab` command: a thin layer over the library's functions."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from grader.core.options import CALIBRATE, GRADE, GRADE_BATCH, LAUNCHERS, add_arguments
from grader.course import paths


def _handler(family: str, name: str):
    """The handler `name` of grader.commands.`family`, imported only when it runs (`shardlab check` starts
    without the grading, build and term commands)."""

    def run(args) -> int:
        import importlib

        return getattr(importlib.import_module(f"grader.commands.{family}"), name)(args)

    return run


def _staff(handout: bool, text: str) -> dict:
    """A staff command's help: left out of a handout's (where the command refuses to run)."""
    return {} if handout else {"help": text}  # argparse lists a subcommand only when it has a help


def _add_nbgrader_commands(commands, handout: bool = False) -> None:
    nbgrader = commands.add_parser(
        "nbgrader", **_staff(handout, "course staff: package the course for nbgrader")
    )
    nbgrader_commands = nbgrader.add_subparsers(dest="nbgrader_command", required=True)
    build = nbgrader_commands.add_parser(
        "build",
        help="write COURSE_DIR/source/<assignment>/<exercise id>.ipynb and COURSE_DIR/nbgrader_config.py",
    )
    build.add_argument(
        "course_dir", type=Path, metavar="COURSE_DIR", help="the nbgrader course folder"
    )
    build.add_argument(
        "--group",
        action="append",
        default=[],
        metavar="NAME=EX,EX",
        help="put these exercises (ids or numbers) into one assignment NAME (repeatable; "
        "default: one assignment per exercise, named by its id)",
    )
    build.add_argument(
        "--exercise",
        action="append",
        metavar="ID",
        help="only this exercise (repeatable; default: every exercise)",
    )
    build.add_argument(
        "--course-id", default="shardlab", help="nbgrader's course id (default: shardlab)"
    )
    add_arguments(build, "nbgrader build")
    build.set_defaults(func=_handler("builds", "nbgrader_build_command"))


# The exercise whose processes --launcher starts: its option is shown only in a term that has it.
MULTI_PROCESS = "ex12_multi_controller"


def term_exercise_ids() -> tuple[str, ...]:
    """The exercises the help may name: the term's (the course file beside the grader: a handout's
    course.toml), else the catalog's. A course file that cannot be read: the catalog's here, and the command
    itself says what is wrong with it."""
    from grader.course import catalog, term

    found = term.find(paths.REPO_ROOT)
    try:
        exercises = term.load(found).exercises if found else catalog.EXERCISES
    except term.CourseFileError:
        exercises = catalog.EXERCISES
    return tuple(e.id for e in exercises)


def _add_impl(command, verb: str = "") -> None:
    """The student commands' --impl: the folder of the student's modules."""
    command.add_argument(
        "--impl",
        default="exercises",
        metavar="PATH",
        help=" ".join(
            filter(None, ("the folder of exercise modules", verb, "(default: exercises/)"))
        ),
    )


def _add_student_commands(commands, handout: bool) -> None:
    """Check and list: what a student runs; their help names the term's exercises only."""
    ids = term_exercise_ids()
    example = ids[0]
    number = example.split("_", 1)[0]  # "ex04"
    digits = str(int(number.removeprefix("ex")))
    check = commands.add_parser(
        "check",
        help="run the visible tests of your next pending exercise, of "
        "EXERCISE, or of every exercise (--all)",
    )
    check.add_argument(
        "exercise",
        nargs="?",
        metavar="EXERCISE",
        help=f'an exercise id or number: "{example}", "{number}", "ex{digits}", "{int(digits):02d}" or '
        f'"{digits}" (default: the first exercise whose visible tests do not all pass)',
    )
    check.add_argument("--all", action="store_true", help="check every exercise and show a summary")
    _add_impl(check, "to check")
    check.add_argument(
        "--html",
        nargs="?",
        const="",
        metavar="FILE",
        help="also write the results as a page to open in a browser, with the layouts drawn "
        "(default FILE: .shardlab/feedback.html beside the folder checked)",
    )
    check.add_argument(
        "--launcher",
        choices=LAUNCHERS,
        default="local",
        help="how ex12's processes start: on this machine (local, the default) or as one Slurm "
        "step (srun), each joining through jax.distributed.initialize() with no arguments"
        if MULTI_PROCESS in ids
        else argparse.SUPPRESS,
    )
    add_arguments(check, "check")
    check.set_defaults(func=_handler("student", "check_from_args"))

    listing = commands.add_parser(
        "list",
        help="the exercises, their points and your status (with the course file: each one's "
        "assignment and due date, and the late policy)",
    )
    _add_impl(listing)
    add_arguments(listing, "list")
    listing.set_defaults(func=_handler("student", "list_from_args"))

    capstone = commands.add_parser(
        "capstone",
        help="part 2's capstone: your transformer block trained 3-D and your ZeRO-1 step on 8 devices, "
        "with the collectives a step runs and the memory per device that remat and ZeRO save",
    )
    _add_impl(capstone)
    capstone.set_defaults(func=_handler("capstone", "capstone_from_args"))


def _add_grading_commands(commands, handout: bool) -> None:
    """Grade, grade-batch and calibrate."""
    grade = commands.add_parser(
        "grade",
        help="grade one submission (a folder or a .zip of exNN_name.py modules); "
        "in a handout, `--visible-only` grades your own work as its CI does",
    )
    grade.add_argument("submission", help="the submission folder or .zip")
    grade.add_argument(
        "--out",
        required=True,
        type=Path,
        help="where report.json, results.json, junit.xml and feedback.html go",
    )
    grade.add_argument(
        "--fail-under", type=float, metavar="SCORE", help="exit 1 when the score is lower (CI)"
    )
    grade.add_argument("--quiet", action="store_true", help="no summary table")
    grade.add_argument(
        "--gradebook",
        metavar="DB_URL",
        help="also record the scores in this nbgrader gradebook "
        "(e.g. sqlite:///course/gradebook.db), as nbgrader autograde would",
    )
    grade.add_argument(
        "--student",
        help="the student's name, as the course file's extensions, the adjustments and "
        "--gradebook name them (default: the submission's name)",
    )
    grade.add_argument(
        "--submitted-at",
        action="append",
        metavar="[ASSIGNMENT=]TIME",
        help="when the submission came in, ISO 8601 with its offset (2026-10-05T23:59:00+02:00), for "
        "the course file's late policy: TIME for every exercise graded, ASSIGNMENT=TIME (its name or "
        "slug; repeat the flag) for that assignment's exercises only (default: Gradescope's "
        "metadata, else nbgrader's timestamp.txt, else a git clone's last commit, else the time an "
        "earlier grading in OUT "
        "recorded for that exercise)",
    )
    grade.add_argument(
        "--submission-metadata",
        type=Path,
        metavar="FILE",
        help="Gradescope's submission_metadata.json: the submission time and the due dates "
        "(run_autograder)",
    )
    add_arguments(grade, GRADE)
    grade.set_defaults(func=_handler("grading", "grade_command"))

    batch = commands.add_parser(
        "grade-batch", help="course staff: grade a class, one folder or .zip per student"
    )
    batch.add_argument("submissions", help="folder holding one submission per student")
    batch.add_argument(
        "--out",
        required=True,
        type=Path,
        help="grades.csv, the class page index.html, and students/<student>/ for each student",
    )
    batch.add_argument(
        "--jobs",
        type=int,
        default=1,
        help="submissions graded at once on this machine (default 1; each gets cores / jobs "
        "harnesses; with --slurm, --slurm-array-limit says how many at once)",
    )
    batch.add_argument(
        "--force",
        action="store_true",
        help="grade again students already graded (with --exercise: those exercises only, every "
        "other exercise's results kept as they were)",
    )
    batch.add_argument(
        "--submitted-at",
        type=Path,
        metavar="FILE.csv",
        help="when each student's submission came in, for the course file's late policy: a "
        "student,submitted_at header and a line per student (applied to the exercises graded), or "
        "student,assignment,submitted_at and a line per student and assignment (applied to that "
        "assignment's exercises only); ISO 8601 with its offset; default: a git clone's last "
        "commit, else none (no late penalty, said in grades.csv)",
    )
    add_arguments(batch, GRADE_BATCH)
    from grader.commands.slurm_request import add_slurm_arguments

    add_slurm_arguments(batch)
    batch.set_defaults(func=_handler("grading", "grade_batch_command"))

    calibrate = commands.add_parser(
        "calibrate",
        **_staff(
            handout,
            "course staff: time the reference on this "
            "machine, so that each test's time limit "
            "follows from it (and fill the compile cache)",
        ),
    )
    calibrate.add_argument(
        "--ship",
        action="store_true",
        help="course authors: also write the timings into the package "
        "(grader/harness/reference_times.json), the limits of every machine without a "
        "calibration of its own; run it again after changing tests",
    )
    add_arguments(calibrate, CALIBRATE)
    calibrate.set_defaults(func=_handler("grading", "calibrate_command"))


def _add_release_commands(commands, handout: bool) -> None:
    """Stubs and release: the course's files for students."""
    stubs = commands.add_parser(
        "stubs",
        **_staff(
            handout, "course authors: regenerate the student stubs in exercises/ from solutions/"
        ),
    )
    stubs.add_argument(
        "--check", action="store_true", help="only report stubs that are out of date"
    )
    stubs.set_defaults(func=_handler("builds", "stubs_command"))

    release = commands.add_parser(
        "release",
        **_staff(
            handout,
            "course staff: write the student handout to OUT: the "
            "stubs, the visible tests, the grader and a CI "
            "grading workflow, never a solution or a hidden test",
        ),
    )
    release.add_argument(
        "out", type=Path, metavar="OUT", help="a new or empty folder, outside the course's trees"
    )
    release.add_argument(
        "--course-name",
        help="the title of the handout's README (default: the course file's name, else shardlab)",
    )
    add_arguments(release, "release")
    release.add_argument(
        "--force", action="store_true", help="replace the contents of a non-empty OUT"
    )
    release.set_defaults(func=_handler("builds", "release_command"))


def _add_term_commands(commands, handout: bool) -> None:
    """Course check, override and export: a term over a graded class."""
    course = commands.add_parser(
        "course", **_staff(handout, "course staff: the term's course file")
    )
    course_commands = course.add_subparsers(dest="course_command", required=True)
    course_check = course_commands.add_parser(
        "check",
        help="read the course file, say what is wrong with it (with its line), or print the term",
    )
    add_arguments(course_check, "course")
    course_check.set_defaults(func=_handler("term", "course_check_command"))

    override = commands.add_parser(
        "override",
        **_staff(
            handout,
            "course staff: adjust a student's grade by hand "
            "(kept in the course's adjustments file, across "
            "regrades) and publish the class again",
        ),
    )
    override.add_argument(
        "out", type=Path, metavar="OUT", help="the graded class (grade-batch's --out)"
    )
    override.add_argument("--student", required=True, help="the student, as grade-batch names them")
    override.add_argument(
        "--exercise", required=True, metavar="ID", help="the exercise (id or number)"
    )
    override.add_argument(
        "--test",
        metavar="NAME",
        help="one test's points instead of the exercise's score "
        "(its name as the feedback page shows it)",
    )
    change = override.add_mutually_exclusive_group(required=True)
    change.add_argument("--set", type=float, metavar="SCORE", help="the new score")
    change.add_argument(
        "--add", type=float, metavar="POINTS", help="points added (negative to take some off)"
    )
    override.add_argument(
        "--reason", required=True, help="why: the student and the class page show it"
    )
    override.add_argument("--by", required=True, help="who made the adjustment")
    add_arguments(override, "override")
    override.set_defaults(func=_handler("term", "override_command"))

    export = commands.add_parser(
        "export",
        **_staff(
            handout,
            "course staff: a graded class's grades as an LMS "
            "imports them, for the course file's roster",
        ),
    )
    export.add_argument(
        "out", type=Path, metavar="OUT", help="the graded class (grade-batch's --out)"
    )
    export.add_argument(
        "--canvas",
        type=Path,
        metavar="FILE",
        help="Canvas's gradebook import CSV: one column per "
        "assignment of the course file, its lms_id in it",
    )
    export.add_argument(
        "--long",
        type=Path,
        metavar="FILE",
        help="a long CSV: student, exercise, raw, penalty, override, final, and why",
    )
    add_arguments(export, "export")
    export.set_defaults(func=_handler("term", "export_command"))


def _add_platform_commands(commands, handout: bool) -> None:
    """Nbgrader build and gradescope build."""
    _add_nbgrader_commands(commands, handout)

    gradescope = commands.add_parser(
        "gradescope", **_staff(handout, "course staff: the Gradescope autograder")
    )
    gradescope_commands = gradescope.add_subparsers(dest="gradescope_command", required=True)
    gradescope_build = gradescope_commands.add_parser(
        "build",
        help="write the autograder zip to upload to Gradescope (tests, grader, no solutions)",
    )
    gradescope_build.add_argument(
        "out_zip", type=Path, nargs="?", metavar="OUT.zip", help="where to write the zip"
    )
    gradescope_build.add_argument(
        "--each-assignment",
        type=Path,
        metavar="OUTDIR",
        help="instead of OUT.zip: one zip per assignment of the course file, OUTDIR/<slug>.zip",
    )
    add_arguments(gradescope_build, "gradescope build")
    gradescope_build.set_defaults(func=_handler("builds", "gradescope_build_command"))


def _add_dev_check(commands, handout: bool) -> None:
    """Dev-check: the course's self-check."""
    dev = commands.add_parser(
        "dev-check",
        **_staff(
            handout,
            "course authors: every reference passes, every stub "
            "fails as not attempted, exercises/ is generated, "
            "every hidden rule kind has a visible sample",
        ),
    )
    dev.add_argument("--no-tests", action="store_true", help="skip the two test runs")
    dev.set_defaults(func=_handler("devcheck", "dev_check_command"))


def build_parser(*, handout: bool = False) -> argparse.ArgumentParser:
    """The command line; in a student's handout (handout=True) the help shows only what works there."""
    parser = argparse.ArgumentParser(
        prog="shardlab",
        description="A self-grading course in JAX parallelism. Students: `shardlab check` runs "
        "the visible tests of your next exercise, `shardlab list` shows where you are.",
    )
    shown = IN_A_HANDOUT + (() if handout else STAFF_ONLY)  # in the order they are added below
    commands = parser.add_subparsers(
        dest="command",
        required=True,
        metavar="{" + ",".join(shown) + "}",
        title="commands (students: check, list and capstone; the others are for course staff)",
    )

    _add_student_commands(commands, handout)
    _add_grading_commands(commands, handout)
    _add_release_commands(commands, handout)
    _add_term_commands(commands, handout)
    _add_platform_commands(commands, handout)
    _add_dev_check(commands, handout)
    return parser


def find_own_tools_first() -> None:
    """Put the folder of the Python running shardlab first on PATH, for this process and all it starts.

    A user may run `.venv/bin/shardlab` without activating the venv, and a Slurm job runs the Python that
    submitted it: the tools installed beside that Python (nbgrader's gradebook runs `alembic` by name) are then
    found there, not some other installation's or none."""
    own = os.path.dirname(sys.executable)
    if own:
        rest = [
            entry
            for entry in os.environ.get("PATH", os.defpath).split(os.pathsep)
            if entry and entry != own
        ]
        os.environ["PATH"] = os.pathsep.join([own, *rest])


# The commands that start test runs: a conflicting device count in the environment is refused before any
# runs, as the set-up's error (a test process that died of it would read as the student's crash).
RUNS_TESTS = ("check", "capstone", "grade", "grade-batch", "calibrate", "dev-check")


def setup_error(command: str) -> str | None:
    """`command`'s set-up error, said before it starts anything, or None."""
    from grader.course.devices import DeviceCountError, check_environment

    if command not in RUNS_TESTS:
        return None
    try:
        check_environment()
    except DeviceCountError as exc:
        return str(exc)
    return None


# The course staff's commands that need the course itself (solutions/ and the hidden tests): a student's
# handout has neither, so there they are left out of the help and refuse to run, saying why.
STAFF_ONLY = (
    "calibrate",
    "stubs",
    "release",
    "course",
    "override",
    "export",
    "nbgrader",
    "gradescope",
    "dev-check",
)
IN_A_HANDOUT = ("check", "list", "capstone", "grade", "grade-batch")


def in_handout() -> bool:
    """A student's handout: the grader without the course's references."""
    return not paths.SOLUTIONS_DIR.is_dir()


def main(argv: list[str] | None = None) -> int:
    find_own_tools_first()
    handout = in_handout()
    args = build_parser(handout=handout).parse_args(argv)
    if args.command in STAFF_ONLY and handout:
        print(
            f"shardlab {args.command}: a course staff command: it needs the course's solutions/ and hidden tests, "
            "which a student handout does not have. Students use `shardlab check` and `shardlab list`.",
            file=sys.stderr,
        )
        return 2
    problem = setup_error(args.command)
    if problem:
        print(f"shardlab {args.command}: set-up error: {problem}", file=sys.stderr)
        return 2
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
