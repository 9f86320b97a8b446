"""No import circles between the project's modules: not at run time, not under TYPE_CHECKING, not in a function.

Read from the source (AST) without importing it. Every package with an ``__init__.py`` at the repository root
(but ``tests``) is covered, so a package added later is checked too. An edge goes from a module to each project
module it imports (``from package import submodule`` to the submodule, ``from package import name`` to the
package's ``__init__``); a cycle is a strongly connected component of more than one module.
"""

from __future__ import annotations

import ast
import pathlib
import tomllib

ROOT = pathlib.Path(__file__).resolve().parents[2]


def project_packages(root: pathlib.Path) -> list[str]:
    """The top-level packages: directories at ``root`` holding an ``__init__.py`` (tests aside)."""
    return sorted(path.parent.name for path in root.glob("*/__init__.py") if path.parent.name != "tests")


def project_modules(root: pathlib.Path, packages: list[str]) -> dict[str, pathlib.Path]:
    """Module name -> file, for every module of ``packages`` (a package by its ``__init__.py``)."""
    modules = {}
    for package in packages:
        for path in (root / package).rglob("*.py"):
            parts = list(path.relative_to(root).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            modules[".".join(parts)] = path
    return modules


def import_edges(modules: dict[str, pathlib.Path]) -> dict[str, set[str]]:
    """Module -> the project modules it imports, anywhere in its source."""

    def known(name: str) -> str | None:  # the module itself, or the nearest package above it that exists
        while name and name not in modules:
            name = name.rpartition(".")[0]
        return name or None

    edges: dict[str, set[str]] = {}
    for module, path in modules.items():
        package = module.split(".") if path.name == "__init__.py" else module.split(".")[:-1]
        targets: set[str | None] = set()
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            if isinstance(node, ast.Import):
                targets.update(known(alias.name) for alias in node.names)
            elif isinstance(node, ast.ImportFrom):
                base = (".".join(package[:len(package) - node.level + 1] + ([node.module] if node.module else []))
                        if node.level else node.module or "")
                targets.update(f"{base}.{alias.name}" if f"{base}.{alias.name}" in modules else known(base)
                               for alias in node.names)
        edges[module] = {target for target in targets if target is not None and target != module}
    return edges


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for start in sorted(edges):
        if start in index:
            continue
        work = [(start, iter(sorted(edges[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            module, successors = work[-1]
            for successor in successors:
                if successor not in index:
                    index[successor] = low[successor] = len(index)
                    stack.append(successor)
                    on_stack.add(successor)
                    work.append((successor, iter(sorted(edges[successor]))))
                    break
                if successor in on_stack:
                    low[module] = min(low[module], index[successor])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[module])
                if low[module] == index[module]:
                    component = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.append(member)
                        if member == module:
                            break
                    if len(component) > 1:
                        found.append(sorted(component))
    return found


def _describe(component: list[str], edges: dict[str, set[str]]) -> str:
    members = set(component)
    return "\n".join(f"  {module} -> {sorted(edges[module] & members)}" for module in component)


def test_the_project_packages_are_found():
    """Every package pyproject installs is covered (a new one is found by its ``__init__.py``)."""
    includes = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"]["find"]
    installed = {pattern.rstrip("*") for pattern in includes["include"]}
    assert installed and installed <= set(project_packages(ROOT))


def test_no_import_cycles():
    """No module imports, directly or through others, a module that imports it back."""
    edges = import_edges(project_modules(ROOT, project_packages(ROOT)))
    found = cycles(edges)
    assert not found, "import cycles:\n" + "\n\n".join(_describe(component, edges) for component in found)


def test_the_check_finds_a_cycle(tmp_path):
    """A cycle through a TYPE_CHECKING import and a package ``__init__`` is found (so the check can fail)."""
    package = tmp_path / "pkg"
    (package / "sub").mkdir(parents=True)
    (package / "__init__.py").write_text("from .a import A\n")
    (package / "a.py").write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from .b import B\nA = 1\n")
    (package / "b.py").write_text("def late():\n    from . import sub\nB = 2\n")
    (package / "sub" / "c.py").write_text("from .. import A\n")
    (package / "sub" / "__init__.py").write_text("from .c import *\n")
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "__init__.py").write_text("import pkg\n")
    assert project_packages(tmp_path) == ["pkg"]
    edges = import_edges(project_modules(tmp_path, project_packages(tmp_path)))
    assert edges["pkg.b"] == {"pkg.sub"} and edges["pkg.sub.c"] == {"pkg"}
    assert cycles(edges) == [["pkg", "pkg.a", "pkg.b", "pkg.sub", "pkg.sub.c"]]
    (package / "a.py").write_text("A = 1\n")
    assert cycles(import_edges(project_modules(tmp_path, project_packages(tmp_path)))) == []
