"""The course packaged for nbgrader: a course folder with one notebook per exercise under source/, an
nbgrader_config.py, and the feedback preprocessor that keeps hidden test code out of feedback.

    shardlab nbgrader build COURSE_DIR [--group NAME=ex01,ex02] [--exercise ID] [--course-id ID]
    cd COURSE_DIR && nbgrader generate_assignment ex04_sharded_layer   # then release, collect, autograde...

By default each exercise is its own assignment, named by its id; a group puts several exercises'
notebooks into one assignment. Before anything is written, each notebook as `nbgrader generate_assignment`
will release it (nbgrader's own ClearSolutions and ClearHiddenTests) goes through the check every builder
uses (grader.platforms.no_secrets, its NBGRADER_RELEASE policy): no solution line and no hidden test.

With a term's course file (grader.course.term), the course's assignments are nbgrader's: one per
[[assignment]], named by its slug (nbgrader takes letters, digits, - and _ only; the title is the slug's
comment in nbgrader_config.py), holding its exercises in its order, each notebook's
test cells sharing the term's points for the exercise. nbgrader 0.9.6 takes a due date only in its
gradebook (the `duedate` of its Assignment table, which `nbgrader db assignment add NAME --duedate=...`,
formgrader and the Gradebook API's update_or_create_assignment write; nbgrader_config.py has no setting
for it since `CourseDirectory.db_assignments` was removed): the build writes each assignment's due date
there, through that API, into the gradebook nbgrader_config.py names. `nbgrader generate_assignment` keeps
it (it creates or updates the assignment with no due date given), and nbgrader's late-submission penalty,
`nbgrader collect --before-duedate` and formgrader then see it. The course file's late policy goes into
nbgrader_config.py as nbgrader's late-submission plugin (grader.platforms.nbgrader_late), so that `nbgrader
autograde` takes off what grading would, from the timestamp.txt of each submission. The course file's
extensions do not reach nbgrader: give them with nbgrader's own (`Gradebook.grant_extension`, formgrader).
"""

from __future__ import annotations

import contextlib
import copy
import os
import re
import sys
from datetime import datetime
from pathlib import Path

import nbformat
from nbconvert.preprocessors import Preprocessor
from traitlets import Bool

from grader.core.results import TestMeta
from grader.course import catalog, term
from grader.platforms import no_secrets, notebooks
from grader.platforms.handout import course_timezone

_NAME = re.compile(r"[A-Za-z0-9_-]+")

# What JAX, XLA, absl and gloo may print on stderr while a test cell runs: nbgrader would give such a
# cell no points, so these outputs are dropped before grading (IgnorePattern drops a whole stderr output
# when the pattern matches anywhere in it).
NOISE_PATTERN = (
    r"(?m)^(?:[IWEF]\d{4} \d\d:\d\d:\d+\.\d+ +\d+ \S+:\d+\]"  # absl's C++ log lines
    r"|WARNING: All log messages before absl::InitializeLog"
    r"|(?:WARNING|INFO|ERROR):(?:absl|jax|jaxlib|xla)\b"  # Python logging
    r"|.*\b(?:[Gg]loo|XLA|xla_bridge|jaxlib)\b)"
)

CONFIG_TEMPLATE = '''"""nbgrader configuration of the {course_id} course, written by `shardlab nbgrader build`.

Run nbgrader from this folder. Settings of your own go into nbgrader_config_local.py beside this file,
which a rebuild leaves alone and which is read last.
"""

import os
import sys

c = get_config()  # noqa: F821  (provided by nbgrader when it reads this file)
here = os.path.dirname(os.path.abspath(__file__))

# nbgrader runs `alembic` by name when it makes a gradebook: the one installed beside the Python running
# nbgrader, so that `.venv/bin/nbgrader` works without the venv activated.
tools = os.path.dirname(sys.executable)
if os.environ.get("PATH", "").split(os.pathsep)[0] != tools:
    os.environ["PATH"] = os.pathsep.join([tools, os.environ.get("PATH", os.defpath)])

c.CourseDirectory.course_id = {course_id!r}
c.CourseDirectory.root = here
c.CourseDirectory.db_url = "sqlite:///" + os.path.join(here, "gradebook.db")

# A test cell runs real pytest on several meshes, and a speedup test times repeated runs: be generous.
c.Execute.timeout = {timeout}
c.Execute.interrupt_on_timeout = True

# nbgrader's default stub, kept explicit: the student's function raises until it is written.
c.ClearSolutions.code_stub = {{"python": "# YOUR CODE HERE\\nraise NotImplementedError()"}}

# Warnings JAX, XLA, absl or gloo print on stderr are never a failure (nbgrader zeroes a test cell
# that wrote to stderr).
c.IgnorePattern.enabled = True
c.IgnorePattern.pattern = {pattern!r}

# Feedback shows a hidden test's name and messages, never its code.
c.GenerateFeedback.preprocessors = [
    "nbgrader.preprocessors.GetGrades",
    "grader.platforms.nbgrader_course.HideHiddenTestCode",
    "nbconvert.preprocessors.CSSHTMLHeaderPreprocessor",
]

{term_settings}
load_subconfig("nbgrader_config_local.py", here)  # noqa: F821
'''


class HideHiddenTestCode(Preprocessor):
    """Feedback preprocessor: a hidden test cell keeps its outputs (the test's name, its cases and their
    messages for students) but its source becomes one comment naming the test. nbgrader's own feedback
    shows the autograded notebook, where hidden tests are back in full."""

    enabled = Bool(True).tag(config=True)  # nbconvert's preprocessors are off unless enabled

    def preprocess_cell(self, cell, resources, index):
        role, name = notebooks.role_of(cell)
        if role == "hidden" or notebooks.HIDDEN_BEGIN in cell.get("source", ""):
            cell.source = f"# hidden test: {name or 'unnamed'} (code not shown)"
        return cell, resources


def parse_groups(texts: list[str]) -> dict[str, list[catalog.Exercise]]:
    """["lab1=ex01,ex02", ...] (the --group options) -> {"lab1": [ex01, ex02], ...}: exercises by id or number."""
    groups = {}
    for text in texts:
        name, sep, members = text.partition("=")
        if not sep or not _NAME.fullmatch(name) or not members.strip():
            raise ValueError(
                f"a group is NAME=EXERCISE,EXERCISE,... with NAME of letters, digits, - and _: {text!r}"
            )
        if name in groups:
            raise ValueError(f"the group {name} is given twice")
        groups[name] = [
            catalog.get(member.strip()) for member in members.split(",") if member.strip()
        ]
    return groups


def assignments(
    exercises: list[catalog.Exercise], groups: dict[str, list[catalog.Exercise]]
) -> dict[str, list[catalog.Exercise]]:
    """Assignment name -> its exercises, in catalog order: each group, and every other exercise alone."""
    grouped = [e for members in groups.values() for e in members]
    if len(grouped) != len(set(grouped)):
        raise ValueError("an exercise is in more than one group")
    order = {e.id: i for i, e in enumerate(catalog.EXERCISES)}
    result = {name: sorted(members, key=lambda e: order[e.id]) for name, members in groups.items()}
    for exercise in exercises:
        if exercise not in grouped:
            if exercise.id in result:
                raise ValueError(
                    f"the group name {exercise.id} is also an exercise's own assignment"
                )
            result[exercise.id] = [exercise]
    return dict(sorted(result.items(), key=lambda item: order[item[1][0].id]))


def nbgrader_config(
    course_id: str, *, timeout: int = 600, course: term.Course | None = None
) -> str:
    if not _NAME.fullmatch(course_id):
        raise ValueError(f"a course id is letters, digits, - and _: {course_id!r}")
    return CONFIG_TEMPLATE.format(
        course_id=course_id,
        timeout=timeout,
        pattern=NOISE_PATTERN,
        term_settings=_term_settings(course),
    )


def _term_settings(course: term.Course | None) -> str:
    """The config's lines about the term: where its due dates are (a comment: nbgrader reads them from the
    gradebook) and the zone formgrader shows times in."""
    if course is None:
        return ""
    lines = [
        f"# The term: {course.name}"
        + (f" (course file {course.source.path})." if course.source else "."),
        "# Its due dates are in the gradebook (nbgrader reads them nowhere else); `shardlab nbgrader build "
        "--course`",
        "# wrote them there:",
    ]
    for assignment in course.assignments:
        due = assignment.due.isoformat() if assignment.due is not None else "no due date"
        title = f" ({assignment.name})" if assignment.name != assignment.slug else ""
        lines.append(f"#   {assignment.slug}{title}: {due}")
    zone = course_timezone(course)
    if zone is not None:
        lines += [
            "# Formgrader shows times in the course's timezone.",
            f"c.NbGraderAPI.timezone = {zone!r}",
        ]
    lines += late_policy_lines(course.late)
    return "\n".join(lines) + "\n\n"


# nbgrader's late-submission plugin that applies the course file's late policy (importing it imports
# nbgrader, which takes seconds: named here, imported by nbgrader when it reads the config)
LATE_PLUGIN = "grader.platforms.nbgrader_late.TermLatePenalty"


def late_policy_lines(policy: term.LatePolicy) -> list[str]:
    """nbgrader_config.py's lines that make autograde apply `policy` (grader.platforms.nbgrader_late); none for
    a policy without penalty (nbgrader's default, "none", is then the same)."""
    if not policy.percent and policy.zero_after is None:
        return []
    zero_after = policy.zero_after.isoformat() if policy.zero_after else ""
    return [
        f"# Late work: {policy.describe()}: the course file's [late], which autograde applies to the",
        "# timestamp.txt `nbgrader collect` keeps, against the gradebook's due date.",
        f"c.AssignLatePenalties.plugin_class = {LATE_PLUGIN!r}",
        f"c.TermLatePenalty.percent = {policy.percent!r}",
        f"c.TermLatePenalty.per = {policy.per!r}",
        f"c.TermLatePenalty.cap = {policy.cap!r}",
        f"c.TermLatePenalty.grace_seconds = {policy.grace.total_seconds()!r}",
        f"c.TermLatePenalty.zero_after = {zero_after!r}",
    ]


def course_assignments(
    course: term.Course, exercises: list[str] | None = None
) -> dict[str, list[catalog.Exercise]]:
    """nbgrader's assignment name (the course file's slug: nbgrader takes letters, digits, - and _ only) ->
    its exercises (the term's, with the term's points), in the course file's order; `exercises` (ids or
    numbers): only these, each of which must be in the term."""
    wanted = {course.exercise(name).id for name in exercises} if exercises else None
    by_id = {e.id: e for e in course.exercises}
    plan = {}
    for assignment in course.assignments:
        members = [
            by_id[ex_id] for ex_id in assignment.exercises if wanted is None or ex_id in wanted
        ]
        if members:
            plan[assignment.slug] = members
    return plan


def _due_dates(course: term.Course, slugs: list[str]) -> dict[str, datetime | None]:
    return {a.slug: a.due for a in course.assignments if a.slug in slugs}


@contextlib.contextmanager
def _own_tools_first():
    """nbgrader runs `alembic` by name when it makes a gradebook: the one beside this Python, for a while."""
    before = os.environ.get("PATH")
    tools = os.path.dirname(sys.executable)
    os.environ["PATH"] = os.pathsep.join([tools, before or os.defpath])
    try:
        yield
    finally:
        if before is None:
            os.environ.pop("PATH", None)
        else:
            os.environ["PATH"] = before


def gradebook_url(course_dir: str | Path) -> str:
    """The gradebook nbgrader uses in `course_dir`: its nbgrader_config.py's CourseDirectory.db_url, with
    nbgrader_config_local.py's say, as nbgrader reads them."""
    from traitlets.config.loader import PyFileConfigLoader

    root = Path(course_dir).resolve()
    config = PyFileConfigLoader("nbgrader_config.py", str(root)).load_config()
    url = config.CourseDirectory.get("db_url")
    return str(url) if url else f"sqlite:///{root / 'gradebook.db'}"


def _no_such_sqlite_file(url: str) -> bool:
    prefix = "sqlite:///"
    return url.startswith(prefix) and not Path(url[len(prefix) :]).exists()


def write_due_dates(
    course_dir: str | Path, due_dates: dict[str, datetime | None], *, course_id: str
) -> str:
    """Each assignment's due date (None: none) into the gradebook of `course_dir`, through nbgrader's own
    Gradebook API (as `nbgrader db assignment add NAME --duedate=...` does); returns the gradebook's url.
    nbgrader keeps the time in UTC."""
    from nbgrader.api import Gradebook

    with _own_tools_first():
        url = gradebook_url(course_dir)
        if not any(due is not None for due in due_dates.values()) and _no_such_sqlite_file(url):
            return url  # nothing to write and nothing to clear: generate_assignment will make the gradebook
        with Gradebook(url, course_id) as gradebook:
            for name, due in due_dates.items():
                gradebook.update_or_create_assignment(name, duedate=due)
    return url


def released(notebook: nbformat.NotebookNode) -> nbformat.NotebookNode:
    """The notebook as `nbgrader generate_assignment` releases it, as far as what it shows goes: nbgrader's
    own preprocessors replace each solution block by the stub and remove each hidden test block."""
    # Imported here, not above: importing nbgrader takes seconds, and only a build needs it.
    from nbgrader.preprocessors import ClearHiddenTests, ClearSolutions

    notebook = copy.deepcopy(notebook)
    for preprocessor in (ClearSolutions(), ClearHiddenTests()):
        notebook, _ = preprocessor.preprocess(notebook, {})
    return notebook


def released_files(notebooks_by_name: dict[str, nbformat.NotebookNode]) -> dict[str, str]:
    """Every cell of every released notebook, as "<notebook's name>#<cell id>" -> its source."""
    return {
        f"{name}#{cell.id}": cell.source
        for name, notebook in notebooks_by_name.items()
        for cell in released(notebook).cells
    }


def build_course(
    course_dir: str | Path,
    *,
    groups: dict[str, list[catalog.Exercise]] | None = None,
    exercises: list[str] | None = None,
    course_id: str = "shardlab",
    tests: list[TestMeta] | None = None,
    secrets: no_secrets.CourseSecrets | None = None,
    course: term.Course | None = None,
) -> list[Path]:
    """Write source/<assignment>/<exercise id>.ipynb for every exercise (or those named) and
    nbgrader_config.py into `course_dir`; returns the files written. `tests` is collect_tests()'s
    metadata, collected here when not given. Raises no_secrets.LeaksFound, having written nothing, when
    a notebook as released would hold a solution line or a hidden test of `secrets` (the course's own
    by default).

    course: the term (grader.course.term.load). Its assignments are nbgrader's, its points the test
    cells', and each assignment's due date (or its absence) is written into the gradebook nbgrader_config.py
    names (write_due_dates; a term without due dates makes no gradebook that does not exist yet). With a
    course file, `groups` is refused: the course file groups.
    None (or the catalog's course, with groups): each exercise alone or in its group, no due date."""
    groups = groups or {}
    # the exercises the groups may take: the catalog's course's (narrowed to one part by --part)
    pool = tuple(course.exercises) if course is not None else catalog.EXERCISES
    if course is not None and groups:
        if course.source is not None:
            raise ValueError(
                f"--group is not taken beside the course file {course.source.path}: its [[assignment]] "
                "tables are the groups (nbgrader's assignments, named by their slugs): change them "
                "there, or build without a course file (no --course, no course.toml in this folder) "
                "to group the catalog's exercises"
            )
        course = None  # the catalog's course: the groups say how to group it
    # a bad course id fails before anything is written
    config = nbgrader_config(course_id, course=course)
    if course is not None:
        plan = course_assignments(course, exercises)
        chosen = [e for members in plan.values() for e in members]
    else:
        chosen = [catalog.get(name) for name in exercises] if exercises else list(pool)
        chosen += [e for members in groups.values() for e in members if e not in chosen]
        outside = [e.id for e in chosen if e not in pool]
        if outside:
            raise ValueError(f"not in the course built (--part): {', '.join(outside)}")
        plan = assignments(chosen, groups)
    if tests is None:
        from grader.grading.collection import collect_tests

        tests = collect_tests(chosen)
    built = {
        f"{assignment}/{exercise.id}.ipynb": notebooks.exercise_notebook(exercise, tests)
        for assignment, members in plan.items()
        for exercise in members
    }
    no_secrets.refuse_leaks(
        released_files({f"release/{name}": nb for name, nb in built.items()}),
        no_secrets.NBGRADER_RELEASE,
        secrets,
    )
    root = Path(course_dir)
    written = []
    for name, notebook in built.items():
        path = root / "source" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        nbformat.write(notebook, path)
        written.append(path)
    (root / "nbgrader_config.py").write_text(config)
    if course is not None:
        write_due_dates(root, _due_dates(course, list(plan)), course_id=course_id)
    return written + [root / "nbgrader_config.py"]
