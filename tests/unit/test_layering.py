"""The packages depend on each other one way only, in the order ``MAY_IMPORT`` states: the codec (``wire``)
at the bottom, the cross-process code (``coordination``) on it, the segment store (``server``) and the
clients on both, the controller and ``spark_io`` on the clients, and only the composition root
(``tributary``) sees both the server and the controller."""

from __future__ import annotations

import ast
import pathlib

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]

# Each package -> the packages of this repository it may import (all others are upward or sideways).
# A new package gets a row, and goes into the rows of the packages above it.
MAY_IMPORT: dict[str, set[str]] = {
    "wire": set(),
    "coordination": {"wire"},
    "controller_api": {"wire"},
    "server": {"wire", "coordination"},
    "clients": {"wire", "coordination", "controller_api"},
    "controller": {"wire", "coordination", "controller_api", "clients"},
    "spark_io": {"wire", "coordination", "controller_api", "clients"},
    "tributary": {"wire", "coordination", "controller_api", "server", "clients", "controller", "spark_io"},
}
FORBIDDEN = {package: set(MAY_IMPORT) - allowed - {package} for package, allowed in MAY_IMPORT.items()}


def _top_level_imports(path: pathlib.Path):
    tree = ast.parse(path.read_text(), filename=str(path))
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            yield from (alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            yield node.module.split(".")[0]


def test_every_package_has_a_row():
    """Every top-level package of the repository (tests aside) is in the table, so none escapes the rule."""
    packages = {path.parent.name for path in ROOT.glob("*/__init__.py")} - {"tests"}
    assert packages == set(MAY_IMPORT)


def test_the_table_is_an_order():
    """What a package may import, its importers may import too (layers, not a web), and nothing imports itself
    back: no package may import one that may import it."""
    for package, allowed in MAY_IMPORT.items():
        for below in allowed:
            assert MAY_IMPORT[below] <= allowed, f"{package} may import {below} but not all that {below} may"
            assert package not in MAY_IMPORT[below], f"{package} and {below} may import each other"


MODULES = [(package, path) for package in FORBIDDEN for path in sorted((ROOT / package).rglob("*.py"))]


@pytest.mark.parametrize("package, path", MODULES, ids=[str(path.relative_to(ROOT)) for _, path in MODULES])
def test_no_upward_or_sideways_import(package, path):
    """A module imports no package its own must not depend on."""
    assert not set(_top_level_imports(path)) & FORBIDDEN[package]


def test_the_rule_sees_a_violation(tmp_path):
    """The check above finds an upward import when there is one (so it can fail)."""
    module = tmp_path / "bad.py"
    module.write_text("from controller.app import ControllerApp\nimport server.service\n")
    assert set(_top_level_imports(module)) & FORBIDDEN["clients"] == {"controller", "server"}


def test_tributary_exports_exactly_the_sdk_names():
    """``tributary.__all__`` (kept static so ``import tributary`` stays cheap) lists clients' public names,
    and ``from tributary import *`` brings them in."""
    import clients
    import tributary

    assert sorted(tributary.__all__) == sorted(clients.__all__)
    namespace: dict = {}
    exec("from tributary import *", namespace)
    assert namespace["connect"] is clients.connect and namespace["StreamCut"] is clients.StreamCut


def _server_module_imports(path: pathlib.Path, root: pathlib.Path = ROOT):
    """The absolute names of the server modules ``path`` (a module of server/) imports."""
    package = path.relative_to(root).with_suffix("").parts[:-1]
    tree = ast.parse(path.read_text(), filename=str(path))
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = list(package[:len(package) - node.level + 1])
                module = ".".join(base + ([node.module] if node.module else []))
                yield from ([module] if node.module else [f"{module}.{alias.name}" for alias in node.names])
            elif node.module and node.module.startswith("server"):
                yield node.module
        elif isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names if alias.name.startswith("server"))


SERVER_TOP = sorted((ROOT / "server").glob("*.py"))


@pytest.mark.parametrize("path", SERVER_TOP, ids=[path.name for path in SERVER_TOP])
def test_server_uses_only_the_containers_public_surface(path):
    """server/*.py imports ``server.containers`` itself (its public surface), never a module inside it:
    the pending state, segment metadata, table index and record format stay private to the package."""
    inside = [name for name in _server_module_imports(path) if name.startswith("server.containers.")]
    assert not inside


def test_the_containers_rule_sees_a_violation(tmp_path):
    """The rule above resolves relative imports, so it finds a private module imported from server/."""
    bad = tmp_path / "server" / "bad.py"
    bad.parent.mkdir()
    bad.write_text("from .containers.table import TableIndex\nfrom . import containers\nimport server.containers.state\n")
    assert sorted(_server_module_imports(bad, root=tmp_path)) == [
        "server.containers", "server.containers.state", "server.containers.table"]
