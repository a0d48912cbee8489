"""The course staff's build commands as the command line runs them: `shardlab stubs`, `release`, `gradescope
build` and `nbgrader build`, from what argparse parsed to what they print and their exit status."""

from __future__ import annotations

import sys
from pathlib import Path

from grader.core.errors import ShardlabError
from grader.course import catalog, paths, stubs, term


def course_file(path: Path | None) -> term.Course | None:
    """The course of a course file (--course, or the current folder's course.toml); None without one (the
    builds then package the whole catalog). A course file that cannot be read is a ShardlabError."""
    found = path or term.find()
    return term.load(found) if found else None


def course_of_part(
    path: Path | None, part: int | None, assignment: str | None = None
) -> term.Course | None:
    """course_file's course, narrowed to one of its assignments (--assignment, which needs a course file) and
    to one part of the course (--part; the catalog's course when there is no course file). An assignment or a
    part unknown, or a part of which the term has no exercise, is a ShardlabError."""
    course = course_file(path)
    if assignment is not None:
        if course is None:
            raise ShardlabError(f"--assignment {assignment}: needs a course file (--course)")
        try:
            course = course.only(assignment)
        except KeyError as exc:
            raise ShardlabError(f"--assignment {assignment}: {exc.args[0]}") from None
    if part is None:
        return course
    try:
        return (course or term.default_course()).part(part)
    except KeyError as exc:
        raise ShardlabError(f"--part {part}: {exc.args[0]}") from None


def stubs_command(args) -> int:
    if args.check:
        from grader.commands.devcheck import Findings, check_stubs_current

        findings = Findings()
        check_stubs_current(findings)
        for problem in findings.problems:
            print(problem)
        return 0 if findings.ok else 1
    changed = stubs.write_stubs()  # main refuses it in a handout, which has no solutions/
    for path in changed:
        print(f"wrote {path.relative_to(paths.REPO_ROOT)}")
    if not changed:
        print("exercises/ is up to date")
    return 0


def release_command(args) -> int:
    from grader.platforms.handout import build_handout

    try:
        out = build_handout(
            args.out,
            course_name=args.course_name,
            force=args.force,
            course=course_of_part(args.course, args.part, args.assignment),
        )
    except ShardlabError as exc:
        print(f"shardlab release: {exc}", file=sys.stderr)
        return 1
    print(f"wrote the student handout to {out}: no solution and no hidden test in it")
    return 0


def gradescope_build_command(args) -> int:
    from grader.platforms.gradescope import build_each_assignment, build_gradescope_zip

    if (args.out_zip is None) == (args.each_assignment is None):
        print(
            "shardlab gradescope build: give OUT.zip (one assignment) or --each-assignment OUTDIR",
            file=sys.stderr,
        )
        return 2
    if args.each_assignment is not None and args.assignment is not None:
        print(
            "shardlab gradescope build: --each-assignment builds every assignment: no --assignment",
            file=sys.stderr,
        )
        return 2
    try:
        course = course_file(args.course)
        if args.each_assignment is not None:
            if course is None:
                raise ShardlabError("--each-assignment needs a course file (--course)")
            written = build_each_assignment(args.each_assignment, course=course, part=args.part)
        else:
            written = [
                build_gradescope_zip(
                    args.out_zip, course=course, assignment=args.assignment, part=args.part
                )
            ]
    except ShardlabError as exc:
        print(f"shardlab gradescope build: {exc}", file=sys.stderr)
        return 1
    for path in written:
        print(f"wrote {path}: upload it on its assignment's Configure Autograder page")
    return 0


def nbgrader_build_command(args) -> int:
    from grader.grading.collection import GradingError
    from grader.platforms.nbgrader_course import build_course, parse_groups

    try:
        written = build_course(
            args.course_dir,
            groups=parse_groups(args.group),
            exercises=args.exercise,
            course_id=args.course_id,
            course=course_of_part(args.course, args.part, args.assignment),
        )
    except (ValueError, catalog.UnknownExercise, GradingError, ShardlabError) as exc:
        print(f"shardlab nbgrader build: {exc}", file=sys.stderr)
        return 2
    for path in written:
        print(f"wrote {path}")
    return 0
