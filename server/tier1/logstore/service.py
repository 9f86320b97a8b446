"""A log store process: the ``LogStore`` server, its ZooKeeper registration, and ledger garbage collection.

``tributary logstore`` runs one of these. Garbage collection: every ``gc_interval`` seconds the store
reads every log's chain from ZooKeeper and deletes the ledgers it holds that no chain names any more
(truncated away while this store was down, or created by an open or roll that then lost its
conditional write). A ledger that received an ADD within ``gc_grace`` seconds is left alone: a
writer adds to a new ledger only after the chain names it, so a ledger still being written is
never taken for garbage by a pass that read the chains just before the writer's update.
"""

from __future__ import annotations

import asyncio
import logging
import os

from coordination.zookeeper import NoNodeError, ZooKeeper, ZooKeeperUnavailable

from .chain import LogChain
from .journal import StoreJournal
from .registry import DEFAULT_ROOT, Paths, Registration
from .store import LogStore

log = logging.getLogger("tributary.logstore")


class LogStoreService:
    def __init__(self, data_dir: str | os.PathLike, zk_hosts: str, host: str = "127.0.0.1", port: int = 0,
                 advertise_host: str | None = None, root: str = DEFAULT_ROOT, gc_interval: float = 60.0,
                 gc_grace: float = 600.0, session_timeout: float = 10.0, journal_file_size: int | None = None,
                 *, journal: StoreJournal | None = None, replica_id: bytes | None = None):
        """``journal``, ``replica_id``: as ``LogStore`` takes them (instead of the files under ``data_dir``)."""
        self.store = LogStore(data_dir, host, port, journal_file_size=journal_file_size, journal=journal,
                              replica_id=replica_id)
        self.zk = ZooKeeper(zk_hosts, session_timeout=session_timeout)
        self.paths = Paths(root)
        self.advertise_host = advertise_host or host
        self.gc_interval = gc_interval
        self.gc_grace = gc_grace
        self._registration: Registration | None = None
        self._gc: asyncio.Task | None = None
        self._started = 0.0

    @property
    def replica_id(self) -> str:
        return self.store.replica_id.hex()

    @property
    def port(self) -> int:
        return self.store.port

    async def start(self) -> None:
        await self.zk.start()
        try:
            await self.paths.ensure(self.zk)
            await self.store.start()
            self._registration = Registration(self.zk, self.paths, self.replica_id, self.advertise_host,
                                              self.store.port)
            await self._registration.start()
        except BaseException:
            await self.store.stop()
            await self.zk.stop()
            raise
        self._started = asyncio.get_running_loop().time()  # ledgers seen before any ADD count as active from here
        self._gc = asyncio.get_running_loop().create_task(self._collect_forever(), name="logstore gc")
        log.info("log store serving", extra={"replica": self.replica_id, "port": self.store.port})

    async def stop(self) -> None:
        self.zk.begin_shutdown()  # the registration's delete gets a short grace, none while ZooKeeper is unreachable
        if self._gc is not None:
            self._gc.cancel()
            await asyncio.gather(self._gc, return_exceptions=True)
        if self._registration is not None:
            await self._registration.stop()
        await self.store.stop()
        await self.zk.stop()

    async def collect_garbage(self) -> list[int]:
        """One pass; returns the ledgers deleted."""
        referenced: set[int] = set()
        for name in await self.zk.get_children(self.paths.logs):
            try:
                data, _ = await self.zk.get(self.paths.log(name))
            except NoNodeError:
                continue
            referenced |= {ledger.id for ledger in LogChain.from_json(data).ledgers}
        now = asyncio.get_running_loop().time()
        deleted = []
        for ledger in self.store.ledger_ids():
            if ledger in referenced or now - self.store.last_add.get(ledger, self._started) < self.gc_grace:
                continue
            await self.store.delete_ledger(ledger)
            deleted.append(ledger)
        if deleted:
            log.info("collected ledgers no log names", extra={"ledgers": deleted})
        return deleted

    async def _collect_forever(self) -> None:
        while True:
            await asyncio.sleep(self.gc_interval)
            try:
                await self.collect_garbage()
            except (ZooKeeperUnavailable, ValueError) as error:
                log.warning("ledger garbage collection failed", extra={"error": repr(error)})
