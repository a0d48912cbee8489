"""Similar code across a class (grader.grading.similarity, grader.reports.similarity_section): a small class
written here, five honest answers to ex05 written five ways on the stub everyone was handed (its docstrings
and signatures kept), a planted copy of one of them (names changed, functions reordered, docstrings and
comments rewritten), students who kept the stub, a module that does not parse, a corrupt zip, and hostile
names and code in the HTML."""

from __future__ import annotations

import io
import os
import re
import subprocess
import sys
import zipfile
from html.parser import HTMLParser
from pathlib import Path

import pytest

from grader.course import catalog
from grader.grading import reachable, similarity
from grader.grading.similarity import (
    MISSING,
    STUB_ONLY,
    UNCHANGED,
    ClassSimilarity,
    ExerciseSimilarity,
    SimilarityThresholds,
    compare_class,
    compare_exercise,
    normalize,
)
from grader.reports.html import Markup, document
from grader.reports.similarity_section import similarity_section

EX05 = "ex05_collectives"
STUB = catalog.get(EX05).stub_path().read_text(encoding="utf-8")


def answer(
    bodies: dict[str, str], *, imports: str = "", helpers: str = "", stub: str = STUB
) -> str:
    """The stub with each function's `# YOUR CODE HERE` and `raise NotImplementedError` replaced by the body
    given (written at the function's indentation), `imports` after the stub's first import and `helpers` before
    its first function: how a student hands in an exercise."""
    text = stub
    number = stub.split("_", 1)[0].strip('"')
    for name, body in bodies.items():
        hole = f'    # YOUR CODE HERE\n    raise NotImplementedError("{number}: {name}")\n'
        assert hole in text, name
        lines = body.strip("\n").split("\n")
        text = text.replace(hole, "".join(f"    {line}\n" if line else "\n" for line in lines))
    if imports:
        text = text.replace("\nimport jax\n", "\n" + imports.strip("\n") + "\nimport jax\n", 1)
    if helpers:
        first = text.index("\n\n\ndef ")
        text = text[:first] + "\n\n\n" + helpers.strip("\n") + text[first:]
    return text


# -- five honest answers -------------------------------------------------------------------------------------

# ada: functools.partial as a decorator, one nested function per collective.
ADA = answer(
    {
        "device_ranks": """
@partial(jax.shard_map, mesh=mesh, in_specs=(), out_specs=P("i"))
def ranks():
    return jnp.array([jax.lax.axis_index("i")], dtype=jnp.int32)

return ranks()
""",
        "all_gather": """
@partial(jax.shard_map, mesh=mesh, in_specs=P("i"), out_specs=P(), check_vma=False)
def gathered(block):
    return jax.lax.all_gather(block, "i", tiled=True)

return gathered(x)
""",
        "all_reduce": """
@partial(jax.shard_map, mesh=mesh, in_specs=P("i"), out_specs=P())
def summed(block):
    return jax.lax.psum(block, "i")

return summed(x)
""",
        "reduce_scatter": """
@partial(jax.shard_map, mesh=mesh, in_specs=P("i"), out_specs=P("i"))
def scattered(block):
    return jax.lax.psum_scatter(block, "i", tiled=True)

return scattered(x)
""",
        "all_reduce_via_scatter_gather": """
@partial(jax.shard_map, mesh=mesh, in_specs=P("i"), out_specs=P(), check_vma=False)
def two_steps(block):
    mine = jax.lax.psum_scatter(block, "i", tiled=True)
    return jax.lax.all_gather(mine, "i", tiled=True)

return two_steps(x)
""",
        "all_to_all": """
@partial(jax.shard_map, mesh=mesh, in_specs=P("i"), out_specs=P("i"))
def transpose(block):
    return jax.lax.all_to_all(block, "i", 0, 0, tiled=True)

return transpose(x)
""",
        "ring_shift": """
size = mesh.shape["i"]
perm = [(src, (src + k) % size) for src in range(size)]

@partial(jax.shard_map, mesh=mesh, in_specs=P("i"), out_specs=P("i"))
def shifted(block):
    return jax.lax.ppermute(block, "i", perm)

return shifted(x)
""",
        "ring_all_reduce": """
size = mesh.shape["i"]
perm = [(src, (src + 1) % size) for src in range(size)]

@partial(jax.shard_map, mesh=mesh, in_specs=P("i"), out_specs=P(), check_vma=False)
def ring(block):
    acc = block
    cur = block
    for _ in range(size - 1):
        cur = jax.lax.ppermute(cur, "i", perm)
        acc += cur
    return acc

return ring(x)
""",
    },
    imports="from functools import partial",
)

# ben: one helper that every function calls with a lambda.
BEN_HELPER = '''
def _on_blocks(fn, mesh, out_spec, *args, in_spec=P("i"), check=True):
    """Run fn on every device's block of args."""
    return jax.shard_map(fn, mesh=mesh, in_specs=in_spec, out_specs=out_spec, check_vma=check)(*args)
'''
BEN_BODIES = {
    "device_ranks": """
return _on_blocks(lambda: jax.lax.axis_index("i").astype(jnp.int32).reshape(1), mesh, P("i"), in_spec=())
""",
    "all_gather": """
return _on_blocks(lambda b: jax.lax.all_gather(b, "i", tiled=True), mesh, P(), x, check=False)
""",
    "all_reduce": """
return _on_blocks(lambda b: jax.lax.psum(b, "i"), mesh, P(), x)
""",
    "reduce_scatter": """
return _on_blocks(lambda b: jax.lax.psum_scatter(b, "i", scatter_dimension=0, tiled=True), mesh, P("i"), x)
""",
    "all_reduce_via_scatter_gather": """
def both(b):
    return jax.lax.all_gather(jax.lax.psum_scatter(b, "i", tiled=True), "i", tiled=True)

return _on_blocks(both, mesh, P(), x, check=False)
""",
    "all_to_all": """
return _on_blocks(lambda b: jax.lax.all_to_all(b, "i", split_axis=0, concat_axis=0, tiled=True), mesh, P("i"), x)
""",
    "ring_shift": """
n = mesh.shape["i"]
moves = list(zip(range(n), [(d + k) % n for d in range(n)]))
return _on_blocks(lambda b: jax.lax.ppermute(b, "i", moves), mesh, P("i"), x)
""",
    "ring_all_reduce": """
n = mesh.shape["i"]
moves = [(d, (d + 1) % n) for d in range(n)]

def body(b):
    seen = [b]
    for _ in range(n - 1):
        seen.append(jax.lax.ppermute(seen[-1], "i", moves))
    return sum(seen[1:], seen[0])

return _on_blocks(body, mesh, P(), x, check=False)
""",
}
BEN = answer(BEN_BODIES, helpers=BEN_HELPER)

# cleo: a constant for the axis, a named inner function and a named mapped function everywhere, a loop to
# build the permutations, fori_loop for the ring.
CLEO = answer(
    {
        "device_ranks": """
def body():
    # each device asks where it is
    rank = jax.lax.axis_index(AXIS)
    rank = rank.astype(jnp.int32)
    return rank[None]

mapped = jax.shard_map(body, mesh=mesh, in_specs=(), out_specs=P(AXIS))
result = mapped()
return result
""",
        "all_gather": """
in_spec = P(AXIS)
out_spec = P()

def body(local):
    everything = jax.lax.all_gather(local, AXIS, axis=0, tiled=True)
    return everything

mapped = jax.shard_map(body, mesh=mesh, in_specs=in_spec, out_specs=out_spec, check_vma=False)
return mapped(x)
""",
        "all_reduce": """
def body(local):
    total = jax.lax.psum(local, AXIS)
    return total

mapped = jax.shard_map(body, mesh=mesh, in_specs=P(AXIS), out_specs=P())
return mapped(x)
""",
        "reduce_scatter": """
def body(local):
    # sum everything, keep only my piece
    piece = jax.lax.psum_scatter(local, AXIS, scatter_dimension=0, tiled=True)
    return piece

mapped = jax.shard_map(body, mesh=mesh, in_specs=P(AXIS), out_specs=P(AXIS))
return mapped(x)
""",
        "all_reduce_via_scatter_gather": """
def body(local):
    piece = jax.lax.psum_scatter(local, AXIS, scatter_dimension=0, tiled=True)
    whole = jax.lax.all_gather(piece, AXIS, axis=0, tiled=True)
    return whole

mapped = jax.shard_map(body, mesh=mesh, in_specs=P(AXIS), out_specs=P(), check_vma=False)
return mapped(x)
""",
        "all_to_all": """
def body(local):
    swapped = jax.lax.all_to_all(local, AXIS, split_axis=0, concat_axis=0, tiled=True)
    return swapped

mapped = jax.shard_map(body, mesh=mesh, in_specs=P(AXIS), out_specs=P(AXIS))
return mapped(x)
""",
        "ring_shift": """
n = mesh.shape[AXIS]
shift = k % n
pairs = []
for source in range(n):
    pairs.append((source, (source + shift) % n))

def body(local):
    return jax.lax.ppermute(local, AXIS, perm=pairs)

mapped = jax.shard_map(body, mesh=mesh, in_specs=P(AXIS), out_specs=P(AXIS))
return mapped(x)
""",
        "ring_all_reduce": """
n = mesh.shape[AXIS]
pairs = []
for source in range(n):
    pairs.append((source, (source + 1) % n))

def body(local):
    def step(_, carry):
        total, moving = carry
        moving = jax.lax.ppermute(moving, AXIS, perm=pairs)
        return total + moving, moving

    total, _ = jax.lax.fori_loop(0, n - 1, step, (local, local))
    return total

mapped = jax.shard_map(body, mesh=mesh, in_specs=P(AXIS), out_specs=P(), check_vma=False)
return mapped(x)
""",
    },
    helpers='AXIS = "i"  # the mesh axis every function uses',
)

# dev: other algorithms where there are some (stacking then reshaping, composing earlier answers).
DEV = answer(
    {
        "device_ranks": """
per_device = lambda: jnp.full((1,), jax.lax.axis_index("i"), jnp.int32)  # noqa: E731
return jax.shard_map(per_device, mesh=mesh, in_specs=(), out_specs=P("i"))()
""",
        "all_gather": """
def f(blk):
    stacked = jax.lax.all_gather(blk, "i")          # (n, rows, ...)
    return stacked.reshape((-1,) + blk.shape[1:])

return jax.shard_map(f, mesh=mesh, in_specs=P("i"), out_specs=P(), check_vma=False)(x)
""",
        "all_reduce": """
spec_in, spec_out = P("i"), P()
return jax.shard_map(partial(jax.lax.psum, axis_name="i"), mesh=mesh, in_specs=spec_in, out_specs=spec_out)(x)
""",
        "reduce_scatter": """
n = mesh.shape["i"]

def f(blk):
    split = blk.reshape((n, blk.shape[0] // n) + blk.shape[1:])
    return jax.lax.psum_scatter(split, "i", scatter_dimension=0)

return jax.shard_map(f, mesh=mesh, in_specs=P("i"), out_specs=P("i"))(x)
""",
        "all_reduce_via_scatter_gather": """
return all_gather(reduce_scatter(x, mesh), mesh)
""",
        "all_to_all": """
n = mesh.shape["i"]

def f(blk):
    parts = blk.reshape((n, blk.shape[0] // n) + blk.shape[1:])
    swapped = jax.lax.all_to_all(parts, "i", split_axis=0, concat_axis=0)
    return swapped.reshape(blk.shape)

return jax.shard_map(f, mesh=mesh, in_specs=P("i"), out_specs=P("i"))(x)
""",
        "ring_shift": """
n = mesh.shape["i"]
k = k % n
if k == 0:
    return x
perm = [(i, (i + k) % n) for i in range(n)]
return jax.shard_map(lambda blk: jax.lax.ppermute(blk, "i", perm), mesh=mesh, in_specs=P("i"), out_specs=P("i"))(x)
""",
        "ring_all_reduce": """
n = mesh.shape["i"]
ring = [(i, (i + 1) % n) for i in range(n)]

def f(blk):
    out = jnp.zeros_like(blk)
    for _ in range(n):
        out = out + blk
        blk = jax.lax.ppermute(blk, "i", ring)
    return out

return jax.shard_map(f, mesh=mesh, in_specs=P("i"), out_specs=P(), check_vma=False)(x)
""",
    },
    imports="from functools import partial",
)

# eve: the plain way, a `per_device` function and jax.shard_map called on the spot, as the course shows it.
EVE = answer(
    {
        "device_ranks": """
def per_device():
    return jax.lax.axis_index("i").reshape((1,)).astype(jnp.int32)

return jax.shard_map(per_device, mesh=mesh, in_specs=(), out_specs=P("i"))()
""",
        "all_gather": """
def per_device(block):
    return jax.lax.all_gather(block, "i", tiled=True)

return jax.shard_map(per_device, mesh=mesh, in_specs=P("i"), out_specs=P(), check_vma=False)(x)
""",
        "all_reduce": """
def per_device(block):
    return jax.lax.psum(block, "i")

return jax.shard_map(per_device, mesh=mesh, in_specs=P("i"), out_specs=P())(x)
""",
        "reduce_scatter": """
def per_device(block):
    return jax.lax.psum_scatter(block, "i", scatter_dimension=0, tiled=True)

return jax.shard_map(per_device, mesh=mesh, in_specs=P("i"), out_specs=P("i"))(x)
""",
        "all_reduce_via_scatter_gather": """
def per_device(block):
    reduced = jax.lax.psum_scatter(block, "i", scatter_dimension=0, tiled=True)
    return jax.lax.all_gather(reduced, "i", tiled=True)

return jax.shard_map(per_device, mesh=mesh, in_specs=P("i"), out_specs=P(), check_vma=False)(x)
""",
        "all_to_all": """
def per_device(block):
    return jax.lax.all_to_all(block, "i", split_axis=0, concat_axis=0, tiled=True)

return jax.shard_map(per_device, mesh=mesh, in_specs=P("i"), out_specs=P("i"))(x)
""",
        "ring_shift": """
n = mesh.shape["i"]

def per_device(block):
    return jax.lax.ppermute(block, "i", [(d, (d + k) % n) for d in range(n)])

return jax.shard_map(per_device, mesh=mesh, in_specs=P("i"), out_specs=P("i"))(x)
""",
        "ring_all_reduce": """
n = mesh.shape["i"]

def per_device(block):
    total = block
    for step in range(1, n):
        total = total + jax.lax.ppermute(block, "i", [(d, (d + step) % n) for d in range(n)])
    return total

return jax.shard_map(per_device, mesh=mesh, in_specs=P("i"), out_specs=P(), check_vma=False)(x)
""",
    }
)

HONEST = {"ada": ADA, "ben": BEN, "cleo": CLEO, "dev": DEV, "eve": EVE}


# -- the planted copy: ben's answer, names changed, functions reordered, docstrings and comments rewritten -------


def _functions(module: str) -> tuple[str, list[str]]:
    """A module's text before its first top-level `def`, and each top-level function's text."""
    head, *functions = re.split(r"\n\n\n(?=def )", module)
    return head, functions


def planted_copy(original: str, renames: dict[str, str]) -> str:
    head, functions = _functions(original)
    head = (
        '"""Collectives, my version."""\n\nimport jax\nimport jax.numpy as jnp\n'
        "from jax.sharding import PartitionSpec as P"
    )
    rewritten = []
    for function in functions:
        # Its docstring replaced by one line of the copier's own, a comment added.
        function = re.sub(
            r'""".*?"""',
            '"""My own words about this one."""\n    # done by me, tested on 4 devices',
            function,
            count=1,
            flags=re.S,
        )
        for old, new in renames.items():
            function = re.sub(rf"\b{old}\b", new, function)
        rewritten.append(function)
    return "\n\n\n".join([head, *reversed(rewritten)]) + "\n"


MALLORY = planted_copy(
    BEN,
    {
        "_on_blocks": "run_sharded",
        "fn": "func",
        "out_spec": "spec_out",
        "in_spec": "spec_in",
        "check": "vma",
        "b": "shard",
        "moves": "permutation",
        "n": "devices",
        "seen": "collected",
        "both": "scatter_then_gather",
        "body": "kernel",
    },
)


def pair_names(result: ExerciseSimilarity) -> list[tuple[str, str]]:
    return [(p.a, p.b) for p in result.pairs]


def write_class(root: Path, modules: dict[str, str]) -> dict[str, Path]:
    """One submission per student, in the layouts students hand in: a folder with the module at its top, one
    with exercises/, one wrapping folder, and a .zip."""
    submissions = {}
    for n, (student, text) in enumerate(sorted(modules.items())):
        layout = n % 4
        if layout == 3:
            path = root / f"{student}.zip"
            with zipfile.ZipFile(path, "w") as zf:
                zf.writestr(f"handin/{EX05}.py", text)
        else:
            path = root / student
            where = {0: path, 1: path / "exercises", 2: path / "my-work"}[layout]
            where.mkdir(parents=True)
            (where / f"{EX05}.py").write_text(text, encoding="utf-8")
        submissions[student] = path
    return submissions


# -- the class: the copy is found, the honest are not -----------------------------------------------------------


@pytest.fixture(scope="module")
def klass(tmp_path_factory) -> tuple[ClassSimilarity, dict[str, Path]]:
    root = tmp_path_factory.mktemp("class")
    submissions = write_class(root, {**HONEST, "mallory": MALLORY})
    return compare_class(submissions, [EX05, "ex04"]), submissions


def test_the_planted_copy_is_first_and_no_honest_pair_is_flagged(klass):
    result, _ = klass
    ex05 = result.exercises[0]
    assert ex05.exercise == EX05
    assert ex05.compared == ("ada", "ben", "cleo", "dev", "eve", "mallory")  # every layout was read
    assert pair_names(ex05) == [("ben", "mallory")]
    assert ex05.flagged == 1
    copy = ex05.pairs[0]
    assert copy.similarity_a > 0.9 and copy.similarity_b > 0.9
    assert copy.shared >= SimilarityThresholds().min_shared


def test_every_pair_ranked_the_copy_stands_out(klass):
    """With no threshold at all every pair is listed: the copy is first, far above the most similar honest pair,
    which stays below the default threshold."""
    _, submissions = klass
    everything = compare_class(
        submissions, [EX05], SimilarityThresholds(similarity=0.0, min_shared=0, top=100)
    )
    pairs = everything.exercises[0].pairs
    assert len(pairs) >= 8 and all(p.shared > 0 for p in pairs)
    assert (pairs[0].a, pairs[0].b) == ("ben", "mallory")
    assert [p.similarity for p in pairs] == sorted((p.similarity for p in pairs), reverse=True)
    honest = [p for p in pairs if "mallory" not in (p.a, p.b)]
    assert max(p.similarity for p in honest) < SimilarityThresholds().similarity - 0.05
    assert pairs[0].similarity - max(p.similarity for p in honest) > 0.3


def test_the_passages_pair_the_reordered_functions(klass):
    """The copy's functions are in reverse order: each passage of ben's is beside the same code of mallory's,
    and its line numbers are those of the submitted modules."""
    result, _ = klass
    copy = result.exercises[0].pairs[0]
    assert 0 < len(copy.passages) <= SimilarityThresholds().passages
    assert [p.shared for p in copy.passages] == sorted(
        (p.shared for p in copy.passages), reverse=True
    )
    for shared in copy.passages:
        for side, module in ((shared.a, BEN), (shared.b, MALLORY)):
            lines = module.split("\n")[side.first_line - 1 : side.last_line]
            assert not side.cut and side.text == "\n".join(lines)
    ring = next(p for p in copy.passages if "seen.append(jax.lax.ppermute(seen[-1]" in p.a.text)
    assert "collected.append(jax.lax.ppermute(collected[-1]" in ring.b.text
    assert ring.a.first_line > ring.b.first_line  # ben's last function is mallory's first


def test_an_exercise_nobody_handed_in_lists_everyone_as_missing(klass):
    result, _ = klass
    ex04 = result.exercises[1]
    assert ex04.exercise == "ex04_sharded_layer" and ex04.pairs == () and ex04.compared == ()
    assert ex04.not_compared == tuple((s, MISSING) for s in sorted([*HONEST, "mallory"]))


def test_the_same_submissions_give_the_same_result(klass):
    result, submissions = klass
    assert compare_class(submissions, [EX05, "ex04"]) == result


def test_the_figures_do_not_depend_on_string_hashing(tmp_path):
    """copydetect hashes k-grams with Python's hash(), salted per process: with every k-gram kept (window 1)
    the figures are the same whatever the salt, so the class page gives the same bytes."""
    for name, text in {"ben": BEN, "dev": DEV, "eve": EVE, "mallory": MALLORY}.items():
        (tmp_path / f"{name}.py").write_text(text, encoding="utf-8")
    script = (
        "import sys, pathlib\n"
        "from grader.grading.similarity import SimilarityThresholds, compare_exercise\n"
        "from grader.course import catalog\n"
        "folder = pathlib.Path(sys.argv[1])\n"
        "modules = {p.stem: p.read_text() for p in sorted(folder.glob('*.py'))}\n"
        f"r = compare_exercise({EX05!r}, modules, catalog.get({EX05!r}).stub_path().read_text(),\n"
        "                     SimilarityThresholds(similarity=0, min_shared=0, top=10))\n"
        "print([(p.a, p.b, p.similarity_a, p.similarity_b, p.shared, p.passages) for p in r.pairs])\n"
    )
    runs = [
        subprocess.run(
            [sys.executable, "-c", script, str(tmp_path)],
            capture_output=True,
            text=True,
            check=True,
            env={**os.environ, "PYTHONHASHSEED": seed},
        ).stdout
        for seed in ("1", "2")
    ]
    assert runs[0] == runs[1] and "mallory" in runs[0]


# -- what everyone was handed does not count -----------------------------------------------------------------

TINY_A = answer(
    {
        "all_reduce": 'return jax.shard_map(lambda b: jax.lax.psum(b, "i"), mesh=mesh, in_specs=P("i"), '
        "out_specs=P())(x)"
    }
)
TINY_B = answer(
    {
        "ring_shift": 'return jax.device_put(x, jax.sharding.NamedSharding(mesh, P("i")))  # not done yet'
    }
)


def test_the_stub_is_not_a_similarity():
    """Students who kept the stub (its docstrings, signatures and raises), with one short line of their own or
    none, are never a pair; the two who kept it untouched (one with a comment and a docstring changed) are not
    even compared."""
    kept = STUB.replace("# YOUR CODE HERE", "# TODO later").replace(
        "The block transpose", "Block transpose!"
    )
    modules = {
        "kim": TINY_A,
        "lee": TINY_B,
        "max": TINY_A.replace("lambda b", "lambda blk").replace("(b,", "(blk,"),
        "ned": STUB,
        "oz": kept,
    }
    result = compare_exercise(EX05, modules, STUB)
    assert result.pairs == () and result.flagged == 0
    assert dict(result.not_compared) == {"ned": UNCHANGED, "oz": UNCHANGED}
    assert result.compared == ("kim", "lee", "max")
    # kim and max wrote the same one line: all of their own code is shared, but too little of it to tell.
    everything = compare_exercise(
        EX05, modules, STUB, SimilarityThresholds(similarity=0.0, min_shared=0)
    )
    assert pair_names(everything) == [("kim", "max")]
    assert everything.pairs[0].similarity == pytest.approx(1.0)
    assert everything.pairs[0].shared < SimilarityThresholds().min_shared


def test_without_the_stub_as_boilerplate_the_stub_would_be_flagged():
    """The check above can fail: compared with no boilerplate, two students who hardly changed the stub are
    one of the most similar pairs there are."""
    result = compare_exercise(EX05, {"kim": TINY_A, "lee": TINY_B}, stub="")
    assert pair_names(result) == [("kim", "lee")]
    assert result.pairs[0].similarity > 0.9


def test_the_stubs_code_does_not_count_even_where_it_is_rewritten():
    """Code the stub gives, used again inside a student's own lines (so no line of it is the stub's), is still
    the boilerplate's: copydetect's fingerprints of the stub are removed wherever they occur."""
    given = "jax.numpy.concatenate([x[1:], x[:1]], axis=0) * scale + jax.numpy.ones_like(x)"
    stub = (
        f"import jax\n\n\ndef helper(x, scale):\n    return {given}\n\n\n"
        'def f(x):\n    raise NotImplementedError("ex05: f")\n'
    )
    mine = stub.replace(
        'raise NotImplementedError("ex05: f")', f"y = {given} - x\n    return y.sum()"
    )
    yours = stub.replace(
        'raise NotImplementedError("ex05: f")', f"return jax.numpy.mean(({given}) / 3)"
    )
    loose = SimilarityThresholds(similarity=0.0, min_shared=0)
    assert compare_exercise(EX05, {"mine": mine, "yours": yours}, stub, loose).pairs == ()
    assert pair_names(compare_exercise(EX05, {"mine": mine, "yours": yours}, "", loose)) == [
        ("mine", "yours")
    ]


def test_a_module_of_the_stub_and_nothing_else_is_not_compared():
    only_stub_code = answer({name: "pass" for name in ("device_ranks", "all_gather")})
    result = compare_exercise(EX05, {"pat": only_stub_code, "ben": BEN}, STUB)
    assert dict(result.not_compared) == {"pat": STUB_ONLY}
    assert result.compared == ("ben",)


def test_docstrings_and_comments_are_blanked_in_place():
    source = (
        '"""Module doc."""\nimport jax  # a comment\n\n\ndef f(x):\n    """Doc\n    on two lines."""\n'
        '    "a bare string"\n    y = "kept, a value"  # gone\n    return y\n'
    )
    text, parsed = normalize(source)
    assert parsed and len(text) == len(source) and text.count("\n") == source.count("\n")
    assert [line.strip() for line in text.split("\n")] == [
        "",
        "import jax",
        "",
        "",
        "def f(x):",
        "",
        "",
        "",
        'y = "kept, a value"',
        "return y",
        "",
    ]


def test_a_module_that_does_not_parse_is_compared_on_its_raw_text():
    """A copy of ben's that does not parse (a colon missing, a string never closed) is still compared, on its
    raw text, and still found; a module of binary junk is compared too, and nobody crashes."""
    broken = BEN.replace("def both(b):", "def both(b)") + '\n"""never closed\n'
    junk = "\x00\x01 def (((\n\tfrom import\n" * 20
    result = compare_exercise(EX05, {"ben": BEN, "broken": broken, "junk": junk, "eve": EVE}, STUB)
    assert normalize(broken)[1] is False and normalize(junk)[1] is False
    assert result.raw_text == ("broken", "junk")
    assert pair_names(result) == [("ben", "broken")]
    assert result.pairs[0].similarity > 0.9


# -- submissions that cannot be read -----------------------------------------------------------------------


def test_an_unreadable_submission_never_stops_the_others(tmp_path):
    submissions = write_class(tmp_path, {"ben": BEN, "mallory": MALLORY})
    (tmp_path / "zed.zip").write_bytes(b"PK\x03\x04 this is not a zip")
    submissions["zed"] = tmp_path / "zed.zip"
    escape = tmp_path / "sly.zip"
    with zipfile.ZipFile(escape, "w") as zf:
        zf.writestr(f"../outside/{EX05}.py", BEN)  # never extracted, never read
    submissions["sly"] = escape
    submissions["ghost"] = tmp_path / "no-such-folder"
    result = compare_class(submissions, [EX05])
    assert [s for s, _ in result.unreadable] == ["ghost", "zed"]
    ex05 = result.exercises[0]
    assert pair_names(ex05) == [("ben", "mallory")]
    assert dict(ex05.not_compared) == {"sly": MISSING}
    assert not (tmp_path.parent / "outside").exists()


# -- the copydetect workaround ------------------------------------------------------------------------------


def test_boilerplate_removal_keeps_repeated_code_of_ones_own():
    """similarity removes the boilerplate's k-grams itself: copydetect 0.5.0's own option (np.intersect1d with
    assume_unique=True over hashes that repeat) also drops all but the last occurrence of any repeated k-gram
    of the student's own code. If this test fails, copydetect fixed it and `_fingerprint` may use its option."""
    from copydetect import CodeFingerprint

    stub = "import jax\nfrom jax.sharding import PartitionSpec as P\n"
    own = "total = total + jax.lax.ppermute(block, 'i', pairs) * weights[step] + bias[step]\n"
    text = stub + own * 3
    boilerplate = frozenset(similarity._fingerprint("stub", stub, 25).hashes)
    assert boilerplate
    ours = similarity._fingerprint("s", text, 25, boilerplate)
    assert not ours.hashes & boilerplate
    assert max(len(positions) for positions in ours.hash_idx.values()) == 3
    theirs = CodeFingerprint(
        "s", 25, 1, boilerplate=list(boilerplate), language="python", fp=io.StringIO(text)
    )
    assert max(len(positions) for positions in theirs.hash_idx.values()) == 1


# -- dead code is no evidence ---------------------------------------------------------------------------------


def catalogue(own: str, variants: dict[str, str]) -> str:
    """`own`, then every top-level function of each variant module as a dead function of its own
    (`device_ranks_ada`, ...): a module that collects the usual ways to write each answer, none called."""
    dead = []
    for tag, module in variants.items():
        for function in _functions(module)[1]:
            dead.append(re.sub(r"^def (\w+)\(", rf"def \1_{tag}(", function))
    return own.rstrip("\n") + "\n\n\n" + "\n\n\n".join(dead) + "\n"


# cleo's own answer, with ada's and eve's as dead functions (ada's needs functools.partial)
CATALOGUE = catalogue(
    CLEO.replace("\nimport jax\n", "\nfrom functools import partial\nimport jax\n", 1),
    {"ada": ADA, "eve": EVE},
)


def test_a_catalogue_of_dead_answers_flags_no_honest_classmate():
    """Two honest answers, and a module holding both as functions nothing calls beside its own answer: no
    pair is flagged, and the catalogue is still compared (its own answer counts)."""
    result = compare_exercise(EX05, {"ada": ADA, "eve": EVE, "cat": CATALOGUE}, STUB)
    assert result.compared == ("ada", "cat", "eve")
    assert result.pairs == () and result.flagged == 0


def test_the_same_catalogue_wired_in_is_flagged():
    """The check above can fail: the same module with its variants named by one module-level statement (so
    reachable) is flagged with both honest classmates, nearly all of their code found in it."""
    wired = (
        CATALOGUE
        + "VARIANTS = ["
        + ", ".join(
            f"{name}_{tag}"
            for tag in ("ada", "eve")
            for name in (
                "device_ranks",
                "all_gather",
                "all_reduce",
                "reduce_scatter",
                "all_reduce_via_scatter_gather",
                "all_to_all",
                "ring_shift",
                "ring_all_reduce",
            )
        )
        + "]\n"
    )
    result = compare_exercise(EX05, {"ada": ADA, "eve": EVE, "cat": wired}, STUB)
    assert sorted(pair_names(result)) == [("ada", "cat"), ("cat", "eve")]
    assert all(max(p.similarity_a, p.similarity_b) > 0.9 for p in result.pairs)


def test_a_catalogue_of_methods_nothing_calls_flags_no_honest_classmate():
    """The catalogue's variants as methods of a class nothing names: the class body runs, but no method is
    ever called, so they are dead and nobody is flagged; the author's module is listed as mostly dead. With
    one statement of the class body calling every method, they run, and both classmates are flagged."""
    head, own = _functions(CLEO)
    variants = [*_functions(ADA)[1], *_functions(EVE)[1]]
    methods = [re.sub(r"^def (\w+)\(", rf"def \1_{n}(", v) for n, v in enumerate(variants)]
    body = "".join(
        "".join(f"    {line}\n" if line else "\n" for line in m.split("\n")) + "\n" for m in methods
    )
    imports = head.replace("\nimport jax\n", "\nfrom functools import partial\nimport jax\n", 1)
    shelf = "\n\n\n".join([imports, *own]) + f"\n\n\nclass _Shelf:\n{body}"
    compile(shelf, "shelf.py", "exec")
    result = compare_exercise(EX05, {"ada": ADA, "eve": EVE, "cat": shelf}, STUB)
    assert result.compared == ("ada", "cat", "eve") and result.pairs == ()
    assert result.mostly_dead == ("cat",)
    names = [re.match(r"def (\w+)\(", m).group(1) for m in methods]
    wired = shelf + f"    ALL = [{', '.join(names)}]\n"
    result = compare_exercise(EX05, {"ada": ADA, "eve": EVE, "cat": wired}, STUB)
    assert sorted(pair_names(result)) == [("ada", "cat"), ("cat", "eve")]


def test_a_catalogue_of_redefinitions_counts_only_the_last():
    """The catalogue written as redefinitions: ada's functions, eve's, then the author's own, all under the
    graded names. The tests call the last of each: nobody is flagged. With ada's last, they are what the
    tests call, and ada's pair is flagged."""
    head, own = _functions(CLEO)
    variants = [*_functions(ADA)[1], *_functions(EVE)[1]]
    imports = head.replace("\nimport jax\n", "\nfrom functools import partial\nimport jax\n", 1)
    last_own = "\n\n\n".join([imports, *variants, *own]) + "\n"
    result = compare_exercise(EX05, {"ada": ADA, "eve": EVE, "cat": last_own}, STUB)
    assert result.compared == ("ada", "cat", "eve") and result.pairs == ()
    last_ada = "\n\n\n".join([imports, *own, *_functions(EVE)[1], *_functions(ADA)[1]]) + "\n"
    result = compare_exercise(EX05, {"ada": ADA, "eve": EVE, "cat": last_ada}, STUB)
    assert pair_names(result) == [("ada", "cat")]


def test_a_catalogue_nested_in_a_graded_function_flags_nobody():
    """The catalogue's variants defined inside one of its graded functions, which never calls them: dead
    too, nobody flagged. Called from there (a list of them returned beside the answer), they count, and both
    honest classmates are flagged."""
    start = "    def body():\n        # each device asks where it is\n"
    assert start in CLEO
    variants = [*_functions(ADA)[1], *_functions(EVE)[1]]
    names = [re.match(r"def (\w+)\(", v).group(1) for v in variants]
    nested = "".join(
        "".join(
            f"    {line}\n" if line else "\n"
            for line in re.sub(r"^def (\w+)\(", rf"def \1_{n}(", v).split("\n")
        )
        + "\n"
        for n, v in enumerate(variants)
    )
    imports = CLEO.replace("\nimport jax\n", "\nfrom functools import partial\nimport jax\n", 1)
    dead = imports.replace(start, nested + start)
    result = compare_exercise(EX05, {"ada": ADA, "eve": EVE, "cat": dead}, STUB)
    assert result.compared == ("ada", "cat", "eve") and result.raw_text == () and result.pairs == ()
    called = ", ".join(f"{name}_{n}" for n, name in enumerate(names))
    wired = dead.replace(
        "    result = mapped()\n", f"    result = mapped()\n    _ = [{called}]\n", 1
    )
    assert wired != dead
    result = compare_exercise(EX05, {"ada": ADA, "eve": EVE, "cat": wired}, STUB)
    assert sorted(pair_names(result)) == [("ada", "cat"), ("cat", "eve")]


def test_copying_that_a_graded_function_calls_is_flagged():
    """A copier who keeps ben's answer in functions of their own that the graded functions call (one
    graded function each, renamed) is flagged: called code is judged."""
    head, functions = _functions(BEN)
    renamed = [re.sub(r"^def (\w+)\(", r"def \1_impl(", f) for f in functions[1:]]
    calls = [
        f"def {name}(*args, **kwargs):\n    return {name}_impl(*args, **kwargs)"
        for name in re.findall(r"^def (\w+)\(", "\n".join(functions[1:]), flags=re.M)
    ]
    wrapped = "\n\n\n".join([head, functions[0], *renamed, *calls]) + "\n"
    result = compare_exercise(EX05, {"ben": BEN, "wrapper": wrapped, "eve": EVE}, STUB)
    assert pair_names(result) == [("ben", "wrapper")]


def test_a_catalogue_that_does_not_parse_is_evidence_only_against_its_author():
    """Nothing tells what is dead in a module that does not parse: beside one that parses, only the share
    of its own code the other holds counts. The catalogue broken on purpose flags nobody, though nearly all of
    ada's code is in it; a broken copy of ben's is still flagged (test_a_module_that_does_not_parse_...)."""
    broken = CATALOGUE + "\ndef (\n"
    modules = {"ada": ADA, "eve": EVE, "cat": broken}
    result = compare_exercise(EX05, modules, STUB)
    assert result.raw_text == ("cat",) and result.pairs == ()
    everything = compare_exercise(
        EX05, modules, STUB, SimilarityThresholds(similarity=0.0, min_shared=0)
    )
    ada = next(p for p in everything.pairs if (p.a, p.b) == ("ada", "cat"))
    assert ada.similarity_a > SimilarityThresholds().similarity  # what the old rule flagged on
    assert ada.similarity_b < SimilarityThresholds().similarity


# -- the figures do not depend on the order of the names ---------------------------------------------------------


def test_a_pairs_figures_are_the_same_whichever_name_sorts_first():
    """ben's answer and a module holding it twice over (once as its answer, once in functions its answer
    calls): matched characters differ between the two sides. Named so that either sorts first, the pair gives
    the same figures, each on its own student's side, and `shared` is the same number."""
    head, functions = _functions(BEN)
    twice = (
        BEN
        + "\n\n"
        + "\n\n\n".join(re.sub(r"^def (\w+)\(", r"def \1_again(", f) for f in functions)
        + "\nAGAIN = ["
        + ", ".join(
            f"{n}_again" for n in re.findall(r"^def (\w+)\(", "\n".join(functions), flags=re.M)
        )
        + "]\n"
    )
    loose = SimilarityThresholds(similarity=0.0, min_shared=0)
    first = compare_exercise(EX05, {"ann": BEN, "zed": twice}, STUB, loose).pairs[0]
    second = compare_exercise(EX05, {"ann": twice, "zed": BEN}, STUB, loose).pairs[0]
    assert (first.similarity_a, first.similarity_b) == (second.similarity_b, second.similarity_a)
    assert first.shared == second.shared
    # what made it matter: copydetect's count (a's side, what `shared` was) differs with the order
    # (fingerprinted here without the stub)
    from copydetect import compare_files

    k = SimilarityThresholds().noise
    a, b = (similarity._fingerprint(n, normalize(t)[0], k) for n, t in (("a", BEN), ("b", twice)))
    assert compare_files(a, b)[0] != compare_files(b, a)[0]


# -- bounded work --------------------------------------------------------------------------------------------------

# A line that ends in the character a stub's masked line becomes: the module does not parse, and every copy of
# the line is a matching stretch of its own (what made matching passages quadratic in the copies).
SPLIT = (
    "    total = total + jax.lax.ppermute(block, 'i', pairs) * weights[step] + bias[step]"
    " + jax.lax.psum(block, 'i') * scale[step] \u00a4\n"
)


def test_a_kgram_counts_at_most_repeats_times():
    """However often a line is repeated, each of its k-grams keeps its first REPEATS positions: the
    passages' pairing of stretches is at most REPEATS ** 2 votes a shared k-gram."""
    text = "def f(block, pairs, weights, bias, step, scale):\n    total = block\n" + SPLIT * 500
    fingerprint = similarity._fingerprint("x", text, SimilarityThresholds().noise)
    positions = [len(p) for p in fingerprint.hash_idx.values()]
    assert max(positions) == similarity.REPEATS and len(positions) < 200


def test_two_colluders_repeating_a_line_are_still_flagged_and_cut():
    """The attack: both students' modules end with the line repeated 2,000 times. In a dead function that
    parses, the function is blanked (more than half of each module: listed in `mostly_dead`) and nothing is
    left to cut. With the line one that does not parse (in a dead function, or at the top level), the modules
    are compared on their raw text, each on its first MAX_CHARS characters of code (said, in `cut`), and each
    k-gram counts at most REPEATS times. Every way, the two are still found."""
    tail = "\n\ndef _unused(block, pairs, weights, bias, step, scale):\n    total = block\n"
    parses = SPLIT.replace(" \u00a4", "")
    for extra, cut, raw, dead in (
        (tail + parses * 2000, (), (), ("ann", "bob")),
        (tail + SPLIT * 2000, ("ann", "bob"), ("ann", "bob"), ()),
        ("\n" + SPLIT.lstrip() * 2000, ("ann", "bob"), ("ann", "bob"), ()),
    ):
        modules = {"ann": BEN + extra, "bob": MALLORY + extra, "eve": EVE}
        assert len(modules["ann"]) > 3 * similarity.MAX_CHARS
        result = compare_exercise(EX05, modules, STUB)
        assert (result.cut, result.raw_text, result.mostly_dead) == (cut, raw, dead)
        assert pair_names(result) == [("ann", "bob")]


def test_a_long_module_is_cut_at_a_top_level_statement_and_still_parses():
    """A module of more than MAX_CHARS characters of live code (6,000 functions a module-level list names) is
    compared on its first MAX_CHARS, to a top-level statement: what is left parses, and the copy is found."""
    padding = "".join(f"def pad_{i}():\n    return {i}\n\n\n" for i in range(6000))
    padded = (
        BEN + "\n\n" + padding + "PADS = [" + ", ".join(f"pad_{i}" for i in range(6000)) + "]\n"
    )
    head = similarity._cut(padded)
    assert len(similarity._compact(padded)[0]) > similarity.MAX_CHARS
    assert len(similarity._compact(head)[0]) <= similarity.MAX_CHARS
    assert head.endswith("\n") and normalize(head)[1]
    result = compare_exercise(EX05, {"ben": BEN, "padded": padded}, STUB)
    assert result.cut == ("padded",) and result.raw_text == () and result.mostly_dead == ()
    assert pair_names(result) == [("ben", "padded")]


# -- evasions of the fifth round: code that runs, hidden where it looked dead or past the cut -------------------


def _graded_names(module: str) -> list[str]:
    return re.findall(r"^def (\w+)\(", "\n".join(_functions(module)[1]), flags=re.M)


def in_a_class_body(module: str) -> str:
    """The whole module's functions inside a top-level class nothing names, its body declaring them global:
    Python runs the class body on import, so each is defined as the module's own."""
    head, functions = _functions(module)
    body = "".join(
        "".join(f"    {line}\n" if line else "\n" for line in f.strip("\n").split("\n")) + "\n"
        for f in functions
    )
    return f"{head}\n\n\nclass _Scratch:\n    global {', '.join(_graded_names(module))}\n\n{body}"


def bodies_in_nested_classes(module: str) -> str:
    """Each function's body moved into a class defined inside it, which defines the original under another
    name and calls it: the class body runs on every call."""
    head, functions = _functions(module)
    wrapped = []
    for function in functions:
        name = re.match(r"def (\w+)\(", function).group(1)
        inner = "".join(
            f"        {line}\n" if line else "\n"
            for line in re.sub(rf"^def {name}\(", "def _original(", function).split("\n")
        )
        wrapped.append(
            f"def {name}(*args, **kwargs):\n    result = None\n\n    class _Body:\n"
            f"        nonlocal result\n\n{inner}\n        result = _original(*args, **kwargs)\n\n"
            "    return result\n"
        )
    return "\n\n\n".join([head, *wrapped]) + "\n"


def behind_comments(module: str) -> str:
    """800 lines of comments, 64 KB, before an unchanged copy."""
    return "".join(f"# {n:04d} " + "notes " * 12 + "\n" for n in range(800)) + module


@pytest.mark.parametrize("evade", [in_a_class_body, bodies_in_nested_classes, behind_comments])
def test_a_copy_that_runs_is_found_however_it_is_hidden(evade):
    """ben's module hidden three ways, each still a module whose graded functions run ben's code (it compiles,
    and its graded names are bound by what runs): flagged beside ben, as a verbatim copy is; no honest
    classmate is flagged, and nothing is listed as cut or mostly dead."""
    hidden = evade(BEN)
    compile(hidden, "hidden.py", "exec")
    modules = {"ben": BEN, "copy": BEN, "hidden": hidden, "eve": EVE, "ada": ADA}
    result = compare_exercise(EX05, modules, STUB)
    assert sorted(pair_names(result)) == [("ben", "copy"), ("ben", "hidden"), ("copy", "hidden")]
    assert result.cut == () and result.mostly_dead == () and result.not_compared == ()
    assert all(p.similarity > 0.9 for p in result.pairs)


def test_the_evasions_hid_the_copy_from_the_previous_rules(monkeypatch):
    """The test above can fail: under the previous rules (a class nothing names blanked as dead, the raw text
    cut at MAX_CHARS before comments were blanked) each hidden copy was not compared, or not flagged."""
    import ast as python_ast

    def old_dead_nested(function):
        counts = reachable._occurrences(function)
        return [
            node
            for node in python_ast.walk(function)
            if node is not function
            and isinstance(node, python_ast.ClassDef)
            and counts[node.name] - reachable._occurrences(node)[node.name] == 0
        ]

    for evade, rule in (
        (in_a_class_body, "classes"),
        (bodies_in_nested_classes, "nested"),
        (behind_comments, "cut"),
    ):
        with monkeypatch.context() as patch:
            if rule == "classes":
                patch.setattr(
                    reachable,
                    "_definitions",
                    lambda body: (
                        [n for n in body if not isinstance(n, reachable._DEFINITIONS)],
                        [n for n in body if isinstance(n, reachable._DEFINITIONS)],
                    ),
                )
            elif rule == "nested":
                patch.setattr(reachable, "dead_nested", old_dead_nested)
            else:
                patch.setattr(similarity, "_cut", lambda text: text[: similarity.MAX_CHARS])
            result = compare_exercise(EX05, {"ben": BEN, "hidden": evade(BEN)}, STUB)
        assert pair_names(result) == [], evade.__name__


def test_blank_runs_are_compacted_before_lexing_and_mapped_back():
    """Blanked docstrings and dead code are runs of blank lines, which pygments lexes in quadratic time: the
    lexer reads them compacted (no blank line, no run of two blanks), and every character it reads is mapped
    back to its place in the module."""
    text = "x = 1   \n" + "        \n" * 50 + "\tdef  f( a ,\t\tb):\n      \n    return  a\n"
    compact, where = similarity._compact(text)
    assert compact == "x = 1\n\tdef f( a ,\tb):\n return a\n"
    assert len(where) == len(compact) + 1 and where[-1] == len(text)
    assert all(text[at] == char for at, char in zip(where, compact))


def test_a_huge_docstring_is_lexed_compacted_and_the_copy_still_found():
    """ben's answer with a docstring of 900 lines in its helper (blanked, then compacted) is still found
    beside mallory's, each passage at its own lines: the helper's from its `def` to its `return`, the
    docstring between."""
    doc = '    """' + "A line of the docstring, long enough to matter here.\n    " * 900 + '"""\n'
    marker = 'def _on_blocks(fn, mesh, out_spec, *args, in_spec=P("i"), check=True):\n'
    assert marker in BEN
    padded = BEN.replace(marker, marker + doc)
    result = compare_exercise(EX05, {"ben": padded, "mallory": MALLORY, "eve": EVE}, STUB)
    assert len(padded) > 50_000 and result.cut == ()
    assert pair_names(result) == [("ben", "mallory")]
    for shared in result.pairs[0].passages:
        lines = padded.split("\n")[shared.a.first_line - 1 : shared.a.last_line]
        shown = shared.a.text.split("\n")
        assert shown[0] == lines[0] and (shared.a.cut or shared.a.text == "\n".join(lines))
    helper = next(p.a for p in result.pairs[0].passages if p.a.text.startswith("def _on_blocks"))
    assert helper.cut and padded.split("\n")[helper.last_line - 1].strip().startswith("return")


# -- what a resumed batch computes again -----------------------------------------------------------------------


def counting(monkeypatch) -> dict[str, int]:
    """Counts of the module lexings and the pair comparisons a run does."""
    calls = {"lexed": 0, "compared": 0}
    lex, figures = similarity._filter_code, similarity._figures

    def counted_lex(text):
        calls["lexed"] += 1
        return lex(text)

    def counted_figures(fa, fb):
        calls["compared"] += 1
        return figures(fa, fb)

    monkeypatch.setattr(similarity, "_filter_code", counted_lex)
    monkeypatch.setattr(similarity, "_figures", counted_figures)
    return calls


def test_a_resumed_class_lexes_and_compares_only_what_changed(tmp_path, monkeypatch):
    cache = tmp_path / "cache"
    modules = {"ben": BEN, "mallory": MALLORY, "eve": EVE, "dev": DEV}
    submissions = write_class(tmp_path / "class", modules)
    calls = counting(monkeypatch)
    first = compare_class(submissions, [EX05], cache=cache)
    assert calls == {"lexed": 4 + 2, "compared": 6}  # four modules and the stub twice; six pairs
    calls.update(lexed=0, compared=0)
    assert compare_class(submissions, [EX05], cache=cache) == first
    assert calls == {"lexed": 0, "compared": 0}
    # eve changes her answer: her module is lexed again, and her three pairs compared again
    (submissions["eve"] / f"{EX05}.py").write_text(EVE.replace("per_device", "on_device"))
    again = compare_class(submissions, [EX05], cache=cache)
    assert calls == {"lexed": 1, "compared": 3}
    assert pair_names(again.exercises[0]) == pair_names(first.exercises[0]) == [("ben", "mallory")]
    # without the cache, the same result
    assert compare_class(submissions, [EX05]) == again


def test_a_damaged_cache_entry_is_computed_again(tmp_path, monkeypatch):
    cache = tmp_path / "cache"
    submissions = write_class(tmp_path / "class", {"ben": BEN, "mallory": MALLORY})
    first = compare_class(submissions, [EX05], cache=cache)
    entries = sorted(cache.rglob("*.json"))
    assert len(entries) == 4 + 1  # two modules, the stub twice, one pair
    for entry in entries:
        entry.write_text('["not", "what it should hold"')
    calls = counting(monkeypatch)
    assert compare_class(submissions, [EX05], cache=cache) == first
    assert calls == {"lexed": 4, "compared": 1}
    assert all(entry.read_text().startswith("[") for entry in entries)


# -- the HTML section ------------------------------------------------------------------------------------------

HOSTILE = "<script>alert(1)</script>"
HOSTILE_CODE = 'banner = "</pre><script>alert(2)</script><img src=x onerror=alert(3)>"'


class Elements(HTMLParser):
    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.tags: list[tuple[str, dict]] = []
        self.text: list[str] = []

    def handle_starttag(self, tag, attrs):
        self.tags.append((tag, dict(attrs)))

    def handle_data(self, data):
        self.text.append(data)


def parse(html: str) -> Elements:
    parser = Elements()
    parser.feed(html)
    parser.close()
    return parser


def test_the_section_shows_the_pair_and_its_passages(klass):
    result, _ = klass
    section = similarity_section(result)
    assert isinstance(section, Markup)
    page = parse(document("class", section))
    pairs = [
        attrs
        for tag, attrs in page.tags
        if tag == "article" and attrs.get("class") == "similar-pair"
    ]
    assert [(p["data-a"], p["data-b"]) for p in pairs] == [("ben", "mallory")]
    assert [
        attrs["data-exercise"]
        for tag, attrs in page.tags
        if attrs.get("class") == "similar-exercise"
    ] == [EX05]
    text = "".join(page.text)
    assert "seen.append(jax.lax.ppermute(seen[-1]" in text and "collected.append(" in text
    assert "No pair above the thresholds in ex04_sharded_layer." in " ".join(text.split())
    assert {tag for tag, _ in page.tags} <= {
        "html",
        "head",
        "meta",
        "title",
        "style",
        "body",
        "section",
        "h2",
        "h3",
        "p",
        "span",
        "article",
        "header",
        "div",
        "figure",
        "figcaption",
        "pre",
        "details",
        "summary",
    }


def test_the_section_escapes_names_and_code():
    """A student named like a script, and shared code that closes the <pre> and opens a script, stay text."""
    ben_ring, copy_ring = "moves = [(d, (d + 1) % n)", "permutation = [(d, (d + 1) % devices)"
    assert ben_ring in BEN and copy_ring in MALLORY
    modules = {
        "ben": BEN.replace(ben_ring, f"{HOSTILE_CODE}\n    {ben_ring}"),
        HOSTILE: MALLORY.replace(copy_ring, f"{HOSTILE_CODE}\n    {copy_ring}"),
    }
    exercise = compare_exercise(EX05, modules, STUB)
    assert pair_names(exercise) == [(HOSTILE, "ben")]  # "<" sorts before "b"
    assert any(HOSTILE_CODE in p.a.text for p in exercise.pairs[0].passages)
    result = ClassSimilarity(
        (exercise,), ((f"{HOSTILE}.zip", f"BadZipFile: {HOSTILE}"),), SimilarityThresholds()
    )
    html = document("class", similarity_section(result))
    page = parse(html)
    assert "script" not in {tag for tag, _ in page.tags} and "img" not in {
        tag for tag, _ in page.tags
    }
    assert "<script>" not in html.split("</style>", 1)[1] and "onerror=alert(3)>" not in html
    pair = next(attrs for tag, attrs in page.tags if attrs.get("class") == "similar-pair")
    assert pair["data-a"] == HOSTILE
    text = "".join(page.text)
    assert HOSTILE_CODE in text and f"{HOSTILE}.zip" in text
    # the pair's header, its figures, a passage's caption, the unreadable
    assert text.count(HOSTILE) >= 4


def test_the_section_says_when_nothing_is_flagged():
    result = ClassSimilarity(
        (compare_exercise(EX05, {"ada": ADA, "cleo": CLEO}, STUB),), (), SimilarityThresholds()
    )
    text = " ".join("".join(parse(similarity_section(result)).text).split())
    assert "No pair of submissions is above the thresholds." in text
    assert "similar-pair" not in similarity_section(result)


def test_shared_passages_are_cut_to_a_sane_length():
    long_line = "x = [" + ", ".join(str(i) for i in range(200)) + "]"
    text = "\n".join([long_line] * 40) + "\n"
    passage = similarity._passage(
        text, 0, len(text), SimilarityThresholds(passage_lines=5, line_chars=50)
    )
    assert passage.cut and (passage.first_line, passage.last_line) == (1, 40)
    shown = passage.text.split("\n")
    assert len(shown) == 6 and shown[-1] == "… (35 more lines)"
    assert all(len(line) <= 51 for line in shown[:5])


def test_the_section_lists_the_modules_cut_or_mostly_dead():
    """A module mostly made of code no graded function runs, and one with more code than is compared, are
    named for the instructor to look at, not passed over."""
    padding = "".join(f"def pad_{i}():\n    return {i}\n\n\n" for i in range(6000))
    modules = {
        "ben": BEN,
        "deadwood": BEN + "\n\n" + padding,
        "long": BEN
        + "\n\n"
        + padding
        + "PADS = ["
        + ", ".join(f"pad_{i}" for i in range(6000))
        + "]\n",
    }
    exercise = compare_exercise(EX05, modules, STUB)
    assert exercise.mostly_dead == ("deadwood",) and exercise.cut == ("long",)
    text = "".join(
        parse(
            document(
                "class",
                similarity_section(ClassSimilarity((exercise,), (), SimilarityThresholds())),
            )
        ).text
    )
    assert (
        "no graded function reaches" in text
        and "deadwood" in text.split("no graded function reaches")[1]
    )
    assert (
        "characters of code, only their first" in text
        and "long" in text.split("only their first")[1]
    )
