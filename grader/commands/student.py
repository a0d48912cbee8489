"""The student's two commands: `shardlab check` runs visible tests against the student's work and says
what to do next; `shardlab list` shows every exercise with its status.

Like rustlings, `check` with no exercise goes through the catalog in order and stops at the first
exercise whose visible tests do not all pass: the next pending one. Every check is recorded in
`.shardlab/status.json` beside the folder checked (the repo root for exercises/), with a hash of the
module checked, so that `list` can tell "done" from "edited since".

The library functions (`check`, `exercise_statuses`) return plain data; `render_check` and
`render_list` draw it with rich; `check_command` and `list_command` are what the CLI calls.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import os
import re
from dataclasses import dataclass
from datetime import datetime, timezone
from enum import StrEnum
from pathlib import Path

from rich.console import Console
from rich.table import Table
from rich.text import Text

from grader.core.errors import ShardlabError
from grader.core.results import Category, Environment, IsolationRecord, TestResult
from grader.course import catalog, paths, stubs, term
from grader.course.devices import HOST_DEVICES, cores
from grader.course.implementations import resolve_source
from grader.grading.compile_cache import CompileCache
from grader.grading.results import ExerciseResult, GradingResults, score_exercise
from grader.harness.runner import RunFailed, run_tests
from grader.reports.feedback_page import write_feedback_html
from grader.reports.program_text import test_blocks
from grader.reports.text import explained_once, visible_share

STATUS_FILE = Path(".shardlab") / "status.json"
# XLA's compiled programs, kept between checks beside the status file: a check compiles again only what changed
# (the student's own programs); the tests' references and baselines, and what did not change, load in
# milliseconds. The student's own machine and cache: nothing else reads it.
COMPILE_CACHE = Path(".shardlab") / "compile-cache"
COMPILE_CACHE_BYTES = 256 << 20
FEEDBACK_FILE = Path(".shardlab") / "feedback.html"  # `check --html`'s page, beside the status file
OK_CATEGORIES = {Category.PASSED.value, Category.SKIPPED.value}  # a skipped test blocks nothing
SECONDS_PER_EXERCISE = 300.0  # the visible tests of one exercise take seconds; minutes mean a hang


class Status(StrEnum):
    NOT_STARTED = "not started"
    IN_PROGRESS = "in progress"
    DONE = "done"
    MISSING = "missing"


class CheckUsageError(ShardlabError, ValueError):
    """The command line asked for something that cannot be checked; the message says what."""


# ---------------------------------------------------------------------------------------------- model


@dataclass(frozen=True)
class ExerciseCheck:
    """One exercise's visible tests, run against one module; or what is known of it without running them."""

    exercise: catalog.Exercise
    tests: list[TestResult]  # grader.harness.recording's results, in run order
    module_hash: str | None  # of the module as it was when checked (None: missing)
    crash: str = ""  # pytest's output when the run ended without results
    syntax_error: str = ""  # the module does not parse: where and why (no test ran)
    known: dict | None = None  # not run: the status file's record of its last check, which passed

    @property
    def ok(self) -> bool:
        if self.known is not None:
            return True
        return (
            not self.crash
            and not self.syntax_error
            and all(t.category in OK_CATEGORIES for t in self.tests)
        )

    def count(self, category: Category) -> int:
        return sum(t.category == category.value for t in self.tests)

    def scored(self, note: str = "") -> ExerciseResult:
        """Its visible tests scored (copies: scoring writes into them): each carries its points, and the
        exercise how many of them they check."""
        return score_exercise(
            self.exercise, [dataclasses.replace(test) for test in self.tests], note
        )

    def summary(self) -> str:
        """ "visible: 4 of 20 points checked, all pass (3 tests)", or "visible: ..., 1 pass (1 of 8 tests
        pass: 2 failed, 5 not attempted)"."""
        if self.known is not None:
            return f"passed at its last check ({self.known.get('checked_at', 'earlier')}), unchanged since"
        if self.syntax_error:
            return "the module does not parse: no test ran"
        if self.crash:
            return "the test run stopped before it finished"
        total, passed = len(self.tests), self.count(Category.PASSED)
        share = visible_share(self.scored())
        if self.ok:
            return f"{share} ({total} tests)" if total != 1 else f"{share} (1 test)"
        others = [
            f"{self.count(c)} {c.value}"
            for c in Category
            if c is not Category.PASSED and self.count(c)
        ]
        return f"{share} ({passed} of {total} tests pass: {', '.join(others)})"


@dataclass(frozen=True)
class CheckReport:
    source: Path  # the folder of modules checked
    mode: str  # "one", "next" (the next pending exercise) or "all"
    checks: list[ExerciseCheck]

    @property
    def ok(self) -> bool:
        return all(c.ok for c in self.checks)

    @property
    def next_pending(self) -> ExerciseCheck | None:
        return next((c for c in self.checks if not c.ok), None)

    @property
    def exit_code(self) -> int:
        return 0 if self.ok else 1


def module_hash(path: Path) -> str | None:
    return hashlib.sha256(path.read_bytes()).hexdigest() if path.is_file() else None


def syntax_error(path: Path) -> str:
    """Where and why the module does not parse, as Python says it ("line 12: invalid syntax" and the line),
    or "" when it parses (or is missing): said once, instead of once per test that imports it."""
    try:
        compile(path.read_bytes(), str(path), "exec", dont_inherit=True)
    except SyntaxError as exc:
        where = f"line {exc.lineno}" if exc.lineno else "somewhere"
        shown = [f"{_shown(path)}, {where}: {exc.msg}"]
        if exc.text:
            shown.append("    " + exc.text.rstrip("\n"))
            if exc.offset and exc.offset > 0:
                shown.append("    " + " " * (exc.offset - 1) + "^")
        return "\n".join(shown)
    # missing: the tests say "not attempted"; NUL bytes: Python says it below
    except (OSError, ValueError):
        return ""
    return ""


def check_exercises(
    exercises: list[catalog.Exercise],
    source: Path,
    *,
    seconds_each: float = SECONDS_PER_EXERCISE,
    launcher: str = "local",
) -> list[ExerciseCheck]:
    """Run these exercises' visible tests against the modules in `source`, in one pytest process
    stopped after `seconds_each` per exercise (a student's endless loop ends the check, not the shell).
    launcher: how a multi-process exercise starts its processes ("srun": one Slurm step)."""
    # before the run: what was checked
    digests = [module_hash(e.stub_path(source)) for e in exercises]
    broken = {e.id: problem for e in exercises if (problem := syntax_error(e.stub_path(source)))}
    if broken:  # each broken module said once; the others run as usual
        rest = [e for e in exercises if e.id not in broken]
        ran = (
            {
                c.exercise.id: c
                for c in check_exercises(rest, source, seconds_each=seconds_each, launcher=launcher)
            }
            if rest
            else {}
        )
        return [
            ExerciseCheck(e, [], digest, syntax_error=broken[e.id]) if e.id in broken else ran[e.id]
            for e, digest in zip(exercises, digests)
        ]
    cache = CompileCache(source.parent / COMPILE_CACHE, max_bytes=COMPILE_CACHE_BYTES)
    try:
        run = run_tests(
            source,
            tests=[e.tests_dir() for e in exercises],
            visible_only=True,
            timeout=seconds_each * len(exercises),
            extra_args=("--launcher", launcher) if launcher != "local" else (),
            env=cache.environment(),
        )
    except RunFailed as exc:
        if len(exercises) > 1:  # one module took the process down: run each alone to find which
            return [
                check
                for e in exercises
                for check in check_exercises(
                    [e], source, seconds_each=seconds_each, launcher=launcher
                )
            ]
        return [ExerciseCheck(exercises[0], [], digests[0], crash=str(exc))]
    return [
        ExerciseCheck(e, [t for t in run.results if t.exercise == e.id], digest)
        for e, digest in zip(exercises, digests)
    ]


def term_course() -> term.Course | None:
    """This term: a handout's course.toml (written by `shardlab release` from the instructor's course file), or
    the course file beside the grader; None without one (the catalog's exercises, no due dates)."""
    found = term.find(paths.REPO_ROOT)
    try:
        return term.load(found) if found else None
    except term.CourseFileError as exc:
        raise CheckUsageError(str(exc)) from None


def term_of_part(part: int | None) -> term.Course | None:
    """term_course, narrowed to one part of the course (--part; without a course file, the catalog's course's
    part). A part unknown, or of which the term has none, is a CheckUsageError."""
    course = term_course()
    if part is None:
        return course
    try:
        return (course or term.default_course()).part(part)
    except KeyError as exc:
        raise CheckUsageError(f"--part {part}: {exc.args[0]}") from None


def term_exercises(part: int | None = None) -> tuple[catalog.Exercise, ...]:
    """This term's exercises (of one part: --part), with its points; without a course file, the catalog's."""
    return (term_of_part(part) or term.default_course()).exercises


def check(
    exercise: str | None = None,
    *,
    impl: str | Path = "exercises",
    all_exercises: bool = False,
    record: bool = True,
    launcher: str = "local",
    part: int | None = None,
) -> CheckReport:
    """Check one exercise (an id or number), every exercise, or by default the catalog in order up to
    the first one whose visible tests do not all pass. Records each outcome unless record=False."""
    if exercise and all_exercises:
        raise CheckUsageError("give an exercise or --all, not both")
    try:
        source = resolve_source(impl)
        exercises = term_exercises(part)
        chosen = (
            next((e for e in exercises if e.id == catalog.get(exercise).id), None)
            if exercise
            else None
        )
        if exercise and chosen is None and part is not None:
            raise CheckUsageError(
                f"{catalog.get(exercise).id} is not among this term's exercises of "
                f"{catalog.part(part).title} (--part {part})"
            )
        if exercise and chosen is None:
            raise catalog.UnknownExercise(
                f"{catalog.get(exercise).id} (not in this term's course.toml)"
            )
    except (FileNotFoundError, catalog.UnknownExercise) as exc:
        raise CheckUsageError(str(exc)) from None
    if chosen:
        report = CheckReport(source, "one", check_exercises([chosen], source, launcher=launcher))
    elif all_exercises:
        report = CheckReport(
            source, "all", check_exercises(list(exercises), source, launcher=launcher)
        )
    else:
        report = CheckReport(source, "next", _check_up_to_next_pending(source, exercises, launcher))
    if record:
        record_checks(report)
    return report


def _check_up_to_next_pending(
    source: Path, exercises, launcher: str = "local"
) -> list[ExerciseCheck]:
    """Rustlings-style: the term's exercises in order, stopping at the first not all green. An exercise
    whose module passed its last check and is unchanged since is not run again (`--all` runs everything)."""
    recorded = load_status(source)
    checks = []
    for exercise in exercises:
        last = recorded.get(exercise.id)
        if exercise_status(exercise, source, last) is Status.DONE:
            checks.append(ExerciseCheck(exercise, [], last.get("sha256"), known=last))
            continue
        checks += check_exercises([exercise], source, launcher=launcher)
        if not checks[-1].ok:
            break
    return checks


# ------------------------------------------------------------------------------------- status file


def status_file(source: Path) -> Path:
    """Beside the folder checked, so the repo's exercises/ keeps it at the repo root."""
    return source.parent / STATUS_FILE


def load_status(source: Path) -> dict[str, dict]:
    """{exercise id: last recorded check} for the folder `source`; empty when none is readable."""
    try:
        data = json.loads(status_file(source).read_text())
    except (OSError, ValueError):
        return {}  # a missing or damaged status file only loses the "done" marks
    folder = data.get(source.name) if isinstance(data, dict) else None
    return folder if isinstance(folder, dict) else {}


def record_checks(report: CheckReport) -> Path:
    """Store each check's outcome and module hash; several folders may share one status file."""
    path = status_file(report.source)
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        data = {}
    folder = data.setdefault(report.source.name, {})
    now = datetime.now(timezone.utc).isoformat(timespec="seconds")
    for item in report.checks:
        if item.known is not None:  # not run now: its record stands
            continue
        categories: dict[str, int] = {}
        for test in item.tests:
            categories[test.category] = categories.get(test.category, 0) + 1
        folder[item.exercise.id] = {
            "ok": item.ok,
            "sha256": item.module_hash,
            "categories": categories,
            "crashed": bool(item.crash),
            "syntax_error": bool(item.syntax_error),
            "checked_at": now,
        }
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_suffix(".tmp")
    partial.write_text(json.dumps(data, indent=1, sort_keys=True) + "\n")
    os.replace(partial, path)  # never leave a half-written file behind
    return path


# ---------------------------------------------------------------------------------------- the page


def check_results(report: CheckReport) -> GradingResults:
    """A check as grading results, for the feedback page: each visible test carries its points, as in
    `shardlab grade --visible-only`; a run that stopped is a problem of that exercise."""
    exercises, problems = {}, []
    for item in report.checks:
        if item.known is not None:
            continue  # not run now: nothing to show but that it passed before
        note = (
            "module missing: not attempted"
            if item.module_hash is None
            else f"the module does not parse:\n{item.syntax_error}"
            if item.syntax_error
            else ""
        )
        exercises[item.exercise.id] = item.scored(note)
        if item.crash:
            problems.append(
                f"{item.exercise.id}: the tests stopped before they finished: the process running them "
                f"ended (did your code exit, crash Python or run out of memory?). Its last output:\n"
                f"{item.crash.strip()[-2000:]}"
            )
    environment = Environment(
        devices=HOST_DEVICES,
        cores=cores(),
        timing="enforce",
        isolation=IsolationRecord(
            {"level": "none: `shardlab check` runs your code in its own pytest process"}
        ),
    )
    return GradingResults(
        _shown(report.source), exercises, environment, problems, visible_only=True
    )


def write_check_page(report: CheckReport, path: Path | None = None) -> Path:
    """`shardlab check --html`: the check's feedback page, by default beside the status file."""
    return write_feedback_html(check_results(report), path or report.source.parent / FEEDBACK_FILE)


# ------------------------------------------------------------------------------------------ status


def _stub_lines(exercise: catalog.Exercise, text: str) -> list[str]:
    return re.findall(rf'raise NotImplementedError\("{exercise.number}:[^"]*"\)', text)


def exercise_status(
    exercise: catalog.Exercise,
    source: Path,
    recorded: dict | None,
    solutions: Path = paths.SOLUTIONS_DIR,
) -> Status:
    """What `list` shows for one module: missing, not started, in progress or done."""
    module = exercise.stub_path(source)
    if not module.is_file():
        return Status.MISSING
    if recorded and recorded.get("ok") and recorded.get("sha256") == module_hash(module):
        return Status.DONE
    reference = exercise.solution_path(solutions)
    if reference.is_file():
        stub = stubs.make_stub(reference.read_text(), exercise, str(reference))
        untouched = module.read_bytes() == stub.encode()
    else:
        # A student handout has no solutions/: the stub's raise lines still there mean untouched,
        # unless a recorded check saw the code do something (a helper may keep its stub line).
        seen = set(recorded.get("categories", {})) if recorded else set()
        started = bool(seen - {Category.NOT_ATTEMPTED.value, Category.SKIPPED.value})
        untouched = bool(_stub_lines(exercise, module.read_text())) and not started
    return Status.NOT_STARTED if untouched else Status.IN_PROGRESS


def exercise_statuses(
    *,
    impl: str | Path = "exercises",
    solutions: Path = paths.SOLUTIONS_DIR,
    part: int | None = None,
) -> list[tuple[catalog.Exercise, Status]]:
    source = resolve_source(impl)
    recorded = load_status(source)
    return [
        (e, exercise_status(e, source, recorded.get(e.id), solutions)) for e in term_exercises(part)
    ]


# ------------------------------------------------------------------------------------- rendering

_MARKS = {
    Category.PASSED: ("✓", "green"),
    Category.FAILED: ("✗", "red"),
    Category.ERROR: ("!", "red"),
    Category.TIMEOUT: ("!", "red"),
    Category.CRASHED: ("!", "red"),
    Category.NOT_ATTEMPTED: ("○", "yellow"),
    Category.SKIPPED: ("-", "dim"),
}
_STATUS_STYLES = {
    Status.DONE: "green",
    Status.IN_PROGRESS: "yellow",
    Status.NOT_STARTED: "dim",
    Status.MISSING: "red",
}


def _shown(path: Path) -> str:
    """A path as the student would type it: relative to where they are, when it is below."""
    try:
        return str(path.relative_to(Path.cwd()))
    except ValueError:
        return str(path)


def _print_verbatim(console: Console, text: Text) -> None:
    """Messages carry layout grids: no wrapping, no cropping, no markup."""
    console.print(text, no_wrap=True, overflow="ignore", crop=False)


def _indented(message: str, spaces: int) -> str:
    pad = " " * spaces
    return "\n".join(pad + line for line in message.splitlines())


def render_test(test: TestResult, console: Console, explained: str = "") -> None:
    """One test's mark and name; one that did not pass, its message, `explained` (what its JAX error means,
    or where that is said) and its programs' pictures."""
    category = Category(test.category)
    mark, style = _MARKS[category]
    line = Text.assemble("  ", (mark, style), " ", test.name)
    message = test.message.strip()
    if category is Category.NOT_ATTEMPTED and "\n" not in message:
        line.append(f"  {message}", style="yellow")  # one short line: the stub's own words
        message = ""
    elif category is not Category.PASSED:
        line.append(f"  {category.value}", style=style)
    _print_verbatim(console, line)
    if message and category is not Category.PASSED:
        _print_verbatim(console, Text(_indented(message, 6)))
    if explained and category is not Category.PASSED:
        _print_verbatim(console, Text(_indented(explained, 6)))
    if category is not Category.PASSED:
        # its programs' tables and pictures, and its memory bars, drawn as text as the layouts are
        for lines in test_blocks(test, console.width - 6):
            _print_verbatim(console, Text(_indented("\n".join(lines), 6)))


def _heading(item: ExerciseCheck) -> Text:
    return Text.assemble((item.exercise.id, "bold"), f"  {item.exercise.title}")


def _outcome_line(item: ExerciseCheck) -> Text:
    mark, style = _MARKS[Category.PASSED] if item.ok else ("✗", "red")
    return Text.assemble((mark, style), " ", (item.exercise.id, "bold"), f": {item.summary()}")


def render_exercise(item: ExerciseCheck, console: Console) -> None:
    """Every visible test with its mark, each failure's message, then the exercise's outcome."""
    console.print(_heading(item))
    if item.module_hash is None and item.count(Category.NOT_ATTEMPTED) == len(item.tests):
        # One line instead of the same "missing" message under every test.
        mark, style = _MARKS[Category.NOT_ATTEMPTED]
        console.print(
            Text.assemble(
                "  ",
                (mark, style),
                f" {item.exercise.module_file} is missing: {len(item.tests)} tests not attempted",
            )
        )
    elif item.syntax_error:
        console.print(Text("  ✗ the module does not parse, so no test ran:", style="red"))
        _print_verbatim(console, Text(_indented(item.syntax_error, 6)))
    else:
        explained = explained_once(item.tests)
        for test in item.tests:
            render_test(test, console, explained.get(test.nodeid, ""))
    if item.crash:
        console.print(
            Text(
                "  The tests stopped before they finished: the process running them ended "
                "(did your code exit, crash Python or run out of memory?). Its last output:",
                style="red",
            )
        )
        _print_verbatim(console, Text(_indented(item.crash.strip(), 6)))
    console.print(_outcome_line(item))


def _check_again(source: Path, exercise: catalog.Exercise | None = None) -> str:
    """The `shardlab check` command to type next, for the same folder."""
    words = ["shardlab", "check"] + ([exercise.number] if exercise else [])
    if source != paths.EXERCISES_DIR:
        words += ["--impl", _shown(source)]
    return " ".join(words)


def _hint(report: CheckReport, item: ExerciseCheck, console: Console) -> None:
    named = item.exercise if report.mode != "next" else None  # `check` alone finds it again
    if not item.syntax_error:  # a typo is not a misunderstanding: no hint about the idea
        console.print(Text.assemble(("Hint: ", "bold"), item.exercise.hint))
    console.print(
        Text(
            f"Edit {_shown(item.exercise.stub_path(report.source))}, then run "
            f"`{_check_again(report.source, named)}` again."
        )
    )


def render_check(report: CheckReport, console: Console) -> None:
    if report.mode == "next":
        _render_next(report, console)
        return
    for item in report.checks:
        render_exercise(item, console)
        console.print()
    if report.mode == "all":
        _render_summary(report, console)
        if report.next_pending:
            _next(report, report.next_pending, console)
    elif report.ok:
        console.print(Text(_graded_later(report.checks[0].exercise)))
    else:
        _hint(report, report.checks[0], console)


def _graded_later(exercise: catalog.Exercise) -> str:
    """What the hidden tests add, in the words that fit the exercise (ex13 has no mesh)."""
    if exercise.id == "ex12_multi_controller":
        return "When you are graded, hidden tests check more: more processes, other inputs."
    if exercise.mesh_shapes:
        shapes = ", ".join(exercise.mesh_shapes[:-1]) + f" and {exercise.mesh_shapes[-1]}"
        return (
            f"When you are graded, hidden tests check more: other mesh shapes ({shapes}), other "
            "inputs and more cases."
        )
    if exercise.devices == (8,):
        return "When you are graded, hidden tests check more: other inputs and more cases."
    return "When you are graded, hidden tests check more: other mesh sizes, other inputs and more cases."


def _render_next(report: CheckReport, console: Console) -> None:
    if report.checks and all(item.known is not None for item in report.checks):
        _render_all_known(report, console)
        return
    pending = report.next_pending
    for item in report.checks:
        if item is pending:
            console.print()
            render_exercise(item, console)
        else:
            console.print(_outcome_line(item))
    console.print()
    if pending is None:
        console.print(
            Text(f"All {len(report.checks)} exercises pass their visible tests.", style="green")
        )
        return
    _next(report, pending, console)


def _next(report: CheckReport, pending: ExerciseCheck, console: Console) -> None:
    exercise = pending.exercise
    console.print(
        Text.assemble(
            ("Next: ", "bold"),
            (exercise.id, "bold"),
            f" ({exercise.title}, {exercise.points} points)",
        )
    )
    _hint(report, pending, console)


def _render_all_known(report: CheckReport, console: Console) -> None:
    """Every exercise passed at its last check and is unchanged since: the table at once, nothing run."""
    render_list(
        [(item.exercise, Status.DONE) for item in report.checks],
        console,
        report.source,
        footer=False,
    )
    console.print(
        Text(
            f"All {len(report.checks)} exercises passed their visible tests at their last check and are "
            f"unchanged since. `{_check_again(report.source)} --all` runs them all again.",
            style="green",
        )
    )


def _render_summary(report: CheckReport, console: Console) -> None:
    table = Table(box=None, show_header=True, header_style="bold", pad_edge=False)
    table.add_column("exercise")
    table.add_column("visible tests")
    for item in report.checks:
        mark, style = _MARKS[Category.PASSED] if item.ok else ("✗", "red")
        table.add_row(Text.assemble((mark, style), " ", item.exercise.id), Text(item.summary()))
    console.print(table)
    done = sum(item.ok for item in report.checks)
    console.print(
        Text(
            f"{done} of {len(report.checks)} exercises pass their visible tests.",
            style="green" if report.ok else "",
        )
    )


def render_list(
    statuses: list[tuple[catalog.Exercise, Status]],
    console: Console,
    source: Path = paths.EXERCISES_DIR,
    *,
    footer: bool = True,
    course: term.Course | None = None,
) -> None:
    """The exercises with their points and status; with the term's course file, each one's assignment and due
    date too, and the late policy under the table."""
    table = Table(box=None, show_header=True, header_style="bold", pad_edge=False)
    # Ids are never cut: they are what a student types; titles wrap instead.
    table.add_column("exercise", no_wrap=True, min_width=max(len(e.id) for e, _ in statuses))
    table.add_column("title", ratio=1)
    if course is not None:
        table.add_column("assignment")
        table.add_column("due", no_wrap=True)
    table.add_column("points", justify="right", no_wrap=True)
    table.add_column("status", no_wrap=True)
    for i, (exercise, status) in enumerate(statuses):
        if i == 0 or exercise.part != statuses[i - 1][0].part:  # each part under its heading
            if i:
                table.add_section()
            # "Part 2" under the ids, its subject under the titles: the id column keeps its width
            label, _, subject = catalog.part(exercise.part).title.partition(": ")
            table.add_row(Text(label, style="bold"), Text(subject, style="bold"))
        dated = []
        if course is not None:
            assignment, (due, _) = course.assignment_of(exercise.id), course.due(exercise.id)
            dated = [
                Text(assignment.name if assignment else ""),
                term.readable(due) if due is not None else "no due date",
            ]
        table.add_row(
            exercise.id,
            Text(exercise.title),
            *dated,
            f"{exercise.points:g}",
            Text(status.value, style=_STATUS_STYLES[status]),
        )
    bonus = any(e.bonus for e, _ in statuses)
    table.add_row(
        "total",
        Text("bonus points on top" if bonus else ""),
        *(["", ""] if course is not None else []),
        f"{math.fsum(e.points for e, _ in statuses if not e.bonus):g}",
        "",
    )
    console.print(table)
    if course is not None:
        console.print(Text(f"Late work: {course.late.describe()}."))
    if not footer:
        return
    done = sum(status is Status.DONE for _, status in statuses)
    console.print(
        Text(
            f"{done} of {len(statuses)} done: visible tests all passed at the last check, file "
            "unchanged since."
        )
    )
    console.print(Text(f"`{_check_again(source)}` checks the next pending exercise."))


# -------------------------------------------------------------------------------------- commands


def _consoles(console: Console | None) -> tuple[Console, Console]:
    if console is not None:
        return console, console
    return Console(highlight=False), Console(stderr=True, highlight=False)


def check_command(
    exercise: str | None = None,
    *,
    impl: str | Path = "exercises",
    all_exercises: bool = False,
    html: Path | bool = False,
    console: Console | None = None,
    launcher: str = "local",
    part: int | None = None,
) -> int:
    """`shardlab check`: 0 when everything checked passes, 1 when something does not, 2 for bad usage.
    html: also write the feedback page (True: beside the status file; a path: there) and print where.
    launcher: "srun" runs a multi-process exercise's processes as one Slurm step."""
    out, err = _consoles(console)
    try:
        report = check(
            exercise, impl=impl, all_exercises=all_exercises, launcher=launcher, part=part
        )
    except CheckUsageError as exc:
        err.print(Text(f"shardlab check: {exc}"), soft_wrap=True)
        return 2
    render_check(report, out)
    if html:
        page = write_check_page(report, None if html is True else Path(html))
        out.print(Text(f"Feedback page: {_shown(page.resolve())}"), soft_wrap=True)
    return report.exit_code


def list_command(
    *,
    impl: str | Path = "exercises",
    solutions: Path = paths.SOLUTIONS_DIR,
    console: Console | None = None,
    part: int | None = None,
) -> int:
    """`shardlab list`: the term's exercises (of one part: --part), under their part's heading, their points
    and status; with a course file, each one's assignment and due date, and the late policy."""
    out, err = _consoles(console)
    try:
        statuses = exercise_statuses(impl=impl, solutions=solutions, part=part)
        course = term_of_part(part)
        course = course if course is not None and course.source is not None else None
    except (FileNotFoundError, CheckUsageError) as exc:
        err.print(Text(f"shardlab list: {exc}"), soft_wrap=True)
        return 2
    render_list(statuses, out, resolve_source(impl), course=course)
    return 0


def check_from_args(args) -> int:
    """`shardlab check` as parsed: --html alone writes the page to its default place."""
    return check_command(
        args.exercise,
        impl=args.impl,
        all_exercises=args.all,
        html=True if args.html == "" else args.html or False,
        launcher=args.launcher,
        part=args.part,
    )


def list_from_args(args) -> int:
    return list_command(impl=args.impl, part=args.part)
