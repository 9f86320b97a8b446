"""The log store over loopback: adds are durable before they are acknowledged and read back after a
restart, a fence refuses the old writer at once but not recovery re-replication, deletes hold,
a malformed frame closes only its connection, and a failing disk stops acknowledgements."""

from __future__ import annotations

import asyncio
import contextlib
import errno
import itertools
import os

import pytest

from server.tier1.logstore import protocol as p
from server.tier1.logstore.ledgers import StoreClient
from server.tier1.logstore.store import LogStore

pytestmark = pytest.mark.timeout(30)
_ids = itertools.count(1)


@contextlib.asynccontextmanager
async def serving(data_dir):
    """A log store on ``data_dir`` for the block, and a client connected to it (the writer's StoreClient)."""
    store = LogStore(data_dir)
    await store.start()
    client = await StoreClient.connect("127.0.0.1", store.port)
    try:
        yield store, client
    finally:
        client.close()
        await store.stop()


def add(ledger: int, entry: int, payload: bytes, flags: int = 0) -> p.Add:
    return p.Add(next(_ids), ledger, entry, entry - 1, flags, payload)


async def test_adds_are_acknowledged_in_groups_and_read_back_after_a_restart(tmp_path):
    async with serving(tmp_path) as (store, client):
        hello = await client.call(p.Hello(next(_ids), p.VERSION))
        assert isinstance(hello, p.HelloReply) and len(hello.replica_id) == 16
        # pipelined: many in one group commit
        replies = await asyncio.gather(*(client.call(add(7, entry, f"entry {entry}".encode())) for entry in range(50)))
        assert [(r.status, r.entry) for r in replies] == [(p.Status.OK, entry) for entry in range(50)]

    async with serving(tmp_path) as (store, client):
        assert (await client.call(p.Hello(next(_ids), p.VERSION))).replica_id == hello.replica_id  # same replica
        read = await client.call(p.Read(next(_ids), 7, 10, 12))
        assert read.status == p.Status.OK
        assert [(entry, bytes(data)) for entry, data in read.entries] == [
            (e, f"entry {e}".encode()) for e in (10, 11, 12)]
        beyond = await client.call(p.Read(next(_ids), 7, 50, 60))
        assert beyond.status == p.Status.NO_SUCH_ENTRY and beyond.entries == ()
        missing = await client.call(p.Read(next(_ids), 8, 0, 0))
        assert missing.status == p.Status.NO_SUCH_LEDGER


async def test_a_fence_refuses_the_old_writer_but_not_recovery_and_survives_a_restart(tmp_path):
    async with serving(tmp_path) as (store, writer):
        recoverer = await StoreClient.connect("127.0.0.1", store.port)
        for entry in range(3):
            assert (await writer.call(add(1, entry, b"x"))).status == p.Status.OK
        fenced = await recoverer.call(p.Fence(next(_ids), 1))
        assert (fenced.status, fenced.last_entry, fenced.last_add_confirmed) == (p.Status.OK, 2, 1)
        assert (await writer.call(add(1, 3, b"zombie"))).status == p.Status.FENCED
        assert (await recoverer.call(add(1, 3, b"recovered", flags=p.RECOVERY))).status == p.Status.OK
        recoverer.close()

    async with serving(tmp_path) as (store, writer):
        assert (await writer.call(add(1, 4, b"zombie again"))).status == p.Status.FENCED
        assert [bytes(data) for _, data in (await writer.call(p.Read(next(_ids), 1, 3, 9))).entries] == [b"recovered"]


async def test_an_add_behind_a_delete_in_the_same_group_is_refused_not_acknowledged_and_lost(tmp_path):
    """A DELETE and an ADD to its ledger in one loop turn (one group commit): the add must not be answered OK,
    since the index drops whatever follows the ledger's DELETE record."""
    async with serving(tmp_path) as (store, client):
        assert (await client.call(add(6, 0, b"x"))).status == p.Status.OK
        deleted, added = await asyncio.gather(client.call(p.Delete(next(_ids), 6)), client.call(add(6, 1, b"late")))
        assert deleted.status == p.Status.OK
        assert added.status == p.Status.NO_SUCH_LEDGER
        assert (await client.call(p.Read(next(_ids), 6, 0, 1))).status == p.Status.NO_SUCH_LEDGER


async def test_a_deleted_ledger_is_gone_and_takes_no_adds(tmp_path):
    async with serving(tmp_path) as (store, client):
        assert (await client.call(add(5, 0, b"x"))).status == p.Status.OK
        assert (await client.call(p.Delete(next(_ids), 5))).status == p.Status.OK
        assert (await client.call(p.Read(next(_ids), 5, 0, 0))).status == p.Status.NO_SUCH_LEDGER
        assert (await client.call(add(5, 1, b"y"))).status == p.Status.NO_SUCH_LEDGER


async def test_a_malformed_frame_closes_only_its_connection(tmp_path):
    async with serving(tmp_path) as (store, good):
        reader, writer = await asyncio.open_connection("127.0.0.1", store.port)
        writer.write(b"\x10\x00\x00\x00" + b"\xff" * 16)  # a frame whose checksum cannot match
        try:  # closed by the store, with no reply: an EOF, or a reset if the rest of the frame arrived after it
            assert await asyncio.wait_for(reader.read(), 5) == b""
        except ConnectionResetError:
            pass
        assert (await good.call(add(9, 0, b"still here"))).status == p.Status.OK
        writer.close()


async def test_a_failing_disk_stops_acknowledgements(tmp_path):
    async with serving(tmp_path) as (store, client):
        assert (await client.call(add(1, 0, b"ok"))).status == p.Status.OK

        def failing_fdatasync(fd):
            raise OSError(errno.EIO, "Input/output error")

        store._journal.sync = failing_fdatasync
        assert (await client.call(add(1, 1, b"lost"))).status == p.Status.UNAVAILABLE
        store._journal.sync = os.fdatasync
        assert (await client.call(add(1, 2, b"later"))).status == p.Status.UNAVAILABLE  # stays failed
        assert (await client.call(p.Fence(next(_ids), 1))).status == p.Status.UNAVAILABLE
        assert [entry for entry, _ in (await client.call(p.Read(next(_ids), 1, 0, 5))).entries] == [0]
