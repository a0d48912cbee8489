"""The handout from a Jupyter kernel, as on Colab or Kaggle: `!shardlab check` in a kernel whose JAX already
started on one device still checks on the course's 8 devices, and the README's experiment recipe gives a fresh
kernel 8 devices (and a kernel that ran JAX jax's own RuntimeError: "restart the kernel").

Real kernels of this venv's Python (a kernelspec in a temporary folder, none installed), started by nbclient in
the handout's folder, in a student's environment: no XLA_FLAGS, JAX_NUM_CPU_DEVICES or JAX_PLATFORMS. The
README's cells are `!pip install -e .` and `!shardlab check ex04`; here the check runs the handout's own grader
as `python -m grader.cli` from the handout's folder, which is what the installed `shardlab` runs, without a
fresh venv and its minutes of pip."""

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

from grader.course import catalog, paths
from grader.course.devices import HOST_DEVICES, experiment_recipe
from grader.platforms.handout import DEFAULT_COURSE_NAME, _write_templates

pytest.importorskip("ipykernel")
nbclient = pytest.importorskip("nbclient")
kernelspec = pytest.importorskip("jupyter_client.kernelspec")
manager = pytest.importorskip("jupyter_client.manager")

EX01 = catalog.get("ex01")
KERNEL = "shardlab-venv"
STARTED_ON_ONE_DEVICE = (
    "import jax; import jax.numpy as jnp; jnp.ones(3).sum()\nassert jax.device_count() == 1"
)
RECIPE = f'{experiment_recipe()}\nprint(jax.device_count(), jax.make_mesh((2, 4), ("x", "y")).devices.shape)'
TOO_LATE = "before backends are initialized"  # jax's RuntimeError, once its backend started


@pytest.fixture(scope="module")
def handout(tmp_path_factory) -> Path:
    """`shardlab release`'s handout, ex01 solved with the reference."""
    out = tmp_path_factory.mktemp("notebook") / "handout"
    done = subprocess.run(
        [sys.executable, "-m", "grader.cli", "release", str(out)],
        cwd=paths.REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    shutil.copyfile(EX01.solution_path(), EX01.stub_path(out / "exercises"))
    return out


@pytest.fixture(scope="module")
def kernels(tmp_path_factory):
    """A kernelspec of this venv's Python, in a folder of its own: no kernel is installed anywhere."""
    folder = tmp_path_factory.mktemp("kernels")
    (folder / KERNEL).mkdir()
    (folder / KERNEL / "kernel.json").write_text(
        json.dumps(
            {
                "argv": [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
                "display_name": "shardlab's venv",
                "language": "python",
            }
        )
    )
    return kernelspec.KernelSpecManager(kernel_dirs=[str(folder)], ensure_native_kernel=False)


def student_environment(home: Path) -> dict[str, str]:
    """This process's environment as a notebook's: nothing asks for devices; IPython's files in `home`."""
    asked = ("XLA_FLAGS", "JAX_NUM_CPU_DEVICES", "JAX_PLATFORMS")
    return {k: v for k, v in os.environ.items() if k not in asked} | {
        "IPYTHONDIR": str(home / "ipython")
    }


def run_notebook(
    cells: list[str], *, cwd: Path, kernels, tmp_path: Path, raises: tuple[int, ...] = ()
):
    """Run `cells` in a fresh kernel started in `cwd`; the cells in `raises` may end in an error."""
    notebook = nbformat.v4.new_notebook()
    notebook.cells = [
        nbformat.v4.new_code_cell(
            source, metadata={"tags": ["raises-exception"]} if i in raises else {}
        )
        for i, source in enumerate(cells)
    ]
    km = manager.AsyncKernelManager(kernel_name=KERNEL, kernel_spec_manager=kernels)
    km.connection_file = str(tmp_path / f"kernel-{id(notebook)}.json")
    client = nbclient.NotebookClient(
        notebook, km=km, timeout=600, resources={"metadata": {"path": str(cwd)}}
    )
    client.execute(env=student_environment(tmp_path))
    return notebook.cells


def text(cell) -> str:
    """What the cell printed, as read: `!` runs its command on a pty (lines end in \r\n, rich colours them)."""
    printed = "".join(
        output.get("text", "") for output in cell.outputs if output.output_type == "stream"
    )
    return re.sub(r"\x1b\[[0-9;]*m", "", printed.replace("\r\n", "\n"))


def error(cell) -> tuple[str, str]:
    (raised,) = [output for output in cell.outputs if output.output_type == "error"]
    return raised.ename, raised.evalue


@pytest.mark.slow
def test_check_in_a_kernel_where_jax_started_on_one_device(handout, kernels, tmp_path):
    started, grader, checked, recipe = run_notebook(
        [
            STARTED_ON_ONE_DEVICE,
            "import sys\n!{sys.executable} -c 'import grader; print(grader.__file__)'",
            "!{sys.executable} -m grader.cli check ex01\nassert _exit_code == 0, _exit_code",
            RECIPE,
        ],
        cwd=handout,
        kernels=kernels,
        tmp_path=tmp_path,
        raises=(3,),
    )
    assert not [output for output in started.outputs if output.output_type == "error"]
    # The handout's own grader (after the RuntimeWarning jax gives a kernel's first fork: `!` forks a pty).
    assert str(handout / "grader" / "__init__.py") in text(grader).splitlines()
    output = text(checked)
    assert f"✓ {EX01.id}: visible: " in output and "points checked, all pass" in output, output
    assert "Hint:" not in output and "set-up error" not in output
    name, message = error(recipe)  # too late in this kernel: restart it (the README says so)
    assert name == "RuntimeError" and TOO_LATE in message


def test_the_recipe_gives_a_fresh_kernel_the_course_devices(kernels, tmp_path):
    (recipe,) = run_notebook([RECIPE], cwd=tmp_path, kernels=kernels, tmp_path=tmp_path)
    assert text(recipe) == f"{HOST_DEVICES} (2, 4)\n", recipe.outputs


def test_the_readme_gives_these_cells(tmp_path):
    """The cells a student pastes, and the recipe and its restart as the tests above run them."""
    _write_templates(tmp_path, DEFAULT_COURSE_NAME)
    readme = (tmp_path / "README.md").read_text()
    section = readme.split("## In a notebook (Colab, Kaggle, Jupyter)", 1)[1].split("\n## ", 1)[0]
    for cell in ("!pip install -e .", "!shardlab check ex04"):
        assert f"    {cell}\n" in section
    experimenting = readme.split("## Experimenting on 8 devices", 1)[1].split("\n## ", 1)[0]
    assert 'import jax\njax.config.update("jax_num_cpu_devices", 8)\n' in experimenting
    assert "Restart the REPL or the kernel" in experimenting and TOO_LATE in experimenting
