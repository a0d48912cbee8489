"""The class page's section of similar code (grader.grading.similarity): per exercise, the pairs of students whose
code is unusually similar, each with its two figures and the shared passages side by side.

Names and code are the students': every one of them is placed as text (grader.reports.html escapes it), never as
markup. Nothing here reads a clock: the same comparison gives the same bytes.
"""

from __future__ import annotations

from grader.grading.similarity import (
    MAX_CHARS,
    ClassSimilarity,
    ExerciseSimilarity,
    SharedPassage,
    SimilarPair,
)
from grader.reports.html import Markup, element

SECTION_ID = "similarity"


def _percent(share: float) -> str:
    return f"{round(100 * share)}%"


def _lines(first: int, last: int) -> str:
    return f"line {first}" if first == last else f"lines {first}–{last}"


def _side(student: str, passage) -> Markup:
    return element(
        "figure",
        element(
            "figcaption",
            element("span", student, class_="student"),
            ", ",
            _lines(passage.first_line, passage.last_line),
            " (cut)" if passage.cut else None,
        ),
        element("pre", passage.text),
        data_first_line=passage.first_line,
        data_last_line=passage.last_line,
    )


def _passage(pair: SimilarPair, shared: SharedPassage) -> Markup:
    return element(
        "div",
        _side(pair.a, shared.a),
        _side(pair.b, shared.b),
        class_="side-by-side",
        data_shared=shared.shared,
    )


def _pair(pair: SimilarPair) -> Markup:
    figures = (
        f"{_percent(pair.similarity_a)} of {pair.a}'s own code is in {pair.b}'s, "
        f"{_percent(pair.similarity_b)} of {pair.b}'s in {pair.a}'s; {pair.shared} characters shared"
    )
    return element(
        "article",
        element(
            "header",
            element("span", pair.a, class_="student"),
            " and ",
            element("span", pair.b, class_="student"),
            element("span", _percent(pair.similarity), class_="pts"),
        ),
        element("p", figures, class_="note"),
        [_passage(pair, shared) for shared in pair.passages],
        class_="similar-pair",
        data_exercise=pair.exercise,
        data_a=pair.a,
        data_b=pair.b,
        data_similarity_a=f"{pair.similarity_a:.3f}",
        data_similarity_b=f"{pair.similarity_b:.3f}",
        data_shared=pair.shared,
    )


def _who(entries) -> str:
    return "; ".join(f"{student} ({why})" for student, why in entries)


def _exercise(result: ExerciseSimilarity) -> Markup:
    counts = [f"{len(result.compared)} modules compared"]
    if result.flagged > len(result.pairs):
        counts.append(
            f"{result.flagged} pairs above the thresholds, the {len(result.pairs)} most similar shown"
        )
    else:
        counts.append(
            f"{result.flagged} pair{'s' if result.flagged != 1 else ''} above the thresholds"
        )
    notes = [element("p", ", ".join(counts), class_="note")]
    if result.raw_text:
        notes.append(
            element(
                "p",
                "Compared on their raw text (the module does not parse): ",
                ", ".join(result.raw_text),
                class_="note",
            )
        )
    if result.cut:
        notes.append(
            element(
                "p",
                f"More than {MAX_CHARS} characters of code, only their first {MAX_CHARS} compared: ",
                ", ".join(result.cut),
                class_="note",
            )
        )
    if result.mostly_dead:
        notes.append(
            element(
                "p",
                "More than half of their code is in functions no graded function reaches (left out of "
                "the comparison; worth a look): ",
                ", ".join(result.mostly_dead),
                class_="note",
            )
        )
    if result.not_compared:
        notes.append(
            element(
                "details",
                element("summary", f"{len(result.not_compared)} not compared"),
                element("p", _who(result.not_compared), class_="note"),
            )
        )
    return element(
        "article",
        element("h3", result.exercise, " ", element("span", result.title, class_="note")),
        notes,
        [_pair(pair) for pair in result.pairs],
        class_="similar-exercise",
        data_exercise=result.exercise,
        data_flagged=result.flagged,
        data_compared=len(result.compared),
    )


def similarity_section(result: ClassSimilarity) -> Markup:
    """The class page's <section id="similarity">: the exercises with pairs above the thresholds, then the ones
    without, and the submissions that could not be read."""
    t = result.thresholds
    flagged = [e for e in result.exercises if e.pairs]
    quiet = [e.exercise for e in result.exercises if not e.pairs]
    intro = element(
        "p",
        "Pairs of students whose code for an exercise is unusually similar once the stub's code, docstrings, "
        "comments and the functions the exercise's own functions never call are left out (copydetect's "
        f"fingerprints, {t.noise}-character matches, names and strings "
        f"ignored): at least {_percent(t.similarity)} of one student's own code found in the other's, and at "
        f"least {t.min_shared} characters shared; at most {t.top} pairs per exercise, most similar first. A "
        "reason to read both submissions, not a verdict: short answers written the usual way look alike.",
        class_="note",
    )
    unreadable = (
        element(
            "p",
            element("span", "Could not be read, not compared: ", class_="status-bad"),
            _who(result.unreadable),
            class_="unreadable",
        )
        if result.unreadable
        else None
    )
    return element(
        "section",
        element("h2", "Similar code"),
        intro,
        unreadable,
        [_exercise(e) for e in flagged]
        if flagged
        else element("p", "No pair of submissions is above the thresholds.", class_="note"),
        element("p", "No pair above the thresholds in ", ", ".join(quiet), ".", class_="note")
        if flagged and quiet
        else None,
        id=SECTION_ID,
    )
