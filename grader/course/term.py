"""A term of the course: the instructor's course file (course.toml), read into a typed `Course`.

The course file says which exercises this term grades, in which assignments (a week, a group: each with its
due date), their points, the late policy, the students' extensions, when students see the hidden tests and how
speed is judged. Without one, the catalog is the course: every exercise, its catalog points, no due dates.

    name = "JAX parallelism, autumn 2026"
    timezone = "Europe/Paris"          # a due date written without an offset is in this zone
    hidden_visibility = "after_due_date"
    timing = "enforce"
    roster = "roster.csv"              # files named here are found beside the course file
    adjustments = "adjustments.csv"

    [points]
    ex04 = 30                          # this term's points (default: the catalog's)

    [late]
    percent = 10                       # taken off per day (or hour) started after the due date
    per = "day"
    cap = 50                           # never more than this percent
    grace = "15m"                      # a submission this late is on time
    zero_after = 2026-12-20T23:59:00   # nothing counts after this

    [[assignment]]
    name = "Week 1: meshes"            # its title, as the LMS and the pages show it
    slug = "week1"                     # its name where a platform takes only letters, digits, - and _
                                       # (nbgrader's folders, Gradescope's zips); default: from the name
    due = 2026-10-05T23:59:00
    exercises = ["ex01", "ex02", "ex03"]   # or a whole part: ["part 2"] (its exercises, in order)
    lms_id = 12345                     # the LMS's id of the assignment, for the gradebook export

    [[extension]]
    student = "bob"                    # the student's folder name, as grading names them
    days = 3                           # or until = 2026-10-09T12:00:00
    assignments = ["week1"]            # default: every assignment

Every problem is reported at once, each with the line it is on. The course's two parts (catalog.PARTS) are
named in an assignment's exercises ("part 1"); the commands' --part narrows any term to one part (Course.part).
"""

from __future__ import annotations

import dataclasses
import hashlib
import math
import re
import tomllib
from collections import Counter
from dataclasses import dataclass
from datetime import date, datetime, time, timedelta, timezone
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from grader.core.errors import FileProblems
from grader.core.options import TIMINGS, VISIBILITIES
from grader.course import catalog

FILE_NAME = "course.toml"
DEFAULT_ADJUSTMENTS = "adjustments.csv"
UNITS = {"day": timedelta(days=1), "hour": timedelta(hours=1)}


class CourseFileError(FileProblems):
    """The course file cannot be used."""


# -- late work ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Lateness:
    """How late one exercise came in and what it costs: a percentage of its score, and why."""

    submitted_at: str  # ISO 8601, with its offset
    due: str | None  # the due date that applied (the student's extension's, if any)
    late_seconds: float  # 0 when on time
    percent: float  # of the exercise's score taken off
    reason: str

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Lateness:
        return cls(
            str(data["submitted_at"]),
            data.get("due"),
            float(data["late_seconds"]),
            float(data["percent"]),
            str(data["reason"]),
        )


def _span(delta: timedelta) -> str:
    """timedelta(days=2, hours=3) -> "2 d 3 h"; under a minute: "under a minute"."""
    minutes = int(delta.total_seconds() // 60)
    days, rest = divmod(minutes, 24 * 60)
    hours, minutes = divmod(rest, 60)
    parts = (
        [f"{days} d"] * bool(days)
        + [f"{hours} h"] * bool(hours)
        + [f"{minutes} min"] * bool(minutes)
    )
    return " ".join(parts) or "under a minute"


@dataclass(frozen=True)
class LatePolicy:
    """Late work as data: `percent` off per `per` (day or hour) started after the due date, at most `cap`
    percent; a submission within `grace` of the due date is on time; after `zero_after`, nothing counts."""

    percent: float = 0.0
    per: str = "day"
    cap: float = 100.0
    grace: timedelta = timedelta(0)
    zero_after: datetime | None = None

    def describe(self) -> str:
        if not self.percent and self.zero_after is None:
            return "no penalty for late work"
        parts = (
            [f"{self.percent:g}% per {self.per} started, at most {self.cap:g}%"]
            if self.percent
            else []
        )
        if self.grace:
            parts.append(f"{_span(self.grace)} of grace")
        if self.zero_after is not None:
            parts.append(f"0 after {self.zero_after.isoformat()}")
        return "; ".join(parts)

    def judge(
        self, submitted: datetime, due: datetime | None, *, extended: bool = False
    ) -> Lateness:
        """What submitting at `submitted` costs against `due` (None: no due date)."""
        due_text = due.isoformat() if due is not None else None
        whose = "your extended due date" if extended else "the due date"
        if self.zero_after is not None and submitted > self.zero_after:
            return Lateness(
                submitted.isoformat(),
                due_text,
                (submitted - (due or self.zero_after)).total_seconds(),
                100.0,
                f"submitted {submitted.isoformat()}, after {self.zero_after.isoformat()}, the last "
                "time late work is accepted: 0 points",
            )
        if due is None or submitted <= due:
            return Lateness(
                submitted.isoformat(),
                due_text,
                0.0,
                0.0,
                f"on time (extended due date {due_text})" if extended else "on time",
            )
        late = submitted - due
        if late <= self.grace:
            return Lateness(
                submitted.isoformat(),
                due_text,
                late.total_seconds(),
                0.0,
                f"{_span(late)} after {whose}, within the {_span(self.grace)} grace period: on time",
            )
        units = math.ceil(late / UNITS[self.per])
        percent = min(self.cap, self.percent * units)
        capped = " (the cap)" if percent == self.cap and self.percent * units > self.cap else ""
        return Lateness(
            submitted.isoformat(),
            due_text,
            late.total_seconds(),
            percent,
            f"{_span(late)} after {whose} ({due_text}): {units} {self.per}(s) started x "
            f"{self.percent:g}% = {percent:g}% off{capped}",
        )


# -- the course ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Assignment:
    """Exercises handed in together against one due date (a week, a group; nbgrader's assignment)."""

    name: str
    exercises: tuple[str, ...]  # exercise ids, in the term's order
    due: datetime | None = None
    lms_id: str | None = None  # the LMS's id of this assignment (Canvas: the number in its address)
    # its name where only letters, digits, - and _ will do (nbgrader's folders, file names): the course
    # file's `slug`, or one made from the name
    slug: str = ""

    def __post_init__(self):
        if not self.slug:
            object.__setattr__(self, "slug", slugify(self.name))


SLUG = re.compile(r"[A-Za-z0-9_-]+")


def slugify(name: str) -> str:
    """ "Week 1: meshes" -> "week-1-meshes": an assignment's name as a platform's identifier."""
    return re.sub(r"[^a-z0-9_]+", "-", name.casefold()).strip("-") or "assignment"


@dataclass(frozen=True)
class Extension:
    student: str
    assignments: tuple[str, ...]  # empty: every assignment
    until: datetime | None = None  # a new due date ...
    days: float = 0.0  # ... or this many days added to each one

    def applies(self, assignment: str) -> bool:
        return not self.assignments or assignment in self.assignments

    def due(self, due: datetime) -> datetime:
        return self.until if self.until is not None else due + timedelta(days=self.days)


@dataclass(frozen=True)
class CourseSource:
    """Which course file graded: report.json records it."""

    path: str
    digest: str  # sha256 of its bytes

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


@dataclass(frozen=True)
class Course:
    name: str
    exercises: tuple[catalog.Exercise, ...]  # this term's, in order, with this term's points
    assignments: tuple[Assignment, ...]
    late: LatePolicy = LatePolicy()
    extensions: tuple[Extension, ...] = ()
    hidden_visibility: str | None = None  # None: the option's own default
    timing: str | None = None
    roster: Path | None = None
    adjustments: Path | None = None
    source: CourseSource | None = None  # None: the catalog, no course file

    def exercise(self, name: str) -> catalog.Exercise:
        """A term's exercise by any name catalog.get takes; one not in this term is an error."""
        wanted = catalog.get(name).id
        for exercise in self.exercises:
            if exercise.id == wanted:
                return exercise
        raise catalog.UnknownExercise(f"{wanted} (not in this term's course file)")

    @property
    def max_score(self) -> float:
        return math.fsum(e.points for e in self.exercises if not e.bonus)

    def assignment(self, name: str) -> Assignment:
        """A term's assignment by its name (as the course file writes it) or its slug."""
        for assignment in self.assignments:
            if name in (assignment.name, assignment.slug):
                return assignment
        known = ", ".join(repr(a.name) for a in self.assignments)
        raise KeyError(f"no assignment named {name!r} in this term (its assignments: {known})")

    def only(self, name: str) -> Course:
        """The term narrowed to one assignment (its name or slug): its exercises only, so its points are the
        whole score and its lateness the only one judged (a platform's assignment is one of the term's).
        KeyError, naming the term's assignments, for one it does not have."""
        chosen = self.assignment(name)
        return dataclasses.replace(
            self,
            exercises=tuple(e for e in self.exercises if e.id in chosen.exercises),
            assignments=(chosen,),
        )

    def part(self, number: int | str) -> Course:
        """The term narrowed to one part of the course (catalog.PARTS): its exercises only, each assignment
        keeping its exercises of that part, an assignment left with none dropped. KeyError, saying why, for a
        part the catalog does not have or of which this term grades nothing."""
        try:
            chosen = catalog.part(number)
        except catalog.UnknownPart as exc:
            raise KeyError(str(exc)) from None
        exercises = tuple(e for e in self.exercises if e.part == chosen.number)
        if not exercises:
            raise KeyError(f"this term grades no exercise of {chosen.title}")
        ids = {e.id for e in exercises}
        assignments = tuple(
            dataclasses.replace(a, exercises=tuple(i for i in a.exercises if i in ids))
            for a in self.assignments
            if ids.intersection(a.exercises)
        )
        return dataclasses.replace(self, exercises=exercises, assignments=assignments)

    def keeping(self, ids: tuple[str, ...]) -> Course:
        """The term with only the exercises `ids` (every one: ()), as a calibration times them."""
        if not ids:
            return self
        return dataclasses.replace(self, exercises=tuple(e for e in self.exercises if e.id in ids))

    def chosen(
        self,
        assignment: str | None = None,
        part: int | str | None = None,
        names: tuple[str, ...] = (),
    ) -> tuple[str, ...]:
        """The ids of the exercises a grading of this term grades: those of `assignment` (name or slug) and of
        `part`, narrowed to `names` (--exercise) when some are given; () for every exercise of the term. The
        term itself is never narrowed: each exercise's due date and points stay the course file's, so
        grading one assignment judges no other (KeyError, saying why, for an assignment, part or name the
        term does not have, or a name outside the assignment or part chosen)."""
        narrowed = self
        if assignment is not None:
            narrowed = narrowed.only(assignment)
        if part is not None:
            narrowed = narrowed.part(part)
        ids = tuple(e.id for e in narrowed.exercises)
        if not names:
            return ids if narrowed is not self else ()
        try:
            named = tuple(dict.fromkeys(self.exercise(name).id for name in names))
        except catalog.UnknownExercise as exc:
            raise KeyError(str(exc)) from None
        outside = [e for e in named if e not in ids]
        if outside:
            what = " and ".join(
                [f"assignment {narrowed.assignments[0].name!r}"] * (assignment is not None)
                + [f"part {part}"] * (part is not None)
            )
            raise KeyError(f"{', '.join(outside)} not in {what or 'this term'}")
        return named

    def assignment_of(self, exercise_id: str) -> Assignment | None:
        return next((a for a in self.assignments if exercise_id in a.exercises), None)

    def due(self, exercise_id: str, student: str | None = None) -> tuple[datetime | None, bool]:
        """The due date of `exercise_id` (any name catalog.get takes) for `student`, and whether an extension
        gave it."""
        assignment = self.assignment_of(catalog.get(exercise_id).id)
        if assignment is None or assignment.due is None:
            return None, False
        for extension in self.extensions:
            if extension.student == student and extension.applies(assignment.name):
                return extension.due(assignment.due), True
        return assignment.due, False

    def lateness(self, exercise_id: str, student: str | None, submitted: datetime) -> Lateness:
        due, extended = self.due(exercise_id, student)
        return self.late.judge(submitted, due, extended=extended)


def default_course() -> Course:
    """The catalog as a course: every exercise, its points, one assignment per exercise, no due dates."""
    return Course(
        "shardlab", catalog.EXERCISES, tuple(Assignment(e.id, (e.id,)) for e in catalog.EXERCISES)
    )


# -- reading a course file -------------------------------------------------------------------------


def line_of(text: str, path: tuple[str | int, ...]) -> int | None:
    """The line of `path` (("assignment", 1, "due")) in TOML `text`: the key's line, or its table's header's.
    Written for course files as people write them: [tables], [[arrays of tables]] and `key = value` lines."""
    seen: Counter[str] = Counter()
    table: tuple[str | int, ...] = ()
    best = None
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if line.startswith("[["):
            name = line[2:].split("]]", 1)[0].strip()
            table = (name, seen[name])
            seen[name] += 1
        elif line.startswith("["):
            table = tuple(part.strip().strip('"') for part in line[1:].split("]", 1)[0].split("."))
        elif "=" in line and not line.startswith("#"):
            key = (*table, line.split("=", 1)[0].strip().strip('"'))
            if path[: len(key)] == key:
                return number
            continue
        else:
            continue
        if path[: len(table)] == table:
            best = number
    return best


_SPAN = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(m|min|h|d)\s*$")
_SPAN_UNITS = {"m": 60, "min": 60, "h": 3600, "d": 86400}

_TOP = {
    "name",
    "timezone",
    "hidden_visibility",
    "timing",
    "roster",
    "adjustments",
    "points",
    "late",
    "assignment",
    "extension",
}
_LATE = {"percent", "per", "cap", "grace", "zero_after"}
_ASSIGNMENT = {"name", "slug", "due", "exercises", "lms_id"}
_EXTENSION = {"student", "days", "until", "assignments"}


class _Reader:
    """One course file being read: its text, and the problems found so far, each with its line."""

    def __init__(self, path: Path, text: str):
        self.path, self.text, self.problems = path, text, []
        self.zone: ZoneInfo | None = None

    def problem(self, where: tuple[str | int, ...], message: str) -> None:
        line = line_of(self.text, where)
        self.problems.append(f"line {line}: {message}" if line else message)

    def keys(self, table: dict, known: set[str], where: tuple[str | int, ...]) -> None:
        for key in sorted(set(table) - known):
            self.problem(
                (*where, key),
                f"unknown key {'.'.join(map(str, (*where, key)))!r} "
                f"(known here: {', '.join(sorted(known))})",
            )

    def tables(self, tables: Any, name: str, known: set[str]):
        """(index, where, table) for each [[name]] table, its keys checked against `known`."""
        if not isinstance(tables, list) or not all(isinstance(t, dict) for t in tables):
            self.problem((name,), f"{name} must be written as [[{name}]] tables")
            return
        for i, table in enumerate(tables):
            self.keys(table, known, (name, i))
            yield i, (name, i), table

    def typed(
        self, table: dict, key: str, kinds: tuple[type, ...], where: tuple, what: str, default=None
    ):
        value = table.get(key, default)
        if key in table and (
            not isinstance(value, kinds) or isinstance(value, bool) and bool not in kinds
        ):
            self.problem((*where, key), f"{key} must be {what}, not {value!r}")
            return default
        return value

    def moment(self, table: dict, key: str, where: tuple) -> datetime | None:
        """A due date: a TOML date-time (with an offset, or in the course's timezone), a date (its end of day),
        or the same written as a string ("2026-10-05 23:59")."""
        value = table.get(key)
        if value is None:
            return None
        if isinstance(value, str):
            try:
                value = datetime.fromisoformat(value.strip())
            except ValueError:
                self.problem(
                    (*where, key),
                    f"{key} = {value!r} is not a date and time (write 2026-10-05T23:59:00, "
                    "with an offset such as +02:00 or in the course's timezone)",
                )
                return None
        if isinstance(value, date) and not isinstance(value, datetime):
            value = datetime.combine(value, time(23, 59, 59))
        if not isinstance(value, datetime):
            self.problem((*where, key), f"{key} must be a date and time, not {value!r}")
            return None
        if value.tzinfo is None:
            if self.zone is None:
                self.problem(
                    (*where, key),
                    f"{key} has no UTC offset and the course file names no timezone: add "
                    'timezone = "Europe/Paris" (any IANA zone) at its top, or an offset',
                )
                return None
            value = value.replace(tzinfo=self.zone)
        return value

    def span(self, table: dict, key: str, where: tuple) -> timedelta:
        value = table.get(key, "0m")
        match = _SPAN.match(value) if isinstance(value, str) else None
        if isinstance(value, (int, float)) and not isinstance(value, bool) and value >= 0:
            return timedelta(minutes=value)
        if match is None:
            self.problem(
                (*where, key),
                f'{key} = {value!r} is not a span of time (write "15m", "2h" or "1d")',
            )
            return timedelta(0)
        return timedelta(seconds=float(match[1]) * _SPAN_UNITS[match[2]])


def _line_number(problem: str) -> int:
    match = re.match(r"line (\d+):", problem)
    return int(match[1]) if match else 0


def find(folder: Path | None = None) -> Path | None:
    """The course file of the folder a command runs in, if it has one."""
    candidate = Path(folder or Path.cwd()) / FILE_NAME
    return candidate if candidate.is_file() else None


def load(path: str | Path | None) -> Course:
    """The course `path` describes; None: the course file of the current folder, or the catalog's course."""
    if path is None:
        path = find()
        if path is None:
            return default_course()
    path = Path(path)
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise CourseFileError(path, [f"cannot read it: {exc.strerror or exc}"]) from None
    try:
        text = data.decode("utf-8")
        table = tomllib.loads(text)
    except UnicodeDecodeError:
        raise CourseFileError(path, ["it is not UTF-8 text"]) from None
    except tomllib.TOMLDecodeError as exc:
        raise CourseFileError(path, [f"not valid TOML: {exc}"]) from None
    reader = _Reader(path, text)
    course = _course(
        reader, table, CourseSource(str(path.resolve()), hashlib.sha256(data).hexdigest())
    )
    if reader.problems:
        raise CourseFileError(path, sorted(reader.problems, key=_line_number))
    return course


def _course(r: _Reader, table: dict, source: CourseSource) -> Course:
    r.keys(table, _TOP, ())
    zone = r.typed(table, "timezone", (str,), (), 'an IANA timezone name such as "Europe/Paris"')
    if zone is not None:
        try:
            r.zone = ZoneInfo(zone)
        except (ZoneInfoNotFoundError, ValueError):
            r.problem(
                ("timezone",),
                f"timezone {zone!r} is not a timezone this machine knows (an IANA name such "
                'as "Europe/Paris" or "UTC")',
            )
    name = r.typed(table, "name", (str,), (), "text", default="shardlab")
    visibility = r.typed(table, "hidden_visibility", (str,), (), "text")
    if visibility is not None and visibility not in VISIBILITIES:
        r.problem(
            ("hidden_visibility",), f"hidden_visibility must be one of {', '.join(VISIBILITIES)}"
        )
    timing = r.typed(table, "timing", (str,), (), "text")
    if timing is not None and timing not in TIMINGS:
        r.problem(("timing",), f"timing must be one of {', '.join(TIMINGS)}")
    folder = Path(source.path).parent
    roster = r.typed(table, "roster", (str,), (), "a file name")
    adjustments = r.typed(
        table, "adjustments", (str,), (), "a file name", default=DEFAULT_ADJUSTMENTS
    )
    points = _points(r, r.typed(table, "points", (dict,), (), "a table", default={}))
    assignments = _assignments(r, table.get("assignment"))
    named = [ex_id for a in assignments for ex_id in a.exercises]
    for ex_id in points:
        if ex_id not in named:
            r.problem(
                ("points", ex_id), f"points for {ex_id}, which no assignment of this term holds"
            )
    exercises = tuple(
        dataclasses.replace(catalog.get(ex_id), points=points.get(ex_id, catalog.get(ex_id).points))
        for ex_id in named
    )
    return Course(
        name=name,
        exercises=exercises,
        assignments=assignments,
        late=_late(r, table.get("late", {})),
        extensions=_extensions(r, table.get("extension", []), {a.name for a in assignments}),
        hidden_visibility=visibility,
        timing=timing,
        roster=folder / roster if roster else None,
        adjustments=folder / adjustments if adjustments else None,
        source=source,
    )


def _exercise_id(r: _Reader, name: Any, where: tuple) -> str | None:
    try:
        return catalog.get(str(name)).id
    except catalog.UnknownExercise as exc:
        r.problem(where, str(exc))
        return None


def _listed_ids(r: _Reader, listed: list, where: tuple) -> list[str]:
    """An assignment's exercises as ids: an exercise by any name catalog.get takes, or a whole part ("part 2")
    as its exercises in catalog order."""
    ids = []
    for item in listed:
        if not catalog.is_part_name(item):
            ex_id = _exercise_id(r, item, where)
            ids += [ex_id] if ex_id is not None else []
            continue
        try:
            part = catalog.part(item)
        except catalog.UnknownPart as exc:
            r.problem(where, str(exc))
            continue
        if not part.exercises:
            r.problem(where, f"{item!r}: the catalog has no exercise of {part.title} yet")
        ids += [e.id for e in part.exercises]
    return ids


def _points(r: _Reader, table: dict) -> dict[str, float]:
    found = {}
    for key, value in table.items():
        ex_id = _exercise_id(r, key, ("points", key))
        if ex_id is None:
            continue
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
            r.problem(("points", key), f"points for {key} must be a number above 0, not {value!r}")
        else:
            found[ex_id] = float(value) if isinstance(value, float) else value
    return found


def _assignments(r: _Reader, tables: Any) -> tuple[Assignment, ...]:
    if tables is None:  # no assignments: the whole catalog, one exercise each, no due dates
        return default_course().assignments
    assignments, owner = [], {}
    for i, where, table in r.tables(tables, "assignment", _ASSIGNMENT):
        name = r.typed(table, "name", (str,), where, "text")
        if not name:
            r.problem(where, f"assignment {i + 1} has no name")
            name = f"assignment {i + 1}"
        elif any(a.name == name for a in assignments):
            r.problem((*where, "name"), f"two assignments are named {name!r}")
        ids = []
        listed = r.typed(table, "exercises", (list,), where, "a list of exercise ids", default=[])
        if not listed:
            r.problem(where, f"assignment {name!r} lists no exercises")
        for ex_id in _listed_ids(r, listed, (*where, "exercises")):
            if ex_id in owner:
                r.problem(
                    (*where, "exercises"),
                    f"{ex_id} is listed twice in assignment {name!r} (a part listed holds its exercises)"
                    if owner[ex_id] == name
                    else f"{ex_id} is in two assignments, {owner[ex_id]!r} and {name!r}",
                )
                continue
            owner[ex_id] = name
            ids.append(ex_id)
        lms_id = r.typed(table, "lms_id", (int, str), where, "the LMS's id of the assignment")
        slug = r.typed(table, "slug", (str,), where, "text") or slugify(name)
        if not SLUG.fullmatch(slug):
            r.problem(
                (*where, "slug"),
                f"slug {slug!r} must be letters, digits, - and _ only (it names nbgrader's folder "
                "and files)",
            )
        elif any(a.slug == slug for a in assignments):
            r.problem(
                (*where, "slug" if "slug" in table else "name"),
                f'two assignments would share the slug {slug!r}: give one a slug = "..." of its own',
            )
        assignments.append(
            Assignment(
                name,
                tuple(ids),
                r.moment(table, "due", where),
                str(lms_id) if lms_id is not None else None,
                slug,
            )
        )
    return tuple(assignments)


def _late(r: _Reader, table: Any) -> LatePolicy:
    where = ("late",)
    if not isinstance(table, dict):
        r.problem(where, "late must be a table: [late]")
        return LatePolicy()
    r.keys(table, _LATE, where)
    percent = r.typed(table, "percent", (int, float), where, "a number", default=0)
    cap = r.typed(table, "cap", (int, float), where, "a number", default=100)
    per = r.typed(table, "per", (str,), where, '"day" or "hour"', default="day")
    for key, value in (("percent", percent), ("cap", cap)):
        if not 0 <= value <= 100:
            r.problem((*where, key), f"{key} must be a percentage from 0 to 100, not {value!r}")
    if per not in UNITS:
        r.problem((*where, "per"), f'per must be "day" or "hour", not {per!r}')
        per = "day"
    return LatePolicy(
        float(percent),
        per,
        float(cap),
        r.span(table, "grace", where),
        r.moment(table, "zero_after", where),
    )


def _extensions(r: _Reader, tables: Any, assignments: set[str]) -> tuple[Extension, ...]:
    found = []
    for i, where, table in r.tables(tables, "extension", _EXTENSION):
        student = r.typed(table, "student", (str,), where, "the student's name")
        if not student:
            r.problem(where, f"extension {i + 1} names no student")
        days = r.typed(table, "days", (int, float), where, "a number of days", default=0)
        until = r.moment(table, "until", where)
        if ("days" in table) == ("until" in table):
            r.problem(
                where,
                f"extension {i + 1} needs one of days (added to each due date) or until (a new due date)",
            )
        elif "days" in table and not days > 0:
            r.problem((*where, "days"), f"days must be above 0, not {days!r}")
        named = r.typed(
            table, "assignments", (list,), where, "a list of assignment names", default=[]
        )
        for name in named:
            if name not in assignments:
                r.problem(
                    (*where, "assignments"),
                    f"no assignment named {name!r} (this term's: {', '.join(sorted(assignments))})",
                )
        found.append(Extension(student or "", tuple(map(str, named)), until, float(days)))
    return tuple(found)


def describe(course: Course) -> list[str]:
    """The term, a line per assignment: what `shardlab course check` prints."""
    where = (
        f"course file {course.source.path}"
        if course.source
        else "no course file: the catalog's course"
    )
    lines = [f"{course.name} ({where})"]
    for assignment in course.assignments:
        due = assignment.due.isoformat() if assignment.due else "no due date"
        items = ", ".join(
            f"{e.id} ({e.points:g}{' bonus' if e.bonus else ''})"
            for e in course.exercises
            if e.id in assignment.exercises
        )
        slug = f" [{assignment.slug}]" if assignment.slug != assignment.name else ""
        lines.append(f"  {assignment.name}{slug}: due {due}: {items}")
    lines.append(f"  {course.max_score:g} points in all; late work: {course.late.describe()}")
    for (
        part
    ) in catalog.PARTS:  # the parts the term grades, so a course file naming "part 2" is seen whole
        held = [e for e in course.exercises if e.part == part.number]
        if held:
            points = math.fsum(e.points for e in held if not e.bonus)
            lines.append(f"  {part.title}: {len(held)} exercise(s), {points:g} points")
    for extension in course.extensions:
        new = extension.until.isoformat() if extension.until else f"+{extension.days:g} days"
        lines.append(
            f"  extension: {extension.student}, {', '.join(extension.assignments) or 'every assignment'}: "
            f"{new}"
        )
    return lines


def readable(moment: datetime) -> str:
    """A due date as students read it: 2026-10-05 23:59 (UTC+02:00)."""
    offset = moment.strftime("%z")
    zone = f"UTC{offset[:3]}:{offset[3:]}" if offset else "UTC"
    return f"{moment:%Y-%m-%d %H:%M} ({zone})"


def utc_now() -> datetime:
    return datetime.now(timezone.utc)
