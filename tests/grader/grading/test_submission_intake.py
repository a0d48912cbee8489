"""What a student hands in: folders and zips in the shapes students make them, and the odd ones."""

import stat
import zipfile

import pytest

from grader.grading.submission import MAX_MODULE_BYTES, SubmissionError, prepare_submission

MODULE = "def make_mesh_2x4():\n    return None\n"


def zipped(path, entries: dict[str, str], symlinks: dict[str, str] = None):
    with zipfile.ZipFile(path, "w") as zf:
        for name, text in entries.items():
            zf.writestr(name, text)
        for name, target in (symlinks or {}).items():
            info = zipfile.ZipInfo(name)
            info.external_attr = (stat.S_IFLNK | 0o777) << 16
            zf.writestr(info, target)
    return path


@pytest.mark.parametrize(
    "layout",
    [
        "ex01_meshes.py",
        "exercises/ex01_meshes.py",
        "alice/ex01_meshes.py",
        "alice/exercises/ex01_meshes.py",
    ],
)
def test_modules_are_found_where_students_put_them(tmp_path, layout):
    archive = zipped(tmp_path / "alice.zip", {layout: MODULE, "notes.txt": "hi"})
    prepared = prepare_submission(archive, tmp_path / "work")
    assert prepared.found == ["ex01_meshes"]
    assert (prepared.modules_dir / "ex01_meshes.py").read_text() == MODULE
    assert prepared.ignored == ["notes.txt" if "/" not in layout else "notes.txt"]


def test_a_folder_copies_only_exercise_modules(tmp_path):
    folder = tmp_path / "bob"
    (folder / "solutions").mkdir(parents=True)
    (folder / "ex04_sharded_layer.py").write_text(MODULE)
    for name in (
        "conftest.py",
        "pytest.ini",
        "sitecustomize.py",
        "evil.pth",
        "solutions/ex04_sharded_layer.py",
    ):
        (folder / name).write_text("import os; os._exit(1)\n")
    (folder / "link.py").symlink_to(folder / "conftest.py")
    prepared = prepare_submission(folder, tmp_path / "work")
    assert prepared.found == ["ex04_sharded_layer"]
    assert sorted(p.name for p in prepared.modules_dir.iterdir()) == ["ex04_sharded_layer.py"]
    assert "solutions/ex04_sharded_layer.py" in prepared.ignored
    assert any("link.py is a symbolic link" in p for p in prepared.problems)
    assert "conftest.py" in prepared.ignored  # listed as ignored, not as a problem
    assert not any("conftest.py" in p for p in prepared.problems)


def test_odd_zip_paths_are_refused_and_named(tmp_path):
    archive = zipped(
        tmp_path / "odd.zip",
        {
            "../ex01_meshes.py": MODULE,
            "/abs/ex02_sharding_properties.py": MODULE,
            "ex04_sharded_layer.py": MODULE,
        },
        symlinks={"ex03_computation_follows_data.py": "/etc/passwd"},
    )
    prepared = prepare_submission(archive, tmp_path / "work")
    assert prepared.found == ["ex04_sharded_layer"]
    text = "\n".join(prepared.problems)
    assert "'../ex01_meshes.py' has an unsafe path" in text
    assert "'/abs/ex02_sharding_properties.py' has an unsafe path" in text
    assert "'ex03_computation_follows_data.py' is a symbolic link" in text
    assert not (tmp_path / "ex01_meshes.py").exists()


def test_the_top_level_wins_over_deeper_copies(tmp_path):
    archive = zipped(
        tmp_path / "two.zip",
        {
            "ex01_meshes.py": MODULE,
            "exercises/ex01_meshes.py": "x = 2\n",
            "exercises/ex02_sharding_properties.py": "x = 3\n",
        },
    )
    prepared = prepare_submission(archive, tmp_path / "work")
    assert prepared.found == ["ex01_meshes"]
    assert (prepared.modules_dir / "ex01_meshes.py").read_text() == MODULE
    assert prepared.ignored == ["exercises/ex01_meshes.py", "exercises/ex02_sharding_properties.py"]


def test_a_name_twice_in_one_zip_is_reported(tmp_path):
    with zipfile.ZipFile(tmp_path / "dup.zip", "w") as zf:
        zf.writestr("ex01_meshes.py", MODULE)
        with pytest.warns(UserWarning, match="Duplicate name"):
            zf.writestr("ex01_meshes.py", "x = 2\n")
    prepared = prepare_submission(tmp_path / "dup.zip", tmp_path / "work")
    assert (prepared.modules_dir / "ex01_meshes.py").read_text() == MODULE
    assert any("a second ex01_meshes.py" in p for p in prepared.problems)


def test_an_oversized_module_is_not_graded(tmp_path):
    archive = zipped(tmp_path / "big.zip", {"ex01_meshes.py": "#" * (MAX_MODULE_BYTES + 1)})
    prepared = prepare_submission(archive, tmp_path / "work")
    assert prepared.found == []
    assert any("larger than 1 MiB" in p for p in prepared.problems)


def test_an_empty_submission_says_what_was_expected(tmp_path):
    (tmp_path / "empty").mkdir()
    prepared = prepare_submission(tmp_path / "empty", tmp_path / "work")
    assert prepared.found == [] and "no exercise module found" in prepared.problems[0]


@pytest.mark.parametrize(
    "name, content, message",
    [
        ("broken.zip", b"PK\x03\x04 not really a zip", "not a valid zip file"),
        ("essay.docx", b"hello", "neither a folder nor a .zip"),
    ],
)
def test_unreadable_submissions_raise_a_clear_error(tmp_path, name, content, message):
    (tmp_path / name).write_bytes(content)
    with pytest.raises(SubmissionError, match=message):
        prepare_submission(tmp_path / name, tmp_path / "work")


def test_a_missing_path_is_named(tmp_path):
    with pytest.raises(SubmissionError, match="neither a folder nor a .zip"):
        prepare_submission(tmp_path / "nope", tmp_path / "work")


def test_a_huge_module_in_a_folder_is_refused_without_being_read_whole(tmp_path):
    import tracemalloc

    folder = tmp_path / "alice"
    folder.mkdir()
    with (folder / "ex01_meshes.py").open("wb") as module:
        module.truncate(8 << 30)  # sparse: 8 GiB to read, nothing on disk
    tracemalloc.start()
    try:
        prepared = prepare_submission(folder, tmp_path / "work")
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert prepared.found == [] and any("larger than 1 MiB" in p for p in prepared.problems)
    assert peak < 4 * MAX_MODULE_BYTES
