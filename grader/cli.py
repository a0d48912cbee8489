"""The `shardlab` command: a thin layer over the library's functions."""

from __future__ import annotations

import argparse
import sys

from grader import catalog, paths


def _cmd_list(args) -> int:
    width = max(len(e.id) for e in catalog.EXERCISES)
    for exercise in catalog.EXERCISES:
        print(f"{exercise.id:<{width}}  {exercise.points:>3} pts  {exercise.title}")
    print(f"{'total':<{width}}  {catalog.total_points():>3} pts")
    return 0


def _cmd_stubs(args) -> int:
    from grader import stubs

    if args.check:
        from grader.devcheck import Findings, check_stubs_current

        findings = Findings()
        check_stubs_current(findings)
        for problem in findings.problems:
            print(problem)
        return 0 if findings.ok else 1
    changed = stubs.write_stubs()
    for path in changed:
        print(f"wrote {path.relative_to(paths.REPO_ROOT)}")
    if not changed:
        print("exercises/ is up to date")
    return 0


def _cmd_dev_check(args) -> int:
    from grader.devcheck import dev_check, report

    findings = dev_check(run_tests_too=not args.no_tests)
    print(report(findings))
    return 0 if findings.ok else 1


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="shardlab", description="A self-grading course in JAX parallelism.")
    commands = parser.add_subparsers(dest="command", required=True)

    commands.add_parser("list", help="the exercises and their points").set_defaults(func=_cmd_list)

    stubs = commands.add_parser("stubs", help="regenerate the student stubs in exercises/ from solutions/")
    stubs.add_argument("--check", action="store_true", help="only report stubs that are out of date")
    stubs.set_defaults(func=_cmd_stubs)

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
