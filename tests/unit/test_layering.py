"""The packages depend on each other one way only: wire <- server, wire <- clients <- controller,
clients <- spark_io, and only the composition root (``tributary``) sees both server and controller."""

from __future__ import annotations

import ast
import pathlib

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
FORBIDDEN = {
    "server": {"controller", "clients", "tributary", "spark_io"},
    "clients": {"server", "controller", "tributary", "spark_io"},
    "controller": {"server", "tributary", "spark_io"},
    "spark_io": {"server", "controller"},
}


def _top_level_imports(path: pathlib.Path):
    tree = ast.parse(path.read_text(), filename=str(path))
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            yield from (alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            yield node.module.split(".")[0]


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
