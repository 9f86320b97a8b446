#!/usr/bin/env python3
"""Regenerate the Python gRPC stubs for the Controller API.

Compiles ``controller_api/controller.proto`` with ``grpc_tools.protoc`` into
``controller_pb2.py``, ``controller_pb2.pyi`` and ``controller_pb2_grpc.py`` next to it,
then rewrites the absolute ``import controller_pb2`` that protoc emits in the _grpc
module into a package import (``from controller_api import controller_pb2``).

Usage (from anywhere)::

    .venv/bin/python scripts/generate_grpc_stubs.py
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
API_DIR = REPO_ROOT / "controller_api"
PROTO_NAME = "controller.proto"
PACKAGE = "controller_api"
MODULE = "controller_pb2"


def _protoc_include_dir() -> str:
    """Directory holding the well-known .proto files shipped with grpc_tools."""
    import grpc_tools

    return str(Path(grpc_tools.__file__).resolve().parent / "_proto")


def run_protoc() -> None:
    from grpc_tools import protoc

    args = [
        "grpc_tools.protoc",
        f"--proto_path={API_DIR}",
        f"--proto_path={_protoc_include_dir()}",
        f"--python_out={API_DIR}",
        f"--pyi_out={API_DIR}",
        f"--grpc_python_out={API_DIR}",
        str(API_DIR / PROTO_NAME),
    ]
    rc = protoc.main(args)
    if rc != 0:
        raise SystemExit(f"protoc failed with exit code {rc}")


def fix_grpc_import() -> None:
    """Make the generated _grpc module import its messages through the package."""
    grpc_file = API_DIR / f"{MODULE}_grpc.py"
    text = grpc_file.read_text(encoding="utf-8")
    pattern = re.compile(rf"^import {MODULE} as (\w+)$", re.MULTILINE)
    fixed, count = pattern.subn(rf"from {PACKAGE} import {MODULE} as \1", text)
    if count != 1 and f"from {PACKAGE} import {MODULE}" not in text:
        raise SystemExit(f"could not find the '{MODULE}' import in {grpc_file}")
    grpc_file.write_text(fixed, encoding="utf-8")


def main() -> int:
    run_protoc()
    fix_grpc_import()
    for suffix in ("_pb2.py", "_pb2.pyi", "_pb2_grpc.py"):
        print(f"generated {API_DIR / ('controller' + suffix)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
