"""What grading produces: plain dataclasses, with the scoring rule. Reports are built from these
(grader.reports.writers), never the other way round."""

from __future__ import annotations

import dataclasses
import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from grader.core.bounds import (
    GRADING_CHARS,
    MESSAGE_CHARS,
    NAME_CHARS,
    PROBLEM_CHARS,
    PROBLEMS,
    at_most,
    clipped,
)
from grader.core.results import Category, Environment, TestResult
from grader.course import catalog
from grader.course.term import Lateness

# an exercise's state when a due date applies and no submission time is known
NO_TIME = "no submission time: no late penalty applied"


@dataclass
class ExerciseResult:
    id: str
    title: str
    max_score: float
    tests: list[TestResult] = field(default_factory=list)
    note: str = ""  # e.g. "module missing: not attempted"
    bonus: bool = False  # extra credit: its score counts, its max_score does not
    # when it came in against its due date, and what that costs (the course file)
    late: Lateness | None = None
    # the time it was judged with: a grading of another assignment keeps it (grader.grading.lateness)
    submitted: Submitted | None = None
    # a due date applies but no submission time is known: no late penalty applied, and every output says so
    untimed: bool = False
    # the digest of the submission it was graded from (grader.grading.submission_digest), and when: grade-batch
    # grades it again when the submission changed since; a grading of other exercises keeps both
    graded_from: str | None = None
    graded_at: str | None = None

    @property
    def score(self) -> float:
        """What its tests earned: the raw score, before any late penalty."""
        return math.fsum(t.score for t in self.tests)  # exact: the same total in any test order

    @property
    def penalty(self) -> float:
        """The points the late policy takes off the raw score."""
        return self.score * self.late.percent / 100 if self.late is not None else 0.0

    @property
    def final(self) -> float:
        return self.score - self.penalty

    @property
    def checked(self) -> float:
        """The points its tests that ran carry: all of max_score when every test ran, less when only the
        visible ones did."""
        return math.fsum(t.max_score for t in self.tests)

    def count(self, category: Category) -> int:
        return sum(t.category == category for t in self.tests)


@dataclass(frozen=True)
class Submitted:
    """When an exercise's submission came in, and where that time came from (the flag, a times file, git,
    Gradescope)."""

    at: str  # ISO 8601 with its offset
    source: str

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Submitted:
        return cls(str(data["at"]), str(data["source"]))


@dataclass(frozen=True)
class TermRecord:
    """Which term graded whose submission, and when it came in: report.json's "term"."""

    course: str  # the course's name
    course_file: str | None = None  # None: no course file, the catalog's course
    course_digest: str | None = None  # sha256 of the course file's bytes
    student: str | None = None  # as extensions and adjustments name them
    # the latest of its exercises' times (ISO 8601 with its offset); None: none known, no late policy applied
    submitted_at: str | None = None
    # where that time came from: the flag, a times file, git, Gradescope
    submitted_from: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> TermRecord:
        return cls(
            **{f.name: data.get(f.name) for f in dataclasses.fields(cls)}
            | {"course": data["course"]}
        )


@dataclass(frozen=True)
class Regrade:
    """One exercise graded again into an existing report: when, and its score before and after."""

    exercise: str
    at: str  # ISO 8601, UTC
    before: float
    after: float
    course_digest: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Regrade:
        return cls(
            str(data["exercise"]),
            str(data["at"]),
            float(data["before"]),
            float(data["after"]),
            data.get("course_digest"),
        )


@dataclass
class GradingResults:
    submission: str
    exercises: dict[str, ExerciseResult]
    environment: Environment = field(default_factory=Environment)
    problems: list[str] = field(default_factory=list)  # about the submission as a whole
    output: str = ""  # the harness's own output (warnings, a crash's last words), truncated
    duration: float = 0.0
    visible_only: bool = False
    # files in the submission that are not exercise modules
    ignored: list[str] = field(default_factory=list)
    term: TermRecord | None = None  # the course file, the student and the submission time
    # exercises graded again into this report, oldest first
    regrades: list[Regrade] = field(default_factory=list)
    # sha256 of the submission as intake reads it (grader.grading.submission.digest), and when, at its latest
    # grading (each exercise records its own: ExerciseResult.graded_from)
    submission_digest: str | None = None
    graded_at: str | None = None  # ISO 8601, UTC
    # files handed in and not graded (each also among problems): the class page and grades.csv name them
    refused: list[str] = field(default_factory=list)

    def __post_init__(self):
        """A grading's text is bounded (grader.core.bounds), whatever made it: when its tests would take more
        than GRADING_CHARS, the largest are cut to one size so that they fit, and a problem says so; the
        problems are bounded too. A grading built again from a bounded one is the same."""
        sizes = {id(t): t.text_size() for t in self.tests()}
        cap = _cap(sorted(sizes.values()), GRADING_CHARS)
        over = {id(t) for t in self.tests() if cap is not None and sizes[id(t)] > cap}
        if over:
            self.exercises = {
                ex_id: dataclasses.replace(
                    ex, tests=[_cut(t, cap) if id(t) in over else t for t in ex.tests]
                )
                for ex_id, ex in self.exercises.items()
            }
            self.problems = [
                f"the results of {len(over)} test(s) were cut to {cap:,} characters each (their facts "
                f"and what their code printed left out, their messages shortened): all tests' messages, "
                f"output and facts would take more than the {GRADING_CHARS:,} characters a grading "
                "may take",
                *self.problems,
            ]
        self.problems = at_most(
            [clipped(str(p), PROBLEM_CHARS) for p in self.problems],
            PROBLEMS,
            " problems, not listed",
        )
        self.ignored = at_most([clipped(str(name), NAME_CHARS) for name in self.ignored], PROBLEMS)
        self.refused = at_most(
            [clipped(str(p), PROBLEM_CHARS) for p in self.refused], PROBLEMS, " files refused"
        )

    @property
    def score(self) -> float:
        return math.fsum(e.score for e in self.exercises.values())

    @property
    def penalty(self) -> float:
        return math.fsum(e.penalty for e in self.exercises.values())

    @property
    def final(self) -> float:
        """The score after late penalties (an instructor's adjustments come on top: grader.grading.standing)."""
        return math.fsum(e.final for e in self.exercises.values())

    @property
    def max_score(self) -> float:
        """The course's maximum: a bonus exercise adds to the score only."""
        return math.fsum(e.max_score for e in self.exercises.values() if not e.bonus)

    @property
    def checked(self) -> float:
        """The points the tests that ran carry (a visible-only run's are fewer than max_score)."""
        return math.fsum(e.checked for e in self.exercises.values())

    def tests(self) -> list[TestResult]:
        return [t for e in self.exercises.values() for t in e.tests]

    def to_dict(self) -> dict[str, Any]:
        exercises = {
            ex_id: {
                "id": ex.id,
                "title": ex.title,
                "max_score": ex.max_score,
                "tests": [t.to_dict() | {"name": t.name} for t in ex.tests],
                "note": ex.note,
                "bonus": ex.bonus,
                "score": ex.score,
                "late": ex.late.to_dict() if ex.late is not None else None,
                "submitted": ex.submitted.to_dict() if ex.submitted is not None else None,
                "untimed": ex.untimed,
                "graded_from": ex.graded_from,
                "graded_at": ex.graded_at,
                "penalty": ex.penalty,
                "final": ex.final,
            }
            for ex_id, ex in self.exercises.items()
        }
        return {
            "submission": self.submission,
            "score": self.score,
            "penalty": self.penalty,
            "final": self.final,
            "max_score": self.max_score,
            "term": self.term.to_dict() if self.term is not None else None,
            "regrades": [r.to_dict() for r in self.regrades],
            "submission_digest": self.submission_digest,
            "graded_at": self.graded_at,
            "visible_only": self.visible_only,
            "duration": self.duration,
            "exercises": exercises,
            "problems": self.problems,
            "ignored": self.ignored,
            "refused": self.refused,
            "output": self.output,
            "environment": self.environment.to_dict(),
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> GradingResults:
        """From to_dict()'s form, as report.json holds it: this version's, or an older one's (whose tests
        carry no strike and no facts; whose exercises record no time of their own: the one time it judged them
        all with is theirs). A test with a key TestResult does not know is an error."""
        term = TermRecord.from_dict(data["term"]) if data.get("term") else None
        one_time = (
            Submitted(term.submitted_at, term.submitted_from or "an earlier grading")
            if term is not None and term.submitted_at is not None
            else None
        )
        exercises = {}
        for ex_id, ex in data["exercises"].items():
            tests = [TestResult.from_dict(t, ignore=("name",)) for t in ex["tests"]]
            late = ex.get("late")
            if "submitted" not in ex:  # an older report's: the one time it recorded
                submitted = one_time
            else:
                submitted = Submitted.from_dict(ex["submitted"]) if ex["submitted"] else None
            exercises[ex_id] = ExerciseResult(
                ex["id"],
                ex["title"],
                ex["max_score"],
                tests,
                ex.get("note", ""),
                ex.get("bonus", False),
                Lateness.from_dict(late) if late else None,
                submitted,
                bool(ex.get("untimed", False)),
                # an older report's: the grading's, which graded every exercise it holds
                ex.get("graded_from", data.get("submission_digest")),
                ex.get("graded_at", data.get("graded_at")),
            )
        return cls(
            data["submission"],
            exercises,
            Environment.from_dict(data.get("environment")),
            data.get("problems", []),
            data.get("output", ""),
            data.get("duration", 0.0),
            data.get("visible_only", False),
            data.get("ignored", []),
            term,
            [Regrade.from_dict(r) for r in data.get("regrades", ())],
            data.get("submission_digest"),
            data.get("graded_at"),
            list(data.get("refused", [])),
        )


def read_report(path: Path) -> GradingResults | None:
    """The grading a report.json holds; None when there is none, or it cannot be read (the caller says what
    that means: not graded yet, or nothing earlier to keep)."""
    try:
        return GradingResults.from_dict(json.loads(Path(path).read_text(encoding="utf-8")))
    # MalformedResult is a ValueError
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return None


_SMALLEST_CUT = 1_000  # a cut test keeps at least this much: the start of its message and the note


def _cap(sizes: list[int], total: int) -> int | None:
    """The largest size c such that the sizes, each cut to c, add up to at most `total` (at least
    _SMALLEST_CUT); None when they fit uncut. `sizes` ascending."""
    if sum(sizes) <= total:
        return None
    room = total
    for i, size in enumerate(sizes):
        share = room // (len(sizes) - i)  # what each of the rest may take
        if size > share:
            return max(share, _SMALLEST_CUT)
        room -= size
    return None


def _cut(test: TestResult, cap: int) -> TestResult:
    """`test` within `cap` characters: its facts and output left out, its message cut to what fits with a
    note that says why."""
    note = (
        f"[the grader left out this test's facts and output and cut its message: this grading's results "
        f"would take more than the {GRADING_CHARS:,} characters a grading may take]"
    )
    chars = min(cap, MESSAGE_CHARS) - len(note) - 1
    while True:
        message = clipped(test.message, chars) + "\n" + note if test.message and chars > 0 else note
        shortened = dataclasses.replace(
            test, message=message, output="", layouts=[], collectives=[], speedup=None
        )
        if shortened.text_size() <= cap or chars <= 0:
            return shortened
        chars //= 2  # text_size counts what escapes take: cut more


def score_exercise(
    exercise: catalog.Exercise, tests: list[TestResult], note: str = ""
) -> ExerciseResult:
    """A test's points are its weight: an exercise's tests, visible and hidden, weigh its catalog points
    (dev-check checks it), so a run of some of them (the visible ones) carries only their points. A term
    that gives the exercise other points (its course file) scales every test alike. Should the tests run
    weigh more than the exercise (a course being written), they share its points by weight: never a score
    above the maximum. A passed (or skipped) test earns its points."""
    total_weight = math.fsum(t.weight for t in tests)
    try:
        catalog_points = catalog.get(exercise.id).points
    except catalog.UnknownExercise:
        catalog_points = exercise.points
    scale = (
        exercise.points / catalog_points * min(1.0, catalog_points / total_weight)
        if total_weight
        else 0.0
    )
    for test in tests:
        test.max_score = test.weight * scale
        # A test skipped by the timing policy or because the platform does not report a figure earns its
        # share: the student is not penalized for the grader's choice or platform. Student code cannot
        # make a graded test skip: in a worker, its exceptions come back as ordinary errors.
        test.score = test.max_score if test.earns else 0.0
    return ExerciseResult(
        exercise.id, exercise.title, float(exercise.points), tests, note, exercise.bonus
    )
