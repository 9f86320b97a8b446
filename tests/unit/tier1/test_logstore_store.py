"""The log store over loopback: adds are durable before they are acknowledged and read back after a
restart, a fence refuses the old writer at once but not recovery re-replication, deletes hold,
a malformed frame closes only its connection, and a failing disk stops acknowledgements."""

from __future__ import annotations

import asyncio
import errno
import itertools
import os

import pytest

from server.tier1.logstore import protocol as p
from server.tier1.logstore.store import LogStore

pytestmark = pytest.mark.timeout(30)
_ids = itertools.count(1)


class Client:
    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter):
        self.reader, self.writer = reader, writer
        self.decoder = p.Decoder()
        self.received: list[p.Message] = []

    @classmethod
    async def connect(cls, store: LogStore) -> Client:
        return cls(*await asyncio.open_connection("127.0.0.1", store.port))

    def send(self, message: p.Message) -> None:
        self.writer.writelines(p.encode(message))

    async def next(self) -> p.Message:
        while not self.received:
            data = await self.reader.read(1 << 20)
            if not data:
                raise ConnectionError("closed")
            self.received += self.decoder.feed(data)
        return self.received.pop(0)

    async def call(self, message: p.Message) -> p.Message:
        self.send(message)
        return await self.next()

    async def close(self) -> None:
        self.writer.close()


def add(ledger: int, entry: int, payload: bytes, flags: int = 0) -> p.Add:
    return p.Add(next(_ids), ledger, entry, entry - 1, flags, payload)


async def test_adds_are_acknowledged_in_groups_and_read_back_after_a_restart(tmp_path):
    store = LogStore(tmp_path)
    await store.start()
    client = await Client.connect(store)
    hello = await client.call(p.Hello(next(_ids), p.VERSION))
    assert isinstance(hello, p.HelloReply) and len(hello.replica_id) == 16
    for entry in range(50):  # pipelined: many in one group commit
        client.send(add(7, entry, f"entry {entry}".encode()))
    replies = [await client.next() for _ in range(50)]
    assert [(r.status, r.entry) for r in replies] == [(p.Status.OK, entry) for entry in range(50)]
    await client.close()
    await store.stop()

    store = LogStore(tmp_path)
    await store.start()
    client = await Client.connect(store)
    assert (await client.call(p.Hello(next(_ids), p.VERSION))).replica_id == hello.replica_id  # same replica
    read = await client.call(p.Read(next(_ids), 7, 10, 12))
    assert read.status == p.Status.OK
    assert [(entry, bytes(data)) for entry, data in read.entries] == [(e, f"entry {e}".encode()) for e in (10, 11, 12)]
    beyond = await client.call(p.Read(next(_ids), 7, 50, 60))
    assert beyond.status == p.Status.NO_SUCH_ENTRY and beyond.entries == ()
    missing = await client.call(p.Read(next(_ids), 8, 0, 0))
    assert missing.status == p.Status.NO_SUCH_LEDGER
    await client.close()
    await store.stop()


async def test_a_fence_refuses_the_old_writer_but_not_recovery_and_survives_a_restart(tmp_path):
    store = LogStore(tmp_path)
    await store.start()
    writer = await Client.connect(store)
    recoverer = await Client.connect(store)
    for entry in range(3):
        assert (await writer.call(add(1, entry, b"x"))).status == p.Status.OK
    fenced = await recoverer.call(p.Fence(next(_ids), 1))
    assert (fenced.status, fenced.last_entry, fenced.last_add_confirmed) == (p.Status.OK, 2, 1)
    assert (await writer.call(add(1, 3, b"zombie"))).status == p.Status.FENCED
    assert (await recoverer.call(add(1, 3, b"recovered", flags=p.RECOVERY))).status == p.Status.OK
    await writer.close()
    await recoverer.close()
    await store.stop()

    store = LogStore(tmp_path)
    await store.start()
    writer = await Client.connect(store)
    assert (await writer.call(add(1, 4, b"zombie again"))).status == p.Status.FENCED
    assert [bytes(data) for _, data in (await writer.call(p.Read(next(_ids), 1, 3, 9))).entries] == [b"recovered"]
    await writer.close()
    await store.stop()


async def test_a_deleted_ledger_is_gone_and_takes_no_adds(tmp_path):
    store = LogStore(tmp_path)
    await store.start()
    client = await Client.connect(store)
    assert (await client.call(add(5, 0, b"x"))).status == p.Status.OK
    assert (await client.call(p.Delete(next(_ids), 5))).status == p.Status.OK
    assert (await client.call(p.Read(next(_ids), 5, 0, 0))).status == p.Status.NO_SUCH_LEDGER
    assert (await client.call(add(5, 1, b"y"))).status == p.Status.NO_SUCH_LEDGER
    await client.close()
    await store.stop()


async def test_a_malformed_frame_closes_only_its_connection(tmp_path):
    store = LogStore(tmp_path)
    await store.start()
    good, bad = await Client.connect(store), await Client.connect(store)
    bad.writer.write(b"\x10\x00\x00\x00" + b"\xff" * 16)  # a frame whose checksum cannot match
    with pytest.raises(ConnectionError):
        await bad.next()
    assert (await good.call(add(9, 0, b"still here"))).status == p.Status.OK
    await good.close()
    await store.stop()


async def test_a_failing_disk_stops_acknowledgements(tmp_path, monkeypatch):
    store = LogStore(tmp_path)
    await store.start()
    client = await Client.connect(store)
    assert (await client.call(add(1, 0, b"ok"))).status == p.Status.OK

    def failing_fdatasync(fd):
        raise OSError(errno.EIO, "Input/output error")

    monkeypatch.setattr(os, "fdatasync", failing_fdatasync)
    assert (await client.call(add(1, 1, b"lost"))).status == p.Status.UNAVAILABLE
    monkeypatch.undo()
    assert (await client.call(add(1, 2, b"later"))).status == p.Status.UNAVAILABLE  # stays failed
    assert (await client.call(p.Fence(next(_ids), 1))).status == p.Status.UNAVAILABLE
    assert [entry for entry, _ in (await client.call(p.Read(next(_ids), 1, 0, 5))).entries] == [0]
    await client.close()
    await store.stop()
