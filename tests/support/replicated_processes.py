"""Real processes for the replicated Tier-1: `tributary logstore` children, and what ZooKeeper says of them.

``LogStores`` starts ``count`` log stores on free loopback ports, each with its own data directory,
registered in the ZooKeeper at ``zk_hosts``; each can be SIGKILLed and restarted (same port, same
data, so the same replica id). ``chains`` reads every container log's ledger chain straight from
ZooKeeper, for tests that check which replicas the ledgers use.
"""

from __future__ import annotations

import contextlib
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

from kazoo.client import KazooClient

from server.tier1.logstore.chain import LogChain
from server.tier1.logstore.registry import Paths

from .processes import ServerProcess


class LogStores:
    def __init__(self, home: Path, zk_hosts: str, count: int = 3, journal_mib: int = 8):
        self.zk_hosts = zk_hosts
        self.processes = [ServerProcess("logstore", home / f"logstore-{index}",
                                        extra_args=["--zk", zk_hosts, "--gc-interval", "2",
                                                    "--journal-file-size", str(journal_mib)],
                                        log_path=home / f"logstore-{index}.log") for index in range(count)]

    def start(self) -> LogStores:
        for process in self.processes:
            process.start()
        self.wait_registered(len(self.processes))
        return self

    def kill(self, index: int) -> None:
        self.processes[index].kill()

    def restart(self, index: int) -> None:
        self.processes[index].start()

    def stop_all(self) -> None:
        for process in self.processes:
            process.kill()

    def segment_store_args(self, session_timeout: float = 1.0) -> list[str]:
        """Options that put a segment store (or standalone) on these log stores."""
        return ["--tier1", "replicated", "--zk", self.zk_hosts, "--zk-session-timeout", str(session_timeout)]

    def replica_id(self, index: int) -> str:
        return uuid.UUID((Path(self.processes[index].data_dir) / "IDENTITY").read_text().strip()).hex

    def wait_registered(self, count: int, timeout: float = 20.0) -> None:
        deadline = time.monotonic() + timeout
        while len(self.registered()) < count:
            if time.monotonic() > deadline:
                raise AssertionError(f"{len(self.registered())} log stores registered, {count} expected")
            time.sleep(0.1)

    def registered(self) -> list[str]:
        with _client(self.zk_hosts) as client:
            return client.get_children(Paths().logstores)

    def chains(self) -> dict[str, LogChain]:
        paths = Paths()
        with _client(self.zk_hosts) as client:
            return {name: LogChain.from_json(client.get(paths.log(name))[0])
                    for name in client.get_children(paths.logs)}


class _client:
    def __init__(self, hosts: str):
        self.client = KazooClient(hosts=hosts)

    def __enter__(self) -> KazooClient:
        self.client.start(timeout=15)
        return self.client

    def __exit__(self, *_) -> None:
        self.client.stop()
        self.client.close()


@contextlib.contextmanager
def tier1_options(kind: str, home: Path, request) -> Iterator[list[str]]:
    """Segment store options for a test parametrised over tier-1 kinds: none for "local"; for "replicated",
    three log stores started here (on the test's ZooKeeper chroot) and the options that use them."""
    if kind == "local":
        yield []
        return
    stores = LogStores(home, request.getfixturevalue("zk_hosts")).start()
    try:
        yield stores.segment_store_args()
    finally:
        stores.stop_all()
