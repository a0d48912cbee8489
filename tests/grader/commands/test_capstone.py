"""`shardlab capstone`: part 2's figures measured on an implementation's ex17 and ex18; the reference's are what
docs/students.md quotes, and a part not written yet is said, never a traceback."""

import ast
import re
import subprocess
import sys

import pytest

from grader.commands import capstone as cs
from grader.course import catalog, paths

STUDENTS_DOC = paths.REPO_ROOT / "docs" / "students.md"
# the remat stack as the command, docs/students.md and ex18's docstring state it, and its two figures
STACK = re.compile(r"(L = \d+ blocks,.*?mesh data=\d+ x model=\d+)")
SIZES = re.compile(r"\b([LBTDHF]) = (\d+)")
MESH = re.compile(r"mesh data=(\d+) x model=(\d+)")
REMAT = re.compile(r"(\d+(?:\.\d+)? [KM]iB) without remat,? (?:and )?(\d+(?:\.\d+)? [KM]iB) with\b")


def capstone(impl) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "grader.cli", "capstone", "--impl", str(impl)],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=paths.REPO_ROOT,
    )


def traffic(section: str) -> dict[tuple[str, str], tuple[int, int]]:
    """{(kind, axes): (runs, arrays)} of one section's collectives lines."""
    found = {}
    for kind, axes, runs, arrays in re.findall(
        r"^\s+([a-z\-]+)\s+over (\S+)\s+(\d+) runs?\s+(\d+) arrays?", section, re.M
    ):
        found[(kind, axes)] = (int(runs), int(arrays))
    return found


@pytest.mark.slow
def test_the_reference_trains_3d_and_remat_and_zero_save_what_the_docs_say():
    done = capstone(paths.SOLUTIONS_DIR)
    assert done.returncode == 0, done.stdout + done.stderr
    block, remat, zero = re.split(r"^\d\. ", done.stdout, flags=re.M)[1:]
    assert "each device holds" in block and "(1/8)" in block
    losses = [float(v) for v in re.search(r"SGD steps: (.*)", block)[1].split(", ")]
    assert len(losses) == 5 and all(b < a for a, b in zip(losses, losses[1:]))
    step = traffic(block)
    # FSDP: weights gathered and their gradients reduce-scattered over "data"; the sequence over "model"
    assert step[("all-gather", "data")][1] >= 6 and step[("reduce-scatter", "data")][1] >= 6
    assert ("all-gather", "model") in step and ("reduce-scatter", "model") in step
    assert all(
        kind != "all-reduce" or moved == "4 B"
        for kind, moved in re.findall(
            r"^\s+([a-z\-]+)\s+over \S+\s+.*?arrays?\s+(\S+ \S+) of operands", block, re.M
        )
    )  # only the loss's scalars are all-reduced
    without, with_, ratio, loss_a, loss_b = re.search(
        r"(\S+ \S+) without remat, (\S+ \S+) with \((\S+) of it\); loss (\S+) and (\S+)", remat
    ).groups()
    assert float(ratio) <= 0.5 and loss_a == loss_b
    # the stack it ran and what it measured are what docs/students.md states
    assert stack_stated(remat) == stack_stated(STUDENTS_DOC.read_text())
    assert "(1/8)" in zero
    zero_step, accumulate = zero.split("one accumulate_grads")
    leaves = int(re.search(r"\((\d+) parameter arrays\)", zero_step)[1])
    assert traffic(zero_step)[("reduce-scatter", "data")][1] == leaves
    assert traffic(zero_step)[("all-gather", "data")][1] == leaves
    assert traffic(accumulate)[("all-reduce", "data")] == (
        1,
        leaves,
    )  # once per call, not per microbatch


def stack_stated(text: str) -> tuple[dict[str, int], tuple[int, int], tuple[str, str] | None]:
    """The remat stack a text states (its sizes and mesh) and the figures it gives for it, if any."""
    text = " ".join(text.split())  # a docstring's or a table's line breaks
    stack = STACK.search(text)
    assert stack is not None, f"no stack stated in {text[:200]}..."
    mesh = MESH.search(stack[1])
    figures = REMAT.search(text, stack.end())
    return (
        {name: int(value) for name, value in SIZES.findall(stack[1])},
        (int(mesh[1]), int(mesh[2])),
        figures.groups() if figures is not None else None,
    )


def stack_loss_docstring(root) -> str:
    tree = ast.parse(catalog.get(cs.BLOCK).solution_path(root).read_text())
    (function,) = (n for n in tree.body if getattr(n, "name", None) == "stack_loss")
    return ast.get_docstring(function)


def test_the_docs_and_ex18_state_the_stack_the_command_prints():
    """One configuration, stated three times: the command prints its stack, and docs/students.md and ex18's
    stack_loss docstring (the stub's and the reference's) give the same sizes, mesh and figures for it."""
    printed = cs.render(cs.Capstone(block="not run", remat="not run", zero="not run"))
    docs = STUDENTS_DOC.read_text()
    sizes, mesh, figures = stack_stated(docs)
    assert stack_stated(printed)[:2] == (sizes, mesh)
    assert sizes == {
        "L": cs.LAYERS,
        "B": cs.BATCH,
        "T": cs.SEQ,
        "D": cs.D,
        "H": cs.HEADS,
        "F": cs.F,
    }
    assert figures is not None and all(f.endswith(" MiB") for f in figures)
    for root in (paths.SOLUTIONS_DIR, paths.EXERCISES_DIR):
        assert stack_stated(stack_loss_docstring(root)) == (sizes, mesh, figures)
    assert cs.block_configuration() in " ".join(docs.split())


def test_parts_not_written_are_said_and_the_command_fails(tmp_path):
    (tmp_path / "ex17_zero1_accumulation.py").write_text("raise SystemExit(3)\n")
    stubs = paths.EXERCISES_DIR / "ex18_transformer_block.py"
    (tmp_path / "ex18_transformer_block.py").write_text(stubs.read_text())
    done = capstone(tmp_path)
    assert done.returncode == 1
    assert "Traceback" not in done.stdout + done.stderr
    assert done.stdout.count("ex18_transformer_block is not finished: `shardlab check ex18`") == 2
    assert "ex17_zero1_accumulation.py called exit(3) while being imported" in done.stdout


# -- the figures read from the account ----------------------------------------------------------------------


def looped_psum(mesh, steps: int | None):
    """A psum over "data" per step of a loop (static `steps`, or traced when None), and one over the size-1
    axis "one", which moves nothing."""
    import jax
    import jax.numpy as jnp
    from jax.sharding import NamedSharding, PartitionSpec as P

    from grader.checks import compiled

    def body(x, n):
        count = steps if steps is not None else n
        x = jax.lax.psum(x, "one")
        return jax.lax.fori_loop(0, count, lambda i, c: c + jax.lax.psum(c, "data"), x)

    spec = P("data", "one")
    fn = jax.shard_map(body, mesh=mesh, in_specs=(spec, P()), out_specs=spec)
    x = jax.device_put(jnp.ones((8, 16), jnp.float32), NamedSharding(mesh, spec))
    return compiled(fn, x, jnp.int32(3))


def test_the_traffic_is_the_accounts_between_devices():
    """Each row is the account's (runs and arrays counted through the loop, bytes of operands and bytes sent
    per device), the collective over a singleton group left out; a loop of traced bounds says so, never a
    guess, on every figure of its line."""
    from grader.checks import test_mesh
    from grader.checks.account import account_of, between_devices

    mesh = test_mesh((4, 1), ("data", "one"), "explicit")
    program = looped_psum(mesh, 5)
    rows = cs._traffic(program, mesh)
    assert rows == between_devices(account_of(program, mesh=mesh))
    (row,) = rows
    assert (row.kind, row.axes, row.runs, row.operands) == ("all-reduce", ("data",), 5, 5)
    # each device's block is 2 x 16 float32s, 128 bytes, all-reduced 5 times over groups of 4
    assert row.operand_bytes == 5 * 128 and row.sent_bytes == 2 * 5 * 128 * 3 // 4
    (line,) = cs._traffic_lines(rows)
    assert re.search(r"all-reduce\s+over data\s+5 runs\s+5 arrays\s+640 B of operands,", line)
    assert line.endswith("960 B sent per device")
    (unknown,) = cs._traffic_lines(cs._traffic(looped_psum(mesh, None), mesh))
    assert unknown.endswith("in a loop with no static trip count: not counted")
