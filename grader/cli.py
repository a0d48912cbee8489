"""The `shardlab` command: a thin layer over the library's functions."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from grader.course import catalog, paths

MAX_PARALLEL = 4   # harnesses per submission: more than the cores only adds start-up work


def _cmd_check(args) -> int:
    from grader.commands import student

    return student.check_command(args.exercise, impl=args.impl, all_exercises=args.all)


def _cmd_list(args) -> int:
    from grader.commands import student

    return student.list_command(impl=args.impl)


def _cmd_stubs(args) -> int:
    from grader.course import stubs

    if args.check:
        from grader.commands.devcheck import Findings, check_stubs_current

        findings = Findings()
        check_stubs_current(findings)
        for problem in findings.problems:
            print(problem)
        return 0 if findings.ok else 1
    if not paths.SOLUTIONS_DIR.is_dir():
        print("no solutions/ here (a student handout?): stubs are generated from the course's references",
              file=sys.stderr)
        return 2
    changed = stubs.write_stubs()
    for path in changed:
        print(f"wrote {path.relative_to(paths.REPO_ROOT)}")
    if not changed:
        print("exercises/ is up to date")
    return 0


def _cmd_release(args) -> int:
    from grader.platforms.handout import HandoutError, build_handout

    try:
        out = build_handout(args.out, course_name=args.course_name, force=args.force)
    except HandoutError as exc:
        print(f"shardlab release: {exc}", file=sys.stderr)
        return 1
    print(f"wrote the student handout to {out}: no solution and no hidden test in it")
    return 0


def _cmd_gradescope_build(args) -> int:
    from grader.platforms.gradescope import GradescopeBuildError, build_gradescope_zip

    try:
        path = build_gradescope_zip(args.out_zip)
    except GradescopeBuildError as exc:
        print(f"shardlab gradescope build: {exc}", file=sys.stderr)
        return 1
    print(f"wrote {path}: upload it on the assignment's Configure Autograder page")
    return 0


def _cmd_nbgrader_build(args) -> int:
    from grader.grading.collection import GradingError
    from grader.platforms.nbgrader_course import build_course, parse_groups

    try:
        written = build_course(args.course_dir, groups=parse_groups(args.group), exercises=args.exercise,
                               course_id=args.course_id)
    except (ValueError, catalog.UnknownExercise, GradingError) as exc:
        print(f"shardlab nbgrader build: {exc}", file=sys.stderr)
        return 2
    for path in written:
        print(f"wrote {path}")
    return 0


def _add_nbgrader_commands(commands) -> None:
    nbgrader = commands.add_parser("nbgrader", help="package the course for nbgrader")
    nbgrader_commands = nbgrader.add_subparsers(dest="nbgrader_command", required=True)
    build = nbgrader_commands.add_parser(
        "build", help="write COURSE_DIR/source/<assignment>/<exercise id>.ipynb and COURSE_DIR/nbgrader_config.py")
    build.add_argument("course_dir", type=Path, metavar="COURSE_DIR", help="the nbgrader course folder")
    build.add_argument("--group", action="append", default=[], metavar="NAME=EX,EX",
                       help="put these exercises (ids or numbers) into one assignment NAME (repeatable; "
                            "default: one assignment per exercise, named by its id)")
    build.add_argument("--exercise", action="append", metavar="ID",
                       help="only this exercise (repeatable; default: every exercise)")
    build.add_argument("--course-id", default="shardlab", help="nbgrader's course id (default: shardlab)")
    build.set_defaults(func=_cmd_nbgrader_build)


def _cmd_dev_check(args) -> int:
    from grader.commands.devcheck import dev_check, report

    findings = dev_check(run_tests_too=not args.no_tests)
    print(report(findings))
    return 0 if findings.ok else 1


def _limits(args):
    from grader.grading.process import Limits

    return Limits(test_timeout=args.test_timeout, isolation=args.isolation,
                  memory_bytes=int(args.memory_limit * (1 << 30)) if args.memory_limit else None)


def _memory_gib(text: str) -> float:
    """--memory-limit: refused at once when no worker could start with it (every test would crash)."""
    from grader.grading.process import MIN_WORKER_MEMORY_BYTES

    gib = float(text)
    minimum = MIN_WORKER_MEMORY_BYTES / (1 << 30)
    if gib != 0 and not gib >= minimum:
        raise argparse.ArgumentTypeError(
            f"{text} GiB is too small: the student's worker needs at least {minimum:g} GiB of address space to "
            f"start jax on its host devices and run the course's tests (0: no limit)")
    return gib


def _add_memory_option(parser) -> None:
    from grader.grading.process import HARNESS_MEMORY_BYTES, MIN_WORKER_MEMORY_BYTES

    parser.add_argument("--memory-limit", type=_memory_gib, default=6.0, metavar="GIB",
                        help=f"address-space limit of the student's worker process in GiB, at least "
                             f"{MIN_WORKER_MEMORY_BYTES / (1 << 30):g}, 0 for none (default 6); the grader's own "
                             f"harness keeps {HARNESS_MEMORY_BYTES / (1 << 30):g} GiB")


def _cache(args, default: Path | None = None):
    from grader.grading.compile_cache import CompileCache, default_folder

    folder = args.cache or default or default_folder()
    return CompileCache(None if args.no_compile_cache else folder, max_bytes=int(args.cache_max_mb * (1 << 20))), folder


def _parallel(args) -> int:
    from grader.course.devices import cores

    return args.parallel or max(1, min(cores(), MAX_PARALLEL))


def _cmd_grade(args) -> int:
    from grader.grading.engine import GradingError, grade_submission
    from grader.grading.submission import SubmissionError
    from grader.harness import time_limits
    from grader.reports.writers import print_summary, write_all

    cache, folder = _cache(args)
    try:
        results = grade_submission(args.submission, visible_only=args.visible_only, timing=args.timing,
                                   limits=_limits(args), time_limit=args.time_limit, exercises=args.exercise,
                                   cache=cache, time_limits=time_limits.load(folder, args.test_timeout),
                                   parallel=_parallel(args))
    except (SubmissionError, GradingError, catalog.UnknownExercise) as exc:
        print(f"shardlab grade: {exc}", file=sys.stderr)
        return 2
    written = write_all(results, args.out)
    if args.gradebook:
        from grader.reports.gradebook import record_in_gradebook

        student = args.student or Path(args.submission).stem
        for problem in record_in_gradebook(results, db_url=args.gradebook, student=student):
            print(f"shardlab grade: gradebook: {problem}", file=sys.stderr)
    if not args.quiet:
        print_summary(results)
        print("wrote " + ", ".join(str(path) for path in written.values()))
    if args.fail_under is not None and results.score < args.fail_under:
        print(f"score {results.score:.2f} is below --fail-under {args.fail_under:g}", file=sys.stderr)
        return 1
    return 0


def _cmd_calibrate(args) -> int:
    from grader.grading.calibration import calibrate
    from grader.grading.engine import GradingError
    from grader.harness import time_limits

    cache, folder = _cache(args)
    print("timing the reference solutions on this machine (once per course version and machine) ...")
    try:
        limits = calibrate(folder, cache=cache, parallel=_parallel(args), limits=_limits(args))
    except (time_limits.CalibrationError, GradingError) as exc:
        print(f"shardlab calibrate: {exc}", file=sys.stderr)
        return 1
    print(f"{limits.source}; wrote {Path(folder) / time_limits.FILE_NAME}")
    if getattr(args, "ship", False):
        print(f"wrote {time_limits.ship(limits)}: the limits wherever this course is graded without a calibration")
    return 0


def _cmd_grade_batch(args) -> int:
    from rich.progress import Progress

    from grader.grading.batch import find_submissions, grade_batch
    from grader.harness import time_limits

    cache, folder = _cache(args, default=args.out / ".cache")
    if args.test_timeout is None and not time_limits.load(folder).reference and paths.SOLUTIONS_DIR.is_dir():
        # Limits from the reference before the first student: this also fills the compile cache with the
        # programs every student's tests compile (the baselines and references).
        if _cmd_calibrate(argparse.Namespace(**{**vars(args), "cache": folder})) != 0:
            print(f"shardlab grade-batch: grading with {time_limits.FALLBACK_SECONDS:g} s per test instead",
                  file=sys.stderr)
    grade_args = [f"--timing={args.timing}", f"--time-limit={args.time_limit}", f"--memory-limit={args.memory_limit}",
                  f"--isolation={args.isolation}", f"--cache={folder}", f"--cache-max-mb={args.cache_max_mb}"]
    grade_args += [f"--parallel={args.parallel}"] if args.parallel else []
    grade_args += [f"--test-timeout={args.test_timeout}"] if args.test_timeout is not None else []
    grade_args += ["--no-compile-cache"] if args.no_compile_cache else []
    grade_args += ["--visible-only"] if args.visible_only else []
    grade_args += [f"--exercise={exercise}" for exercise in args.exercise or ()]
    total = len(find_submissions(Path(args.submissions)))
    with Progress(transient=False) as bar:
        task = bar.add_task("grading", total=total)

        def advance(student, outcome):
            bar.console.print(f"{student}: {outcome.status} {outcome.detail[:200]}".rstrip())
            bar.advance(task)

        summary = grade_batch(args.submissions, args.out, jobs=args.jobs, force=args.force, grade_args=grade_args,
                              timeout=args.time_limit + 300, progress=advance)
    print(f"{summary.count('graded')} graded, {summary.count('skipped')} already graded, "
          f"{summary.count('failed')} failed in {summary.seconds:.0f} s; grades in {summary.grades_csv}")
    return 0


def _add_grading_options(parser) -> None:
    parser.add_argument("--visible-only", action="store_true", help="run only the visible tests")
    parser.add_argument("--timing", choices=["enforce", "report", "skip"], default="enforce",
                        help="speedup thresholds: enforce (default), report the figures only, or skip")
    parser.add_argument("--test-timeout", type=float, default=None, metavar="S",
                        help="seconds every test may run (default: each test's own limit, from the reference's "
                             "time measured here by `shardlab calibrate`, else from its timings shipped with the "
                             "course; 120 for a test neither knows)")
    parser.add_argument("--time-limit", type=float, default=1800.0, metavar="S",
                        help="seconds one submission may take in all (default 1800)")
    _add_memory_option(parser)
    parser.add_argument("--isolation", default="auto",
                        choices=["auto", "strict", "bubblewrap", "landlock", "process"],
                        help="how the student's code is confined: auto (the best this machine has: bubblewrap, "
                             "then landlock, then a plain process), strict (refuse to grade without bubblewrap "
                             "or landlock), or one level")
    _add_speed_options(parser)


def _add_speed_options(parser) -> None:
    parser.add_argument("--cache", type=Path, metavar="DIR",
                        help="the compile cache and the calibrated time limits (default: $SHARDLAB_CACHE or "
                             "~/.cache/shardlab; grade-batch: OUT/.cache). Only the grader reads and writes it.")
    parser.add_argument("--no-compile-cache", action="store_true", help="compile every program afresh")
    parser.add_argument("--cache-max-mb", type=float, default=1024, metavar="MB",
                        help="the compile cache's size cap: least recently used entries go first (default 1024)")
    parser.add_argument("--parallel", type=int, default=None, metavar="N",
                        help=f"harnesses grading one submission's exercises at once (default: the cores, at most "
                             f"{MAX_PARALLEL}; grade-batch: cores / jobs)")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="shardlab", description="A self-grading course in JAX parallelism.")
    commands = parser.add_subparsers(dest="command", required=True)

    check = commands.add_parser("check", help="run the visible tests of your next pending exercise, of "
                                               "EXERCISE, or of every exercise (--all)")
    check.add_argument("exercise", nargs="?", metavar="EXERCISE",
                       help='an exercise id or number, e.g. "ex04" (default: the first exercise whose visible '
                            'tests do not all pass)')
    check.add_argument("--all", action="store_true", help="check every exercise and show a summary")
    check.add_argument("--impl", default="exercises", metavar="PATH",
                       help="the folder of exercise modules to check (default: exercises/)")
    check.set_defaults(func=_cmd_check)

    listing = commands.add_parser("list", help="the exercises, their points and your status")
    listing.add_argument("--impl", default="exercises", metavar="PATH",
                         help="the folder of exercise modules (default: exercises/)")
    listing.set_defaults(func=_cmd_list)

    stubs = commands.add_parser("stubs", help="regenerate the student stubs in exercises/ from solutions/")
    stubs.add_argument("--check", action="store_true", help="only report stubs that are out of date")
    stubs.set_defaults(func=_cmd_stubs)

    grade = commands.add_parser("grade", help="grade one submission (a folder or a .zip of exNN_name.py modules)")
    grade.add_argument("submission", help="the submission folder or .zip")
    grade.add_argument("--out", required=True, type=Path, help="where report.json, results.json, junit.xml go")
    grade.add_argument("--exercise", action="append", metavar="ID", help="grade only this exercise (repeatable)")
    grade.add_argument("--fail-under", type=float, metavar="SCORE", help="exit 1 when the score is lower (CI)")
    grade.add_argument("--quiet", action="store_true", help="no summary table")
    grade.add_argument("--gradebook", metavar="DB_URL", help="also record the scores in this nbgrader gradebook "
                       "(e.g. sqlite:///course/gradebook.db), as nbgrader autograde would")
    grade.add_argument("--student", help="the student id for --gradebook (default: the submission's name)")
    _add_grading_options(grade)
    grade.set_defaults(func=_cmd_grade)

    batch = commands.add_parser("grade-batch", help="grade a class: one folder or .zip per student")
    batch.add_argument("submissions", help="folder holding one submission per student")
    batch.add_argument("--out", required=True, type=Path, help="grades.csv and one folder per student")
    batch.add_argument("--jobs", type=int, default=1,
                       help="submissions graded at once (default 1; each gets cores / jobs harnesses)")
    batch.add_argument("--force", action="store_true", help="grade again students already graded")
    batch.add_argument("--exercise", action="append", metavar="ID", help="grade only this exercise (repeatable)")
    _add_grading_options(batch)
    batch.set_defaults(func=_cmd_grade_batch)

    calibrate = commands.add_parser("calibrate", help="course staff: time the reference on this machine, so that "
                                                      "each test's time limit follows from it (and fill the "
                                                      "compile cache)")
    calibrate.add_argument("--isolation", default="auto",
                           choices=["auto", "strict", "bubblewrap", "landlock", "process"],
                           help="as grading will run (default auto)")
    calibrate.add_argument("--ship", action="store_true",
                           help="course authors: also write the timings into the package "
                                "(grader/harness/reference_times.json), the limits of every machine without a "
                                "calibration of its own; run it again after changing tests")
    _add_memory_option(calibrate)
    calibrate.set_defaults(func=_cmd_calibrate, test_timeout=None)
    _add_speed_options(calibrate)

    release = commands.add_parser("release", help="write the student handout to OUT: the stubs, the visible tests, "
                                                  "the grader and a CI grading workflow, never a solution or a "
                                                  "hidden test")
    release.add_argument("out", type=Path, metavar="OUT", help="a new or empty folder, outside the course's trees")
    release.add_argument("--course-name", default="shardlab", help="the title of the handout's README")
    release.add_argument("--force", action="store_true", help="replace the contents of a non-empty OUT")
    release.set_defaults(func=_cmd_release)

    _add_nbgrader_commands(commands)

    gradescope = commands.add_parser("gradescope", help="course authors: the Gradescope autograder")
    gradescope_commands = gradescope.add_subparsers(dest="gradescope_command", required=True)
    gradescope_build = gradescope_commands.add_parser(
        "build", help="write the autograder zip to upload to Gradescope (tests, grader, no solutions)")
    gradescope_build.add_argument("out_zip", type=Path, metavar="OUT.zip", help="where to write the zip")
    gradescope_build.set_defaults(func=_cmd_gradescope_build)

    dev = commands.add_parser("dev-check", help="course authors: every reference passes, every stub "
                                                "fails as not attempted, exercises/ is generated, the "
                                                "catalog matches the files")
    dev.add_argument("--no-tests", action="store_true", help="skip the two test runs")
    dev.set_defaults(func=_cmd_dev_check)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
