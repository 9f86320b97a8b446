"""Where the replicated log keeps its state in ZooKeeper, and the calls on it both sides share.

Layout under a root (default ``/tributary``), as docs/replicated-log.md describes:

    logstores/<replica id hex>   ephemeral   {"host", "port", "started"}: a live log store
    ledger-ids/id-<n>            sequential  created and deleted at once: n is a new ledger id
    logs/<log name>              persistent  the log's ``LogChain`` (JSON), changed only by CAS
    owners/<log name>            ephemeral   the current owner's token: a second ``open()`` is LogBusy

A log store keeps its registration while it runs: if its session expires (ZooKeeper lost it), the
node is created again as soon as the new session is up.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time

from coordination.zookeeper import NodeExistsError, NoNodeError, ZooKeeper, ZooKeeperUnavailable

log = logging.getLogger("tributary.logstore.registry")

DEFAULT_ROOT = "/tributary"


class Paths:
    def __init__(self, root: str = DEFAULT_ROOT):
        self.root = root.rstrip("/") or ""
        self.logstores = f"{self.root}/logstores"
        self.ledger_ids = f"{self.root}/ledger-ids"
        self.logs = f"{self.root}/logs"
        self.owners = f"{self.root}/owners"

    def log(self, name: str) -> str:
        return f"{self.logs}/{name}"

    def owner(self, name: str) -> str:
        return f"{self.owners}/{name}"

    def logstore(self, replica_id: str) -> str:
        return f"{self.logstores}/{replica_id}"

    async def ensure(self, zk: ZooKeeper) -> None:
        for path in (self.logstores, self.ledger_ids, self.logs, self.owners):
            await zk.ensure_path(path)


async def live_logstores(zk: ZooKeeper, paths: Paths) -> dict[str, tuple[str, int]]:
    """Replica id -> (host, port) of every registered log store."""
    stores: dict[str, tuple[str, int]] = {}
    for replica_id in await zk.get_children(paths.logstores):
        try:
            data, _ = await zk.get(paths.logstore(replica_id))
        except NoNodeError:  # it went away between the two calls
            continue
        document = json.loads(data)
        stores[replica_id] = (document["host"], int(document["port"]))
    return stores


async def new_ledger_id(zk: ZooKeeper, paths: Paths) -> int:
    """A ledger id no one else ever gets (ZooKeeper's sequence counter of ``ledger-ids``)."""
    created = await zk.create(f"{paths.ledger_ids}/id-", sequence=True)
    await zk.delete(created)
    return int(created.rsplit("-", 1)[1])


class Registration:
    """Keeps ``logstores/<replica id>`` alive for a running log store (recreated after a session loss)."""

    def __init__(self, zk: ZooKeeper, paths: Paths, replica_id: str, host: str, port: int,
                 check_interval: float = 1.0):
        self._zk = zk
        self._path = paths.logstore(replica_id)
        self._data = json.dumps({"host": host, "port": port, "started": time.time()}).encode()
        self._interval = check_interval
        self._task: asyncio.Task | None = None

    async def start(self) -> None:
        await self._register()
        self._task = asyncio.get_running_loop().create_task(self._keep(), name="logstore registration")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
        try:
            await self._zk.delete(self._path)
        except ZooKeeperUnavailable:
            pass  # the session's end removes it anyway

    async def _register(self) -> None:
        """(A previous process's node, its session not expired yet, is replaced: it carries this process's address
        and goes with this session. ``_data`` holds this process's start time, so ``register`` knows its own.)"""
        await self._zk.register(self._path, self._data)

    async def _keep(self) -> None:
        while True:
            await asyncio.sleep(self._interval)
            try:
                if not await self._zk.exists(self._path):
                    log.warning("log store registration was lost; registering again", extra={"path": self._path})
                    await self._register()
            except (ZooKeeperUnavailable, NodeExistsError):
                continue
