"""The Gradescope autograder: `shardlab gradescope build autograder.zip`.

What Gradescope does with it (gradescope-autograders.readthedocs.io, "Autograder Specifications" and
"Base Images"): it builds a Docker image, Ubuntu 22.04 by default, from a zip with `setup.sh` and
`run_autograder` at its root. The zip is unpacked in /autograder/source, and setup.sh runs once, as
root, while the image is built. For each submission, run_autograder (copied to
/autograder/run_autograder) runs with /autograder as its working folder and the student's files in
/autograder/submission. It must write /autograder/results/results.json, or Gradescope shows only "The
autograder failed to execute correctly". Whatever it prints goes to /autograder/results/stdout, which
only instructors see.

The zip holds the course as grading uses it: the grader package, every exercise's tests (visible and
hidden, with their conftests), the root conftest.py, and pyproject.toml with the README it names, so
that setup.sh can `pip install -e` the project with its pinned dependencies. It holds neither solutions/
nor exercises/. Grading reads neither, since submissions bring their own modules, and the stubs belong
to the student handout. verify_autograder_zip checks all this (what must not ship, with the check every
builder uses: grader.platforms.no_secrets under its GRADESCOPE policy), and the build refuses any zip it
finds fault with.

With a term's course file (grader.course.term), the zip holds it whole, extensions included (only
instructors see the zip), as course.toml at its root: /autograder/source/course.toml, which run_autograder
passes to `shardlab grade --course`. It always passes /autograder/submission_metadata.json with
`--submission-metadata`: Gradescope's submission time, due dates and users (grader.grading.gradescope_metadata).

A Gradescope assignment is one of the term's: `shardlab gradescope build OUT.zip --assignment HW1` (its name
or slug) writes the slug into the zip as assignment.txt, which run_autograder passes to `shardlab grade
--assignment`, so the zip grades that assignment's exercises only, scores out of its points and judges
its lateness only (Gradescope's created_at against its due date). `--each-assignment OUTDIR` writes one
zip per assignment, OUTDIR/<slug>.zip. A course file of several assignments is refused without either: one
zip for the whole term would score every assignment in each and apply one assignment's late penalty again
in the next.

One part of the course (`--part 2`, catalog.PARTS) writes its number into the zip as part.txt, which
run_autograder passes to `shardlab grade --part`: the zip grades that part's exercises only (of the
assignment, with --assignment; --each-assignment: a zip for each assignment holding exercises of the part).

On Gradescope, give the assignment more than the default resources (Autograder Settings): 2 CPUs for 8
forced host devices, and 2 GB of memory, since a grading child peaked at 480 MB here, close to the
default 768 MB. Grading a fully correct submission took 26 s here on 2 cores. run_autograder stops
the tests after 420 s and the grader after 510 s, under Gradescope's default 10-minute timeout (its
header says how to raise them).
"""

from __future__ import annotations

import hashlib
import os
import stat
import tempfile
import zipfile
from pathlib import Path, PurePosixPath

from grader.core.errors import ShardlabError
from grader.course import catalog, paths, term
from grader.platforms import no_secrets

TEMPLATES = Path(__file__).with_name("gradescope_templates")
SCRIPTS = ("setup.sh", "run_autograder")  # at the zip's root, executable: Gradescope's entry points
# pyproject names the README: pip needs both
ROOT_FILES = ("pyproject.toml", "README.md", "conftest.py")
REQUIRED_GRADER_FILES = ("grader/__init__.py", "grader/cli.py", "grader/course/paths.py")
# the term's course file, at the zip's root: /autograder/source/course.toml
COURSE_FILE = term.FILE_NAME
# the slug of the one assignment the zip grades, at the zip's root (run_autograder reads it)
ASSIGNMENT_FILE = "assignment.txt"
# the number of the one part of the course the zip grades, at the zip's root (run_autograder reads it)
PART_FILE = "part.txt"
# the earliest a zip can hold: the same course gives the same bytes
_FIXED_TIME = (1980, 1, 1, 0, 0, 0)


class GradescopeBuildError(ShardlabError, RuntimeError):
    """The autograder zip failed its verification; the problems are in `.problems`."""

    def __init__(self, path: Path, problems: list[str]):
        self.problems = problems
        super().__init__(f"{path} was not written: " + "; ".join(problems))


# -- what goes in -------------------------------------------------------------------------------------


def _shipped(path: Path) -> bool:
    """Source files only: no caches, no compiled files (a .pyc of a solution would escape the line check)."""
    return (
        path.is_file()
        and "__pycache__" not in path.parts
        and path.suffix not in (".pyc", ".pyo")
        and not path.name.startswith(".")
    )


def _tree(folder: Path, root: Path) -> dict[str, Path]:
    return {
        path.relative_to(root).as_posix(): path
        for path in sorted(folder.rglob("*"))
        if _shipped(path)
    }


def course_files(
    root: Path = paths.REPO_ROOT, exercise_ids: tuple[str, ...] | None = None
) -> dict[str, Path]:
    """Every file of the course the zip holds, by its name in the zip (the scripts aside): the grader, and
    the tests of the exercises it grades (`exercise_ids`; None: every one of the catalog)."""
    files = {name: root / name for name in ROOT_FILES}
    files |= _tree(root / "grader", root)
    for exercise in catalog.EXERCISES:
        if exercise_ids is None or exercise.id in exercise_ids:
            files |= _tree(exercise.tests_dir(root / "tests" / "exercises"), root)
    return files


def _zip_info(name: str, executable: bool) -> zipfile.ZipInfo:
    info = zipfile.ZipInfo(name, date_time=_FIXED_TIME)
    info.create_system = 3  # Unix: unzip then honours the mode bits below
    info.external_attr = (stat.S_IFREG | (0o755 if executable else 0o644)) << 16
    info.compress_type = zipfile.ZIP_DEFLATED
    return info


def _write_zip(path: Path, files: dict[str, Path], extra: dict[str, bytes] | None = None) -> None:
    with zipfile.ZipFile(path, "w") as zf:
        for name in SCRIPTS:
            zf.writestr(_zip_info(name, executable=True), (TEMPLATES / name).read_bytes())
        for name, source in sorted(files.items()):
            zf.writestr(_zip_info(name, executable=os.access(source, os.X_OK)), source.read_bytes())
        for name, data in sorted((extra or {}).items()):
            zf.writestr(_zip_info(name, executable=False), data)


def course_file_bytes(course: term.Course, out_zip: Path) -> dict[str, bytes]:
    """{COURSE_FILE: the course file's bytes} as grading read them (its digest checked), or {} for the
    catalog's course, which has no file."""
    if course.source is None:
        return {}
    path = Path(course.source.path)
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise GradescopeBuildError(
            out_zip, [f"the course file {path} cannot be read: {exc.strerror or exc}"]
        ) from None
    if hashlib.sha256(data).hexdigest() != course.source.digest:
        raise GradescopeBuildError(
            out_zip, [f"the course file {path} changed since it was read: build again"]
        )
    return {COURSE_FILE: data}


def assignment_file_bytes(
    course: term.Course | None, assignment: str | None, out_zip: Path
) -> dict[str, bytes]:
    """{ASSIGNMENT_FILE: the slug} of the assignment the zip grades; {} for a zip of the whole course, which
    only a course of one assignment (or the catalog's, without a course file) may have."""
    course = course or term.default_course()
    if assignment is None:
        if course.source is not None and len(course.assignments) > 1:
            named = ", ".join(f"{a.name!r} ({a.slug})" for a in course.assignments)
            raise GradescopeBuildError(
                out_zip,
                [
                    f"the course file has {len(course.assignments)} assignments ({named}) and a "
                    "Gradescope assignment grades one: give --assignment NAME, or --each-assignment "
                    "OUTDIR for a zip each"
                ],
            )
        return {}
    try:
        return {ASSIGNMENT_FILE: (course.assignment(assignment).slug + "\n").encode()}
    except KeyError as exc:
        raise GradescopeBuildError(out_zip, [exc.args[0]]) from None


def build_gradescope_zip(
    out_zip: str | Path,
    *,
    secrets: no_secrets.CourseSecrets | None = None,
    course: term.Course | None = None,
    assignment: str | None = None,
    part: int | None = None,
) -> Path:
    """Write the autograder zip to `out_zip` and verify it against `secrets` (the course's own by
    default). If verification finds a problem, nothing is left at `out_zip` and GradescopeBuildError
    lists what is wrong. course: the term (grader.course.term.load), whose course file the zip holds
    whole as course.toml, for run_autograder to grade with; None (or the catalog's course): no course file.
    assignment: the one the zip grades (name or slug), required of a course file of several.
    part: the one part of the course the zip grades (its exercises of the assignment)."""
    out_zip = Path(out_zip)
    extra = course_file_bytes(course, out_zip) if course is not None else {}
    whole = course or term.default_course()
    if part is not None:
        extra[PART_FILE] = f"{part}\n".encode()
        try:
            course = whole.part(part)
        except KeyError as exc:
            raise GradescopeBuildError(out_zip, [f"--part {part}: {exc.args[0]}"]) from None
    extra |= assignment_file_bytes(course, assignment, out_zip)
    # the tests of what it grades, and of no other exercise
    graded = whole.chosen(assignment, part) or tuple(e.id for e in whole.exercises)
    out_zip.parent.mkdir(parents=True, exist_ok=True)
    partial = out_zip.with_name(f".{out_zip.name}.part")
    try:
        _write_zip(partial, course_files(exercise_ids=graded), extra)
        problems = verify_autograder_zip(partial, secrets=secrets)
        if problems:
            raise GradescopeBuildError(out_zip, problems)
        os.replace(partial, out_zip)
    finally:
        partial.unlink(missing_ok=True)
    return out_zip


def build_each_assignment(
    out_dir: str | Path,
    *,
    course: term.Course,
    secrets: no_secrets.CourseSecrets | None = None,
    part: int | None = None,
) -> list[Path]:
    """One autograder zip per assignment of the term, OUTDIR/<slug>.zip, each grading that assignment only
    (of one part: each assignment holding exercises of that part, its exercises of the part)."""
    try:
        chosen = course.part(part) if part is not None else course
    except KeyError as exc:
        raise GradescopeBuildError(Path(out_dir), [f"--part {part}: {exc.args[0]}"]) from None
    return [
        build_gradescope_zip(
            Path(out_dir) / f"{a.slug}.zip",
            secrets=secrets,
            course=course,
            assignment=a.slug,
            part=part,
        )
        for a in chosen.assignments
    ]


# -- verification -------------------------------------------------------------------------------------------


def _required_entries(exercise_ids: tuple[str, ...]) -> list[str]:
    required = [*SCRIPTS, *ROOT_FILES, *REQUIRED_GRADER_FILES]
    for exercise in catalog.EXERCISES:
        if exercise.id not in exercise_ids:
            continue
        tests = f"tests/exercises/{exercise.id}"
        required += [f"{tests}/test_visible.py", f"{tests}/test_hidden.py"]
        required += list(_tree(exercise.tests_dir(), paths.REPO_ROOT))  # conftests too
    return list(dict.fromkeys(required))


def _missing(names: set[str], exercise_ids: tuple[str, ...]) -> list[str]:
    return [
        f"missing {name}" + (" (hidden tests)" if name.endswith("/test_hidden.py") else "")
        for name in _required_entries(exercise_ids)
        if name not in names
    ]


def _others(names: set[str], exercise_ids: tuple[str, ...]) -> list[str]:
    """Tests of exercises the zip does not grade: an assignment's autograder carries its own only."""
    found = sorted(
        {
            parts[2]
            for name in names
            if len(parts := PurePosixPath(name).parts) > 3 and parts[:2] == ("tests", "exercises")
        }
        - set(exercise_ids)
    )
    return [
        f"tests/exercises/{ex_id}/: the tests of an exercise this zip does not grade"
        for ex_id in found
    ]


def _unsafe(names: set[str]) -> list[str]:
    return [
        f"{name}: unsafe path"
        for name in sorted(names)
        if name.startswith("/") or ".." in PurePosixPath(name).parts
    ]


def _script_problems(zf: zipfile.ZipFile, names: set[str]) -> list[str]:
    problems = []
    for name in SCRIPTS:
        if name not in names:
            continue  # reported as missing
        mode = zf.getinfo(name).external_attr >> 16
        if mode & 0o111 != 0o111:
            problems.append(
                f"{name} is not executable (mode {oct(mode & 0o777)}): Gradescope runs it directly"
            )
        text = zf.read(name)
        if not text.startswith(b"#!"):
            problems.append(f"{name} does not start with a #! line")
        if b"\r" in text:
            problems.append(
                f"{name} has CR line endings: the #! line would name a program that does not exist"
            )
    return problems


def _graded_by(zf: zipfile.ZipFile, names: set[str]) -> tuple[tuple[str, ...] | None, list[str]]:
    """The exercises the zip grades (its course file's, else the catalog's, narrowed to its part and its
    assignment), and what is wrong with those files: a course file in the zip must be one grading can read
    (the problems term.load finds in it), and the part and the assignment it names the course's own. With a
    problem, None: what it grades is not known."""
    everything = None
    course = term.default_course()
    if COURSE_FILE in names:
        with tempfile.TemporaryDirectory(prefix="shardlab-course-") as folder:
            path = Path(folder) / COURSE_FILE
            path.write_bytes(zf.read(COURSE_FILE))
            try:
                course = term.load(path)
            except term.CourseFileError as exc:
                return everything, [f"{COURSE_FILE}: {problem}" for problem in exc.problems]
    part = slug = None
    if PART_FILE in names:
        part = zf.read(PART_FILE).decode("utf-8", "replace").strip()
        try:
            course.part(part)
        except KeyError as exc:
            return everything, [f"{PART_FILE}: {exc.args[0]}"]
    if ASSIGNMENT_FILE in names:
        slug = zf.read(ASSIGNMENT_FILE).decode("utf-8", "replace").strip()
        slugs = [a.slug for a in (course.part(part) if part else course).assignments]
        if slug not in slugs:
            known = ", ".join(slugs)
            return everything, [
                f"{ASSIGNMENT_FILE}: {slug!r} is no assignment of the course (its slugs: {known})"
            ]
    return course.chosen(slug, part) or tuple(e.id for e in course.exercises), []


def _leaks(zf: zipfile.ZipFile, secrets: no_secrets.CourseSecrets | None) -> list[str]:
    """What the GRADESCOPE policy forbids (a solution line, a solutions folder, a compiled file), in
    every entry, folders included."""
    files = {info.filename: b"" if info.is_dir() else zf.read(info) for info in zf.infolist()}
    return [str(leak) for leak in no_secrets.find_leaks(files, no_secrets.GRADESCOPE, secrets)]


def verify_autograder_zip(
    path: str | Path, *, secrets: no_secrets.CourseSecrets | None = None
) -> list[str]:
    """What is wrong with an autograder zip, or [] when nothing is: required entries (Gradescope's two
    scripts, executable, and the visible and hidden tests of every exercise it grades, and of no other), no
    unsafe path, nothing the GRADESCOPE policy of grader.platforms.no_secrets forbids (no solutions/, no
    compiled file, no line of a reference solution in any file) against `secrets` (the course's own by
    default), and a course file, part and assignment, when the zip holds them, that grading can read."""
    try:
        with zipfile.ZipFile(path) as zf:
            names = {info.filename for info in zf.infolist() if not info.is_dir()}
            graded, course_problems = _graded_by(zf, names)
            return (
                (_missing(names, graded) + _others(names, graded) if graded is not None else [])
                + _unsafe(names)
                + _script_problems(zf, names)
                + course_problems
                + _leaks(zf, secrets)
            )
    except (OSError, zipfile.BadZipFile) as exc:
        return [f"{path} cannot be read as a zip: {exc}"]


__all__ = [
    "ASSIGNMENT_FILE",
    "COURSE_FILE",
    "GradescopeBuildError",
    "assignment_file_bytes",
    "build_each_assignment",
    "build_gradescope_zip",
    "course_file_bytes",
    "course_files",
    "verify_autograder_zip",
]
