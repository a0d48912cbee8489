"""The grading commands as the command line runs them: `shardlab grade`, `grade-batch` (on this machine or on
Slurm) and `calibrate`, from what argparse parsed to what they print and their exit status."""

from __future__ import annotations

import dataclasses
import os
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

from grader.core.options import CALIBRATE, GRADE, GRADE_BATCH, MAX_PARALLEL, GradingOptions
from grader.course import catalog
from grader.course.term import Course


def options_for(args, command: str) -> GradingOptions:
    """What `command` was asked, typed; --parallel's default (the cores, at most MAX_PARALLEL) filled in."""
    from grader.course.devices import cores

    options = GradingOptions.from_args(args, command)
    return dataclasses.replace(
        options, parallel=options.parallel or max(1, min(cores(), MAX_PARALLEL))
    )


def compile_cache_for(options: GradingOptions, default: Path | None = None):
    from grader.grading.compile_cache import CompileCache, default_folder

    folder = options.cache or default or default_folder()
    return CompileCache(
        None if options.no_compile_cache else folder, max_bytes=options.cache_max_bytes
    ), folder


def course_and_options(options: GradingOptions, submission: Path | None = None):
    """The term options.course names (or the current folder's course.toml, or the catalog's), whole, and the
    options with its settings where no flag gave one, --assignment and --part turned into the exercises they
    grade (options.exercises). A course file that cannot be used is a ShardlabError. A course.toml
    found inside the submission graded is the student's, never the course's: not used."""
    from grader.course import term

    found = options.course or term.find()
    if (
        found is not None
        and submission is not None
        and options.course is None
        and Path(found).resolve().is_relative_to(Path(submission).resolve())
    ):
        print(
            f"shardlab: {found} is inside the submission: not the course file (give --course)",
            file=sys.stderr,
        )
        found = None
    course = term.load(found) if found is not None else term.default_course()
    if options.assignment is not None or options.part is not None:
        # the term stays whole: what is graded is chosen, and every exercise keeps its due date and points
        try:
            chosen = course.chosen(options.assignment, options.part, options.exercises)
        except KeyError as exc:
            raise term.CourseFileError(found or "the catalog's course", [exc.args[0]]) from None
        options = dataclasses.replace(options, exercises=chosen)
    return course, options.with_course(
        {"timing": course.timing, "hidden_visibility": course.hidden_visibility}
    )


def submission_time(args, course):
    """When the submission came in (grader.grading.lateness.Times: one time, or one per assignment), the
    course with a platform's dates, and the student's name as the course file's extensions and the
    adjustments name them (default: the submission's, a folder given as "." by its own name)."""
    from grader.grading import lateness

    student = args.student or Path(os.path.abspath(args.submission)).stem
    given = lateness.Times.parse(args.submitted_at or [], course, "--submitted-at")
    platform = None
    if args.submission_metadata:
        from grader.grading import gradescope_metadata as gradescope

        try:
            meta = gradescope.read_metadata(args.submission_metadata)
        except gradescope.SubmissionMetadataError as exc:
            # The platform's file, not the student's work: graded without a time (no late penalty), and said.
            print(
                f"shardlab grade: {exc}: graded without a submission time, so without a late penalty",
                file=sys.stderr,
            )
        else:
            course = gradescope.course_with_platform_dates(
                course, meta, getattr(args, "assignment", None)
            )
            platform = lateness.SubmissionTime(
                meta.submitted_at, "Gradescope's submission_metadata.json"
            )
            student = args.student or gradescope.course_student(course, meta) or student
    every = given.every or platform
    # the submission's own time only where no time is given for all: a student can write it
    clock = (
        None
        if every is not None
        else lateness.from_nbgrader(Path(args.submission))
        or lateness.from_git(Path(args.submission))
    )
    return dataclasses.replace(given, every=every, student_clock=clock), course, student


def grade_command(args) -> int:
    from grader.core.errors import ShardlabError
    from grader.course import adjustments
    from grader.grading import lateness, regrade, submission_digest
    from grader.grading.batch import chosen_ids
    from grader.grading.engine import GradingError, grade_submission
    from grader.grading.standing import standing
    from grader.grading.submission import SubmissionError
    from grader.harness import time_limits
    from grader.reports.writers import print_summary, write_all

    try:
        course, options = course_and_options(options_for(args, GRADE), Path(args.submission))
        submitted, course, student = submission_time(args, course)
        adjusted = adjustments.load(course.adjustments)
    except ShardlabError as exc:
        print(f"shardlab grade: {exc}", file=sys.stderr)
        return 2
    cache, folder = compile_cache_for(options)
    # what was read, before grading reads it: the whole, and each exercise's
    digest = submission_digest.digest(args.submission)
    try:
        read_for = submission_digest.exercise_digests(
            args.submission, [course.exercise(ex_id) for ex_id in chosen_ids(options, course)]
        )
    except ShardlabError as exc:
        print(f"shardlab grade: {exc}", file=sys.stderr)
        return 2
    graded_at = datetime.now(timezone.utc).isoformat(timespec="seconds")
    try:
        results = grade_submission(
            args.submission,
            options,
            cache=cache,
            course=course,
            time_limits=time_limits.load(folder, options.test_timeout),
        )
    except (SubmissionError, GradingError, catalog.UnknownExercise) as exc:
        print(f"shardlab grade: {exc}", file=sys.stderr)
        return 2
    earlier = regrade.earlier_report(args.out, args.submission)
    # each exercise graded judged from its own time; the exercises a partial grading keeps are not judged here
    results = lateness.with_term(
        lateness.stamped(results, course, submitted, earlier), course, student
    )
    results = dataclasses.replace(
        results,
        exercises={
            ex_id: dataclasses.replace(ex, graded_from=read_for.get(ex_id), graded_at=graded_at)
            for ex_id, ex in results.exercises.items()
        },
        submission_digest=digest,
        graded_at=graded_at,
    )
    if earlier is not None:
        # one assignment graded into an earlier report keeps the others' exercises as they were
        partial = (
            bool(options.exercises) or options.assignment is not None or options.part is not None
        )
        results = regrade.merge(earlier, results, partial=partial)
    for line in regrade.regraded(earlier, results):
        print(f"regraded {line}")
    mine = standing(results, adjusted, student)
    written = write_all(
        results, args.out, hidden_visibility=options.hidden_visibility, standing=mine
    )
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
        print(
            f"score {results.score:.2f} is below --fail-under {args.fail_under:g}", file=sys.stderr
        )
        return 1
    return 0


def calibrate_command(args) -> int:
    return calibrate(options_for(args, CALIBRATE), ship=args.ship)


def calibrate(options: GradingOptions, ship: bool = False, course: Course | None = None) -> int:
    """Time the reference of the term's exercises: `course` (grade-batch's, already read), else the course
    file the options name or the current folder holds, else the catalog's."""
    from grader.core.errors import ShardlabError
    from grader.grading import calibration
    from grader.grading.engine import GradingError
    from grader.harness import time_limits

    # from grade-batch: the term it read, and the exercises it grades that have no limits yet
    options = options.for_command(CALIBRATE)
    try:
        if course is None:
            course, options = course_and_options(options)
        course = course.keeping(tuple(course.exercise(name).id for name in options.exercises))
    except ShardlabError as exc:
        print(f"shardlab calibrate: {exc}", file=sys.stderr)
        return 2
    if ship and {e.id for e in course.exercises} != {e.id for e in catalog.EXERCISES}:
        # the shipped timings are every machine's limits without a calibration: every exercise's
        print(
            "shardlab calibrate: --ship times every exercise of the catalog: give no course file "
            f"(this one has {len(course.exercises)} of {len(catalog.EXERCISES)})",
            file=sys.stderr,
        )
        return 2
    cache, folder = compile_cache_for(options)
    numbers = ", ".join(e.id.split("_", 1)[0] for e in course.exercises)
    print(
        f"timing the reference solutions of {len(course.exercises)} exercise(s) ({numbers}) on this "
        "machine (once per course version and machine) ...",
        flush=True,  # in a log, before the minutes it takes
    )
    started, timed = time.monotonic(), []

    def progress(exercise: str, tests: int) -> None:
        # a line per exercise as it is timed, which a log reads as well as a terminal
        timed.append(exercise)
        print(
            f"  timed {exercise} ({tests} tests) after {time.monotonic() - started:.0f} s "
            f"({len(timed)} of {len(course.exercises)})",
            flush=True,
        )

    try:
        limits = calibration.calibrate(
            folder, options, cache=cache, course=course, progress=progress
        )
    except (time_limits.CalibrationError, GradingError) as exc:
        print(f"shardlab calibrate: {exc}", file=sys.stderr)
        return 1
    print(f"{limits.source}; wrote {Path(folder) / time_limits.FILE_NAME}")
    if ship:
        print(
            f"wrote {time_limits.ship(limits)}: the limits wherever this course is graded without a calibration"
        )
    return 0


def grade_batch_command(args) -> int:
    from rich.progress import Progress
    from rich.text import Text

    from grader.commands.publish import class_term, publish_class
    from grader.core.errors import ShardlabError
    from grader.grading.batch import CACHE, REFUSED, SIMILARITY, find_submissions, grade_batch
    from grader.harness import time_limits
    from grader.reports.text import printable

    try:
        # --parallel: grade_batch's cores / jobs
        course, options = course_and_options(
            GradingOptions.from_args(args, GRADE_BATCH), Path(args.submissions)
        )
        term = class_term(course, times_of(args.submitted_at, course, Path(args.submissions)))
    except ShardlabError as exc:
        print(f"shardlab grade-batch: {exc}", file=sys.stderr)
        return 2
    # each student's grading (a child, a Slurm task) reads the same file
    if course.source is not None:
        options = dataclasses.replace(options, course=Path(course.source.path))
    if args.slurm or args.slurm_dry_run:
        return grade_batch_on_slurm(args, options, term)
    if args.wait:
        print(
            "shardlab grade-batch: --wait follows a Slurm batch: give --slurm too", file=sys.stderr
        )
        return 2
    _, folder = compile_cache_for(options, default=args.out / CACHE)
    options = dataclasses.replace(options, cache=folder)
    graded = time_limits.graded_ids(tuple(e.id for e in course.exercises), options.exercises)
    if time_limits.batch_should_calibrate(folder, options.test_timeout, graded):
        # Limits from the reference of the exercises graded that have none yet, before the first student: this
        # also fills the compile cache with the programs every student's tests compile (the baselines and
        # references). The course read above, never found again (a course.toml in a submission is not the
        # course).
        given = dataclasses.replace(
            options_for(args, GRADE_BATCH),
            cache=folder,
            exercises=time_limits.uncalibrated(folder, graded),
        )
        if calibrate(given, course=course) != 0:
            print(
                f"shardlab grade-batch: grading with {time_limits.FALLBACK_SECONDS:g} s per test instead",
                file=sys.stderr,
            )
    klass = find_submissions(Path(args.submissions))
    if klass.ignored:
        print(
            f"not submissions (hidden, or neither a folder nor a .zip), ignored: "
            f"{', '.join(printable(repr(name)) for name in klass.ignored)}"
        )
    # the bar in a terminal; in a log (no terminal) it would show only at its end: each line counts instead
    with Progress(transient=False, disable=not sys.stdout.isatty()) as bar:
        task = bar.add_task("grading", total=len(klass.students))
        told = []

        def advance(student, outcome):
            # Text, not str: a student's name is theirs, and rich would read "[link=...]" in a str as markup.
            # "bob: regraded, submission changed since ...; ex05: 8 -> 10 (3 of 5)", else "bob: graded (1 of 5)"
            said = outcome.detail
            if not said.startswith("regraded"):
                said = f"{outcome.status} {said}"
            told.append(student)
            line = f"{student}: {said[:300]}".rstrip() + f" ({len(told)} of {len(klass.students)})"
            # soft_wrap: one line per student, whatever the terminal's width (a log is searched by line)
            bar.console.print(Text(printable(line)), soft_wrap=True)
            bar.advance(task)

        summary = grade_batch(
            args.submissions,
            args.out,
            options,
            jobs=args.jobs,
            force=args.force,
            timeout=options.time_limit + 300,
            progress=advance,
            class_term=term,
        )
    published = publish_class(
        args.out,
        summary.outcomes,
        term,
        hidden_visibility=options.hidden_visibility,
        similarity=similarity_of(klass, course, args.out / CACHE / SIMILARITY),
    )
    for problem in published.problems:
        print(printable(f"adjustments: {problem}"), file=sys.stderr)
    refused = (
        f", {summary.count(REFUSED)} refused (their rows say why)" if summary.count(REFUSED) else ""
    )
    print(
        f"{summary.count('graded')} graded, {summary.count('skipped')} already graded, "
        f"{summary.count('failed')} failed{refused} in {summary.seconds:.0f} s; grades in {published.grades_csv}; "
        f"class page {published.page}"
    )
    return 0


def times_of(path: Path | None, course, submissions: Path) -> dict | None:
    """grade-batch's times file read: each student's times (grader.grading.lateness.Times). A student it
    names who is neither in the class folder nor on the roster is an error naming the line; a student of
    the class it does not name is graded without a time, and said on stderr."""
    from grader.course import roster
    from grader.grading import lateness
    from grader.grading.batch import find_submissions
    from grader.grading.results import NO_TIME
    from grader.reports.text import printable

    if path is None:
        return None
    klass = set(find_submissions(submissions).to_grade)
    try:
        known = set(roster.load(course.roster).students) if course.roster is not None else set()
    except roster.RosterError:
        known = set()  # course check names the roster's problems
    where = "in the class folder" + (" nor on the roster" if known else "")
    read = lateness.read_times(path, course, lateness.Known(klass | known, where))
    missing = sorted(klass - set(read.students))
    if missing:
        print(
            printable(
                f"shardlab grade-batch: {path} gives no time for {', '.join(missing)}: {NO_TIME} "
                "(unless an earlier grading of theirs recorded one)"
            ),
            file=sys.stderr,
        )
    return read.students


def similarity_of(klass, course, cache: Path):
    """The class page's section of unusually similar submissions, per exercise of the course; what it
    computes kept in `cache` for the next run."""
    from grader.grading.similarity import compare_class
    from grader.reports.similarity_section import similarity_section

    return similarity_section(
        compare_class(klass.to_grade, [e.id for e in course.exercises], cache=cache)
    )


def grade_batch_on_slurm(args, options: GradingOptions, term) -> int:
    from grader.commands import slurm
    from grader.reports.text import printable

    try:
        made = slurm.plan(
            Path(args.submissions),
            args.out,
            options,
            slurm.SlurmRequest.from_args(args),
            force=args.force,
            times=term.times,
        )
        if args.slurm_dry_run:
            for job, script in made.scripts.items():
                print(f"# --- {job}.sbatch ---\n{script}")
            return 0
        for student, why in made.changed.items():
            print(printable(f"{student}: to be regraded, {why}"))
        print(
            f"{len(made.skipped)} already graded; submitting {len(made.batch.todo)} students to Slurm"
        )
        submitted = slurm.submit(made)
    except slurm.SlurmError as exc:
        print(f"shardlab grade-batch: {exc}", file=sys.stderr)
        return 2
    jobs = submitted.jobs
    print(
        "submitted "
        + ", ".join(f"{job} job {number}" for job, number in jobs.items())
        + f"; the batch is in {submitted.folder}"
    )
    if not args.wait:
        print(
            f"follow it with `squeue --jobs {','.join(jobs.values())}`; grades.csv and index.html are written "
            f"into {args.out} when the collect job ({jobs['collect']}) ends"
        )
        return 0
    try:
        state = slurm.follow(submitted)
    except slurm.SlurmError as exc:
        print(f"shardlab grade-batch: {exc}", file=sys.stderr)
        return 2
    print(
        f"the collect job ended {state}; grades in {args.out / 'grades.csv'}; class page {args.out / 'index.html'}"
    )
    return 0 if state == "COMPLETED" else 1
