"""Static checks of the codec package: it stays sans-IO and its registry stays sound."""

from __future__ import annotations

import ast
import pathlib

import pytest

import wire
from wire import base
from wire.fields import I64

WIRE_DIR = pathlib.Path(wire.__file__).parent
# Event loops, sockets and TLS, clocks, threads and processes, files, and the clients of other services
# (ZooKeeper, gRPC, HTTP, S3): none of them; nor any package above the codec (the order: test_layering.py).
FORBIDDEN_MODULES = {
    "asyncio", "uvloop", "trio", "selectors", "socket", "ssl", "time", "threading", "concurrent", "subprocess",
    "multiprocessing", "os", "aiofiles", "kazoo", "grpc", "aiohttp", "aiobotocore", "botocore",
    "coordination", "controller_api", "server", "controller", "clients", "spark_io", "tributary",
}


def _imported_modules(path: pathlib.Path):
    tree = ast.parse(path.read_text(), filename=str(path))
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            yield from (alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            yield node.module.split(".")[0]


@pytest.mark.parametrize("path", sorted(WIRE_DIR.rglob("*.py")), ids=lambda p: str(p.relative_to(WIRE_DIR)))
def test_wire_imports_no_io_clock_or_upper_layer(path):
    """wire/ never imports an event loop, sockets, clocks, threads, files, service clients, or the packages above it."""
    assert not set(_imported_modules(path)) & FORBIDDEN_MODULES


def test_registry_refuses_a_duplicate_type_code():
    """Declaring a second command with a taken type code fails at declaration time."""
    with pytest.raises(ValueError, match="already used by Hello"):
        @base.command(-127, "request_id" / I64)
        class Impostor(base.Request):
            pass
    assert wire.REGISTRY[-127] is wire.Hello
