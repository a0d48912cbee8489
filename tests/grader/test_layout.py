"""The README's layout is the layering the code keeps: its grader/ entries in the order of pyproject.toml's
import-linter contract, every package of the grader named once."""

import re
import tomllib

from grader.course import paths


def contract_layers() -> list[list[str]]:
    config = tomllib.loads((paths.REPO_ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]
    (layers,) = [c["layers"] for c in config["contracts"] if c["type"] == "layers"]
    return [[name.strip().removeprefix("grader.") for name in layer.split("|")] for layer in layers]


def readme_grader_entries() -> list[str]:
    text = (paths.REPO_ROOT / "README.md").read_text()
    section = text[text.index("## Layout"):text.index("\n## ", text.index("## Layout") + 1)]
    block = section[section.index("    grader/"):section.index("\n    docs/")]
    return [m[1].removesuffix("/").removesuffix(".py") for m in re.finditer(r"^      (\S+)", block, re.M)]


def test_the_readme_draws_the_layers_in_the_contracts_order():
    expected = [name for layer in contract_layers() for name in layer]
    assert readme_grader_entries() == expected


def test_every_grader_package_is_a_layer():
    packages = {p.name for p in (paths.REPO_ROOT / "grader").iterdir() if (p / "__init__.py").is_file()}
    assert packages | {"cli"} == {name for layer in contract_layers() for name in layer}
