"""End to end, as grading runs it: a submission whose ex17 accumulate_grads adds a pmean'd gradient to a
per-device sum and returns it as replicated fails ex17's visible test in its confined worker, and the
TestResult the harness sends back carries JAX's message and, beside it, the course's explanation of it; pytest's
own report of the failure says it too."""

import subprocess
import sys
import time

from grader.core.results import Category
from grader.course import catalog, paths
from grader.grading import process
from grader.harness import jax_errors
from grader.sandbox import confinement

EX17 = catalog.get("ex17_zero1_accumulation")
SOLVED = '    ### BEGIN SOLUTION\n    n, mb = mesh.shape["data"], xs.shape[0]\n'
# The mistake: every microbatch's gradient pmean'd, then added to a per-device (varying) sum.
MISTAKE = """    ### BEGIN SOLUTION
    def per_device(params, xs, ys):
        local = jax.lax.pcast(params, "data", to="varying")
        total = jax.tree.map(jnp.zeros_like, local)
        for i in range(xs.shape[0]):
            grads = jax.grad(mse_loss)(local, xs[i], ys[i])
            total = jax.tree.map(lambda t, g: t + jax.lax.pmean(g, "data"), total, grads)
        return jax.tree.map(lambda t: t / xs.shape[0], total)

    return jax.shard_map(
        per_device, mesh=mesh, in_specs=(P(), P(None, "data"), P(None, "data")), out_specs=P()
    )(params, xs, ys)
    n, mb = mesh.shape["data"], xs.shape[0]
"""


def test_a_graded_submission_mixing_a_pmean_into_a_per_device_sum_is_told_what_it_means(tmp_path):
    modules = tmp_path / "modules"
    modules.mkdir()
    source = EX17.solution_path().read_text()
    # accumulate_grads's solution, the first of the module's, starts with the mistake instead
    assert (
        source.index("def accumulate_grads") < source.index(SOLVED) < source.index("def zero1_init")
    )
    (modules / EX17.module_file).write_text(source.replace(SOLVED, MISTAKE, 1))
    visible = EX17.tests_dir() / "test_visible.py"
    graded = process.run_pytest_child(
        targets=[f"{visible}::test_accumulate_grads"],
        modules_dir=modules,
        workdir=tmp_path,
        deadline=time.monotonic() + 300,
        timing="skip",
        isolation=confinement.choose_isolation("auto").value,  # as grading chooses it
    )
    (result,) = graded.results.values()
    assert result.category is Category.ERROR, (result, graded.output[-2000:])
    known = next(k for k in jax_errors.KNOWN_ERRORS if k.name == "replication not inferred")
    assert (
        "out_specs which require replication which can't be statically inferred" in result.message
    )
    assert f"raised at {EX17.module_file}:" in result.message
    assert result.explanation == known.explanation() and known.meaning not in result.message
    # `python -m pytest ... --impl`, the route with pytest's own output, says it under the traceback
    plain = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-p",
            "no:cacheprovider",
            f"{visible}::test_accumulate_grads",
        ]
        + ["--impl", str(modules), "--visible-only"],
        capture_output=True,
        text=True,
        cwd=paths.REPO_ROOT,
        timeout=300,
    )
    assert plain.returncode == 1, plain.stdout[-3000:] + plain.stderr[-3000:]
    assert "What this JAX error means" in plain.stdout and known.meaning in plain.stdout, (
        plain.stdout[-3000:]
    )
