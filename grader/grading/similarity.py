"""Similar code across a class: for each exercise, the pairs of students whose modules share unusually much,
for an instructor to read (a reason to look, never a verdict).

The comparison is copydetect's (k-gram fingerprints of code whose names, strings and whitespace its filter has
already replaced: renaming a variable or reformatting changes nothing). Before it sees a module:

- every docstring, every bare string statement and every comment is blanked (replaced by spaces, line breaks
  kept, so that the offsets and line numbers of what is compared are the student's own);
- every function (top-level, or a method) that the exercise's own functions (the names the stub defines)
  cannot reach, and every one defined inside a live function that nothing else in it names, is blanked too
  (grader.grading.reachable: by name, conservatively; a class body runs, so it is never blanked): code the
  tests never run is evidence neither against its author nor against a classmate whose answer it holds. A
  module more than half of whose code is blanked so is listed (`mostly_dead`), a reason to look itself;
- of what is left, only the first MAX_CHARS characters of code are read (runs of blanks and blank lines
  counted once, as the lexer reads them: comments padding a module push nothing out), up to the last
  top-level statement that starts within them; a module cut is listed as such (`cut`);
- the stub, normalized the same way, is the boilerplate: each of its k-grams is removed from every student's
  fingerprints wherever it occurs, and each line of the stub's code (signatures, imports, `raise
  NotImplementedError`) is masked so that no fingerprint runs across it from one answer into the next. What
  everyone was handed counts for nobody. A module missing, unchanged from the stub, or with too little code of
  its own left is not compared.

A module that does not parse is compared on its raw text (comments blanked as far as the tokenizer reaches, the
raw stub's lines and k-grams as boilerplate too, nothing known to be dead) and is listed as such. A submission
that cannot be read at all is listed, and the others are compared.

Figures: for a pair (a, b), `similarity_a` is the share of a's own code (its fingerprinted characters once the
stub's are removed, copydetect's "token coverage") that b's module also holds, and `similarity_b` the other
way round, as copydetect.compare_files counts them; `shared` is the smaller of the two sides' matched
characters. The same two modules give the same figures whichever name sorts first. A pair is flagged when
either figure reaches `SimilarityThresholds.similarity` and they share at least `min_shared` filtered
characters: the exercises are short, and answers written the way the course shows coincide without any
copying. Beside a module that parses, a module that does not counts only by its own figure: its dead code
cannot be told apart, so it is evidence against its author only.

Bounded work. Per module (read whole, at most 1 MiB: grader.grading.submission): parsed and tokenized whole
(linear in its size), then at most MAX_CHARS characters of code lexed and hashed (runs of blanks and blank
lines compacted before copydetect's lexer, which reads them in quadratic time), and each k-gram kept at its
first REPEATS positions. Per pair: the figures cost a set intersection and a sort of the two fingerprints (at
most MAX_CHARS k-gram positions each); pairing the shared
passages, done for the `top` pairs of each exercise only, casts at most REPEATS votes per shared k-gram
position, REPEATS * MAX_CHARS in all. Per class: n students cost n modules and n (n - 1) / 2 pairs per
exercise.

Kept between runs (`cache`, grader.grading.similarity_cache; grade-batch's is OUT/.cache/similarity): each
module's lexed code and each pair's figures, under the hash of what they were computed from, so that a resumed
batch lexes and compares only the modules that changed.

Reading modules reuses grader.grading.submission (folder, exercises/, one wrapping folder, .zip with its
safety checks, notebooks), each submission copied into a temporary folder removed after. Nothing here reads a
clock or a random number: the same submissions give the same figures (every k-gram is kept, a window of 1, so
the result does not depend on the process's salted string hashing, which copydetect's hashes are).
copydetect (and matplotlib, which it imports) is imported only when a comparison runs.
"""

from __future__ import annotations

import ast
import dataclasses
import io
import re
import tempfile
import tokenize
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from functools import lru_cache, partial
from pathlib import Path

from grader.course import catalog
from grader.grading.reachable import dead_spans, defined_names
from grader.grading.similarity_cache import SimilarityCache, key
from grader.grading.submission import prepare_submission

# Why a module is not compared (ExerciseSimilarity.not_compared).
MISSING = "no module"
UNCHANGED = "unchanged from the stub"
STUB_ONLY = "too little code of its own beside the stub's"

# The work's bounds (module docstring): what of a module is fingerprinted, and how often one k-gram counts.
MAX_CHARS = 65_536  # about seven times the longest reference module
REPEATS = 8


@dataclass(frozen=True)
class SimilarityThresholds:
    similarity: float = 0.65  # either student's own code covered at least this much by the other's
    # and at least this many filtered characters shared (about 5 lines of code)
    min_shared: int = 200
    noise: int = 25  # copydetect's k: the shortest match counted, in filtered characters
    top: int = 5  # pairs reported per exercise, most similar first
    passages: int = 4  # shared passages shown per pair, longest first
    passage_lines: int = 15  # each side of a passage cut to this many lines
    line_chars: int = 160  # and each line to this many characters


@dataclass(frozen=True)
class Passage:
    """Lines first_line..last_line (1-based, inclusive) of one student's module, as they wrote them."""

    first_line: int
    last_line: int
    text: str  # the lines, cut to passage_lines lines of at most line_chars characters
    cut: bool = False  # whether text was cut


@dataclass(frozen=True)
class SharedPassage:
    """Code of a's that matches code of b's: the two sides, each where it is in its own module."""

    a: Passage
    b: Passage
    shared: int  # filtered characters of a's side that match b's code


@dataclass(frozen=True)
class SimilarPair:
    exercise: str
    a: str  # the two students, in name order
    b: str
    similarity_a: float  # share of a's own code found in b's module (0..1), as copydetect gives it
    similarity_b: float  # share of b's own code found in a's module
    # filtered characters matched, the smaller of the two sides' counts: the same whichever name sorts first
    shared: int
    passages: tuple[SharedPassage, ...]

    @property
    def similarity(self) -> float:
        """What pairs are ordered and flagged by: the larger of the two figures."""
        return max(self.similarity_a, self.similarity_b)


@dataclass(frozen=True)
class ExerciseSimilarity:
    exercise: str
    title: str
    compared: tuple[str, ...]  # students whose modules were compared, in name order
    not_compared: tuple[tuple[str, str], ...]  # (student, why: MISSING, UNCHANGED or STUB_ONLY)
    raw_text: tuple[str, ...]  # compared on their raw text: the module does not parse
    flagged: int  # pairs above the thresholds, before keeping the top ones
    pairs: tuple[SimilarPair, ...]  # the top `SimilarityThresholds.top`, most similar first
    # more than MAX_CHARS characters of code: only their first MAX_CHARS (to a top-level statement) compared
    cut: tuple[str, ...] = ()
    # more than half of their code in functions no graded function reaches (blanked, not compared)
    mostly_dead: tuple[str, ...] = ()


@dataclass(frozen=True)
class ClassSimilarity:
    exercises: tuple[ExerciseSimilarity, ...]
    # (student, why): their submission could not be read at all
    unreadable: tuple[tuple[str, str], ...]
    thresholds: SimilarityThresholds


# -- what is compared -------------------------------------------------------------------------------------


def source_text(data: bytes) -> str:
    """A module's bytes as text: UTF-8 (undecodable bytes replaced), no BOM, every line break a "\\n"."""
    text = data.decode("utf-8", errors="replace").removeprefix("\ufeff")
    return text.replace("\r\n", "\n").replace("\r", "\n")


def _blank(text: str, spans: Iterable[tuple[int, int]]) -> str:
    chars = list(text)
    for start, end in spans:
        for i in range(max(0, start), min(end, len(chars))):
            if chars[i] != "\n":
                chars[i] = " "
    return "".join(chars)


def normalize(source: str) -> tuple[str, bool]:
    """`source` (as `source_text` gives it) with its docstrings, bare string statements and comments replaced
    by spaces, line breaks kept: the same length and lines. And whether it parses; when it does not, only the
    comments the tokenizer reached before failing are blanked."""
    # as Python numbers lines (not str.splitlines, which splits on \f too)
    lines = source.split("\n")
    starts = [0]
    for line in lines[:-1]:
        starts.append(starts[-1] + len(line) + 1)

    def at(row: int, column: int, in_bytes: bool) -> int:
        line = lines[row - 1]
        if in_bytes:  # ast's columns count UTF-8 bytes
            column = len(line.encode("utf-8", "surrogatepass")[:column].decode("utf-8", "ignore"))
        return starts[row - 1] + column

    spans = []
    try:
        tree = ast.parse(source)
    # ValueError: NUL bytes (Python 3.11)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        parsed = False
    else:
        parsed = True
        for node in ast.walk(tree):
            if (
                isinstance(node, ast.Expr)
                and isinstance(node.value, ast.Constant)
                and isinstance(node.value.value, str)
            ):
                spans.append(
                    (
                        at(node.lineno, node.col_offset, True),
                        at(node.end_lineno, node.end_col_offset, True),
                    )
                )
    try:
        for token in tokenize.generate_tokens(io.StringIO(source).readline):
            if token.type == tokenize.COMMENT:
                spans.append((at(*token.start, False), at(*token.end, False)))
    except (tokenize.TokenError, SyntaxError, ValueError, RecursionError, IndexError):
        pass  # keep the comments found before the tokenizer gave up
    return _blank(source, spans), parsed


def read_modules(
    submissions: Mapping[str, Path], exercise_ids: Iterable[str]
) -> tuple[dict[str, dict[str, str]], dict[str, str]]:
    """{exercise id: {student: module text}} for the modules each submission holds where grading finds them
    (grader.grading.submission), and {student: why} for the submissions that cannot be read."""
    ids = [catalog.get(e).id for e in exercise_ids]
    modules: dict[str, dict[str, str]] = {e: {} for e in ids}
    unreadable: dict[str, str] = {}
    for student in sorted(submissions):
        try:
            with tempfile.TemporaryDirectory(prefix="shardlab-similarity-") as work:
                prepared = prepare_submission(submissions[student], Path(work))
                texts = {
                    e: source_text((prepared.modules_dir / catalog.get(e).module_file).read_bytes())
                    for e in ids
                    if e in prepared.found
                }
        # one submission, whatever is wrong with it, never stops the others
        except Exception as exc:
            unreadable[student] = f"{type(exc).__name__}: {exc}"
            continue
        for exercise_id, text in texts.items():
            modules[exercise_id][student] = text
    return modules, unreadable


# -- copydetect -------------------------------------------------------------------------------------------

MASK = "\u00a4"  # "¤": what a line of the stub's code becomes in a student's module (kept by copydetect's filter)


def mask_lines(text: str, lines: frozenset[str]) -> str:
    """`text` with every line whose code (stripped) is one of `lines` blanked but for one MASK character where
    its code starts, length kept. Fingerprints that touch a MASK are dropped (`_fingerprint`): without this, the
    k-grams that run from the end of one answer through the stub's next signature into the next answer would
    be shared by any two students who end and start their answers the same way. (One MASK a line: the lexer
    reads each as an error token of its own, slowly.)"""
    out = []
    for line in text.split("\n"):
        code = line.strip()
        if code in lines:
            indent = len(line) - len(line.lstrip())
            line = line[:indent] + MASK + " " * (len(line) - indent - 1)
        out.append(line)
    return "\n".join(out)


@lru_cache(maxsize=4)  # a module is compacted to be cut, then to be lexed: once
def _compact(text: str):
    """`text` without what the lexer would read slowly and the filter drops anyway: each line's trailing
    blanks (a line of nothing else becomes empty), every other run of blanks cut to its first character,
    and every run of empty lines cut to one line break; and where each character of the result is in `text`
    (one more entry: the end). pygments' Python lexer takes time quadratic in a run of blank lines (the
    docstrings, comments and dead definitions blanked): 64 KB of them took minutes."""
    import numpy as np

    keep = np.ones(len(text) + 1, dtype=bool)
    for run in re.finditer(r"[ \t\f\v]+", text):
        start, end = run.span()
        keep[start if end == len(text) or text[end] == "\n" else start + 1 : end] = False
    # one code point per element: the characters kept are picked by index, not joined one by one
    chars = np.frombuffer(text.encode("utf-32-le", "surrogatepass"), dtype=np.uint32)
    where = np.flatnonzero(keep)
    kept = chars[where[:-1]]
    # an empty line: a line break right after another one kept
    repeated = np.zeros(len(where), dtype=bool)
    repeated[1:-1] = (kept[1:] == ord("\n")) & (kept[:-1] == ord("\n"))
    where = where[~repeated]
    return chars[where[:-1]].tobytes().decode("utf-32-le", "surrogatepass"), where


def _filter_code(text: str) -> tuple[str, list[list[int]]]:
    """copydetect's filtered code of `text` (names, strings and whitespace replaced) and its offsets back into
    `text`: the lexing, a module's costly step, which the cache keeps."""
    from copydetect.utils import filter_code

    code, offsets = filter_code(text, "module.py", "python")
    return code, [[int(at), int(skipped)] for at, skipped in offsets]


def _fingerprint(
    name: str,
    text: str,
    k: int,
    boilerplate: frozenset = frozenset(),
    cache: SimilarityCache | None = None,
):
    """copydetect's fingerprint of `text` (Python, filtered), every k-gram kept (window 1) but at most its
    first REPEATS occurrences, without the boilerplate's k-grams and without those that touch a MASK
    character.

    The boilerplate is removed here rather than by CodeFingerprint(boilerplate=...): copydetect 0.5.0 does it
    with np.intersect1d(..., assume_unique=True) over hashes that are not unique, which also drops every
    repeated k-gram of the student's own code but its last occurrence (see the tests)."""
    import numpy as np
    from copydetect import CodeFingerprint
    from copydetect.utils import get_token_coverage

    compact, fingerprint_keep = _compact(text)
    code, offsets = (cache or SimilarityCache(None)).filtered(compact, _filter_code)
    fingerprint = CodeFingerprint(name, k, 1, filter=False, fp=io.StringIO(code))
    fingerprint.raw_code = text
    fingerprint.offsets = np.array(offsets, dtype=np.int64).reshape(-1, 2)
    kept = {
        h: positions[:REPEATS]
        for h, positions in fingerprint.hash_idx.items()
        if h not in boilerplate and MASK not in code[positions[0] : positions[0] + k]
    }
    fingerprint.hashes = set(kept)
    fingerprint.hash_idx = kept
    fingerprint.token_coverage = get_token_coverage(kept, k, len(code))
    # Where copydetect's offsets (into `compact`) are in `text`: the lexer strips leading line breaks, so its
    # offsets start after them.
    lead = len(compact) - len(compact.lstrip("\n"))
    fingerprint.place = lambda at: int(fingerprint_keep[min(max(0, at + lead), len(compact))])
    return fingerprint


def _figures(fa, fb) -> tuple[float, float, int]:
    """(similarity_a, similarity_b, shared) of two fingerprints, as copydetect.compare_files counts them
    (each side's matched filtered characters over its token coverage), with `shared` the smaller side's
    matched characters: the same figures whichever module is passed first."""
    import numpy as np
    from copydetect.utils import find_fingerprint_overlap, get_copied_slices

    idx_a, idx_b = find_fingerprint_overlap(fa.hashes, fb.hashes, fa.hash_idx, fb.hash_idx)
    if len(idx_a) == 0:
        return 0.0, 0.0, 0
    matched_a = int(np.sum(np.diff(get_copied_slices(idx_a, fa.k), axis=0)))
    matched_b = int(np.sum(np.diff(get_copied_slices(idx_b, fb.k), axis=0)))
    return (
        float(matched_a / fa.token_coverage),
        float(matched_b / fb.token_coverage),
        min(matched_a, matched_b),
    )


def _passage(text: str, start: int, end: int, thresholds: SimilarityThresholds) -> Passage:
    start, end = max(0, min(start, len(text))), max(0, min(end, len(text)))
    while start < end and text[start].isspace():  # copydetect's ends fall on token boundaries: trim
        start += 1
    while end > start and text[end - 1].isspace():
        end -= 1
    first = text.count("\n", 0, start) + 1
    last = max(first, text.count("\n", 0, max(start, end - 1)) + 1)
    lines = text.split("\n")[first - 1 : last]
    kept = [
        line if len(line) <= thresholds.line_chars else line[: thresholds.line_chars] + "…"
        for line in lines[: thresholds.passage_lines]
    ]
    cut = len(lines) > thresholds.passage_lines or any(
        len(line) > thresholds.line_chars for line in lines
    )
    if len(lines) > thresholds.passage_lines:
        kept.append(f"… ({len(lines) - thresholds.passage_lines} more lines)")
    return Passage(first, last, "\n".join(kept), cut)


def _passages(
    fa, fb, text_a: str, text_b: str, thresholds: SimilarityThresholds
) -> tuple[SharedPassage, ...]:
    """The matching stretches of a's module, longest first, each beside the stretch of b's that shares most of
    its fingerprints (functions may be reordered: stretches are paired by content, not by position)."""
    import numpy as np
    from copydetect import compare_files
    from copydetect.utils import find_fingerprint_overlap, get_copied_slices

    k = fa.k
    _, _, (raw_a, raw_b) = compare_files(fa, fb)  # the stretches in each module's own characters
    idx_a, idx_b = find_fingerprint_overlap(fa.hashes, fb.hashes, fa.hash_idx, fb.hash_idx)
    # same order as raw_*
    filtered_a, filtered_b = (get_copied_slices(idx_a, k), get_copied_slices(idx_b, k))
    if len(raw_a) == 0 or len(raw_a[0]) == 0:
        return ()
    votes: Counter = Counter()
    for h in fa.hashes & fb.hashes:
        in_a = set(np.searchsorted(filtered_a[0], fa.hash_idx[h], side="right") - 1)
        in_b = set(np.searchsorted(filtered_b[0], fb.hash_idx[h], side="right") - 1)
        for i in in_a:
            for j in in_b:
                votes[int(i), int(j)] += 1
    partner: dict[int, tuple[int, int]] = {}
    for (i, j), count in votes.items():
        if i not in partner or (count, -j) > (partner[i][1], -partner[i][0]):
            partner[i] = (j, count)
    sizes = filtered_a[1] - filtered_a[0]
    order = sorted(partner, key=lambda i: (-int(sizes[i]), i))[: thresholds.passages]
    shared = []
    for i in order:
        j = partner[i][0]
        shared.append(
            SharedPassage(
                _passage(
                    text_a, fa.place(int(raw_a[0][i])), fa.place(int(raw_a[1][i])), thresholds
                ),
                _passage(
                    text_b, fb.place(int(raw_b[0][j])), fb.place(int(raw_b[1][j])), thresholds
                ),
                int(sizes[i]),
            )
        )
    return tuple(shared)


def _code_chars(text: str) -> int:
    """How many characters of `text` are not blanks."""
    return len(text) - sum(text.count(c) for c in " \t\n\f\v")


def _code_lines(text: str) -> frozenset[str]:
    return frozenset(line.strip() for line in text.split("\n") if line.strip())


def _cut(text: str) -> str:
    """`text` (a module as it is compared: its docstrings, comments and dead code blanked) up to its first
    MAX_CHARS characters of code as the lexer reads them (`_compact`: blank runs and empty lines count once),
    ending where its last top-level statement that starts within them starts (a line that starts
    unindented)."""
    compact, where = _compact(text)
    if len(compact) <= MAX_CHARS:
        return text
    head = text[: int(where[MAX_CHARS])]
    starts = [m.end() for m in re.finditer(r"\n(?=\S)", head)]
    return head[: starts[-1]] if starts else head[: head.rfind("\n") + 1]


def _flagged(
    figures: tuple[float, float, int], raw: tuple[bool, bool], thresholds: SimilarityThresholds
) -> bool:
    """Whether a pair is above the thresholds. A module that does not parse keeps its dead code (nothing
    tells what is dead): beside a module that parses, only how much of its own code the other holds counts,
    so that it is evidence against its author and never against the classmate."""
    sim_a, sim_b, shared = figures
    if raw[0] != raw[1]:
        judged = sim_a if raw[0] else sim_b
    else:
        judged = max(sim_a, sim_b)
    return shared > 0 and shared >= thresholds.min_shared and judged >= thresholds.similarity


def compare_exercise(
    exercise_id: str,
    modules: Mapping[str, str],
    stub: str,
    thresholds: SimilarityThresholds = SimilarityThresholds(),
    cache: SimilarityCache | None = None,
) -> ExerciseSimilarity:
    """The pairs of `modules` ({student: module text}) whose code for the exercise is unusually similar,
    once `stub` (the text every student started from), the docstrings and comments, and the definitions no
    graded function reaches are left out. `cache`: what earlier runs computed (none by default)."""
    cache = cache or SimilarityCache(None)
    exercise = catalog.get(exercise_id)
    k = thresholds.noise
    stub_text = source_text(stub.encode("utf-8", "surrogatepass"))
    stub_code, _ = normalize(stub_text)
    stub_compact = "".join(stub_code.split())
    graded = defined_names(stub_text)  # the exercise's own functions: what the tests call
    # The boilerplate: the stub's k-grams and its lines of code; for a module that does not parse (its
    # docstrings and comments not blanked), the raw stub's too.
    boilerplate = frozenset(_fingerprint("stub", stub_code, k, cache=cache).hashes)
    raw_boilerplate = boilerplate | frozenset(
        _fingerprint("stub (raw)", stub_text, k, cache=cache).hashes
    )
    stub_lines, raw_stub_lines = (
        _code_lines(stub_code),
        _code_lines(stub_code) | _code_lines(stub_text),
    )
    prints, texts, keys, raw_text, not_compared, cut, mostly_dead = {}, {}, {}, [], [], [], []
    for student in sorted(modules):
        text = modules[student]
        code, parsed = normalize(text)
        if "".join(code.split()) == stub_compact:
            not_compared.append((student, UNCHANGED))
            continue
        # Dead definitions blanked in place (offsets and lines kept), found on the text as written: a
        # function whose body is only a docstring no longer parses once the docstring is blanked.
        if parsed:
            own = _code_chars(code)
            code = _blank(code, dead_spans(text, graded))
            if 2 * _code_chars(code) < own:
                mostly_dead.append(student)
        compared = mask_lines(code, stub_lines if parsed else raw_stub_lines)
        # What is lexed and hashed: at most MAX_CHARS characters of code, whatever the module holds.
        head = _cut(compared)
        if len(head) < len(compared):
            cut.append(student)
            compared = head
        fingerprint = _fingerprint(
            f"{student}/{exercise.module_file}",
            compared,
            k,
            boilerplate if parsed else raw_boilerplate,
            cache,
        )
        if fingerprint.token_coverage == 0:
            not_compared.append((student, STUB_ONLY))
            continue
        prints[student], texts[student] = fingerprint, text
        # everything the figures depend on: a pair's are kept under its two modules' keys
        keys[student] = key("module", stub_text, str(k), str(REPEATS), str(parsed), compared)
        if not parsed:
            raw_text.append(student)
    students, raw = list(prints), set(raw_text)
    found = []
    for x, a in enumerate(students):
        for b in students[x + 1 :]:
            first, second = sorted((a, b), key=lambda s: keys[s])
            figures = cache.figures(
                key("pair", keys[first], keys[second]),
                partial(_figures, prints[first], prints[second]),
            )
            if first != a:
                figures = (figures[1], figures[0], figures[2])
            if _flagged(figures, (a in raw, b in raw), thresholds):
                found.append((*figures, a, b))
    found.sort(key=lambda f: (-max(f[0], f[1]), -f[2], f[3], f[4]))
    pairs = tuple(
        SimilarPair(
            exercise.id,
            a,
            b,
            sim_a,
            sim_b,
            shared,
            _passages(prints[a], prints[b], texts[a], texts[b], thresholds),
        )
        for sim_a, sim_b, shared, a, b in found[: thresholds.top]
    )
    return ExerciseSimilarity(
        exercise.id,
        exercise.title,
        tuple(students),
        tuple(not_compared),
        tuple(raw_text),
        len(found),
        pairs,
        tuple(cut),
        tuple(mostly_dead),
    )


def compare_class(
    submissions: Mapping[str, Path],
    exercises: Iterable[str] | None = None,
    thresholds: SimilarityThresholds = SimilarityThresholds(),
    *,
    stubs: Path | None = None,
    cache: Path | None = None,
) -> ClassSimilarity:
    """Every exercise of `exercises` (ids, default the whole catalog) compared across `submissions`
    ({student: folder or .zip}, e.g. grader.grading.batch.find_submissions(folder).students). The stubs are
    the course's (exercises/), or those under `stubs`; an exercise whose stub cannot be read is compared
    with no boilerplate (and no definition is dead). `cache`: the folder where what is computed is kept
    for the next run (grader.grading.similarity_cache), none by default."""
    ids = (
        [catalog.get(e).id for e in exercises]
        if exercises is not None
        else [e.id for e in catalog.EXERCISES]
    )
    modules, unreadable = read_modules(submissions, ids)
    kept = SimilarityCache(cache)
    results = []
    for exercise_id in ids:
        students = modules[exercise_id]
        try:
            stub = catalog.get(exercise_id).stub_path(stubs).read_text(encoding="utf-8")
        except OSError:
            stub = ""
        result = compare_exercise(exercise_id, students, stub, thresholds, kept)
        missing = tuple(
            (s, MISSING) for s in sorted(submissions) if s not in students and s not in unreadable
        )
        results.append(
            dataclasses.replace(result, not_compared=tuple(sorted(result.not_compared + missing)))
        )
    return ClassSimilarity(tuple(results), tuple(sorted(unreadable.items())), thresholds)
