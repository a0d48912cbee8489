"""The layout docs/architecture.md draws is the layering the code keeps: its grader/ entries in the order of
pyproject.toml's import-linter contract, every package of the grader named once; no import circle and no
private name imported across modules; and the README stays short and sets up as CI does."""

import re
import tomllib

from grader.course import paths


def contract_layers() -> list[list[str]]:
    config = tomllib.loads((paths.REPO_ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]
    (layers,) = [c["layers"] for c in config["contracts"] if c["type"] == "layers"]
    return [[name.strip().removeprefix("grader.") for name in layer.split("|")] for layer in layers]


def readme_grader_entries() -> list[str]:
    """The grader/ entries of the Layout section, which the README links to in docs/architecture.md."""
    text = (paths.REPO_ROOT / "docs" / "architecture.md").read_text()
    section = text[text.index("## Layout") : text.index("\n## ", text.index("## Layout") + 1)]
    block = section[section.index("    grader/") : section.index("\n    docs/")]
    return [
        m[1].removesuffix("/").removesuffix(".py")
        for m in re.finditer(r"^      (\S+)", block, re.M)
    ]


def test_the_readme_draws_the_layers_in_the_contracts_order():
    expected = [name for layer in contract_layers() for name in layer]
    assert readme_grader_entries() == expected


def test_the_readme_is_read_in_five_minutes():
    assert len((paths.REPO_ROOT / "README.md").read_text().splitlines()) <= 150


def test_the_readmes_set_up_is_what_ci_runs():
    """The README's install and test commands are .ci/run's, run with the venv's own executables."""
    readme = (paths.REPO_ROOT / "README.md").read_text()
    ci = (paths.REPO_ROOT / ".ci" / "run").read_text()
    assert (
        '    python3.11 -m venv .venv && . .venv/bin/activate && pip install -e ".[dev]"\n'
        in readme
    )
    assert (
        "\npython3.11 -m venv .venv\n" in ci
        and '\n.venv/bin/python -m pip install --quiet -e ".[dev]"\n' in ci
    )
    (test_command,) = re.findall(r"^    (python -m pytest [^#]*?)\s+#", readme, re.M)
    assert f"\n.venv/bin/{test_command}\n" in ci


def test_every_grader_package_is_a_layer():
    packages = {
        p.name for p in (paths.REPO_ROOT / "grader").iterdir() if (p / "__init__.py").is_file()
    }
    assert packages | {"cli"} == {name for layer in contract_layers() for name in layer}


def module_imports() -> dict[str, set[str]]:
    """Each grader module -> the grader modules it imports, lazily or not (grimp, import-linter's own graph)."""
    import grimp

    graph = grimp.build_graph("grader")
    return {
        m: {i for i in graph.find_modules_directly_imported_by(m) if i != m} for m in graph.modules
    }


def test_no_module_imports_itself_back():
    """No circle of imports, through lazy imports too: each module sits above all it imports."""
    imports = module_imports()
    state: dict[str, str] = {}
    circles = []

    def visit(module: str, path: list[str]) -> None:
        state[module] = "open"
        for name in sorted(imports.get(module, ())):
            if state.get(name) == "open":
                circles.append(" -> ".join([*path[path.index(name) :], name]))
            elif name not in state:
                visit(name, [*path, name])
        state[module] = "done"

    for module in sorted(imports):
        if module not in state:
            visit(module, [module])
    assert circles == []


def test_no_private_name_is_imported_across_modules():
    """A name with a leading underscore is its module's own: no other grader module imports it or reaches it
    through the module (`module._name`)."""
    import ast

    found = []
    for path in sorted((paths.REPO_ROOT / "grader").rglob("*.py")):
        tree = ast.parse(path.read_text())
        modules = set()  # local names bound to grader modules
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("grader"):
                for alias in node.names:
                    if alias.name.startswith("_"):
                        found.append(f"{path.name}: from {node.module} import {alias.name}")
                    modules.add(alias.asname or alias.name)
            elif isinstance(node, ast.Import):
                modules |= {a.asname or a.name for a in node.names if a.name.startswith("grader")}
        for node in ast.walk(tree):
            if (
                isinstance(node, ast.Attribute)
                and isinstance(node.value, ast.Name)
                and node.value.id in modules
                and node.attr.startswith("_")
                and not node.attr.startswith("__")
            ):
                found.append(f"{path.name}: {node.value.id}.{node.attr}")
    assert found == []
