"""ex10 to ex18's known mistakes named by what the student's function computed: the reference with one
mistake made in it runs through the exercise's visible tests in-process (as `shardlab check` runs
them), and its first failure names the mistake and its fix, in words written for a student (no
pytest introspection). Nothing reads the source: the message comes from comparing the result with
the wrong variants the exercise's conftest computes."""

from dataclasses import dataclass
from pathlib import Path

import pytest

from grader.course import catalog, paths
from grader.harness.runner import run_tests

# pytest's assertion introspection, which a student cannot act on.
PYTEST_WORDS = ("+  where", "assert False", "<built-in function", "Use -v")


@dataclass(frozen=True)
class Made:
    """The reference of `exercise` with `old` replaced by `new` after the line starting `within`."""

    exercise: str
    within: str
    old: str
    new: str
    test: str  # the visible test run
    says: tuple[str, ...]  # words its failure must hold; none: the test must pass


MADE = {
    "ex11 mean of per-device means": Made(
        "ex11_padded_particles",
        "def masked_mean",
        "        total = jax.lax.psum(jnp.where(valid[:, None], block, 0.0).sum(axis=0), axis)\n"
        "        how_many = jax.lax.psum(valid.sum(), axis)\n",
        "        local = jnp.where(valid[:, None], block, 0.0).sum(axis=0)\n"
        "        total = jax.lax.psum(local / jnp.maximum(count[0], 1), axis)\n"
        "        how_many = jax.lax.psum((count[0] > 0).astype(jnp.int32), axis)\n",
        "test_masked_mean",
        ("is the mean of the devices' means", "padding", "weigh each device by its count"),
    ),
    "ex13 all-to-all costed as an all-gather": Made(
        "ex13_comm_costs",
        "def alltoall_time",
        "transfer = (n - 1) / n * nbytes / bandwidth / 4",
        "transfer = (n - 1) / n * nbytes / bandwidth",
        "test_alltoall_book_question10",
        ("alltoall_time(", "is the all-gather's time", "divide the bandwidth time by 4"),
    ),
    # A test of alltoall_time does not fail for the student's allgather_time.
    "ex13 all-gather without the ring factor, all-to-all right": Made(
        "ex13_comm_costs",
        "def allgather_time",
        "transfer = (n - 1) / n * nbytes / bandwidth",
        "transfer = nbytes / bandwidth",
        "test_alltoall_book_question10",
        (),
    ),
}


def made(tmp_path: Path, mistake: Made) -> Path:
    source = (paths.SOLUTIONS_DIR / f"{mistake.exercise}.py").read_text()
    start = source.index(mistake.within)
    assert mistake.old in source[start:], f"{mistake.old!r} not after {mistake.within!r}"
    wrong = source[:start] + source[start:].replace(mistake.old, mistake.new, 1)
    (tmp_path / f"{mistake.exercise}.py").write_text(wrong)
    return tmp_path


@pytest.mark.parametrize("name", sorted(MADE))
def test_a_known_mistake_is_named_by_what_it_computed(tmp_path, name):
    mistake = MADE[name]
    run = run_tests(
        made(tmp_path, mistake),
        tests=[catalog.get(mistake.exercise).tests_dir()],
        timing="skip",
        visible_only=True,
        extra_args=("-k", mistake.test),
    )
    assert run.results, run.output[-2000:]
    failed = [r for r in run.results if not r.earns]
    if not mistake.says:
        assert not failed, f"{failed[0].function}: {failed[0].message}"
        return
    assert failed, f"the mistake failed no visible test: {run.output[-2000:]}"
    first = failed[0]
    assert first.function == mistake.test, first.message
    missing = [words for words in mistake.says if words.lower() not in first.message.lower()]
    assert not missing, f"{first.function} does not say {missing}: {first.message}"
    leaked = [words for words in PYTEST_WORDS if words in first.message]
    assert not leaked, f"{first.function}'s message shows pytest's {leaked}: {first.message}"
