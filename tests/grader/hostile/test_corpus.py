"""A corpus of hostile and broken submissions, graded as one class by the real grader (`grade_batch`, two
at a time, every student module in a confined worker): each must get exactly the points it earned, leave
nothing running, change no file of the checkout or the Python environment, reach no classmate's result,
no network and no secret, and carry no hidden test out.

Each case is a reference module or a stub with a twist, so that exactly the tests the twist touches
change category. Stub-based cases are the sharp ones: an attack that worked would turn "not attempted"
into points (or, where it says so, into a distinctive error). Grouped as the attacks are: crashes and
limits; tampering with the grader; forging results; reading what is secret; gaming the checks. The
harness never runs student code, so every attack here runs in the worker, and the question each case
asks is whether anything it does there reaches the harness, the grading process or the machine.

The cases are folders of cases/ (see `load_case`): the attack's own files, linted as any module, and a
case.toml saying how the submission is built from them and what each of its tests must come to.
"""

from __future__ import annotations

import csv
import hashlib
import json
import os
import socket
import sys
import textwrap
import time
import tomllib
from collections.abc import Callable
from pathlib import Path
from typing import NamedTuple

import psutil
import pytest

from grader.course import catalog, paths
from grader.grading.batch import grade_batch, student_folder
from grader.grading.results import GradingResults

# its module-scoped fixture does the heavy work once
pytestmark = pytest.mark.xdist_group("test_hostile")

EX01, EX02, EX03, EX04 = (catalog.get(f"ex0{n}") for n in (1, 2, 3, 4))
GRADED = [EX01, EX02, EX03, EX04]
MARKER = "shardlab-hostile-daemon-7f3a"  # in the daemon's command line, to find it afterwards
PORT = "__SHARDLAB_LISTENER_PORT__"  # replaced by the port of a listener the fixture opens
# replaced by the graders' compile cache folder (SHARDLAB_CACHE)
CACHE = "__SHARDLAB_COMPILE_CACHE__"
PLANTED = "planted-by-a-student-cache"  # an entry's name as jax writes them (<key>-cache)
CASES_DIR = Path(__file__).parent / "cases"
SHARED = "_shared/"  # cases/_shared/: attack code several cases append ("_shared/read_secret.py")


def source(exercise, stub: bool = False) -> str:
    path = exercise.stub_path() if stub else exercise.solution_path()
    return "".join(
        line for line in path.read_text().splitlines(keepends=True) if "### " not in line
    )


def wrap(function: str, condition: str, action: str) -> str:
    """Redefine a function of the module so that it runs `action` (Python source: a line or a block) when
    `condition` holds (n: the first positional argument)."""
    return "\n".join(
        [
            "",
            f"_{function}_original = {function}",
            f"def {function}(*args, **kwargs):",
            "    n = args[0] if args else None",
            f"    if {condition}:",
            textwrap.indent(textwrap.dedent(action).strip("\n"), " " * 8),
            f"    return _{function}_original(*args, **kwargs)",
            "",
        ]
    )


# --- the cases -------------------------------------------------------------------------------------
# cases/<name>/case.toml:
#   [submission]  file name -> how it is built, in this order:
#       base = "reference" | "stub"   that of the exercise the file is the module of ("### " lines dropped);
#                                     without it, the file starts empty
#       replace = {old = new}         edits of the base, each old text found exactly once
#       append = [file, ...]          files of the case's folder appended (after a blank line if any base);
#                                     "_shared/<file>": one of cases/_shared/, which several cases use
#       wrap = [{function, when, action}, ...]   `wrap(function, when, the text of the file action)` appended
#   [expected]    exercise number -> {name prefix -> category or [accepted categories], "*" -> every other
#                 test}; the first prefix a test's name starts with decides. An exercise not listed: every
#                 test "not attempted".
#   [messages]    category -> a fragment every test of that category must show.
# Every file of the folder but case.toml is used by the recipe.


class Case(NamedTuple):
    files: dict[str, str]  # the submission: file name -> text
    expected: Callable  # expected(exercise id, test name) -> category or tuple of categories
    messages: dict  # category -> a fragment every test of that category must show


def categories(table: dict) -> Callable[[str], object]:
    """test name -> the category (or tuple of accepted ones) an [expected] table gives it."""
    assert "*" in table, f"{table}: no '*' for the other tests"
    as_category = {prefix: tuple(c) if isinstance(c, list) else c for prefix, c in table.items()}
    return lambda name: next(
        (c for prefix, c in as_category.items() if prefix != "*" and name.startswith(prefix)),
        as_category["*"],
    )


def build(folder: Path, name: str, recipe: dict, used: set[str]) -> str:
    assert set(recipe) <= {"base", "replace", "append", "wrap"}, (
        f"{folder.name}/{name}: {sorted(recipe)}"
    )
    text = ""
    if "base" in recipe:
        exercise = next(e for e in GRADED if e.module_file == name)
        text = source(exercise, stub={"reference": False, "stub": True}[recipe["base"]])
    for old, new in recipe.get("replace", {}).items():
        assert text.count(old) == 1, (
            f"{folder.name}/{name}: {old!r} is not in its base exactly once"
        )
        text = text.replace(old, new)
    for part in recipe.get("append", []):
        text += ("\n" if text else "") + (
            CASES_DIR / part if part.startswith(SHARED) else folder / part
        ).read_text()
        used.add(part)
    for wrapped in recipe.get("wrap", []):
        assert set(wrapped) == {"function", "when", "action"}, f"{folder.name}/{name}: {wrapped}"
        text += wrap(wrapped["function"], wrapped["when"], (folder / wrapped["action"]).read_text())
        used.add(wrapped["action"])
    return text


def load_case(folder: Path) -> Case:
    case = tomllib.loads((folder / "case.toml").read_text())
    assert set(case) <= {"submission", "expected", "messages"}, f"{folder.name}: {sorted(case)}"
    used: set[str] = set()
    files = {name: build(folder, name, recipe, used) for name, recipe in case["submission"].items()}
    unused = {p.name for p in folder.iterdir()} - used - {"case.toml", "__pycache__"}
    assert not unused, f"{folder.name}: files no recipe uses: {sorted(unused)}"
    by_id = {
        catalog.get(number).id: categories(table) for number, table in case["expected"].items()
    }

    def expected(exercise: str, name: str) -> object:
        return by_id[exercise](name) if exercise in by_id else "not attempted"

    return Case(files, expected, case.get("messages", {}))


CASES: dict[str, Case] = {
    folder.name: load_case(folder)
    for folder in sorted(CASES_DIR.iterdir())
    if folder.is_dir() and folder.name not in ("__pycache__", SHARED.strip("/"))
}
SHIPPED = sorted(set(CASES["ships_conftest_and_site_hooks"].files) - {EX01.module_file})


# --- grading the corpus ----------------------------------------------------------------------------


def accepted(expected) -> tuple:
    return expected if isinstance(expected, tuple) else (expected,)


def fingerprint(root: Path, *, contents: bool, skip: tuple[str, ...] = ()) -> dict[str, tuple]:
    """Every file under root (__pycache__ included): size and mtime, and the digest of those under 1 MB."""
    found = {}
    for folder, folders, files in os.walk(root):
        folders[:] = [f for f in folders if f not in skip]
        for name in files:
            path = Path(folder, name)
            try:
                stat = path.lstat()
                digest = (
                    hashlib.sha256(path.read_bytes()).hexdigest()
                    if contents and path.is_file() and stat.st_size < 1 << 20
                    else ""
                )
            except OSError:
                continue
            found[str(path)] = (stat.st_size, stat.st_mtime_ns, digest)
    return found


def checkout() -> dict[str, tuple]:
    # Not .git, nor the cache of a linter that may run beside the suite: grading reaches neither. Nor the
    # venv the suite may run from (.ci/run's .venv): environment() watches it.
    return fingerprint(paths.REPO_ROOT, contents=True, skip=(".git", ".ruff_cache", ".venv"))


def environment_roots() -> list[Path]:
    import site

    return sorted({Path(p) for p in site.getsitepackages()} | {Path(sys.prefix) / "bin"})


def environment() -> dict[str, tuple]:
    return {
        path: entry
        for root in environment_roots()
        for path, entry in fingerprint(root, contents=False).items()
    }


def differences(before: dict, after: dict) -> list[str]:
    return sorted(
        f"{path}: {'added' if path not in before else 'removed' if path not in after else 'changed'}"
        for path in before.keys() | after.keys()
        if before.get(path) != after.get(path)
    )


def daemons_running() -> list[int]:
    return [
        p.pid
        for p in psutil.process_iter(["cmdline", "status"])
        if MARKER in " ".join(p.info["cmdline"] or []) and p.info["status"] != psutil.STATUS_ZOMBIE
    ]


class Graded(NamedTuple):
    results: dict[str, GradingResults | None]  # read back from each student's report.json
    out: Path
    summary: object
    changes: dict[str, list[str]]
    listener: socket.socket


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    """The whole corpus graded as one class, two at a time, as an instructor would."""
    # a submission that reaches it was not confined
    listener = socket.create_server(("127.0.0.1", 0))
    listener.setblocking(False)
    port = str(listener.getsockname()[1])
    class_dir = tmp_path_factory.mktemp("class")
    for name, case in CASES.items():
        (class_dir / name).mkdir()
        for filename, text in case.files.items():
            (class_dir / name / filename).write_text(
                text.replace(PORT, port).replace(CACHE, os.environ["SHARDLAB_CACHE"])
            )
    out = tmp_path_factory.mktemp("graded")
    checkout_before, environment_before = checkout(), environment()
    started = time.monotonic()
    # each test's time limit is grading's own (the shipped limits, of processor time), as for a class
    summary = grade_batch(class_dir, out, jobs=2, exercises=[e.number for e in GRADED])
    print(
        f"\nhostile corpus: {len(CASES)} submissions graded in {time.monotonic() - started:.1f} s wall time"
    )
    for outcome in sorted(summary.outcomes, key=lambda o: -o.seconds):
        print(
            f"  {outcome.student}: {outcome.status} in {outcome.seconds:.1f} s {outcome.detail[:200]}"
        )
    changes = {
        "checkout": differences(checkout_before, checkout()),
        "environment": differences(environment_before, environment()),
    }
    results = {}
    for name in CASES:
        report = student_folder(out, name) / "report.json"
        results[name] = (
            GradingResults.from_dict(json.loads(report.read_text())) if report.is_file() else None
        )
    yield Graded(results, out, summary, changes, listener)
    listener.close()


def expected_score(case: Case, results: GradingResults) -> float:
    """What the case earns by its expectations: the tests expected to pass, and those that may pass or not
    (an abort that may fall after its call's answer) where they passed; nothing else."""
    return sum(
        t.max_score
        for t in results.tests()
        if accepted(case.expected(t.exercise, t.name)) == ("passed",)
        or ("passed" in accepted(case.expected(t.exercise, t.name)) and t.category == "passed")
    )


def test_the_cases_hold_what_the_checks_look_for():
    """What the checks look for in the machine and in the reports is in the cases' files: the daemon's
    marker, the planted cache entry's name, the placeholders the fixture replaces, the files shipped."""
    assert MARKER in CASES["spawns_a_daemon"].files[EX01.module_file]
    assert PORT in CASES["reaches_the_network"].files[EX01.module_file]
    assert CACHE in CASES["reaches_the_compile_cache"].files[EX01.module_file]
    assert PLANTED in CASES["reaches_the_compile_cache"].files[EX01.module_file]
    assert SHIPPED == ["conftest.py", "evil.pth", "pytest.ini", "sitecustomize.py"]
    assert "could not be read" in CASES["leaks_hidden_tests_in_an_error"].files[EX01.module_file]
    assert "note:" in CASES["notes_hidden_calls"].files[EX01.module_file]


@pytest.mark.slow
def test_every_submission_was_graded(graded):
    statuses = sorted((o.student, o.status, o.detail[:300]) for o in graded.summary.outcomes)
    assert statuses == [(name, "graded", "") for name in sorted(CASES)]


@pytest.mark.slow
@pytest.mark.parametrize("case", list(CASES))
def test_each_case_gets_exactly_what_it_earned(graded, case):
    results = graded.results[case]
    assert results is not None, f"no report.json for {case}"
    expected = CASES[case]
    tests = results.tests()
    assert {t.exercise for t in tests} == {e.id for e in GRADED}
    wrong = [
        f"{t.exercise} {t.name}: {t.category} ({t.message[:300]})"
        for t in tests
        if t.category not in accepted(expected.expected(t.exercise, t.name))
    ]
    assert not wrong, f"{len(wrong)} test(s) not as expected:\n" + "\n".join(wrong[:12])
    for category, fragment in expected.messages.items():
        missing = [
            f"{t.name}: {t.message[:300]}"
            for t in tests
            if t.category == category and fragment not in t.message
        ]
        assert not missing, f"{category} without {fragment!r}:\n" + "\n".join(missing[:5])
    earned = expected_score(expected, results)
    assert results.score == pytest.approx(earned)
    gradescope = json.loads((student_folder(graded.out, case) / "results.json").read_text())
    assert gradescope["score"] == pytest.approx(round(earned, 4), abs=1e-3)


@pytest.mark.slow
def test_an_xla_abort_names_its_signal(graded):
    """The heap corruption of aborts_xla_in_a_call may hang a call or go unnoticed in it (so each of those
    tests accepts that), but it does abort: six calls corrupt the heap, and at least one of them is graded
    as the crash it was, naming the signal."""
    crashed = [t for t in graded.results["aborts_xla_in_a_call"].tests() if t.category == "crashed"]
    assert crashed, "no call of aborts_xla_in_a_call was graded as crashed"
    assert all("killed by SIG" in t.message for t in crashed), [t.message[:200] for t in crashed]


@pytest.mark.slow
def test_the_worker_was_sandboxed(graded):
    isolation = graded.results["zz_honest_classmate"].environment.isolation
    print(f"\nisolation in force: {isolation.level} ({isolation.described})")
    assert isolation.level in ("bubblewrap", "landlock")
    assert all(
        r is None or r.environment.isolation.level == isolation.level
        for r in graded.results.values()
    )


@pytest.mark.slow
def test_nothing_is_left_running(graded):
    assert daemons_running() == [], "a submission's daemon outlived its grading"
    left = [
        p for p in psutil.Process().children(recursive=True) if p.status() != psutil.STATUS_ZOMBIE
    ]
    assert left == [], [(p.pid, p.cmdline()) for p in left]


@pytest.mark.slow
def test_the_checkout_and_the_environment_are_unchanged(graded):
    assert graded.changes["checkout"] == [], "\n".join(graded.changes["checkout"][:30])
    assert graded.changes["environment"] == [], graded.changes["environment"][:20]


@pytest.mark.slow
def test_no_classmate_result_changes(graded):
    """Every report.json and grades.csv row says what its case earned, whatever the others did."""
    honest = graded.results["zz_honest_classmate"]
    assert honest.max_score == sum(e.points for e in GRADED)
    assert honest.score == pytest.approx(honest.max_score)
    with open(graded.out / "grades.csv", newline="") as handle:
        table = csv.DictReader(handle)
        header, rows = table.fieldnames, {row["student"]: row for row in table}
    assert "total" in header and set(rows) == set(CASES)
    for name, case in CASES.items():
        results = graded.results[name]
        earned = expected_score(case, results)
        report = json.loads((student_folder(graded.out, name) / "report.json").read_text())
        assert report["score"] == pytest.approx(earned), name
        assert report["max_score"] == pytest.approx(sum(e.points for e in GRADED)), name
        assert float(rows[name]["total"]) == pytest.approx(round(earned, 2), abs=0.011), rows[name]
        assert rows[name]["status"] == "graded", rows[name]


@pytest.mark.slow
def test_no_hidden_test_line_reaches_any_output(graded):
    hidden = {
        line.strip()
        for e in catalog.EXERCISES
        for line in (e.tests_dir() / "test_hidden.py").read_text().splitlines()
        if len(line.strip()) > 25
    }
    checked = 0
    for path in graded.out.rglob("*"):
        if path.is_file() and path.suffix in (".json", ".xml", ".csv", ".log", ".txt"):
            text = path.read_text(errors="replace")
            checked += path.name in ("report.json", "results.json")
            leaked = sorted(line for line in hidden if line in text)
            assert not leaked, (
                f"{path.relative_to(graded.out)} holds hidden test lines: {leaked[:3]}"
            )
    assert checked == 2 * len(CASES)
    leak = graded.results["leaks_hidden_tests_in_an_error"]
    assert any("could not be read" in t.message for t in leak.tests())


@pytest.mark.slow
def test_the_network_was_not_reached(graded):
    try:
        connection, address = graded.listener.accept()
    except BlockingIOError:
        return
    connection.close()
    raise AssertionError(f"a submission connected to the listener on 127.0.0.1 from {address}")


@pytest.mark.slow
def test_the_compile_cache_holds_only_what_the_graders_compiled(graded):
    honest = graded.results["zz_honest_classmate"].environment.compile_cache
    assert honest["enabled"] and honest["folder"].startswith(os.environ["SHARDLAB_CACHE"])
    assert honest["entries"] > 0 and honest["hits"] + honest["misses"] > 0, honest
    planted = list(Path(os.environ["SHARDLAB_CACHE"]).rglob(f"*{PLANTED}*"))
    assert not planted, planted


@pytest.mark.slow
def test_shipped_files_are_listed_and_never_loaded(graded):
    ignored = graded.results["ships_conftest_and_site_hooks"].ignored
    assert all(any(name in listed for listed in ignored) for name in SHIPPED), ignored


@pytest.mark.slow
def test_visible_tests_never_meet_a_worker_that_served_hidden_ones(graded):
    """The one visible call of place is the only one its message can name: visible tests run first."""
    results = graded.results["notes_hidden_calls"]
    visible = [t for t in results.tests() if not t.hidden and t.name.startswith("test_place")]
    hidden = [t for t in results.tests() if t.hidden and t.name.startswith("test_place")]
    assert len(visible) == 1 and hidden, [t.name for t in results.tests()]
    assert visible[0].message.count("note:") == 1, visible[0].message
    assert max(t.message.count("note:") for t in hidden) > 1  # the attack did note calls


@pytest.mark.slow
def test_huge_output_is_truncated(graded):
    results = graded.results["huge_output"]
    tests = results.exercises[EX01.id].tests
    assert all(len(t.output) < 6000 for t in tests)
    assert any(t.output.startswith("yyyy") for t in tests)
    assert len(results.output) < 50_000
    assert (student_folder(graded.out, "huge_output") / "report.json").stat().st_size < 2_000_000
