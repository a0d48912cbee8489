"""The course's two parts: declared once in the catalog, named in a course file's assignment ("part 2"), and
narrowing any term to one part (Course.part, which every command's --part uses). `two_parts` (conftest) gives
the catalog a part 2 whatever the real one holds."""

import pytest

from grader.course import catalog, term


def test_the_parts_are_declared_once_and_every_exercise_is_in_one():
    numbers = [p.number for p in catalog.PARTS]
    assert numbers == sorted(set(numbers))
    assert {e.part for e in catalog.EXERCISES} <= set(numbers)
    assert catalog.part(1).title == "Part 1: meshes to multi-process JAX"
    assert catalog.part(2).title == "Part 2: scaling a model"


def test_part_1_is_ex01_to_ex13():
    first = [e.id for e in catalog.EXERCISES if int(e.number.removeprefix("ex")) <= 13]
    assert len(first) == 13
    assert [e.id for e in catalog.part(1).exercises] == first


def test_a_part_by_any_name_and_an_unknown_one_named():
    assert (
        catalog.part(2) is catalog.part("2") is catalog.part("Part 2") is catalog.part(" part 2 ")
    )
    with pytest.raises(
        catalog.UnknownPart, match=r"no part '3' in the catalog \(its parts: 1, 2\)"
    ):
        catalog.part("3")
    assert catalog.get("ex04").id == "ex04_sharded_layer"  # exercises are found as before


def test_the_default_course_is_both_parts_one_assignment_per_exercise(two_parts):
    course = term.default_course()
    assert course.exercises == catalog.EXERCISES
    assert [a.exercises for a in course.assignments] == [(e.id,) for e in catalog.EXERCISES]
    assert course.max_score == sum(e.points for e in catalog.EXERCISES if not e.bonus)
    second = course.part(2)
    assert [e.id for e in second.exercises] == [two_parts.id]
    assert [a.name for a in second.assignments] == [two_parts.id]
    assert [e.id for e in course.part("1").exercises] == [
        e.id for e in catalog.EXERCISES if e.id != two_parts.id
    ]


PARTS_COURSE = """
name = "Both halves"

[[assignment]]
name = "first half"
exercises = ["part 1"]

[[assignment]]
name = "second half"
exercises = ["part 2"]
"""


def test_a_course_file_names_a_part_as_its_exercises(two_parts, tmp_path):
    path = tmp_path / "course.toml"
    path.write_text(PARTS_COURSE)
    course = term.load(path)
    first, second = course.assignments
    assert first.exercises == tuple(e.id for e in catalog.part(1).exercises)
    assert second.exercises == (two_parts.id,)
    assert course.part(2).assignments == (second,)
    # a part and one of its exercises again: the exercise is in two assignments, said as before
    path.write_text(PARTS_COURSE.replace('["part 1"]', '["part 1", "ex13"]'))
    with pytest.raises(
        term.CourseFileError, match="line 10: ex13_comm_costs is in two assignments"
    ):
        term.load(path)
    # a part and one of its exercises in one assignment: said as such (once "in two assignments, 'second
    # half' and 'second half'")
    path.write_text(PARTS_COURSE.replace('["part 2"]', '["part 2", "ex13"]'))
    with pytest.raises(term.CourseFileError) as caught:
        term.load(path)
    assert (
        "ex13_comm_costs is listed twice in assignment 'second half' (a part listed holds its "
        "exercises)" in str(caught.value)
    )


def test_course_check_prints_each_part_the_term_grades(two_parts, tmp_path):
    path = tmp_path / "course.toml"
    path.write_text(PARTS_COURSE)
    lines = term.describe(term.load(path))
    first = catalog.part(1).exercises
    assert f"  Part 1: meshes to multi-process JAX: {len(first)} exercise(s), " in "\n".join(lines)
    assert "  Part 2: scaling a model: 1 exercise(s), 0 points" in lines  # ex13: a bonus
    assert not any("Part 2" in line for line in term.describe(term.load(path).part(1)))


def test_a_course_file_naming_an_unknown_or_empty_part_is_refused_with_its_line(
    monkeypatch, tmp_path
):
    path = tmp_path / "course.toml"
    path.write_text(PARTS_COURSE.replace('"part 1"', '"part 3"'))
    with pytest.raises(term.CourseFileError) as refused:
        term.load(path)
    assert refused.value.problems[0] == (
        "line 6: no part 'part 3' in the catalog (its parts: 1, 2)"
    )
    # a catalog without part 2's exercises (as before they land): said, not an empty assignment
    only_first = tuple(e for e in catalog.EXERCISES if e.part == 1)
    monkeypatch.setattr(catalog, "EXERCISES", only_first)
    path.write_text(PARTS_COURSE)
    with pytest.raises(term.CourseFileError) as refused:
        term.load(path)
    assert refused.value.problems[0] == (
        "line 10: 'part 2': the catalog has no exercise of Part 2: scaling a model yet"
    )


def test_a_term_narrowed_to_a_part_keeps_each_assignments_exercises_of_it(two_parts, tmp_path):
    path = tmp_path / "course.toml"
    path.write_text('[[assignment]]\nname = "all"\nexercises = ["ex01", "ex13"]\n')
    course = term.load(path)
    assert course.part(2).assignments[0].exercises == (two_parts.id,)
    assert course.part(2).max_score == 0  # ex13 is a bonus: its points add to no maximum
    assert course.part(1).max_score == catalog.get("ex01").points
    path.write_text('[[assignment]]\nname = "one"\nexercises = ["ex01"]\n')
    with pytest.raises(KeyError, match="this term grades no exercise of Part 2: scaling a model"):
        term.load(path).part(2)
    with pytest.raises(KeyError, match=r"no part '9' in the catalog"):
        term.load(path).part(9)
