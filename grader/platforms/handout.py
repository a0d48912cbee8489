"""The student handout: what `shardlab release OUT` writes, and the check that nothing secret is in it.

    build_handout(Path("out/handout"))      # then give out/handout to the students (e.g. a template repo)

The handout holds the stubs (exercises/), the visible tests and their conftest.py files, the root
conftest.py, the grader package (checks, pytest plugin, the student commands), the docs students are
pointed to (docs/students.md, the docs it links to and those the grader's comments name), a pyproject.toml
whose dependencies are the course's pins, a README for students and a GitHub Actions workflow that grades
exercises/ with the visible tests (.github/grade.sh, runnable locally). Which files those are is
grader.course.handout_layout's account, which grading's intake reads too. A doc's link to a course file the
handout leaves out is written as its text alone, so that every link in it leads somewhere. It never holds
solutions/ or a hidden test: `verify_handout` scans every file with the check every builder uses
(grader.platforms.no_secrets, under its HANDOUT policy), and `build_handout` refuses to finish when it finds
anything.

With a term's course file (grader.course.term), the handout holds that term's exercises only (their stubs,
visible tests and the files those run beside; never another exercise's), the README is the term's (its
exercises with their points, assignments and due dates, the late policy, bonus wording and an exercise's own
section only when the term has that exercise), and course.toml at the handout's root is the course file as
students may read it (`student_course_file`): name, timezone, points, assignments with their due dates, and
the late policy. The instructor's extensions (which name students), roster and adjustments never ship, nor
the settings that are the instructor's business (hidden_visibility, timing).
"""

from __future__ import annotations

import json
import math
import re
import shutil
import stat
import tomllib
from datetime import datetime, timedelta
from pathlib import Path
from string import Template
from zoneinfo import ZoneInfo

from grader.core.errors import ShardlabError
from grader.course import catalog, handout_layout, paths, stubs, term
from grader.platforms import no_secrets

DEFAULT_COURSE_NAME = "shardlab"
TEMPLATES_DIR = Path(__file__).parent / "templates" / "handout"
# An exercise's own README section (sections/<exercise id>.md): in a handout only when the exercise is.
SECTIONS_DIR = TEMPLATES_DIR / "sections"
# What the catalog's exercises are about, for a handout of the whole catalog.
CATALOG_TOPICS = (
    "meshes and shardings, collectives, sharded matmuls, data-parallel, fully sharded and tensor-parallel "
    "training, padded per-device data, several JAX processes, a bonus on what communication costs; then "
    "pipelines, experts over devices, long sequences, ZeRO-1 and a transformer block trained 3-D"
)
TEMPLATE_FILES = handout_layout.TEMPLATE_FILES  # template file -> where it goes in the handout
# the others are shipped verbatim ($ is bash's there)
SUBSTITUTED = {"README.md", "pyproject.toml.in"}
# dependencies the students' commands never import
INSTRUCTOR_ONLY = {"nbgrader", "nbformat", "copydetect", "dulwich"}
# What the handout's course.toml may hold: what students may know of the term.
STUDENT_KEYS = frozenset({"name", "timezone", "points", "late", "assignment"})
# Course trees a handout must never be written into (nor the course itself be inside the handout).
PROTECTED = ("grader", "solutions", "exercises", "tests", "examples")


class HandoutError(ShardlabError, RuntimeError):
    """The handout cannot be written, or what was written holds something students must not see."""


# ------------------------------------------------------------------------------------------- build


def build_handout(
    out: str | Path,
    *,
    course_name: str | None = None,
    force: bool = False,
    secrets: no_secrets.CourseSecrets | None = None,
    course: term.Course | None = None,
) -> Path:
    """Write the student handout into `out` (new or empty; with force its contents are replaced),
    verify it against `secrets` (the course's own by default), and return its path. A handout that
    fails verification is deleted, and HandoutError lists what was found.

    course: the term (grader.course.term.load): only its exercises ship, with its points, and its course
    file as students may read it goes to course.toml. None: every exercise of the catalog, no course.toml.
    course_name: the README's title (default: the course's name, else "shardlab")."""
    out = Path(out).expanduser().resolve()
    exercises = tuple(course.exercises) if course is not None else catalog.EXERCISES
    if not exercises:
        raise HandoutError("the course holds no exercise: there is nothing to hand out")
    if course_name is None:
        course_name = course.name if course is not None else DEFAULT_COURSE_NAME
    check_destination(out)
    _check_stubs_current(exercises)
    _prepare(out, force)
    _copy_course_files(out, exercises)
    _write_templates(out, course_name, exercises, course)
    if course is not None:
        (out / term.FILE_NAME).write_text(student_course_file(course))
    _write_docs(out)  # last: their links are kept where they lead to what was written
    leaks = no_secrets.find_leaks(handout_files(out), no_secrets.HANDOUT, secrets)
    problems = ([no_secrets.listing(leaks)] if leaks else []) + course_file_problems(out)
    if problems:
        shutil.rmtree(out)
        raise HandoutError(
            "the handout would reveal what students must not see, so it was deleted:\n  "
            + "\n  ".join(problems)
        )
    return out


def check_destination(out: Path) -> None:
    """Refuse a destination that is, contains, or lies inside one of the course's own trees."""
    root = paths.REPO_ROOT
    if root.is_relative_to(out):
        raise HandoutError(
            f"{out} holds the course itself: choose a folder outside it (or under {root / 'out'})"
        )
    for tree in PROTECTED:
        if out.is_relative_to(root / tree):
            raise HandoutError(f"{out} is inside the course's {tree}/: choose another folder")


def _prepare(out: Path, force: bool) -> None:
    if out.exists() and not out.is_dir():
        raise HandoutError(f"{out} exists and is not a folder")
    if out.is_dir() and any(out.iterdir()):
        if not force:
            raise HandoutError(
                f"{out} is not empty: choose an empty folder, or replace its contents with --force"
            )
        for child in out.iterdir():
            if child.is_dir() and not child.is_symlink():
                shutil.rmtree(child)
            else:
                child.unlink()
    out.mkdir(parents=True, exist_ok=True)


def _check_stubs_current(exercises: tuple[catalog.Exercise, ...] = catalog.EXERCISES) -> None:
    """The stubs are shipped as committed; stale ones could hold what the reference has since hidden.
    Only the stubs that ship are checked."""
    shipped = {exercise.stub_path() for exercise in exercises}
    stale = [
        path.name
        for path, text in stubs.expected_stubs().items()
        if path in shipped and (not path.is_file() or path.read_text() != text)
    ]
    if stale:
        raise HandoutError(
            f"exercises/ is out of date ({', '.join(stale)}): run `shardlab stubs` first"
        )


def _copy_course_files(out: Path, exercises: tuple[catalog.Exercise, ...]) -> None:
    """The root conftest.py, each exercise's stub, visible tests and the files they run beside, and the
    grader package, as the course holds them (the docs are written apart: their links are checked)."""
    docs = handout_layout.doc_files()
    for destination, source in handout_layout.copied_files(exercises).items():
        if destination not in docs:
            target = out / destination
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy(source, target)  # with its mode: the grader holds scripts


# a Markdown link, [text](target)
MARKDOWN_LINK = re.compile(r"\[([^\]\n]*)\]\(([^)\s]+)\)")


def _write_docs(out: Path) -> None:
    """The docs as the course holds them, then each one's links that lead out of the handout made text
    (once every doc is written: a doc's link to one written after it is kept)."""
    docs = [out / destination for destination in handout_layout.doc_files()]
    for target, source in zip(docs, handout_layout.doc_files().values()):
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(source, target)
    for doc in docs:
        doc.write_text(links_within(doc.read_text(), doc.parent, out))


def links_within(text: str, folder: Path, root: Path) -> str:
    """A doc's text (the doc in `folder`), each relative link that leads to nothing under `root` written as
    its text alone: the course's files a handout leaves out (its benchmarks, its own tests, the docs on
    writing hidden tests) would be links to nowhere."""

    def kept_or_text(link: re.Match[str]) -> str:
        label, target = link.groups()
        return link[0] if _not_a_file(target) or _leads_within(folder, target, root) else label

    return MARKDOWN_LINK.sub(kept_or_text, text)


def _not_a_file(target: str) -> bool:
    """An anchor in the same page, or an address on the web."""
    return target.startswith("#") or "://" in target or target.startswith("mailto:")


def _leads_within(folder: Path, target: str, root: Path) -> bool:
    path = (folder / target.split("#", 1)[0]).resolve()
    return path.is_relative_to(root.resolve()) and path.exists()


def _write_templates(
    out: Path,
    course_name: str,
    exercises: tuple[catalog.Exercise, ...] = catalog.EXERCISES,
    course: term.Course | None = None,
) -> None:
    values = _readme_values(course_name, exercises, course) | _pyproject_values(course_name)
    for name, destination in TEMPLATE_FILES.items():
        text = (TEMPLATES_DIR / name).read_text()
        if name in SUBSTITUTED:
            text = Template(text).substitute(values)
        target = out / destination
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text)
    script = out / TEMPLATE_FILES["grade.sh"]
    script.chmod(script.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)


def _points(value: float) -> str:
    """10 -> "10", 12.5 -> "12.5": as the course file writes them."""
    return f"{value:g}"


def _readme_values(
    course_name: str,
    exercises: tuple[catalog.Exercise, ...] = catalog.EXERCISES,
    course: term.Course | None = None,
) -> dict[str, str]:
    """What the README says of the course, from the exercises that ship (the term's, else the catalog's): the
    table (points; with a term, each exercise's assignment and due date, and the late policy in words), bonus
    wording only when an exercise is a bonus, and a section of SECTIONS_DIR for each exercise that has one."""
    # an early exercise, past the warm-ups (the catalog's: ex04), never a bonus one
    example = next((e for e in reversed(exercises[:4]) if not e.bonus), exercises[0])
    number = str(int(example.number.removeprefix("ex")))
    return {
        "course_name": course_name,
        "topics": CATALOG_TOPICS
        if course is None
        else f"this term's {len(exercises)} exercise{'s' if len(exercises) != 1 else ''}, "
        "in the table below",
        "exercise_table": _exercise_table(exercises, course),
        "list_shows": "every exercise, its points and your status"
        if course is None
        else "this term's exercises: assignment, due date, points, your status; the late policy",
        "example": f"{example.number}     # one exercise (its number as you like: {number}, "
        f"{int(number):02d}, ex{number})",
        "example_id": example.id,
        "example_number": example.number,
        "exercise_sections": "".join(
            "\n" + Template((SECTIONS_DIR / f"{e.id}.md").read_text()).substitute()
            for e in exercises
            if (SECTIONS_DIR / f"{e.id}.md").is_file()
        ),
    }


def _exercise_table(exercises: tuple[catalog.Exercise, ...], course: term.Course | None) -> str:
    bonus = any(e.bonus for e in exercises)
    columns = ["exercise", "title", "points"]
    if course is not None:
        columns += ["assignment", "due"]
    rows = [
        "| " + " | ".join(columns) + " |",
        "| --- | --- | ---: |" + " --- |" * (len(columns) - 3),
    ]
    for i, e in enumerate(exercises):
        if i == 0 or e.part != exercises[i - 1].part:  # each part under its heading
            rows.append(f"| **{catalog.part(e.part).title}** | |" + " |" * (len(columns) - 2))
        cells = [f"`{e.id}`", e.title, f"{_points(e.points)}{' bonus' if e.bonus else ''}"]
        if course is not None:
            assignment = course.assignment_of(e.id)
            due = course.due(e.id)[0]
            cells += [
                # a course file's name may hold "|", which would end the cell
                assignment.name.replace("|", "\\|") if assignment is not None else "",
                term.readable(due) if due is not None else "no due date",
            ]
        rows.append("| " + " | ".join(cells) + " |")
    total = math.fsum(e.points for e in exercises if not e.bonus)
    rows.append(
        f"| | total{' (bonus points come on top)' if bonus else ''} | {_points(total)} |"
        + " |" * (len(columns) - 3)
    )
    table = "\n".join(rows)
    if course is not None:
        table += (
            "\n\nLate work: "
            f"{course.late.describe()}. `course.toml` holds the term's assignments, their due dates and the "
            "late policy: `shardlab list` shows them too."
        )
    return table


def _pyproject_values(course_name: str) -> dict[str, str]:
    """The course's own pins, less what only instructors use: one source of truth for the versions."""
    course = tomllib.loads((paths.REPO_ROOT / "pyproject.toml").read_text())
    dependencies = [
        d for d in course["project"]["dependencies"] if _distribution(d) not in INSTRUCTOR_ONLY
    ]
    pytest_options = dict(course["tool"]["pytest"]["ini_options"])
    pytest_options["addopts"] = [*pytest_options.get("addopts", []), "--impl=exercises"]
    return {
        "course_name": course_name,
        "build_requires": _toml(course["build-system"]["requires"]),
        "version": course["project"]["version"],
        "requires_python": course["project"]["requires-python"],
        "dependencies": "[\n" + "".join(f"    {_toml(d)},\n" for d in dependencies) + "]",
        "pytest_options": "\n".join(
            f"{key} = {_toml(value)}" for key, value in pytest_options.items()
        ),
    }


def _distribution(requirement: str) -> str:
    return re.split(r"[\s\[=<>!~;]", requirement, maxsplit=1)[0].lower()


def _toml(value) -> str:
    """Strings, booleans, numbers and lists of them: JSON writes these exactly as TOML does."""
    return json.dumps(value)


# ------------------------------------------------------------------------- the students' course file


def _toml_value(value) -> str:
    """A course file's value: a date and time with its offset (TOML's offset date-time), a number, text or a
    list of them."""
    if isinstance(value, datetime):
        if value.tzinfo is None or value.utcoffset() is None:
            raise HandoutError(f"{value} has no UTC offset: a course's dates always have one")
        return value.isoformat()
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_toml_value(item) for item in value) + "]"
    return _toml(value)


def _grace(grace: timedelta) -> str:
    """As the course file takes it: "15m" for whole minutes, else the minutes as a number."""
    minutes = grace.total_seconds() / 60
    return _toml(f"{int(minutes)}m") if minutes.is_integer() else repr(minutes)


def course_timezone(course: term.Course) -> str | None:
    """The course file's timezone: as its file names it, else the zone its dates were read in."""
    if course.source is not None:
        try:
            zone = tomllib.loads(Path(course.source.path).read_text()).get("timezone")
        except (OSError, ValueError):
            zone = None
        if isinstance(zone, str):
            return zone
    moments = [a.due for a in course.assignments] + [course.late.zero_after]
    return next(
        (m.tzinfo.key for m in moments if m is not None and isinstance(m.tzinfo, ZoneInfo)), None
    )


def student_course_file(course: term.Course) -> str:
    """The course file as students may read it (the handout's course.toml): the course's name and timezone,
    each exercise's points, the assignments with their due dates, and the late policy. What names students
    ([[extension]] tables, the roster and adjustments files) and what only instructors set (hidden_visibility,
    timing) is left out. Every date is written with its UTC offset; grader.course.term.load reads the file
    back into the same exercises, points, assignments and late policy."""
    lines = [
        f"# The course file of {course.name}, as students see it: this term's exercises, their points, the",
        "# assignments' due dates and the late policy. Written by `shardlab release`; `shardlab list` reads it.",
        f"name = {_toml(course.name)}",
    ]
    zone = course_timezone(course)
    if zone is not None:
        lines.append(f"timezone = {_toml(zone)}")
    lines += ["", "[points]"]
    lines += [f"{e.id} = {_toml_value(float(e.points))}" for e in course.exercises]
    late = course.late
    if late != term.LatePolicy():
        lines += [
            "",
            "[late]",
            f"percent = {_toml_value(late.percent)}",
            f"per = {_toml(late.per)}",
            f"cap = {_toml_value(late.cap)}",
        ]
        if late.grace:
            lines.append(f"grace = {_grace(late.grace)}")
        if late.zero_after is not None:
            lines.append(f"zero_after = {_toml_value(late.zero_after)}")
    else:
        lines += ["", "# late work: no penalty"]
    for assignment in course.assignments:
        lines += ["", "[[assignment]]", f"name = {_toml(assignment.name)}"]
        if assignment.due is not None:
            lines.append(f"due = {_toml_value(assignment.due)}")
        lines.append(f"exercises = {_toml_value(list(assignment.exercises))}")
    return "\n".join(lines) + "\n"


# ------------------------------------------------------------------------------------------ verify


def handout_files(root: Path) -> dict[str, bytes]:
    """Every file and folder ("name/") of the handout at `root`, by its path in it; .git is the
    instructor's own (a handout may become a repository)."""
    files: dict[str, bytes] = {}
    for path in sorted(p for p in root.rglob("*") if ".git" not in p.relative_to(root).parts):
        name = path.relative_to(root).as_posix()
        if path.is_dir():
            files[f"{name}/"] = b""
        else:
            files[name] = path.read_bytes()
    return files


def verify_handout(
    path: str | Path, *, secrets: no_secrets.CourseSecrets | None = None
) -> list[str]:
    """Every problem found in the handout at `path` under the handout's policy (grader.platforms.no_secrets:
    no solution line, no hidden test, no solutions folder, no compiled file), each "file:line: what";
    an empty list means the handout is clean. `secrets`: the course's own by default. A course.toml must be
    one students may read: nothing but STUDENT_KEYS."""
    found = no_secrets.find_leaks(handout_files(Path(path)), no_secrets.HANDOUT, secrets)
    return [str(leak) for leak in found] + course_file_problems(Path(path))


def course_file_problems(root: Path) -> list[str]:
    """What the handout's course.toml holds that students must not read (extensions name students; the
    roster and adjustments are the instructor's), or that is not a course file."""
    path = root / term.FILE_NAME
    if not path.is_file():
        return []
    try:
        table = tomllib.loads(path.read_text())
    except (UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        return [f"{term.FILE_NAME}: not a course file: {exc}"]
    return [
        f"{term.FILE_NAME}: {key}: the instructor's, not for students"
        for key in sorted(set(table) - STUDENT_KEYS)
    ]
