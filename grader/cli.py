"""The `shardlab` command: a thin layer over the library's functions."""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys
from pathlib import Path

from grader.core.options import CALIBRATE, GRADE, GRADE_BATCH, MAX_PARALLEL, GradingOptions, add_arguments
from grader.course import catalog, paths


def _cmd_check(args) -> int:
    from grader.commands import student

    return student.check_command(args.exercise, impl=args.impl, all_exercises=args.all,
                                 html=True if args.html == "" else args.html or False, launcher=args.launcher)


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
    changed = stubs.write_stubs()   # main refuses it in a handout, which has no solutions/
    for path in changed:
        print(f"wrote {path.relative_to(paths.REPO_ROOT)}")
    if not changed:
        print("exercises/ is up to date")
    return 0


def _course_file(path: Path | None):
    """The course of a course file (--course, or the current folder's course.toml); None without one (the
    builds then package the whole catalog, as before). A course file that cannot be read is a ShardlabError."""
    from grader.course import term

    found = path or term.find()
    return term.load(found) if found else None


def _cmd_release(args) -> int:
    from grader.core.errors import ShardlabError
    from grader.platforms.handout import build_handout

    try:
        out = build_handout(args.out, course_name=args.course_name, force=args.force, course=_course_file(args.course))
    except ShardlabError as exc:
        print(f"shardlab release: {exc}", file=sys.stderr)
        return 1
    print(f"wrote the student handout to {out}: no solution and no hidden test in it")
    return 0


def _cmd_gradescope_build(args) -> int:
    from grader.core.errors import ShardlabError
    from grader.platforms.gradescope import build_gradescope_zip

    try:
        path = build_gradescope_zip(args.out_zip, course=_course_file(args.course))
    except ShardlabError as exc:
        print(f"shardlab gradescope build: {exc}", file=sys.stderr)
        return 1
    print(f"wrote {path}: upload it on the assignment's Configure Autograder page")
    return 0


def _cmd_nbgrader_build(args) -> int:
    from grader.grading.collection import GradingError
    from grader.platforms.nbgrader_course import build_course, parse_groups

    try:
        written = build_course(args.course_dir, groups=parse_groups(args.group), exercises=args.exercise,
                               course_id=args.course_id, course=_course_file(args.course))
    except (ValueError, catalog.UnknownExercise, GradingError) as exc:
        print(f"shardlab nbgrader build: {exc}", file=sys.stderr)
        return 2
    for path in written:
        print(f"wrote {path}")
    return 0


def _staff(handout: bool, text: str) -> dict:
    """A staff command's help: left out of a handout's (where the command refuses to run)."""
    return {} if handout else {"help": text}   # argparse lists a subcommand only when it has a help


def _add_nbgrader_commands(commands, handout: bool = False) -> None:
    nbgrader = commands.add_parser("nbgrader", **_staff(handout, "course staff: package the course for nbgrader"))
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
    add_arguments(build, "nbgrader build")
    build.set_defaults(func=_cmd_nbgrader_build)


def _cmd_dev_check(args) -> int:
    from grader.commands.devcheck import dev_check, report

    findings = dev_check(run_tests_too=not args.no_tests)
    print(report(findings))
    return 0 if findings.ok else 1


def _options(args, command: str) -> GradingOptions:
    """What `command` was asked, typed; --parallel's default (the cores, at most MAX_PARALLEL) filled in."""
    from grader.course.devices import cores

    options = GradingOptions.from_args(args, command)
    return dataclasses.replace(options, parallel=options.parallel or max(1, min(cores(), MAX_PARALLEL)))


def _cache(options: GradingOptions, default: Path | None = None):
    from grader.grading.compile_cache import CompileCache, default_folder

    folder = options.cache or default or default_folder()
    return CompileCache(None if options.no_compile_cache else folder, max_bytes=options.cache_max_bytes), folder


def _course(options: GradingOptions, submission: Path | None = None):
    """The term options.course names (or the current folder's course.toml, or the catalog's), and the options
    with its settings where no flag gave one. A course file that cannot be used is a ShardlabError. A course.toml
    found inside the submission graded is the student's, never the course's: not used."""
    from grader.course import term

    found = options.course or term.find()
    if found is not None and submission is not None and options.course is None \
            and Path(found).resolve().is_relative_to(Path(submission).resolve()):
        print(f"shardlab: {found} is inside the submission: not the course file (give --course)", file=sys.stderr)
        found = None
    course = term.load(found) if found is not None else term.default_course()
    return course, options.with_course({"timing": course.timing, "hidden_visibility": course.hidden_visibility})


def _submission_time(args, course):
    """When the submission came in (grader.grading.lateness), the course with a platform's dates, and the
    student's name as the course file's extensions and the adjustments name them."""
    from grader.grading import lateness

    submitted, student = None, args.student or Path(args.submission).stem
    if args.submission_metadata:
        from grader.platforms import gradescope_metadata as gradescope

        try:
            meta = gradescope.read_metadata(args.submission_metadata)
        except gradescope.SubmissionMetadataError as exc:
            # The platform's file, not the student's work: graded without a time (no late penalty), and said.
            print(f"shardlab grade: {exc}: graded without a submission time, so without a late penalty",
                  file=sys.stderr)
        else:
            course = gradescope.course_with_platform_dates(course, meta)
            submitted = lateness.SubmissionTime(meta.submitted_at, "Gradescope's submission_metadata.json")
            student = args.student or gradescope.course_student(course, meta) or student
    if args.submitted_at:
        submitted = lateness.SubmissionTime(lateness.moment(args.submitted_at, "--submitted-at"), "--submitted-at")
    return submitted or lateness.from_git(Path(args.submission)), course, student


def _cmd_grade(args) -> int:
    from grader.core.errors import ShardlabError
    from grader.course import adjustments
    from grader.grading import lateness, regrade
    from grader.grading.engine import GradingError, grade_submission
    from grader.grading.standing import standing
    from grader.grading.submission import SubmissionError
    from grader.harness import time_limits
    from grader.reports.writers import print_summary, write_all

    try:
        course, options = _course(_options(args, GRADE), Path(args.submission))
        submitted, course, student = _submission_time(args, course)
        adjusted = adjustments.load(course.adjustments)
    except ShardlabError as exc:
        print(f"shardlab grade: {exc}", file=sys.stderr)
        return 2
    cache, folder = _cache(options)
    try:
        results = grade_submission(args.submission, options, cache=cache, course=course,
                                   time_limits=time_limits.load(folder, options.test_timeout))
    except (SubmissionError, GradingError, catalog.UnknownExercise) as exc:
        print(f"shardlab grade: {exc}", file=sys.stderr)
        return 2
    earlier = regrade.earlier_report(args.out, args.submission)
    if submitted is None and earlier is not None:
        submitted = lateness.recorded_time(earlier)
    results = lateness.with_term(results, course, student, submitted)
    if earlier is not None:
        results = regrade.merge(earlier, results, partial=bool(options.exercises))
    mine = standing(results, adjusted, student)
    written = write_all(results, args.out, hidden_visibility=options.hidden_visibility, standing=mine)
    if args.gradebook:
        from grader.reports.gradebook import record_in_gradebook

        for problem in record_in_gradebook(results, db_url=args.gradebook, student=student):
            print(f"shardlab grade: gradebook: {problem}", file=sys.stderr)
    for problem in mine.problems:
        print(f"shardlab grade: {problem}", file=sys.stderr)
    if not args.quiet:
        print_summary(results, standing=mine)
        print("wrote " + ", ".join(str(path) for path in written.values()))
    if args.fail_under is not None and results.score < args.fail_under:
        print(f"score {results.score:.2f} is below --fail-under {args.fail_under:g}", file=sys.stderr)
        return 1
    return 0


def _cmd_calibrate(args) -> int:
    return _calibrate(_options(args, CALIBRATE), ship=args.ship)


def _calibrate(options: GradingOptions, ship: bool = False) -> int:
    from grader.grading.calibration import calibrate
    from grader.grading.engine import GradingError
    from grader.harness import time_limits

    options = options.for_command(CALIBRATE)   # from grade-batch: the whole course, whatever it grades
    cache, folder = _cache(options)
    print("timing the reference solutions on this machine (once per course version and machine) ...")
    try:
        limits = calibrate(folder, options, cache=cache)
    except (time_limits.CalibrationError, GradingError) as exc:
        print(f"shardlab calibrate: {exc}", file=sys.stderr)
        return 1
    print(f"{limits.source}; wrote {Path(folder) / time_limits.FILE_NAME}")
    if ship:
        print(f"wrote {time_limits.ship(limits)}: the limits wherever this course is graded without a calibration")
    return 0


def _cmd_grade_batch(args) -> int:
    from rich.progress import Progress
    from rich.text import Text

    from grader.commands.publish import class_term, publish_class
    from grader.core.errors import ShardlabError
    from grader.grading import lateness
    from grader.grading.batch import CACHE, REFUSED, find_submissions, grade_batch
    from grader.harness import time_limits
    from grader.reports.text import printable

    try:
        # --parallel: grade_batch's cores / jobs
        course, options = _course(GradingOptions.from_args(args, GRADE_BATCH), Path(args.submissions))
        term = class_term(course, lateness.read_times(args.submitted_at) if args.submitted_at else None)
    except ShardlabError as exc:
        print(f"shardlab grade-batch: {exc}", file=sys.stderr)
        return 2
    if course.source is not None:   # each student's grading (a child, a Slurm task) reads the same file
        options = dataclasses.replace(options, course=Path(course.source.path))
    if args.slurm or args.slurm_dry_run:
        return _grade_batch_on_slurm(args, options, term)
    if args.wait:
        print("shardlab grade-batch: --wait follows a Slurm batch: give --slurm too", file=sys.stderr)
        return 2
    _, folder = _cache(options, default=args.out / CACHE)
    options = dataclasses.replace(options, cache=folder)
    if time_limits.batch_should_calibrate(folder, options.test_timeout):
        # Limits from the reference before the first student: this also fills the compile cache with the
        # programs every student's tests compile (the baselines and references).
        if _calibrate(dataclasses.replace(_options(args, GRADE_BATCH), cache=folder)) != 0:
            print(f"shardlab grade-batch: grading with {time_limits.FALLBACK_SECONDS:g} s per test instead",
                  file=sys.stderr)
    klass = find_submissions(Path(args.submissions))
    if klass.ignored:
        print(f"not submissions (hidden, or neither a folder nor a .zip), ignored: "
              f"{', '.join(printable(repr(name)) for name in klass.ignored)}")
    with Progress(transient=False) as bar:
        task = bar.add_task("grading", total=len(klass.students))

        def advance(student, outcome):
            # Text, not str: a student's name is theirs, and rich would read "[link=...]" in a str as markup.
            bar.console.print(Text(printable(f"{student}: {outcome.status} {outcome.detail[:200]}".rstrip())))
            bar.advance(task)

        summary = grade_batch(args.submissions, args.out, options, jobs=args.jobs, force=args.force,
                              timeout=options.time_limit + 300, progress=advance, class_term=term)
    published = publish_class(args.out, summary.outcomes, term, hidden_visibility=options.hidden_visibility,
                              similarity=_similarity(klass, course))
    for problem in published.problems:
        print(printable(f"adjustments: {problem}"), file=sys.stderr)
    refused = f", {summary.count(REFUSED)} refused (their rows say why)" if summary.count(REFUSED) else ""
    print(f"{summary.count('graded')} graded, {summary.count('skipped')} already graded, "
          f"{summary.count('failed')} failed{refused} in {summary.seconds:.0f} s; grades in {published.grades_csv}; "
          f"class page {published.page}")
    return 0


def _similarity(klass, course):
    """The class page's section of unusually similar submissions, per exercise of the course."""
    from grader.grading.similarity import compare_class
    from grader.reports.similarity_section import similarity_section

    return similarity_section(compare_class(klass.to_grade, [e.id for e in course.exercises]))


def _grade_batch_on_slurm(args, options: GradingOptions, term) -> int:
    from grader.commands import slurm

    try:
        made = slurm.plan(Path(args.submissions), args.out, options, slurm.SlurmRequest.from_args(args),
                          force=args.force, times=term.times)
        if args.slurm_dry_run:
            for job, script in made.scripts.items():
                print(f"# --- {job}.sbatch ---\n{script}")
            return 0
        print(f"{len(made.skipped)} already graded; submitting {len(made.batch.todo)} students to Slurm")
        submitted = slurm.submit(made)
    except slurm.SlurmError as exc:
        print(f"shardlab grade-batch: {exc}", file=sys.stderr)
        return 2
    jobs = submitted.jobs
    print("submitted " + ", ".join(f"{job} job {number}" for job, number in jobs.items())
          + f"; the batch is in {submitted.folder}")
    if not args.wait:
        print(f"follow it with `squeue --jobs {','.join(jobs.values())}`; grades.csv and index.html are written "
              f"into {args.out} when the collect job ({jobs['collect']}) ends")
        return 0
    try:
        state = slurm.follow(submitted)
    except slurm.SlurmError as exc:
        print(f"shardlab grade-batch: {exc}", file=sys.stderr)
        return 2
    print(f"the collect job ended {state}; grades in {args.out / 'grades.csv'}; class page {args.out / 'index.html'}")
    return 0 if state == "COMPLETED" else 1


def _load_course(args, command: str):
    """The course --course names (or the current folder's course.toml); None after saying why it cannot be read."""
    from grader.core.errors import ShardlabError
    from grader.course import term

    try:
        return term.load(args.course)
    except ShardlabError as exc:
        print(f"shardlab {command}: {exc}", file=sys.stderr)
        return None


def _cmd_course_check(args) -> int:
    from grader.course import adjustments, term

    course = _load_course(args, "course check")
    if course is None:
        return 2
    for line in term.describe(course):
        print(line)
    try:
        found = adjustments.load(course.adjustments)
    except adjustments.AdjustmentsError as exc:
        print(f"shardlab course check: {exc}", file=sys.stderr)
        return 2
    if course.adjustments is not None:
        print(f"  adjustments: {len(found)} in {course.adjustments}" if found else
              f"  adjustments: none yet ({course.adjustments})")
    return 0


def _cmd_override(args) -> int:
    from grader.commands.term import TermCommandError, make_adjustment, record_override
    from grader.core.errors import ShardlabError
    from grader.core.options import DEFAULTS
    from grader.reports.text import printable

    course = _load_course(args, "override")
    if course is None:
        return 2
    try:
        adjustment = make_adjustment(args.student, args.exercise, args.test, args.set, args.add, args.reason, args.by)
        published = record_override(args.out, course, adjustment,
                                    course.hidden_visibility or DEFAULTS.hidden_visibility)
    except (TermCommandError, ShardlabError) as exc:
        print(f"shardlab override: {exc}", file=sys.stderr)
        return 2
    for problem in published.problems:
        print(printable(f"adjustments: {problem}"), file=sys.stderr)
    graded = published.standings.get(adjustment.student)
    if graded is not None:
        print(printable(f"{adjustment.student}: {graded.final:.2f}/{graded.max_score:g} after the adjustment "
                        f"({graded.raw:.2f} from the tests)"))
    print(f"recorded in {course.adjustments}; wrote {published.grades_csv} and {published.page}")
    return 0


def _cmd_export(args) -> int:
    from grader.commands.term import export_grades
    from grader.core.errors import ShardlabError
    from grader.reports.text import printable

    course = _load_course(args, "export")
    if course is None:
        return 2
    if args.canvas is None and args.long is None:
        print("shardlab export: say what to write: --canvas FILE, --long FILE or both", file=sys.stderr)
        return 2
    try:
        lines = export_grades(args.out, course, canvas=args.canvas, long=args.long)
    except ShardlabError as exc:
        print(f"shardlab export: {exc}", file=sys.stderr)
        return 2
    for line in lines:
        print(printable(line))
    return 0


def build_parser(*, handout: bool = False) -> argparse.ArgumentParser:
    """The command line; in a student's handout (handout=True) the help shows only what works there."""
    parser = argparse.ArgumentParser(
        prog="shardlab", description="A self-grading course in JAX parallelism. Students: `shardlab check` runs "
        "the visible tests of your next exercise, `shardlab list` shows where you are.")
    shown = IN_A_HANDOUT + (() if handout else STAFF_ONLY)   # in the order they are added below
    commands = parser.add_subparsers(dest="command", required=True, metavar="{" + ",".join(shown) + "}",
                                     title="commands (students: check and list; the others are for course staff)")

    check = commands.add_parser("check", help="run the visible tests of your next pending exercise, of "
                                               "EXERCISE, or of every exercise (--all)")
    check.add_argument("exercise", nargs="?", metavar="EXERCISE",
                       help='an exercise id or number: "ex04_sharded_layer", "ex04", "ex4", "04" or "4" (default: '
                            'the first exercise whose visible tests do not all pass)')
    check.add_argument("--all", action="store_true", help="check every exercise and show a summary")
    check.add_argument("--impl", default="exercises", metavar="PATH",
                       help="the folder of exercise modules to check (default: exercises/)")
    check.add_argument("--html", nargs="?", const="", metavar="FILE",
                       help="also write the results as a page to open in a browser, with the layouts drawn "
                            "(default FILE: .shardlab/feedback.html beside the folder checked)")
    check.add_argument("--launcher", choices=("local", "srun"), default="local",
                       help="how ex12's processes start: on this machine (local, the default) or as one Slurm "
                            "step (srun), each joining through jax.distributed.initialize() with no arguments")
    check.set_defaults(func=_cmd_check)

    listing = commands.add_parser("list", help="the exercises, their points and your status")
    listing.add_argument("--impl", default="exercises", metavar="PATH",
                         help="the folder of exercise modules (default: exercises/)")
    listing.set_defaults(func=_cmd_list)

    grade = commands.add_parser("grade", help="grade one submission (a folder or a .zip of exNN_name.py modules); "
                                              "in a handout, `--visible-only` grades your own work as its CI does")
    grade.add_argument("submission", help="the submission folder or .zip")
    grade.add_argument("--out", required=True, type=Path,
                       help="where report.json, results.json, junit.xml and feedback.html go")
    grade.add_argument("--fail-under", type=float, metavar="SCORE", help="exit 1 when the score is lower (CI)")
    grade.add_argument("--quiet", action="store_true", help="no summary table")
    grade.add_argument("--gradebook", metavar="DB_URL", help="also record the scores in this nbgrader gradebook "
                       "(e.g. sqlite:///course/gradebook.db), as nbgrader autograde would")
    grade.add_argument("--student", help="the student's name, as the course file's extensions, the adjustments and "
                                         "--gradebook name them (default: the submission's name)")
    grade.add_argument("--submitted-at", metavar="TIME",
                       help="when the submission came in, ISO 8601 with its offset (2026-10-05T23:59:00+02:00), for "
                            "the course file's late policy (default: Gradescope's metadata, else a git clone's last "
                            "commit, else the time an earlier grading in OUT recorded)")
    grade.add_argument("--submission-metadata", type=Path, metavar="FILE",
                       help="Gradescope's submission_metadata.json: the submission time and the due dates "
                            "(run_autograder)")
    add_arguments(grade, GRADE)
    grade.set_defaults(func=_cmd_grade)

    batch = commands.add_parser("grade-batch", help="course staff: grade a class, one folder or .zip per student")
    batch.add_argument("submissions", help="folder holding one submission per student")
    batch.add_argument("--out", required=True, type=Path,
                       help="grades.csv, the class page index.html, and students/<student>/ for each student")
    batch.add_argument("--jobs", type=int, default=1,
                       help="submissions graded at once on this machine (default 1; each gets cores / jobs "
                            "harnesses; with --slurm, --slurm-array-limit says how many at once)")
    batch.add_argument("--force", action="store_true",
                       help="grade again students already graded (with --exercise: those exercises only, every "
                            "other exercise's results kept as they were)")
    batch.add_argument("--submitted-at", type=Path, metavar="FILE.csv",
                       help="when each student's submission came in, for the course file's late policy: a "
                            "student,submitted_at header, then a line per student (ISO 8601 with its offset); "
                            "default: a git clone's last commit, else none (no late penalty)")
    add_arguments(batch, GRADE_BATCH)
    from grader.commands.slurm import add_slurm_arguments

    add_slurm_arguments(batch)
    batch.set_defaults(func=_cmd_grade_batch)

    calibrate = commands.add_parser("calibrate", **_staff(handout, "course staff: time the reference on this "
                                                                   "machine, so that each test's time limit "
                                                                   "follows from it (and fill the compile cache)"))
    calibrate.add_argument("--ship", action="store_true",
                           help="course authors: also write the timings into the package "
                                "(grader/harness/reference_times.json), the limits of every machine without a "
                                "calibration of its own; run it again after changing tests")
    add_arguments(calibrate, CALIBRATE)
    calibrate.set_defaults(func=_cmd_calibrate)

    stubs = commands.add_parser("stubs", **_staff(handout, "course authors: regenerate the student stubs in "
                                                           "exercises/ from solutions/"))
    stubs.add_argument("--check", action="store_true", help="only report stubs that are out of date")
    stubs.set_defaults(func=_cmd_stubs)

    release = commands.add_parser("release", **_staff(handout, "course staff: write the student handout to OUT: the "
                                                               "stubs, the visible tests, the grader and a CI "
                                                               "grading workflow, never a solution or a hidden test"))
    release.add_argument("out", type=Path, metavar="OUT", help="a new or empty folder, outside the course's trees")
    release.add_argument("--course-name", help="the title of the handout's README (default: the course file's name, "
                                               "else shardlab)")
    add_arguments(release, "release")
    release.add_argument("--force", action="store_true", help="replace the contents of a non-empty OUT")
    release.set_defaults(func=_cmd_release)

    course = commands.add_parser("course", **_staff(handout, "course staff: the term's course file"))
    course_commands = course.add_subparsers(dest="course_command", required=True)
    course_check = course_commands.add_parser(
        "check", help="read the course file, say what is wrong with it (with its line), or print the term")
    add_arguments(course_check, "course")
    course_check.set_defaults(func=_cmd_course_check)

    override = commands.add_parser("override", **_staff(handout, "course staff: adjust a student's grade by hand "
                                                                 "(kept in the course's adjustments file, across "
                                                                 "regrades) and publish the class again"))
    override.add_argument("out", type=Path, metavar="OUT", help="the graded class (grade-batch's --out)")
    override.add_argument("--student", required=True, help="the student, as grade-batch names them")
    override.add_argument("--exercise", required=True, metavar="ID", help="the exercise (id or number)")
    override.add_argument("--test", metavar="NAME", help="one test's points instead of the exercise's score "
                                                         "(its name as the feedback page shows it)")
    change = override.add_mutually_exclusive_group(required=True)
    change.add_argument("--set", type=float, metavar="SCORE", help="the new score")
    change.add_argument("--add", type=float, metavar="POINTS", help="points added (negative to take some off)")
    override.add_argument("--reason", required=True, help="why: the student and the class page show it")
    override.add_argument("--by", required=True, help="who made the adjustment")
    add_arguments(override, "override")
    override.set_defaults(func=_cmd_override)

    export = commands.add_parser("export", **_staff(handout, "course staff: a graded class's grades as an LMS "
                                                             "imports them, for the course file's roster"))
    export.add_argument("out", type=Path, metavar="OUT", help="the graded class (grade-batch's --out)")
    export.add_argument("--canvas", type=Path, metavar="FILE", help="Canvas's gradebook import CSV: one column per "
                                                                    "assignment of the course file, its lms_id in it")
    export.add_argument("--long", type=Path, metavar="FILE", help="a long CSV: student, exercise, raw, penalty, "
                                                                  "override, final, and why")
    add_arguments(export, "export")
    export.set_defaults(func=_cmd_export)

    _add_nbgrader_commands(commands, handout)

    gradescope = commands.add_parser("gradescope", **_staff(handout, "course staff: the Gradescope autograder"))
    gradescope_commands = gradescope.add_subparsers(dest="gradescope_command", required=True)
    gradescope_build = gradescope_commands.add_parser(
        "build", help="write the autograder zip to upload to Gradescope (tests, grader, no solutions)")
    gradescope_build.add_argument("out_zip", type=Path, metavar="OUT.zip", help="where to write the zip")
    add_arguments(gradescope_build, "gradescope build")
    gradescope_build.set_defaults(func=_cmd_gradescope_build)

    dev = commands.add_parser("dev-check", **_staff(handout, "course authors: every reference passes, every stub "
                                                             "fails as not attempted, exercises/ is generated, "
                                                             "every hidden rule kind has a visible sample"))
    dev.add_argument("--no-tests", action="store_true", help="skip the two test runs")
    dev.set_defaults(func=_cmd_dev_check)
    return parser


def find_own_tools_first() -> None:
    """Put the folder of the Python running shardlab first on PATH, for this process and all it starts.

    A user may run `.venv/bin/shardlab` without activating the venv, and a Slurm job runs the Python that
    submitted it: the tools installed beside that Python (nbgrader's gradebook runs `alembic` by name) are then
    found there, not some other installation's or none."""
    own = os.path.dirname(sys.executable)
    if own:
        rest = [entry for entry in os.environ.get("PATH", os.defpath).split(os.pathsep) if entry and entry != own]
        os.environ["PATH"] = os.pathsep.join([own, *rest])


# The commands that start test runs: a conflicting device count in the environment is refused before any
# runs, as the set-up's error (a test process that died of it would read as the student's crash).
RUNS_TESTS = ("check", "grade", "grade-batch", "calibrate", "dev-check")


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
STAFF_ONLY = ("calibrate", "stubs", "release", "course", "override", "export", "nbgrader", "gradescope", "dev-check")
IN_A_HANDOUT = ("check", "list", "grade", "grade-batch")


def in_handout() -> bool:
    """A student's handout: the grader without the course's references."""
    return not paths.SOLUTIONS_DIR.is_dir()


def main(argv: list[str] | None = None) -> int:
    find_own_tools_first()
    handout = in_handout()
    args = build_parser(handout=handout).parse_args(argv)
    if args.command in STAFF_ONLY and handout:
        print(f"shardlab {args.command}: a course staff command: it needs the course's solutions/ and hidden tests, "
              "which a student handout does not have. Students use `shardlab check` and `shardlab list`.",
              file=sys.stderr)
        return 2
    problem = setup_error(args.command)
    if problem:
        print(f"shardlab {args.command}: set-up error: {problem}", file=sys.stderr)
        return 2
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
