"""Quorum appends and ledger recovery against three real log stores on loopback: entries are
acknowledged in order once two of three hold them, a lost replica leaves the writer degraded but
writing, recovery finds every acknowledged entry (and a lone unacknowledged one it can see), writes it
back everywhere, and fences the old writer out."""

from __future__ import annotations

import asyncio
import time

import pytest

from server.tier1.logstore import protocol as p
from server.tier1.logstore.ledgers import LedgerBroken, LedgerFenced, LedgerWriter, StoreClient, recover
from server.tier1.logstore.store import LogStore
from tests.support.waiting import eventually

pytestmark = pytest.mark.timeout(30)


@pytest.fixture
async def stores(tmp_path):
    started = []
    for index in range(3):
        store = LogStore(tmp_path / f"store-{index}")
        await store.start()
        started.append(store)
    yield started
    for store in started:
        await store.stop()


async def clients(stores) -> list[StoreClient]:
    return [await StoreClient.connect("127.0.0.1", store.port) for store in stores]


async def entries_on(store: LogStore, ledger: int, last: int) -> list[bytes]:
    (client,) = await clients([store])
    reply = await client.call(p.Read(99, ledger, 0, last))
    client.close()
    return [bytes(data) for _, data in reply.entries]


async def entries_within(store: LogStore, ledger: int, last: int, expected: list[bytes]) -> list[bytes]:
    """The store's entries once they equal ``expected``; fails if they do not within 2 s (a replica beyond the
    ack quorum may still be writing when the writer's acknowledgements arrive)."""
    current: list[bytes] = []

    async def caught_up() -> bool:
        nonlocal current
        current = await entries_on(store, ledger, last)
        return current == expected

    await eventually(caught_up, f"ledger {ledger} on a replica to hold the {len(expected)} entries written",
                     timeout=2, interval=0.02)
    return current


async def test_entries_are_acknowledged_in_order_on_a_quorum(stores):
    writer = LedgerWriter(1, await clients(stores), ack_quorum=2)
    acknowledged = await asyncio.gather(*(writer.append(f"e{n}".encode()) for n in range(100)))
    assert acknowledged == list(range(100)) and writer.last_add_confirmed == 99
    for store in stores:  # write quorum = ensemble: every replica gets every entry (the third, after the acks)
        expected = [f"e{n}".encode() for n in range(100)]
        assert await entries_within(store, 1, 99, expected) == expected


async def test_a_lost_replica_degrades_the_writer_and_two_lost_break_it(stores):
    replicas = await clients(stores)
    writer = LedgerWriter(2, replicas, ack_quorum=2)
    assert await writer.append(b"a") == 0
    await stores[2].stop()
    assert await writer.append(b"b") == 1  # two replicas still acknowledge
    assert writer.degraded
    await stores[1].stop()
    with pytest.raises(LedgerBroken):
        await writer.append(b"c")
    with pytest.raises(LedgerBroken):
        await writer.append(b"d")  # and it stays broken
    stores[1:] = []  # already stopped


async def test_recovery_keeps_every_acknowledged_entry_and_fences_the_old_writer(stores):
    old = LedgerWriter(3, await clients(stores), ack_quorum=2)
    for n in range(10):
        await old.append(f"e{n}".encode())
    (lone,) = await clients(stores[:1])  # entry 10 reached one replica only before the writer died
    assert (await lone.call(p.Add(1, 3, 10, 9, 0, b"e10"))).status == p.Status.OK

    last = await recover(3, await clients(stores), ack_quorum=2)
    assert last == 10
    for store in stores:  # written back everywhere
        expected = [f"e{n}".encode() for n in range(11)]
        assert await entries_within(store, 3, 20, expected) == expected
    with pytest.raises(LedgerFenced):
        await old.append(b"zombie")


async def test_recovery_needs_enough_replicas_to_decide(stores):
    writer = LedgerWriter(4, await clients(stores), ack_quorum=2)
    await writer.append(b"x")
    replicas = await clients(stores)
    await stores[1].stop()
    await stores[2].stop()
    stores[1:] = []
    with pytest.raises(LedgerBroken):  # one replica of three cannot tell what two might have acknowledged
        await recover(4, replicas, ack_quorum=2)


class _Replica:
    """A replica whose answers the test gives (``calls``: each request and the future of its answer)."""

    def __init__(self) -> None:
        self.calls: list[tuple[p.Message, asyncio.Future[p.Message]]] = []

    def call(self, message: p.Message, frame=None) -> asyncio.Future[p.Message]:
        future: asyncio.Future[p.Message] = asyncio.get_running_loop().create_future()
        self.calls.append((message, future))
        return future


async def test_a_stall_of_the_writer_s_own_loop_times_no_replica_out():
    """The writer's loop stalls (a GC pause) past the add timeout with an add in flight, and every replica answers
    meanwhile. Once the loop runs again the answers are read in the same turn as the add-timeout timer comes due,
    and asyncio runs that timer before the callbacks that count them: the replicas must not be dropped as timed out
    (the log would roll away from every one of them, and quarantine them for 30 s, for a stall of its own)."""
    replicas = [_Replica() for _ in range(3)]
    writer = LedgerWriter(1, replicas, ack_quorum=2, add_timeout=0.05)  # type: ignore[arg-type]
    acknowledged = writer.append(b"a")
    loop = asyncio.get_running_loop()

    def answer() -> None:  # as data_received does for each replica's reply
        for replica in replicas:
            message, future = replica.calls[-1]
            assert isinstance(message, p.Add)
            future.set_result(p.Added(message.request_id, p.Status.OK, message.ledger, message.entry))

    def stall() -> None:
        time.sleep(0.1)  # blocks the loop past the add timeout
        loop.call_soon(answer)  # the replies, read in the turn after the stall, ahead of the timers due by then

    loop.call_soon(stall)
    assert await asyncio.wait_for(acknowledged, 1) == 0
    assert not writer.failed and not writer.degraded


async def test_replicas_silent_for_the_add_timeout_of_running_time_after_a_stall_are_dropped():
    """After a stall of the writer's loop the replicas get a whole add timeout again, and no more: those that still
    do not answer are then dropped."""
    replicas = [_Replica() for _ in range(3)]
    writer = LedgerWriter(1, replicas, ack_quorum=2, add_timeout=0.05)  # type: ignore[arg-type]
    acknowledged = writer.append(b"a")
    loop = asyncio.get_running_loop()
    loop.call_soon(time.sleep, 0.1)  # the stall
    await asyncio.sleep(0.12)
    assert not writer.failed  # judged from the end of the stall: not yet
    message, future = replicas[0].calls[-1]
    assert isinstance(message, p.Add)
    future.set_result(p.Added(message.request_id, p.Status.OK, message.ledger, message.entry))
    with pytest.raises(LedgerBroken):
        await asyncio.wait_for(acknowledged, 1)
    assert list(writer.failed.values()) == ["timeout", "timeout"]
