"""What a student who has done part 2 sees: a clone of the part 2 handout holding the reference's five modules
(an honest full-marks part 2), graded with `shardlab grade <clone> --part 2` in a process of its own, as an
instructor grades a Classroom repository. Graded once; every assertion reads that grading.

The page fits: at 1400 px wide in Chromium, at most PAGE_PX tall and no exercise's section over SECTION_PX
(before, 119,168 px, ex17's section alone 51,359 px: every passing test's pictures were open). A passing test
is one line, its pictures one click away; the pipeline pictures of a schedule the rule accepts say so; the
handout's own files are not listed as ignored."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from grader.course import catalog

# One handout and one grading of part 2 (about 45 s here): slow, and in one xdist group.
pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("test_part2_page")]

PART_2 = [exercise for exercise in catalog.EXERCISES if exercise.part == 2]
PAGE_PX = 25_000
SECTION_PX = 6_000
WIDTH_PX = 1_400


@pytest.fixture(scope="module")
def graded(tmp_path_factory) -> tuple[Path, Path, subprocess.CompletedProcess]:
    """(the clone, the grading's folder, the grading's process)."""
    root = tmp_path_factory.mktemp("part2")
    clone = root / "clone"
    released = subprocess.run(
        [sys.executable, "-m", "grader.cli", "release", str(clone), "--part", "2"],
        capture_output=True,
        text=True,
        cwd=root,
        timeout=600,
    )
    assert released.returncode == 0, released.stderr[-3000:]
    for exercise in PART_2:
        shutil.copy(exercise.solution_path(), clone / "exercises" / exercise.module_file)
    out = root / "graded"
    done = subprocess.run(
        [sys.executable, "-m", "grader.cli", "grade", str(clone), "--part", "2"]
        + ["--out", str(out)],
        capture_output=True,
        text=True,
        cwd=root,
        timeout=1_200,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return clone, out, done


def test_the_clone_earns_full_marks_and_lists_none_of_the_handouts_files(graded):
    clone, out, done = graded
    report = json.loads((out / "report.json").read_text())
    assert list(report["exercises"]) == [exercise.id for exercise in PART_2]
    assert report["score"] == report["max_score"] == sum(e.points for e in PART_2)
    # the handout's README, grader/, tests/ and the rest are the course's, not the student's extras
    assert report.get("ignored", []) == []
    assert "Ignored" not in done.stdout and "ignored" not in (out / "feedback.html").read_text()


def test_no_passing_test_draws_a_schedule_it_did_not_take(graded):
    _, out, _ = graded
    page = (out / "feedback.html").read_text()
    assert 'class="pipeline-check"' in page  # ex14 draws its schedules
    assert "not the steps expected" not in page


def test_the_page_fits_and_each_passing_test_is_one_line(browser, page_visit, graded, tmp_path):
    _, out, _ = graded
    with page_visit(browser, out / "feedback.html", javascript=True, width=WIDTH_PX) as seen:
        page = seen.page
        height = page.evaluate("() => document.documentElement.scrollHeight")
        sections = page.evaluate(
            """() => Object.fromEntries([...document.querySelectorAll('section.exercise')].map(
                s => [s.id, Math.round(s.getBoundingClientRect().height)]))"""
        )
        lines = page.evaluate(
            """() => [...document.querySelectorAll('article.test')].map(a => ({
                category: a.dataset.category, height: a.getBoundingClientRect().height,
                folded: a.querySelector(':scope > details') !== null
                    && !a.querySelector(':scope > details').open}))"""
        )
        # a reader opens ex14's first test with a pipeline: its pictures are there
        opened = page.locator("article.test:has(figure.pipeline-check) > details > summary").first
        opened.click()
        drawn = page.evaluate(
            """() => [...document.querySelectorAll('figure.pipeline-check')].filter(
                f => f.getBoundingClientRect().height > 0).length"""
        )
        page.screenshot(path=str(tmp_path / "part2.png"))
    assert seen.requests == [] and seen.console == [] and seen.errors == []
    assert set(sections) == {exercise.id for exercise in PART_2}
    assert height <= PAGE_PX, (height, sections)
    assert max(sections.values()) <= SECTION_PX, sections
    assert lines and all(line["category"] == "passed" for line in lines)
    # every passing test with something to show folds it; a line is a line, not a card of pictures
    assert all(line["height"] < 60 for line in lines), max(line["height"] for line in lines)
    assert sum(line["folded"] for line in lines) >= len(lines) // 2
    assert drawn >= 1
