"""`tributary standalone` as a child process for tests: free loopback ports, waits for both
listeners, killed by PID (SIGKILL) or stopped with SIGTERM. Tier-1 log files are the smallest
allowed (16 MiB, preallocated), and ``remove_data`` frees the disk once a test is done.
``TRIBUTARY_TEST_STANDALONE_ARGS`` adds options to every standalone a test starts (e.g.
``--cache-size 16`` to run the interop suite with constant eviction)."""

from __future__ import annotations

import os
import shlex
import shutil

from tests.support.processes import ServerProcess, free_port, listening, wait_until_ready


class StandaloneProcess(ServerProcess):
    """One standalone (segment store on ``store_port`` + controller). Ports are kept across restarts."""

    def __init__(self, data_dir, log_path=None, container_count: int = 4, log_file_mib: int = 16, extra_args=()):
        self.controller_port = free_port()
        super().__init__("standalone", data_dir, log_path=log_path, extra_args=[
            "--controller-port", str(self.controller_port), "--containers", str(container_count),
            "--log-file-size", str(log_file_mib), *extra_args,
            *shlex.split(os.environ.get("TRIBUTARY_TEST_STANDALONE_ARGS", ""))])

    @property
    def store_port(self) -> int:
        return self.port

    @property
    def controller_uri(self) -> str:
        return f"tcp://127.0.0.1:{self.controller_port}"

    def start(self, timeout: float = 30.0) -> "StandaloneProcess":
        """Starts the process and waits until the segment store and then the controller listen."""
        super().start(timeout)
        wait_until_ready(self.process, listening(self.controller_port),
                         f"standalone's controller on port {self.controller_port}", timeout)
        return self

    def remove_data(self) -> None:
        """Kills the process and deletes its data dir (preallocated logs take disk space)."""
        self.kill()
        shutil.rmtree(self.data_dir, ignore_errors=True)


def serve(tmp_path_factory, name: str, **options):
    """A started standalone for a fixture (``yield from serve(...)``), its data removed afterwards."""
    process = StandaloneProcess(tmp_path_factory.mktemp(name) / "data", **options).start()
    try:
        yield process
    finally:
        process.remove_data()


INTEROP_TARGETS = ("standalone", "cluster")  # what the interop tests run against (``interop_server``)
# The tests of the real pravega client also run their scenarios through Tributary's drop-in for it
# (tributary.compat.pravega_client), against a standalone: the same checks must hold.
BINDING_TARGETS = (*INTEROP_TARGETS, "compat")
COMPAT_CLIENT = "TRIBUTARY_INTEROP_CLIENT"  # the scenarios' environment variable that picks the drop-in


def interop_server(request, home, name: str = "server"):
    """A started server for an interop fixture parametrised over ``INTEROP_TARGETS`` (``yield from
    interop_server(request, ...)``): a standalone, or a cluster (3 log stores, 2 segment stores, 2 controllers
    on the session's ZooKeeper: tests/support/cluster.py) that must behave the same to the real client;
    removed afterwards. Target ``compat`` (``BINDING_TARGETS``) is a standalone whose test's scenarios run
    through tributary.compat.pravega_client instead of the binding."""
    from tests.support.cluster import ClusterTarget

    home.mkdir(parents=True, exist_ok=True)
    if request.param == "compat":
        request.getfixturevalue("monkeypatch").setenv(COMPAT_CLIENT, "compat")
    server = (ClusterTarget(home / "cluster", request.getfixturevalue("zookeeper")) if request.param == "cluster"
              else StandaloneProcess(home / "data", log_path=home / f"{name}.log"))
    server.start()
    try:
        yield server
    finally:
        server.remove_data()
