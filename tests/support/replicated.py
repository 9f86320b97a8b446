"""In-process replicated Tier-1 for tests: log stores registered in a real ZooKeeper, and a ``ReplicatedTier1``.

``replicated_tier1(home, zk_hosts, stores=3)`` starts the log stores (each a ``LogStoreService`` on a
free loopback port with its own data directory) and a ``ReplicatedTier1`` on them, and stops all of
them on exit. Tests that kill processes use ``tributary logstore`` children instead.
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from server.tier1.logstore.service import LogStoreService
from server.tier1.replicated import ReplicatedTier1, ReplicationSettings

from .zookeeper import ZooKeeperServer, fresh_chroot

JOURNAL_FILE_SIZE = 4 * 1024 * 1024  # preallocated per store: small, so that tests write little
# Small ledgers, so that the conformance suite's volumes make the log roll many times.
TEST_SETTINGS = ReplicationSettings(ledger_size_max=64 * 1024, add_timeout=2.0, stall_timeout=10.0)


class ReplicatedCluster:
    def __init__(self, home: Path, zk_hosts: str, settings: ReplicationSettings):
        self.home = home
        self.zk_hosts = zk_hosts
        self.settings = settings
        self.stores: list[LogStoreService] = []
        self.tier1: ReplicatedTier1 | None = None

    async def start_store(self, index: int) -> LogStoreService:
        store = LogStoreService(self.home / f"logstore-{index}", self.zk_hosts, gc_interval=3600,
                                journal_file_size=JOURNAL_FILE_SIZE)
        await store.start()
        self.stores.append(store)
        return store

    async def stop_store(self, store: LogStoreService) -> None:
        self.stores.remove(store)
        await store.stop()


@contextlib.asynccontextmanager
async def replicated_tier1(home: Path, zk_hosts: str, stores: int = 3,
                           settings: ReplicationSettings = TEST_SETTINGS) -> AsyncIterator[ReplicatedCluster]:
    cluster = ReplicatedCluster(home, zk_hosts, settings)
    try:
        for index in range(stores):
            await cluster.start_store(index)
        cluster.tier1 = ReplicatedTier1(zk_hosts, settings)
        await cluster.tier1.start()
        yield cluster
    finally:
        if cluster.tier1 is not None:
            await cluster.tier1.stop()
        for store in list(cluster.stores):
            await store.stop()


class ReplicatedTier1Machine:
    """Mix into a hypothesis state machine that has ``self.loop``, ``self.directory``, ``self.run`` and the
    ``start_tier1``/``stop_tier1`` hooks: its container logs become replicated logs on three in-process
    log stores. The ZooKeeper comes from ``zookeeper_for_machines`` (import it into the test module)."""

    zookeeper: ZooKeeperServer | None = None
    tier1_settings = dataclasses.replace(TEST_SETTINGS, ledger_size_max=4096)  # the machines' logs roll often

    def start_tier1(self):
        assert self.zookeeper is not None, "import the zookeeper_for_machines fixture into the test module"
        self._tier1_stack = contextlib.AsyncExitStack()
        cluster = self.run(self._tier1_stack.enter_async_context(
            replicated_tier1(Path(self.directory) / "replicated", fresh_chroot(self.zookeeper),
                             settings=self.tier1_settings)))
        return lambda: cluster.tier1.log("container-0")

    def stop_tier1(self):
        self.run(self._tier1_stack.aclose())


@pytest.fixture(autouse=True)
def zookeeper_for_machines(request):
    """Hands the session's ZooKeeper to replicated state machines (unittest-style classes take no fixtures)."""
    machine = getattr(getattr(request.cls, "runTest", None), "_hypothesis_state_machine_class", None)
    if isinstance(machine, type) and issubclass(machine, ReplicatedTier1Machine):
        ReplicatedTier1Machine.zookeeper = request.getfixturevalue("zookeeper")
