"""The replicated log under failure, beyond the conformance suite: in-process log stores, a real ZooKeeper.

Each test drives ``ReplicatedDurableDataLog`` through one failure (a replica stopped, two lost at
once, a replica whose disk fails, a zombie owner, a ZooKeeper restart, an unacknowledged tail on one
replica) and then checks the outcome the design promises (docs/replicated-log.md): every
acknowledged record is read back by the next owner, in order, with contiguous sequences; a record
that was never acknowledged is either recovered with everything before it or not at all; the log
rolls off a failed replica; a fenced owner can never add anything a later owner reads.
"""

from __future__ import annotations

import asyncio
import errno
import time
from collections.abc import Callable, Sequence

import pytest
from kazoo.client import KazooClient
from kazoo.exceptions import ConnectionLoss
from kazoo.handlers.threading import KazooTimeoutError

from server.tier1 import LogAddress
from server.tier1.errors import LogBusy, LogFenced, LogWriteFailed
from server.tier1.logstore import protocol as p
from server.tier1.logstore.chain import CLOSED, OPEN, LogChain
from server.tier1.logstore.ledgers import StoreClient
from server.tier1.logstore.service import LogStoreService
from server.tier1.replicated import ReplicatedDurableDataLog, ReplicatedTier1, ReplicationSettings
from tests.support.replicated import ReplicatedCluster, replicated_tier1
from tests.support.waiting import eventually

from .helpers import read_all

pytestmark = pytest.mark.timeout(60)

NAME = "container-0"
# Ledgers large enough that no test rolls for size unless it asks to; a stall fails after 10 s.
SETTINGS = ReplicationSettings(ledger_size_max=1 << 30, add_timeout=2.0, stall_timeout=10.0)


def record(tag: str, number: int, size: int = 120) -> bytes:
    stem = f"{tag}-{number:05d}|".encode()
    return (stem * (size // len(stem) + 1))[:size]


def tier1_of(cluster: ReplicatedCluster) -> ReplicatedTier1:
    assert cluster.tier1 is not None
    return cluster.tier1


async def chain_in_zookeeper(tier1: ReplicatedTier1, name: str = NAME) -> LogChain:
    data, _ = await tier1.zk.get(tier1.paths.log(name))
    return LogChain.from_json(data)


async def open_log(tier1: ReplicatedTier1, name: str = NAME) -> ReplicatedDurableDataLog:
    log = tier1.log(name)
    await log.open()
    return log


async def reopen_and_read(tier1: ReplicatedTier1, name: str = NAME) -> list[tuple[int, bytes]]:
    """What a new owner reads back (it then closes)."""
    log = await open_log(tier1, name)
    try:
        return await read_all(log)
    finally:
        await log.close()


def store_of(cluster: ReplicatedCluster, replica_id: str) -> LogStoreService:
    return next(store for store in cluster.stores if store.replica_id == replica_id)


def index_of(store: LogStoreService) -> int:
    """The ``start_store`` index of a store of the cluster (its data directory is ``logstore-<index>``)."""
    return int(store.store.data_dir.rsplit("-", 1)[1])


def numbered(payloads: Sequence[bytes], first: int = 1) -> list[tuple[int, bytes]]:
    return [(first + index, payload) for index, payload in enumerate(payloads)]


async def append_all(log: ReplicatedDurableDataLog, payloads: Sequence[bytes]) -> list[int]:
    """Appends ``payloads`` concurrently (in call order); their sequences once all are acknowledged."""
    addresses = await asyncio.gather(*[log.append(payload) for payload in payloads])
    return [address.sequence for address in addresses]


class Appender:
    """Appends batches of records in the background until stopped or an append fails; keeps what was acked."""

    def __init__(self, log: ReplicatedDurableDataLog, tag: str, batch: int = 4):
        self.log = log
        self.tag = tag
        self.batch = batch
        self.acked: list[tuple[int, bytes]] = []
        self.appended: list[bytes] = []
        self.error: BaseException | None = None
        self._stopping = False
        self._task = asyncio.get_running_loop().create_task(self._run())

    async def _run(self) -> None:
        while not self._stopping:
            payloads = [record(self.tag, len(self.appended) + n) for n in range(self.batch)]
            self.appended += payloads
            try:
                futures = [self.log.append(payload) for payload in payloads]
            except Exception as error:  # noqa: BLE001 - the test inspects it
                self.error = error
                return
            results = await asyncio.gather(*futures, return_exceptions=True)
            for payload, result in zip(payloads, results, strict=True):
                if isinstance(result, BaseException):
                    self.error = self.error or result
                else:
                    assert not self.error, "an append was acknowledged after an earlier one failed"
                    self.acked.append((result.sequence, payload))
            if self.error is not None:
                return
            await asyncio.sleep(0.002)

    async def acks(self, count: int, timeout: float = 5.0) -> None:
        """Waits until ``count`` records in all have been acknowledged."""
        await eventually(lambda: len(self.acked) >= count or self._task.done(), f"{count} acks", timeout=timeout)
        assert len(self.acked) >= count, f"only {len(self.acked)} acks, appender stopped on {self.error!r}"

    async def stop(self) -> None:
        self._stopping = True
        await asyncio.wait_for(self._task, 15)


async def quiesce(log: ReplicatedDurableDataLog, stores: Sequence[LogStoreService]) -> None:
    """Waits until no roll is under way and every replica of the current ledger holds every acknowledged
    entry (an entry is acknowledged once two of three have it: the third may still be writing it)."""
    await eventually(lambda: log._rolling is None, "the roll under way to end", timeout=5)
    ledger = log._ledger
    assert ledger is not None
    last = log._last_sequence - ledger.first_sequence
    if last >= 0:
        await eventually(lambda: all(store.store._journal.read(ledger.id, last) is not None
                                     for store in stores if store.replica_id in ledger.ensemble),
                         "every replica to hold the last acknowledged entry", timeout=5)


def assert_contiguous(acked: list[tuple[int, bytes]], first: int = 1) -> None:
    assert [sequence for sequence, _ in acked] == list(range(first, first + len(acked)))


# ---------------------------------------------------------------------- a replica lost, the log rolls


@pytest.mark.parametrize("replacement", ["new store", "same store restarted"])
async def test_a_replica_stopped_mid_stream_loses_nothing_and_the_log_rolls_onto_a_live_one(
        tmp_path, zk_hosts, replacement):
    async with replicated_tier1(tmp_path, zk_hosts, stores=3, settings=SETTINGS) as cluster:
        tier1 = tier1_of(cluster)
        log = await open_log(tier1)
        assert log._ledger is not None
        first_ledger = log._ledger
        appender = Appender(log, "a")
        await appender.acks(40)

        victim = cluster.stores[2]  # every store is in the ensemble (3 of 3)
        assert victim.replica_id in first_ledger.ensemble
        await cluster.stop_store(victim)
        stopped_at = len(appender.acked)
        # Two of three replicas still make the ack quorum: appends go on in the degraded ledger, which
        # cannot roll (no third healthy store).
        await appender.acks(stopped_at + 150)
        writer = log._writer
        assert writer is not None and writer.degraded and log._ledger.id == first_ledger.id
        assert await chain_in_zookeeper(tier1) == log._chain and log._chain.ledgers[-1].state == OPEN

        replica = await cluster.start_store(3 if replacement == "new store" else 2)
        if replacement == "same store restarted":
            assert replica.replica_id == victim.replica_id  # the same data directory: the same replica
        await eventually(lambda: log._ledger is not None and log._ledger.id != first_ledger.id, "a roll", timeout=5)
        rolled_at = len(appender.acked)
        await appender.acks(rolled_at + 40)
        await appender.stop()
        assert appender.error is None

        chain = await chain_in_zookeeper(tier1)
        assert [ledger.id for ledger in chain.ledgers] == [first_ledger.id, log._ledger.id]
        old, new = chain.ledgers
        assert old.state == CLOSED and new.state == OPEN
        assert replica.replica_id in new.ensemble and len(new.ensemble) == 3
        assert new.first_sequence == old.last_sequence + 1
        assert stopped_at + 150 <= old.last_sequence < rolled_at + appender.batch  # (acks are noted per batch)

        acked = appender.acked
        assert_contiguous(acked)
        await log.close()
        assert await reopen_and_read(tier1) == acked


# ---------------------------------------------------------------------- below the ack quorum


async def test_appends_stall_below_the_ack_quorum_and_are_acknowledged_in_order_once_replicas_return(
        tmp_path, zk_hosts):
    async with replicated_tier1(tmp_path, zk_hosts, stores=3, settings=SETTINGS) as cluster:
        tier1 = tier1_of(cluster)
        log = await open_log(tier1)
        before = [record("b", n) for n in range(20)]
        assert await append_all(log, before) == list(range(1, 21))
        first_ledger = log._ledger
        assert first_ledger is not None

        lost = [store_of(cluster, rid) for rid in first_ledger.ensemble[1:]]
        await asyncio.gather(*(cluster.stop_store(store) for store in lost))
        stalled = [record("s", n) for n in range(10)]
        futures = [log.append(payload) for payload in stalled]
        done, _ = await asyncio.wait(futures, timeout=1.5)
        assert not done, "an append was acknowledged by one replica of three (ack quorum 2)"

        started = time.monotonic()
        await asyncio.gather(*(cluster.start_store(index_of(store)) for store in lost))
        addresses = await asyncio.wait_for(asyncio.gather(*futures), 8)
        assert [address.sequence for address in addresses] == list(range(21, 31))  # in order, no gap
        assert time.monotonic() - started < 8
        assert log._ledger is not None and log._ledger.id != first_ledger.id
        after = [record("t", n) for n in range(5)]
        assert await append_all(log, after) == list(range(31, 36))
        await log.close()
        assert await reopen_and_read(tier1) == numbered(before + stalled + after)


async def test_a_stall_longer_than_stall_timeout_fails_the_log_and_a_reopen_keeps_the_acknowledged_prefix(
        tmp_path, zk_hosts):
    settings = ReplicationSettings(ledger_size_max=1 << 30, add_timeout=2.0, stall_timeout=1.0)
    async with replicated_tier1(tmp_path, zk_hosts, stores=3, settings=settings) as cluster:
        tier1 = tier1_of(cluster)
        log = await open_log(tier1)
        before = [record("b", n) for n in range(20)]
        assert await append_all(log, before) == list(range(1, 21))
        assert log._ledger is not None
        lost = [store_of(cluster, rid) for rid in log._ledger.ensemble[1:]]
        await asyncio.gather(*(cluster.stop_store(store) for store in lost))

        stalled = [record("s", n) for n in range(10)]
        futures = [log.append(payload) for payload in stalled]
        started = time.monotonic()
        results = await asyncio.wait_for(asyncio.gather(*futures, return_exceptions=True), 8)
        assert all(isinstance(result, LogWriteFailed) for result in results), results
        assert 1.0 <= time.monotonic() - started < 5
        with pytest.raises(LogWriteFailed):  # the log stays failed
            log.append(b"later")
        with pytest.raises(LogWriteFailed):
            await log.truncate(LogAddress(1))
        await log.close()

        await asyncio.gather(*(cluster.start_store(index_of(store)) for store in lost))
        recovered = await reopen_and_read(tier1)
        # Every acknowledged record, then possibly a prefix of the failed ones: the writer learns that
        # two replicas are gone only from their answers, so the stalled appends it sent at once all
        # reached the surviving replica, and recovery may take them (it may; nothing says it must not).
        assert len(recovered) >= 20
        assert recovered == numbered(before + stalled[:len(recovered) - 20])


# ---------------------------------------------------------------------- a replica whose disk fails


def failing(error_number: int) -> Callable[..., None]:
    def fail(*_: object) -> None:
        raise OSError(error_number, f"injected: {errno.errorcode[error_number]}")
    return fail


@pytest.mark.parametrize("seam, error_number", [("sync", errno.EIO), ("write_at", errno.ENOSPC)])
async def test_a_replica_whose_journal_fails_is_quarantined_and_the_log_rolls_away_from_it(
        tmp_path, zk_hosts, seam, error_number):
    async with replicated_tier1(tmp_path, zk_hosts, stores=4, settings=SETTINGS) as cluster:
        tier1 = tier1_of(cluster)
        log = await open_log(tier1)
        before = [record("b", n) for n in range(20)]
        assert await append_all(log, before) == list(range(1, 21))
        assert log._ledger is not None
        first_ledger = log._ledger
        victim = store_of(cluster, first_ledger.ensemble[0])
        setattr(victim.store._journal, seam, failing(error_number))

        after = [record("a", n) for n in range(60)]
        sequences = []
        for start in range(0, len(after), 6):  # in batches, so that the roll happens between some
            sequences += await append_all(log, after[start:start + 6])
        assert sequences == list(range(21, 81))
        await eventually(lambda: log._ledger is not None and log._ledger.id != first_ledger.id, "a roll", timeout=5)

        assert isinstance(victim.store._failed, OSError) and victim.store._failed.errno == error_number
        client, _ = await StoreClient.handshake("127.0.0.1", victim.port, timeout=2)
        try:  # the failed replica still answers, but refuses every write
            reply = await client.call(p.Add(1, 999_999, 0, -1, 0, b"x"))
            assert isinstance(reply, p.Added) and reply.status == p.Status.UNAVAILABLE
        finally:
            client.close()
        assert victim.replica_id in tier1.pool._quarantined
        chain = await chain_in_zookeeper(tier1)
        assert chain.ledgers[0].id == first_ledger.id and chain.ledgers[0].state == CLOSED
        assert victim.replica_id not in chain.ledgers[-1].ensemble
        assert all(victim.replica_id not in ledger.ensemble for ledger in chain.ledgers[1:])
        more = [record("m", n) for n in range(10)]
        assert await append_all(log, more) == list(range(81, 91))
        await log.close()
        assert await reopen_and_read(tier1) == numbered(before + after + more)


# ---------------------------------------------------------------------- fencing a zombie owner


async def start_tier1(zk_hosts: str, settings: ReplicationSettings = SETTINGS) -> ReplicatedTier1:
    tier1 = ReplicatedTier1(zk_hosts, settings)
    await tier1.start()
    return tier1


async def test_a_new_owner_fences_a_zombie_that_lost_its_session(tmp_path, zk_hosts):
    async with replicated_tier1(tmp_path, zk_hosts, stores=3, settings=SETTINGS) as cluster:
        tier_a = await start_tier1(zk_hosts)
        try:
            a = await open_log(tier_a)
            acked_by_a = [record("a", n) for n in range(30)]
            assert await append_all(a, acked_by_a) == list(range(1, 31))
            epoch_a = a.epoch
            # A "dies" without closing: its session (and owner lock) goes, its log object and its
            # connections to the log stores stay: a zombie that does not know it lost the log.
            await tier_a.zk.stop()
            assert a._writer is not None and not a._writer.broken

            b = await open_log(tier1_of(cluster))
            assert b.epoch > epoch_a
            assert await read_all(b) == numbered(acked_by_a)

            zombie = [record("z", n) for n in range(5)]
            results = await asyncio.wait_for(
                asyncio.gather(*[a.append(payload) for payload in zombie], return_exceptions=True), 5)
            assert all(type(result) is LogFenced for result in results), results
            with pytest.raises(LogFenced):  # and it stays fenced
                a.append(b"zombie-later")
            with pytest.raises(LogFenced):
                await a.truncate(LogAddress(1))

            by_b = [record("b", n) for n in range(10)]
            assert await append_all(b, by_b) == list(range(31, 41))
            assert await read_all(b) == numbered(acked_by_a + by_b)
            await b.close()
            assert await reopen_and_read(tier1_of(cluster)) == numbered(acked_by_a + by_b)
        finally:
            await tier_a.stop()


async def test_an_owner_whose_session_expires_fails_with_log_fenced_and_a_successor_keeps_its_records(
        tmp_path, zk_hosts):
    async with replicated_tier1(tmp_path, zk_hosts, stores=3, settings=SETTINGS) as cluster:
        tier_a = await start_tier1(zk_hosts)
        try:
            a = await open_log(tier_a)
            acked = [record("a", n) for n in range(10)]
            assert await append_all(a, acked) == list(range(1, 11))
            # ZooKeeper expires A's session (as after a long pause): another client closes the same session.
            # A reconnects at once and may take the session back before the thief closes it: then try again.
            session_id, password = tier_a.zk._client.client_id
            for _ in range(20):
                thief = KazooClient(hosts=zk_hosts, client_id=(session_id, password))
                try:
                    await asyncio.to_thread(thief.start, 5)
                    await asyncio.to_thread(thief.stop)
                except (KazooTimeoutError, ConnectionLoss):
                    await asyncio.to_thread(thief.stop)
                thief.close()
                for _ in range(20):
                    if a._failure is not None:
                        break
                    await asyncio.sleep(0.1)
                if a._failure is not None:
                    break
            await eventually(lambda: a._failure is not None, "A to learn that its session expired", timeout=8)
            with pytest.raises(LogFenced):
                a.append(b"after expiry")
            b = await open_log(tier1_of(cluster))  # the owner lock went with the session
            assert await read_all(b) == numbered(acked)
            await b.close()
        finally:
            await tier_a.stop()


async def test_a_zombie_appending_while_the_new_owner_recovers_loses_no_acknowledged_record(tmp_path, zk_hosts):
    async with replicated_tier1(tmp_path, zk_hosts, stores=3, settings=SETTINGS) as cluster:
        tier_a = await start_tier1(zk_hosts)
        try:
            a = await open_log(tier_a)
            appender = Appender(a, "a", batch=3)
            await appender.acks(30)
            await tier_a.zk.stop()  # A keeps appending: it does not know its session is gone

            b = await open_log(tier1_of(cluster))
            recovered = await read_all(b)
            await asyncio.wait_for(appender.stop(), 5)  # A's in-flight appends end: fenced, not hanging
            assert type(appender.error) is LogFenced, appender.error
            acked = appender.acked
            assert_contiguous(acked)
            # Everything A had acknowledged, then possibly a few it appended after them, in order, no gap.
            assert recovered[:len(acked)] == acked
            assert recovered == numbered(appender.appended[:len(recovered)])
            assert len(recovered) < len(appender.appended)

            by_b = [record("b", n) for n in range(5)]
            first = len(recovered) + 1
            assert await append_all(b, by_b) == list(range(first, first + 5))
            await b.close()
            assert await reopen_and_read(tier1_of(cluster)) == recovered + numbered(by_b, first)
        finally:
            await tier_a.stop()


async def test_a_second_open_is_busy_while_the_owner_lives_and_succeeds_once_it_closed(tmp_path, zk_hosts):
    async with replicated_tier1(tmp_path, zk_hosts, stores=3, settings=SETTINGS) as cluster:
        tier1 = tier1_of(cluster)
        other_process = await start_tier1(zk_hosts)
        try:
            owner = await open_log(tier1)
            await append_all(owner, [b"one", b"two"])
            epoch = owner.epoch
            for contender in (tier1.log(NAME), other_process.log(NAME)):
                with pytest.raises(LogBusy) as busy:
                    await contender.open()
                assert busy.value.retriable
            await append_all(owner, [b"three"])  # the failed opens did not disturb the owner
            assert (await chain_in_zookeeper(tier1)).epoch == epoch

            await owner.close()
            successor = await open_log(other_process)
            assert successor.epoch == epoch + 1
            assert await read_all(successor) == [(1, b"one"), (2, b"two"), (3, b"three")]
            with pytest.raises(LogBusy):
                await tier1.log(NAME).open()
            await successor.close()
        finally:
            await other_process.stop()


# ---------------------------------------------------------------------- truncation and garbage collection


async def test_truncation_deletes_whole_ledgers_from_the_chain_and_every_replica(tmp_path, zk_hosts):
    settings = ReplicationSettings(ledger_size_max=2048, add_timeout=2.0, stall_timeout=10.0)
    async with replicated_tier1(tmp_path, zk_hosts, stores=3, settings=settings) as cluster:
        tier1 = tier1_of(cluster)
        log = await open_log(tier1)
        payloads = []
        # One at a time: the log rolls every ~10 records. A roll runs beside the appends (the full ledger takes
        # them until the next is ready), so under load a ledger may hold more: write until there are seven.
        while len(log._chain.ledgers) < 7 and len(payloads) < 2000:
            payloads.append(record("r", len(payloads), size=200))
            await log.append(payloads[-1])
        await quiesce(log, cluster.stores)
        ledgers = log._chain.ledgers
        assert len(ledgers) >= 6 and all(ledger.state == CLOSED for ledger in ledgers[:-1])

        assert ledgers[3].last_entry >= 1
        upto = ledgers[2].last_sequence + 1  # inside the fourth ledger: that one stays, partly truncated
        doomed = [ledger.id for ledger in ledgers if ledger.state == CLOSED and ledger.last_sequence <= upto]
        kept = [ledger.id for ledger in ledgers if ledger.id not in doomed]
        assert doomed == [ledger.id for ledger in ledgers[:3]]
        # (A ledger with no entries yet, e.g. the one a roll just started, is on no replica.)
        held = {store.replica_id: set(store.store.ledger_ids()) for store in cluster.stores}
        assert all(set(doomed) <= ledger_ids for ledger_ids in held.values())
        await log.truncate(LogAddress(upto))
        assert log.truncation_address == LogAddress(upto)
        chain = await chain_in_zookeeper(tier1)
        assert chain.truncation == upto and [ledger.id for ledger in chain.ledgers] == kept
        assert chain.ledgers[0].first_sequence <= upto + 1
        await eventually(lambda: all(not set(doomed) & set(store.store.ledger_ids()) for store in cluster.stores),
                         "the truncated ledgers to go from every replica", timeout=5)
        for store in cluster.stores:  # nothing else was deleted
            assert set(store.store.ledger_ids()) == held[store.replica_id] - set(doomed)
        assert await read_all(log) == numbered(payloads[upto:], upto + 1)

        # A replica that is down while a truncation happens keeps those ledgers; its garbage collection
        # deletes them once nothing names them (and not before the grace period).
        down = cluster.stores[2]
        await cluster.stop_store(down)
        upto = ledgers[4].last_sequence  # exactly the end of the fifth ledger
        doomed = [ledger.id for ledger in ledgers[3:5]]
        await log.truncate(LogAddress(upto))
        assert not set(doomed) & {ledger.id for ledger in (await chain_in_zookeeper(tier1)).ledgers}
        await eventually(lambda: all(not set(doomed) & set(store.store.ledger_ids()) for store in cluster.stores),
                         "the truncated ledgers to go from the replicas that are up", timeout=5)
        back = await cluster.start_store(2)
        assert back.replica_id == down.replica_id and set(doomed) <= set(back.store.ledger_ids())
        assert await back.collect_garbage() == []  # within the grace period
        held_back = set(back.store.ledger_ids())
        back.gc_grace = 0
        assert sorted(await back.collect_garbage()) == sorted(doomed)
        # Only those: the ledgers the chain still names stay.
        assert set(back.store.ledger_ids()) == held_back - set(doomed)
        assert held_back - set(doomed) <= {ledger.id for ledger in log._chain.ledgers}
        assert await back.collect_garbage() == []
        await log.close()
        assert await reopen_and_read(tier1) == numbered(payloads[upto:], upto + 1)


# ---------------------------------------------------------------------- ZooKeeper restarted


async def restart_zookeeper_under_appends(tier1: ReplicatedTier1, zookeeper, name: str) -> bool:
    """Appends to ``name`` while ZooKeeper restarts, truncates during the outage; False if the owner's
    session expired meanwhile (then only what must hold anyway is checked)."""
    log = await open_log(tier1, name)
    acked: list[tuple[int, bytes]] = []
    appended: list[bytes] = []

    async def append_batch() -> None:
        payloads = [record("z", len(appended) + n) for n in range(4)]
        appended.extend(payloads)
        try:
            acked.extend(zip(await append_all(log, payloads), payloads, strict=True))
        except LogFenced:
            pass  # the session expired: checked below

    for _ in range(5):
        await append_batch()
    restart = asyncio.ensure_future(asyncio.to_thread(zookeeper.restart, 1.0))
    deadline = time.monotonic() + 5
    while tier1.zk.connected:
        assert time.monotonic() < deadline, "ZooKeeper did not go away"
        await append_batch()
    truncation = asyncio.ensure_future(log.truncate(LogAddress(10)))
    during_outage = 0
    while not restart.done():
        await append_batch()
        if not tier1.zk.connected:
            during_outage += 4
            assert not truncation.done(), "a truncation completed without ZooKeeper"
        await asyncio.sleep(0.005)  # leave some CPU to ZooKeeper's start and to kazoo's thread
    await restart
    assert during_outage >= 20, "appends did not go on while ZooKeeper was down"
    (truncated,) = await asyncio.gather(asyncio.wait_for(truncation, 30), return_exceptions=True)
    assert_contiguous(acked)
    if log._failure is not None:
        # kazoo can connect while the server is starting and not be answered: it then waits a whole
        # session timeout (divided by the number of hosts) before it tries again, and the session may
        # have expired by then. The owner then loses the log: it must say so, and lose nothing.
        assert type(log._failure) is LogFenced and isinstance(truncated, (LogFenced, LogWriteFailed)), truncated
        await log.close()
        await eventually(lambda: tier1.zk.connected, "a new ZooKeeper session", timeout=15)
        recovered = await reopen_and_read(tier1, name)
        start = recovered[0][0] - 1 if recovered else len(appended)
        assert start in (0, 10) and recovered == numbered(appended[start:start + len(recovered)], start + 1)
        assert start + len(recovered) >= len(acked)
        return False
    assert truncated is None
    assert log.truncation_address == LogAddress(10)
    assert (await chain_in_zookeeper(tier1, name)).truncation == 10
    for _ in range(5):
        await append_batch()
    assert_contiguous(acked)
    assert len(acked) == len(appended)
    await log.close()
    assert await reopen_and_read(tier1, name) == acked[10:]
    return True


async def test_appends_go_on_while_zookeeper_restarts_and_a_truncation_waits_for_it(tmp_path, zookeeper, zk_hosts):
    async with replicated_tier1(tmp_path, zk_hosts, stores=3, settings=SETTINGS):
        # The test server caps sessions at 4 s (tickTime 200 ms). A connection attempt that the starting server
        # does not answer is given up after a quarter of that (coordination/zookeeper.py lists the host four times),
        # so the session outlives the restart.
        owner = ReplicatedTier1(zk_hosts, SETTINGS, session_timeout=4.0)
        await owner.start()
        try:
            assert await restart_zookeeper_under_appends(owner, zookeeper, "container-0"), \
                "the owner's ZooKeeper session expired while ZooKeeper restarted"
        finally:
            await owner.stop()


# ---------------------------------------------------------------------- an unacknowledged tail


async def add_raw(store: LogStoreService, ledger: int, entries: dict[int, bytes], last_add_confirmed: int) -> None:
    """Writes entries straight to one replica, as a writer that died right after sending them would have."""
    client, _ = await StoreClient.handshake("127.0.0.1", store.port, timeout=2)
    try:
        for entry, payload in entries.items():
            reply = await client.call(p.Add(entry + 1, ledger, entry, last_add_confirmed, 0, payload))
            assert isinstance(reply, p.Added) and reply.status == p.Status.OK
    finally:
        client.close()


async def test_a_tail_on_one_replica_is_recovered_up_to_its_first_gap_and_no_further(tmp_path, zk_hosts):
    async with replicated_tier1(tmp_path, zk_hosts, stores=3, settings=SETTINGS) as cluster:
        tier_a = await start_tier1(zk_hosts)
        try:
            a = await open_log(tier_a)
            acked = [record("a", n) for n in range(10)]
            assert await append_all(a, acked) == list(range(1, 11))
            ledger = a._ledger
            assert ledger is not None
            await a.close()  # closing does not close the ledger in the chain: the next owner recovers it
            tail = {10: b"tail-10", 11: b"tail-11", 13: b"tail-13"}  # entry 12 never made it anywhere
            await add_raw(store_of(cluster, ledger.ensemble[0]), ledger.id, tail, last_add_confirmed=9)

            recovered = await reopen_and_read(tier1_of(cluster))
            assert recovered == numbered(acked + [b"tail-10", b"tail-11"])
            chain = await chain_in_zookeeper(tier1_of(cluster))
            assert chain.ledgers[0].id == ledger.id and chain.ledgers[0].last_entry == 11
            for store in cluster.stores:  # written back to every replica
                assert store.store._journal.read(ledger.id, 11) == b"tail-11"
            assert await reopen_and_read(tier1_of(cluster)) == recovered
        finally:
            await tier_a.stop()


@pytest.mark.parametrize("tail_replica", ["answers", "is down"])
async def test_appends_that_reached_one_replica_are_recovered_whole_or_not_at_all(tmp_path, zk_hosts, tail_replica):
    # Four stores: with the tail's replica down, the new owner still finds three for its new ledger.
    async with replicated_tier1(tmp_path, zk_hosts, stores=4, settings=SETTINGS) as cluster:
        # A long add timeout: A must not give up on the silent replicas before it "dies".
        tier_a = await start_tier1(zk_hosts, ReplicationSettings(ledger_size_max=1 << 30, add_timeout=30.0))
        try:
            a = await open_log(tier_a)
            acked = [record("a", n) for n in range(10)]
            assert await append_all(a, acked) == list(range(1, 11))
            assert a._ledger is not None
            ledger_id = a._ledger.id
            holder, *silent = (store_of(cluster, rid) for rid in a._ledger.ensemble)
            for store in silent:  # these two take ADDs and never answer (nor write them)
                store.store._add = lambda message, reply: None  # type: ignore[method-assign]
            tail = [record("t", n) for n in range(5)]
            futures = [a.append(payload) for payload in tail]
            await eventually(lambda: holder.store._journal.read(ledger_id, 14) is not None, "the tail on one replica",
                             timeout=5)
            assert not any(future.done() for future in futures)  # one replica of three: not acknowledged
            await tier_a.zk.stop()  # A dies
            for store in silent:
                del store.store._add
            if tail_replica == "is down":
                await cluster.stop_store(holder)

            b = await open_log(tier1_of(cluster))
            recovered = await read_all(b)
            if tail_replica == "answers":
                assert recovered == numbered(acked + tail)  # the tail it can see is recovered whole
            else:
                assert recovered == numbered(acked)  # none of it: the replicas it recovered from had none
                assert holder.replica_id not in b._chain.ledgers[-1].ensemble
                back = await cluster.start_store(index_of(holder))
                assert back.store._journal.read(ledger_id, 14) is not None  # the stale tail is still there
            chain = await chain_in_zookeeper(tier1_of(cluster))
            assert chain.ledgers[0].id == ledger_id and chain.ledgers[0].last_entry == len(recovered) - 1
            later = [record("b", n) for n in range(3)]
            first = len(recovered) + 1
            assert await append_all(b, later) == list(range(first, first + 3))
            await b.close()
            assert await reopen_and_read(tier1_of(cluster)) == recovered + numbered(later, first)
        finally:
            await tier_a.stop()
