"""The replicated DurableDataLog: a chain of ledgers on log-store replicas, its metadata in ZooKeeper.

Theory of operation (docs/replicated-log.md has the full protocol):

* ``open()`` takes the owner lock (an ephemeral znode: LogBusy while a live owner holds it), bumps
  the epoch with a conditional write, recovers the last ledger if its writer died (fence it on
  enough replicas, re-replicate its tail: ``ledgers.recover``), then closes it and adds a new ledger
  on ``ensemble_size`` healthy replicas, in one more conditional write.
* ``append()`` hands the record to the current ledger's ``LedgerWriter``; it is acknowledged when
  ``ack_quorum`` replicas have it durable, in order. Sequence numbers run on across ledgers.
* When a replica fails (error, lost connection, no answer within ``add_timeout``) or the ledger
  reaches ``ledger_size_max``, the log *rolls*: it picks a new ensemble of healthy replicas, freezes
  the old ledger at its last acknowledged entry, records that and the new ledger in ZooKeeper, and
  sends every unacknowledged record again, in order, to the new ledger. While no healthy ensemble
  can be formed, a degraded ledger that still reaches its ack quorum keeps taking appends and the
  roll is retried; a broken one holds them until ``stall_timeout`` passes, then the log fails (at
  once in a stopping process: ``ReplicatedTier1.begin_shutdown``).
* ``truncate()`` records the new truncation point and drops whole ledgers from the chain (a
  conditional write), then deletes them on their replicas.
* Every metadata write is conditional on the version this owner last wrote: a newer owner's write
  in between makes it fail, and this log reports ``LogFenced``. A newer owner also fences the
  ledger on the replicas, so a paused old owner's appends are refused there first.
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import logging
import random
import time
import uuid
from collections import deque
from collections.abc import AsyncIterator, Callable, Iterable

from coordination.retry import Backoff
from coordination.zookeeper import BadVersionError, NodeExistsError, NoNodeError, ZooKeeper, ZooKeeperUnavailable

from .api import AppendData, DurableDataLog, LogAddress
from .errors import LogBusy, LogClosed, LogCorrupted, LogError, LogFenced, LogWriteFailed, RecordTooLarge
from .logstore import protocol as p
from .logstore.chain import CLOSED, LedgerRecord, LogChain
from .logstore.ledgers import LedgerBroken, LedgerError, LedgerFenced, LedgerWriter, StoreClient, recover
from .logstore.registry import Paths, live_logstores, new_ledger_id

log = logging.getLogger("tributary.tier1.replicated")
_RELEASING = b" released"  # appended to an owner's token in its lock's znode just before the znode is deleted


@dataclasses.dataclass(frozen=True)
class ReplicationSettings:
    ensemble_size: int = 3
    write_quorum: int = 3
    ack_quorum: int = 2
    ledger_size_max: int = 256 * 1024 * 1024  # bytes appended to one ledger before the log rolls to a new one
    add_timeout: float = 2.0  # a replica that has not answered an add for this long is dropped
    connect_timeout: float = 2.0
    stall_timeout: float = 30.0  # appends wait this long for a healthy ensemble before the log fails
    quarantine_seconds: float = 30.0  # a replica that failed with an error is not picked again for this long
    read_batch: int = 256  # entries asked for per READ during recovery

    def __post_init__(self) -> None:
        if not 1 <= self.ack_quorum <= self.write_quorum <= self.ensemble_size:
            raise ValueError("need 1 <= ack quorum <= write quorum <= ensemble size")
        if self.write_quorum != self.ensemble_size:
            # Striping entries over a larger ensemble (BookKeeper's W < E) is not supported: every entry
            # goes to every replica of its ledger.
            raise ValueError("the write quorum must equal the ensemble size")


class NotEnoughReplicas(Exception):
    pass


class ReplicaPool:
    """Connections to log stores by replica id, shared by every log of a process."""

    def __init__(self, zk: ZooKeeper, paths: Paths, settings: ReplicationSettings):
        self.zk = zk
        self.paths = paths
        self.settings = settings
        self._clients: dict[str, StoreClient] = {}
        self._connecting: dict[str, asyncio.Future[StoreClient]] = {}
        self._quarantined: dict[str, float] = {}
        self._addresses: dict[str, tuple[str, int]] = {}
        self.stopping = False  # the process is stopping: a broken ledger fails at once instead of stalling

    def quarantine(self, replica_id: str) -> None:
        self._quarantined[replica_id] = time.monotonic() + self.settings.quarantine_seconds

    def replica_id_of(self, client: StoreClient) -> str | None:
        return next((rid for rid, known in self._clients.items() if known is client), None)

    async def client(self, replica_id: str) -> StoreClient:
        """An open connection to the replica (raises ConnectionError if it is not registered or not answering)."""
        client = self._clients.get(replica_id)
        if client is not None and not client.closed:
            return client
        pending = self._connecting.get(replica_id)
        if pending is None:
            pending = asyncio.ensure_future(self._connect(replica_id))
            self._connecting[replica_id] = pending
            pending.add_done_callback(lambda _: self._connecting.pop(replica_id, None))
        return await asyncio.shield(pending)

    async def _connect(self, replica_id: str) -> StoreClient:
        address = self._addresses.get(replica_id)
        for attempt in range(2):
            if address is None or attempt:
                self._addresses = await live_logstores(self.zk, self.paths)
                address = self._addresses.get(replica_id)
                if address is None:
                    raise ConnectionError(f"log store {replica_id} is not registered")
            try:
                client, actual = await StoreClient.handshake(*address, timeout=self.settings.connect_timeout)
            except OSError as error:
                if attempt:
                    raise ConnectionError(f"log store {replica_id} at {address}: {error}") from error
                continue
            if actual != replica_id:  # another replica now listens there: look the address up again
                client.close()
                if attempt:
                    raise ConnectionError(f"{address} is log store {actual}, not {replica_id}")
                continue
            self._clients[replica_id] = client
            return client
        raise ConnectionError(f"log store {replica_id} is not reachable")

    async def healthy_ensemble(self, size: int, avoid: Iterable[str] = ()) -> list[tuple[str, StoreClient]]:
        """``size`` live, connected replicas, none quarantined or in ``avoid``; NotEnoughReplicas otherwise."""
        now = time.monotonic()
        self._addresses = await live_logstores(self.zk, self.paths)
        avoided = set(avoid)
        candidates = [rid for rid in self._addresses
                      if rid not in avoided and self._quarantined.get(rid, 0) <= now]
        random.shuffle(candidates)
        results = await asyncio.gather(*(self.client(rid) for rid in candidates), return_exceptions=True)
        healthy = [(rid, result) for rid, result in zip(candidates, results, strict=True)
                   if isinstance(result, StoreClient)]
        if len(healthy) < size:
            raise NotEnoughReplicas(f"{len(healthy)} healthy log stores of {len(self._addresses)} registered; "
                                    f"an ensemble needs {size}")
        return healthy[:size]

    async def clients_of(self, ensemble: Iterable[str]) -> list[StoreClient]:
        """Connections to the replicas of ``ensemble`` that answer (possibly fewer)."""
        results = await asyncio.gather(*(self.client(rid) for rid in ensemble), return_exceptions=True)
        return [result for result in results if isinstance(result, StoreClient)]

    def close(self) -> None:
        for client in self._clients.values():
            client.close()
        self._clients.clear()


def _flat(data: AppendData) -> bytes | memoryview:
    if isinstance(data, (list, tuple)):
        return b"".join(data)
    if isinstance(data, bytes):
        return data
    view = memoryview(data)  # type: ignore[arg-type]
    return view if view.format == "B" and view.ndim == 1 else view.cast("B")


class _Record:
    __slots__ = ("payload", "future")

    def __init__(self, payload: bytes | memoryview, future: asyncio.Future[LogAddress]):
        self.payload = payload
        self.future = future


class ReplicatedDurableDataLog(DurableDataLog):
    """One container's log (``name``) over the replicas in ``pool``; see the module docstring."""

    def __init__(self, name: str, pool: ReplicaPool):
        self.name = name
        self._pool = pool
        self._zk = pool.zk
        self._paths = pool.paths
        self._settings = pool.settings
        self._token = uuid.uuid4().hex.encode()
        self._state = "new"  # new -> open -> closed
        self._releasing: asyncio.Future[None] | None = None  # the owner lock's release, once begun
        self._failure: LogError | None = None
        self._chain = LogChain()
        self._version = -1
        self._ledger: LedgerRecord | None = None  # the ledger appends go to
        self._writer: LedgerWriter | None = None
        self._frozen_last = -1  # during a roll: the old ledger's last entry
        self._unacked: deque[_Record] = deque()  # sent or waiting to be sent, in append order
        self._last_sequence = 0  # of the last acknowledged record
        self._rolling: asyncio.Task | None = None
        self._metadata_lock = asyncio.Lock()
        self._owner_lock_held = False
        self._forget_session_listener: Callable[[], None] | None = None
        self._deletions: set[asyncio.Task] = set()

    # ------------------------------------------------------------------ ownership

    @property
    def epoch(self) -> int:
        if self._state == "new":
            raise LogClosed("the log was never opened")
        return self._chain.epoch

    def readable_records(self) -> int | None:
        return max(0, self._last_sequence - self._chain.truncation)  # ledgers' sequences follow on

    @property
    def truncation_address(self) -> LogAddress | None:
        return LogAddress(self._chain.truncation) if self._chain.truncation else None

    async def open(self) -> int:
        if self._state != "new":
            raise LogClosed("this instance was opened before; open a new instance")
        self._state = "opening"
        try:
            await self._take_owner_lock()
            await self._bump_epoch()
            await self._recover_last_ledger()
            await self._start_first_ledger()
        except BaseException as error:
            self._state = "closed"
            await self._release_owner_lock()
            if isinstance(error, (ZooKeeperUnavailable, NotEnoughReplicas, LedgerError, ConnectionError)):
                raise LogWriteFailed(f"log {self.name}: cannot open: {error}") from error
            raise
        self._state = "open"
        self._forget_session_listener = self._zk.on_session_lost(self._session_lost)
        log.info("replicated log opened", extra={"log": self.name, "epoch": self._chain.epoch,
                                                 "ledger": self._ledger.id if self._ledger else None})
        return self._chain.epoch

    async def _take_owner_lock(self) -> None:
        path = self._paths.owner(self.name)
        # Held, for _release_owner_lock (which deletes only a lock holding our token), from before the create: an
        # open cancelled or failed while the create's reply is lost and retried would otherwise leave a lock that
        # nobody releases while this process's session lives, and the log could never be opened elsewhere.
        self._owner_lock_held = True
        try:
            await self._zk.create(path, self._token, ephemeral=True)
        except NodeExistsError:
            try:
                holder, _ = await self._zk.get(path)
            except NoNodeError:
                holder = b""
            if holder != self._token:  # (our own token: a create retried after a lost reply)
                self._owner_lock_held = False
                raise LogBusy(f"log {self.name} is owned by a live process") from None

    async def _release_owner_lock(self) -> None:
        """Releases the owner lock, in a task of its own that a cancelled caller does not stop, and that keeps trying
        while ZooKeeper is out of reach unless the process is stopping.

        A live process's session outlives ZooKeeper being out of reach (the ensemble gives every session a fresh
        timeout when it is back), so a lock left to "go with the session" stays for as long as the process lives, and
        no store can open the log again, this one included. Found by the simulation (cluster seed 90): a container
        stopped while ZooKeeper went down, its stop was cancelled when the store presumed its session lost, the
        session lived on, and the log was never opened again."""
        if not self._owner_lock_held:
            return
        self._owner_lock_held = False
        self._releasing = asyncio.ensure_future(self._release(self._paths.owner(self.name)))
        await asyncio.shield(self._releasing)

    async def _release(self, path: str) -> None:
        delays = _RELEASE_RETRY.delays()
        while True:
            try:
                holder, version = await self._zk.get(path)
                if holder == self._token:
                    # First to a version no held lock has (a lock is created at version 0 and never written), then
                    # deleted at that version: a delete retried after its lost reply must not match the lock the next
                    # owner created at this path meanwhile (at version 0 again, as the lock just deleted was).
                    version = await self._zk.set_if(path, self._token + _RELEASING, version)
                    await self._zk.delete(path, version)
                return
            except (NoNodeError, BadVersionError):
                return  # gone already (with an expired session), or someone else's
            except ZooKeeperUnavailable:
                if self._zk.shutting_down:
                    return  # the process stops: its session ends, and the lock goes with it
                log.warning("owner lock not released yet: ZooKeeper is out of reach; trying again",
                            extra={"log": self.name})
                await asyncio.sleep(next(delays))

    async def _bump_epoch(self) -> None:
        path = self._paths.log(self.name)
        while True:
            try:
                data, version = await self._zk.get(path)
            except NoNodeError:
                try:
                    await self._zk.create(path, LogChain().to_json())
                except NodeExistsError:
                    pass
                continue
            chain = LogChain.from_json(data)
            bumped = dataclasses.replace(chain, epoch=chain.epoch + 1)
            try:
                self._version = await self._zk.set_if(path, bumped.to_json(), version)
            except BadVersionError:
                continue  # an old owner's last write landed in between: read again
            self._chain = bumped
            return

    async def _recover_last_ledger(self) -> None:
        if not self._chain.ledgers or self._chain.ledgers[-1].state == CLOSED:
            return
        ledger = self._chain.ledgers[-1]
        needed = len(ledger.ensemble) - ledger.ack_quorum + 1
        deadline = time.monotonic() + self._settings.stall_timeout
        while True:
            clients = await self._pool.clients_of(ledger.ensemble)
            try:
                if len(clients) < needed:
                    raise LedgerBroken(f"{len(clients)} of ledger {ledger.id}'s replicas answer, {needed} needed")
                last_entry = await recover(ledger.id, clients, ledger.ack_quorum, len(ledger.ensemble))
                break
            except LedgerBroken:
                if time.monotonic() >= deadline:
                    raise
                await asyncio.sleep(0.25)
        log.info("recovered ledger", extra={"log": self.name, "ledger": ledger.id, "last_entry": last_entry})
        self._chain = self._chain.with_last_closed(last_entry)

    async def _start_first_ledger(self) -> None:
        ledger, clients = await self._new_ledger(self._chain.next_sequence)
        chain = self._chain.with_ledger(ledger)
        await self._write_chain(chain)
        self._last_sequence = ledger.first_sequence - 1
        self._install(ledger, clients)

    async def _new_ledger(self, first_sequence: int) -> tuple[LedgerRecord, list[StoreClient]]:
        settings = self._settings
        deadline = time.monotonic() + settings.stall_timeout
        while True:
            try:
                ensemble = await self._pool.healthy_ensemble(settings.ensemble_size)
                break
            except NotEnoughReplicas:
                if time.monotonic() >= deadline:
                    raise
                await asyncio.sleep(0.25)
        ledger_id = await new_ledger_id(self._zk, self._paths)
        record = LedgerRecord(ledger_id, first_sequence, tuple(rid for rid, _ in ensemble),
                              settings.write_quorum, settings.ack_quorum)
        return record, [client for _, client in ensemble]

    async def _write_chain(self, chain: LogChain) -> None:
        """Conditional write of the chain; LogFenced if anyone else wrote since our last write."""
        try:
            self._version = await self._zk.set_if(self._paths.log(self.name), chain.to_json(), self._version)
        except (BadVersionError, NoNodeError):
            raise LogFenced(f"log {self.name}: a newer owner changed the metadata") from None
        self._chain = chain

    def _install(self, ledger: LedgerRecord, clients: list[StoreClient]) -> None:
        self._ledger = ledger
        self._writer = LedgerWriter(ledger.id, clients, ledger.ack_quorum, add_timeout=self._settings.add_timeout)

    def _session_lost(self) -> None:
        """Our owner lock vanished with the ZooKeeper session: someone else may own the log now."""
        self._fail(LogFenced(f"log {self.name}: the ZooKeeper session expired; ownership lost"))

    # ------------------------------------------------------------------ appends

    def append(self, data: AppendData) -> asyncio.Future[LogAddress]:
        if self._failure is not None:
            raise self._failure
        if self._state != "open":
            raise LogClosed(f"log {self.name} is not open")
        payload = _flat(data)
        if len(payload) > self.max_append_size:
            raise RecordTooLarge(f"{len(payload)} bytes exceed the maximum of {self.max_append_size}")
        record = _Record(payload, asyncio.get_running_loop().create_future())
        self._unacked.append(record)
        if self._writer is not None and not self._writer.broken:  # else it is sent once the log has rolled
            self._send(self._writer, record)
        return record.future

    def _send(self, writer: LedgerWriter, record: _Record) -> None:
        writer.append(record.payload).add_done_callback(functools.partial(self._answered, writer, record))

    def _answered(self, writer: LedgerWriter, record: _Record, done: asyncio.Future[int]) -> None:
        error = done.exception()  # retrieved even when ignored, or asyncio logs it as never retrieved
        if writer is not self._writer or self._failure is not None:
            return  # a frozen ledger's answer: the record was (or will be) sent again
        if isinstance(error, LedgerFenced):
            self._fail(LogFenced(f"log {self.name}: {error}"))
            return
        if error is not None:  # LedgerBroken: too few replicas left; roll and send everything again
            self._start_roll(f"{error}")
            return
        head = self._unacked.popleft()
        assert head is record, "acknowledgements out of order"
        assert self._ledger is not None
        self._last_sequence = self._ledger.first_sequence + done.result()
        if not record.future.done():
            record.future.set_result(LogAddress(self._last_sequence))
        if writer.degraded:
            self._start_roll("a replica failed: " + ", ".join(sorted(writer.failed.values())))
        elif writer.bytes_written >= self._settings.ledger_size_max:
            self._start_roll("the ledger is full")

    # ------------------------------------------------------------------ rolling to a new ledger

    def _start_roll(self, reason: str) -> None:
        if self._rolling is not None or self._failure is not None or self._state != "open":
            return
        self._rolling = asyncio.get_running_loop().create_task(self._roll(reason), name=f"roll {self.name}")

    async def _roll(self, reason: str) -> None:
        old_writer, old_ledger = self._writer, self._ledger
        assert old_writer is not None and old_ledger is not None
        for client, why in old_writer.failed.items():
            replica_id = self._pool.replica_id_of(client)
            if replica_id is not None and why != "lost":  # it answers but cannot write, or is stuck
                self._pool.quarantine(replica_id)
        log.info("rolling to a new ledger", extra={"log": self.name, "ledger": old_ledger.id, "reason": reason})
        broken_since: float | None = None
        try:
            while True:  # a ledger that still reaches its ack quorum takes appends until an ensemble is found
                try:
                    ensemble = await self._pool.healthy_ensemble(self._settings.ensemble_size)
                    break
                except (NotEnoughReplicas, ZooKeeperUnavailable) as error:
                    if old_writer.broken:
                        broken_since = broken_since or time.monotonic()
                        if self._pool.stopping:  # nothing to wait for: what is not acknowledged is sent again
                            raise LogWriteFailed(f"log {self.name}: no healthy ensemble while stopping: "
                                                 f"{error}") from error
                        if time.monotonic() - broken_since >= self._settings.stall_timeout:
                            raise LogWriteFailed(f"log {self.name}: no healthy ensemble: {error}") from error
                    await asyncio.sleep(0.5)
            async with self._metadata_lock:
                # Freeze: the old ledger's later answers are ignored; its last entry is the last acknowledged one.
                self._writer = None
                old_writer.abandon()
                last_entry = self._last_sequence - old_ledger.first_sequence
                ledger_id = await new_ledger_id(self._zk, self._paths)
                new_ledger = LedgerRecord(ledger_id, self._last_sequence + 1, tuple(rid for rid, _ in ensemble),
                                          self._settings.write_quorum, self._settings.ack_quorum)
                await self._write_chain(self._chain.with_last_closed(last_entry).with_ledger(new_ledger))
        except LogError as error:
            self._rolling = None
            self._fail(error)
            return
        except ZooKeeperUnavailable as error:
            self._rolling = None
            self._fail(LogWriteFailed(f"log {self.name}: ZooKeeper unavailable while rolling: {error}"))
            return
        self._install(new_ledger, [client for _, client in ensemble])
        self._rolling = None
        log.info("rolled to a new ledger", extra={"log": self.name, "ledger": new_ledger.id,
                                                  "ensemble": list(new_ledger.ensemble)})
        writer = self._writer
        assert writer is not None
        for record in self._unacked:  # every unacknowledged record, again and in order, to the new ledger
            self._send(writer, record)

    # ------------------------------------------------------------------ truncation and reads

    async def truncate(self, upto: LogAddress) -> None:
        self._check_open()
        if upto.sequence > self._last_sequence:
            raise ValueError(f"cannot truncate up to {upto.sequence}: the last acknowledged record is "
                             f"{self._last_sequence}")
        async with self._metadata_lock:
            self._check_open()
            if upto.sequence <= self._chain.truncation:
                return
            chain, dropped = self._chain.truncated(upto.sequence)
            try:
                await self._write_chain(chain)
            except LogError as error:
                self._fail(error)
                raise
            except ZooKeeperUnavailable as error:
                failure = LogWriteFailed(f"log {self.name}: ZooKeeper unavailable while truncating: {error}")
                self._fail(failure)
                raise failure from error
        for ledger in dropped:
            task = asyncio.get_running_loop().create_task(self._delete_ledger(ledger))
            self._deletions.add(task)
            task.add_done_callback(self._deletions.discard)

    async def _delete_ledger(self, ledger: LedgerRecord) -> None:
        """Best effort: a replica that misses this collects the ledger later (it is in no chain)."""
        for client in await self._pool.clients_of(ledger.ensemble):
            try:
                await asyncio.wait_for(client.call(p.Delete(_request_id(), ledger.id)), self._settings.add_timeout)
            except (ConnectionError, TimeoutError):
                continue

    async def read(self, after: LogAddress | None = None) -> AsyncIterator[tuple[LogAddress, memoryview]]:
        self._check_open()
        start = max(self._chain.truncation, after.sequence if after is not None else 0) + 1
        for ledger in list(self._chain.ledgers):
            last_entry = self._last_entry_of(ledger)
            first_entry = max(0, start - ledger.first_sequence)
            if first_entry > last_entry:
                continue
            async for entry, payload in self._read_ledger(ledger, first_entry, last_entry):
                yield LogAddress(ledger.first_sequence + entry), payload

    def _last_entry_of(self, ledger: LedgerRecord) -> int:
        if ledger.state == CLOSED:
            return ledger.last_entry
        return self._last_sequence - ledger.first_sequence  # ours: what has been acknowledged

    async def _read_ledger(self, ledger: LedgerRecord, first: int, last: int) -> AsyncIterator[tuple[int, memoryview]]:
        entry = first
        replicas = list(ledger.ensemble)
        preferred = 0
        while entry <= last:
            batch_last = min(last, entry + self._settings.read_batch - 1)
            got: tuple = ()
            for attempt in range(len(replicas)):
                replica_id = replicas[(preferred + attempt) % len(replicas)]
                try:
                    client = await self._pool.client(replica_id)
                    reply = await asyncio.wait_for(client.call(p.Read(_request_id(), ledger.id, entry, batch_last)),
                                                   self._settings.add_timeout * 5)
                except (ConnectionError, OSError, TimeoutError):
                    continue
                if isinstance(reply, p.Entries) and reply.status == p.Status.OK and reply.entries \
                        and reply.entries[0][0] == entry:
                    got = reply.entries
                    preferred = (preferred + attempt) % len(replicas)
                    break
            if not got:
                raise LogCorrupted(f"log {self.name}: no replica of ledger {ledger.id} has entry {entry}",
                                   location=f"ledger {ledger.id}", offset=entry)
            for number, payload in got:
                if number != entry:
                    break
                yield number, memoryview(payload)
                entry += 1

    # ------------------------------------------------------------------ closing and failing

    def _check_open(self) -> None:
        if self._failure is not None:
            raise self._failure
        if self._state != "open":
            raise LogClosed(f"log {self.name} is not open")

    def _fail(self, error: LogError) -> None:
        if self._failure is not None or self._state == "closed":
            return
        log.warning("replicated log failed", extra={"log": self.name, "error": str(error)})
        self._failure = error
        self._stop_writing(error)

    def _stop_writing(self, error: LogError) -> None:
        if self._writer is not None:
            self._writer.abandon()
            self._writer = None
        if self._rolling is not None and self._rolling is not asyncio.current_task():
            self._rolling.cancel()
        self._rolling = None
        while self._unacked:
            record = self._unacked.popleft()
            if not record.future.done():
                record.future.set_exception(error)

    async def close(self) -> None:
        if self._state == "closed":
            return
        was_open = self._state == "open"
        self._state = "closed"
        self._stop_writing(LogClosed(f"log {self.name} was closed"))
        if self._forget_session_listener is not None:
            self._forget_session_listener()
        if was_open:
            await self._release_owner_lock()


_RELEASE_RETRY = Backoff(initial_seconds=0.5, multiplier=2.0, max_delay_seconds=5.0, attempts=None)
_request_ids = iter(range(1 << 40, 1 << 62))


def _request_id() -> int:
    return next(_request_ids)


class ReplicatedTier1:
    """What a process needs to run replicated logs: a ZooKeeper session and the replica pool."""

    def __init__(self, zk_hosts: str, settings: ReplicationSettings | None = None, root: str = "/tributary",
                 session_timeout: float = 10.0, zk: ZooKeeper | None = None):
        """``zk``: a session the caller started and stops (a clustered segment store shares its own); else one
        to ``zk_hosts`` is made, started and stopped here."""
        self.settings = settings or ReplicationSettings()
        self._owns_session = zk is None
        self.zk = zk if zk is not None else ZooKeeper(zk_hosts, session_timeout=session_timeout)
        self.paths = Paths(root)
        self.pool = ReplicaPool(self.zk, self.paths, self.settings)

    async def start(self) -> None:
        if self._owns_session:
            await self.zk.start()
        try:
            await self.paths.ensure(self.zk)
        except BaseException:
            if self._owns_session:
                await self.zk.stop()
            raise

    def begin_shutdown(self) -> None:
        """The process is stopping: a log whose ledger broke fails at once rather than waiting ``stall_timeout`` for
        a healthy ensemble, and ZooKeeper gets a short grace (none while unreachable; see coordination.zookeeper)."""
        self.pool.stopping = True
        self.zk.begin_shutdown()

    async def stop(self) -> None:
        self.pool.close()
        if self._owns_session:
            await self.zk.stop()

    def log(self, name: str) -> ReplicatedDurableDataLog:
        return ReplicatedDurableDataLog(name, self.pool)
