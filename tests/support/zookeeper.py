"""A real ZooKeeper for tests: Debian's ``zookeeper`` package run as a standalone server on loopback.

``./dev.sh test`` installs the package (``/usr/share/java/zookeeper.jar``). The server runs in the
foreground as a child process (``QuorumPeerMain`` with a generated ``zoo.cfg``) on a free loopback
port, with its own data directory, and is stopped by its PID. ``restart()`` keeps the port and the
data directory, so sessions and znodes survive it as they would a real ZooKeeper restart.

Tests share one server per session and each gets its own chroot (``zk_connect``), so they never see
each other's znodes. ``tickTime`` is 200 ms: sessions may time out after as little as 0.4 s, which
lets fencing tests expire a paused owner's session quickly.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import subprocess
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

from .processes import free_port, kill_process, wait_until_ready

ZOOKEEPER_JAR = Path(os.environ.get("ZOOKEEPER_JAR", "/usr/share/java/zookeeper.jar"))
TICK_MS = 200


def available() -> bool:
    return ZOOKEEPER_JAR.is_file() and shutil.which("java") is not None


class ZooKeeperServer:
    """``host``: the address it listens on; ``popen``: how its process is started (a network namespace's
    ``Node.popen`` in partition tests, tests/support/netns.py)."""

    def __init__(self, data_dir: Path, port: int | None = None, host: str = "127.0.0.1",
                 popen: Callable[..., subprocess.Popen] = subprocess.Popen):
        self.data_dir = Path(data_dir)
        self.port = port or free_port()
        self.host = host
        self._popen = popen
        self.process: subprocess.Popen | None = None

    @property
    def connect_string(self) -> str:
        return f"{self.host}:{self.port}"

    def start(self, timeout: float = 60.0) -> ZooKeeperServer:
        if not available():
            raise RuntimeError(f"ZooKeeper is not installed ({ZOOKEEPER_JAR}); ./dev.sh test installs it")
        (self.data_dir / "data").mkdir(parents=True, exist_ok=True)
        config = self.data_dir / "zoo.cfg"
        config.write_text("\n".join([
            f"tickTime={TICK_MS}", f"dataDir={self.data_dir / 'data'}", f"clientPort={self.port}",
            f"clientPortAddress={self.host}", "admin.enableServer=false", "maxClientCnxns=0",
            "minSessionTimeout=400", "4lw.commands.whitelist=srvr", "forceSync=no", ""]))
        with open(self.data_dir / "zookeeper.log", "ab") as log:
            self.process = self._popen(
                ["java", "-Xmx256m", "-XX:+UseSerialGC", "-Dzookeeper.jmx.log4j.disable=true",
                 "-cp", str(ZOOKEEPER_JAR), "org.apache.zookeeper.server.quorum.QuorumPeerMain", str(config)],
                stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        wait_until_ready(self.process, self._serving, f"ZooKeeper on port {self.port}", timeout)
        return self

    def stop(self) -> None:
        """SIGKILL by PID. ZooKeeper writes its transaction log before it answers (``forceSync=no`` only
        skips the fsync, which a process kill does not need), so nothing it acknowledged is lost."""
        kill_process(self.process)
        self.process = None

    def restart(self, down_seconds: float = 0.0) -> None:
        self.stop()
        time.sleep(down_seconds)
        self.start()

    def _serving(self) -> None:
        """Raises OSError until the server answers ``srvr`` as a serving standalone server."""
        with socket.create_connection((self.host, self.port), timeout=1) as connection:
            connection.sendall(b"srvr")
            answer = b""
            while chunk := connection.recv(4096):
                answer += chunk
        if b"Mode:" not in answer:
            raise ConnectionRefusedError("ZooKeeper is not serving yet")


@contextlib.contextmanager
def zookeeper_server(data_dir: Path) -> Iterator[ZooKeeperServer]:
    server = ZooKeeperServer(data_dir)
    try:
        yield server.start()
    finally:
        server.stop()


def fresh_chroot(server: ZooKeeperServer) -> str:
    """A connect string rooted at a new, empty path (created here): a test's private corner of the shared server."""
    from kazoo.client import KazooClient

    chroot = f"/test-{uuid.uuid4().hex[:12]}"
    client = KazooClient(hosts=server.connect_string)
    client.start(timeout=15)
    try:
        client.ensure_path(chroot)
    finally:
        client.stop()
        client.close()
    return server.connect_string + chroot
