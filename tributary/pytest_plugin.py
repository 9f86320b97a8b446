"""pytest fixtures for testing applications against Tributary (registered as the ``tributary`` plugin).

* ``tributary_server``: a started server on a fresh temporary directory, one per test;
* ``tributary_session_server``: one server shared by every test of the session.

Both are plain (synchronous) fixtures, so they work in sync tests and in async ones, with
pytest-asyncio in any mode or without it. The object has ``controller_uri``
("tcp://127.0.0.1:PORT"), ``controller_endpoint`` and ``segment_store_endpoint`` ((host, port)).

By default the server runs in a child process (``tributary.testing.ProcessServer``): the
``pravega`` client package holds the GIL while it blocks, so it can only talk to a server outside
its own process. The ini option ``tributary_server_mode = thread`` runs it in this process instead,
on its own event loop in a background thread (``tributary.testing.ThreadedServer``: faster to
start, but only for clients that do not hold the GIL while they wait, such as grpc or asyncio
clients). The data directory is deleted once the server has stopped.

This module is imported by every pytest run of an environment where Tributary is installed, so
it imports only pytest; the server is imported inside the fixtures.
"""

from __future__ import annotations

import shutil

import pytest

_MODE_OPTION = "tributary_server_mode"
_MODES = ("process", "thread")


def pytest_addoption(parser) -> None:
    parser.addini(_MODE_OPTION, "how the tributary_server fixtures run the server: 'process' (a child process, "
                                "the default; works with every client) or 'thread' (in this process)",
                  default="process")


def _start_server(config, data_dir):
    from tributary import testing

    mode = (config.getini(_MODE_OPTION) or "process").strip().lower()
    if mode not in _MODES:
        raise pytest.UsageError(f"{_MODE_OPTION} must be one of {', '.join(_MODES)}, not {mode!r}")
    server_class = testing.ProcessServer if mode == "process" else testing.ThreadedServer
    return server_class(data_dir).start()


def _serve(config, data_dir):
    server = _start_server(config, data_dir)
    try:
        yield server
    finally:
        try:
            server.stop()
        finally:
            shutil.rmtree(data_dir, ignore_errors=True)  # Tier-1 log files are preallocated: free the disk


@pytest.fixture
def tributary_server(request, tmp_path_factory):
    """A started Tributary standalone (segment store + controller on 127.0.0.1) for this test."""
    yield from _serve(request.config, tmp_path_factory.mktemp("tributary"))


@pytest.fixture(scope="session")
def tributary_session_server(request, tmp_path_factory):
    """A started Tributary standalone shared by every test of the session."""
    yield from _serve(request.config, tmp_path_factory.mktemp("tributary-session"))
