"""The mistakes the course knows are named by what the student's function computed: the reference with
one mistake made in it is run through the exercise's visible tests in-process (as `shardlab check` runs
them), and its first failure must name that mistake and its fix. Nothing reads the source: the test's
message comes from comparing the result with the wrong variants the exercise's conftest computes."""

from dataclasses import dataclass
from pathlib import Path

import pytest

from grader.course import catalog, paths
from grader.harness.runner import run_tests

# a pytest run per mistake (about 40 s in all): CI's, not the fast path's
pytestmark = pytest.mark.slow


# pytest's assertion introspection, which a student cannot act on.
PYTEST_WORDS = ("+  where", "assert False", "<built-in function", "Use -v")


@dataclass(frozen=True)
class Made:
    """The reference of `exercise` with `old` replaced by `new` after the line starting `within`."""

    exercise: str
    within: str
    old: str
    new: str
    fails: str  # the visible test run: the first to fail
    says: tuple[str, ...]  # words its message must hold; none: the test must pass


MADE = {
    "ex07 all-gather ring turned the wrong way": Made(
        "ex07_collective_matmul",
        "def allgather_matmul_overlapped",
        "to_previous = [(j, (j - 1) % n) for j in range(n)]",
        "to_previous = [(j, (j + 1) % n) for j in range(n)]",
        "test_allgather_matmul_overlapped",
        ("matches a ring turned the wrong way", "pairs (j, (j - 1) % n)"),
    ),
    "ex07 reduce-scatter ring turned the wrong way": Made(
        "ex07_collective_matmul",
        "def reducescatter_matmul_overlapped",
        "to_previous = [(j, (j - 1) % n) for j in range(n)]",
        "to_previous = [(j, (j + 1) % n) for j in range(n)]",
        "test_reducescatter_matmul_overlapped",
        ("matches a ring turned the wrong way",),
    ),
    "ex04 softmax before the psum": Made(
        "ex04_sharded_layer",
        "def layer_feature_sharded",
        'return jax.nn.softmax(jax.lax.psum(partial, "data") + b)',
        'return jax.lax.psum(jax.nn.softmax(partial + b), "data")',
        "test_layer_feature_sharded",
        ("softmax taken on each device's partial product before the psum", "psum the partial"),
    ),
    "ex04 b added on every device": Made(
        "ex04_sharded_layer",
        "def layer_feature_sharded",
        'return jax.nn.softmax(jax.lax.psum(partial, "data") + b)',
        'return jax.nn.softmax(jax.lax.psum(partial + b, "data"))',
        "test_layer_feature_sharded",
        ("b added 8 times", "add b after the psum, once"),
    ),
    "ex04 a Python loop over the devices' blocks": Made(
        "ex04_sharded_layer",
        "def layer_shard_map",
        "return jax.jit(per_device)(x, W, b)",
        "m = x.shape[0] // mesh.shape['data']\n"
        "    return jax.numpy.concatenate(\n"
        "        [layer(x[i * m : (i + 1) * m], W, b) for i in range(mesh.shape['data'])]\n"
        "    )",
        "test_layer_shard_map",
        ("slices or loops over a sharded array by hand", "jax.shard_map(f, mesh=mesh"),
    ),
    "ex04 a Python loop over the devices' blocks, under jit": Made(
        "ex04_sharded_layer",
        "def layer_shard_map",
        "return jax.jit(per_device)(x, W, b)",
        "m = x.shape[0] // mesh.shape['data']\n"
        "    return jax.jit(lambda x, W, b: jax.numpy.concatenate(\n"
        "        [layer(x[i * m : (i + 1) * m], W, b) for i in range(mesh.shape['data'])]\n"
        "    ))(x, W, b)",
        "test_layer_shard_map_has_no_collectives_on_8_devices",
        ("slices or loops over a sharded array by hand", "jax.shard_map(f, mesh=mesh"),
    ),
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
    assert source.count(mistake.old, start) >= 1, f"{mistake.old!r} not after {mistake.within!r}"
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
        extra_args=("-k", mistake.fails),
    )
    assert run.results, run.output[-2000:]
    failed = [r for r in run.results if not r.earns]
    if not mistake.says:  # a test of one function must not fail for another's mistake
        assert not failed, f"{failed[0].function}: {failed[0].message}"
        return
    assert failed, f"the mistake failed no visible test: {run.output[-2000:]}"
    first = failed[0]
    assert first.function == mistake.fails, first.message
    missing = [words for words in mistake.says if words.lower() not in first.message.lower()]
    assert not missing, f"{first.function} does not say {missing}: {first.message}"
    leaked = [words for words in PYTEST_WORDS if words in first.message]
    assert not leaked, f"{first.function}'s message shows pytest's {leaked}: {first.message}"
