"""Every request of the wire protocol and every error reply, over real sockets, against the real
segment store (local durable log in a temporary data dir)."""

from __future__ import annotations

import asyncio
import uuid

import pytest

from clients.connection import WireConnection, next_request_id
from wire import commands as c
from wire.constants import NO_VERSION, NOT_EXISTS, NULL_ATTRIBUTE_VALUE
from wire.envelope import envelope, envelope_all
from tests.support.segment_store import running_segment_store
from tests.support.waiting import eventually

SEGMENT = "scope/stream/0.#epoch.0"
TABLE = "scope/rg_kvtable/0.#epoch.0"


@pytest.fixture
async def store(tmp_path):
    async with running_segment_store(tmp_path, container_count=3, tail_read_timeout=3.0) as service:
        yield service


@pytest.fixture
async def client(store):
    connection = await WireConnection.connect("127.0.0.1", store.port)
    yield connection
    await connection.close()


def rid() -> int:
    return next_request_id()


async def create(client, name=SEGMENT):
    reply = await client.request(c.CreateSegment(rid(), name, 0, 0, ""))
    assert isinstance(reply, c.SegmentCreated), reply


async def append_events(client, segment, events, writer=None, first_event_number=1):
    """SetupAppend then one AppendBlockEnd carrying ``events``; returns the DataAppended."""
    writer = writer or uuid.uuid4()
    setup = await client.request(c.SetupAppend(rid(), writer, segment, ""))
    assert isinstance(setup, c.AppendSetup), setup
    data = envelope_all(events)
    request_id = rid()
    future = client.expect(request_id)
    client.send(c.AppendBlockEnd(writer, len(data), data, len(events), first_event_number + len(events) - 1,
                                 request_id))
    return await asyncio.wait_for(future, 10)


async def test_hello_is_answered_with_version_15_5(store):
    """The server answers Hello with (15, 5)."""
    connection = await WireConnection.connect("127.0.0.1", store.port)
    assert connection.server_versions == (15, 5)
    await connection.close()


async def test_keep_alive_is_echoed(client):
    """KeepAlive is answered with KeepAlive."""
    future = client.expect(-1)
    client.send(c.KeepAlive())
    assert await asyncio.wait_for(future, 5) == c.KeepAlive()


async def test_create_append_read_info(client):
    """Appended events read back exactly; info reports the length; reads at the tail report atTail."""
    await create(client)
    ack = await append_events(client, SEGMENT, [b"one", b"two"])
    data = envelope_all([b"one", b"two"])
    assert isinstance(ack, c.DataAppended)
    assert (ack.event_number, ack.previous_event_number, ack.current_segment_write_offset) == (
        2, NULL_ATTRIBUTE_VALUE, len(data))
    read = await client.request(c.ReadSegment(SEGMENT, 0, 1024, "", rid()))
    assert bytes(read.data) == data and read.at_tail and not read.end_of_segment and read.offset == 0
    info = await client.request(c.GetStreamSegmentInfo(rid(), SEGMENT, ""))
    assert (info.exists, info.is_sealed, info.write_offset, info.start_offset) == (True, False, len(data), 0)
    partial = await client.request(c.ReadSegment(SEGMENT, 3, 4, "", rid()))
    assert bytes(partial.data) == data[3:11] and not partial.at_tail  # 8 is the minimum read size


async def test_create_existing_and_missing_segment_errors(client):
    """SegmentAlreadyExists on a second create; NoSuchSegment for info, read, seal and delete of a missing one."""
    await create(client)
    again = await client.request(c.CreateSegment(rid(), SEGMENT, 0, 0, ""))
    assert isinstance(again, c.SegmentAlreadyExists) and again.segment == SEGMENT
    missing = "scope/stream/9.#epoch.0"
    for request, offset in [(c.GetStreamSegmentInfo(rid(), missing, ""), -1),
                            (c.ReadSegment(missing, 5, 10, "", rid()), 5),
                            (c.SealSegment(rid(), missing, ""), -1),
                            (c.DeleteSegment(rid(), missing, ""), -1),
                            (c.GetSegmentAttribute(rid(), missing, uuid.uuid4(), ""), -1)]:
        reply = await client.request(request)
        assert isinstance(reply, c.NoSuchSegment), reply
        assert reply.segment == missing and reply.offset == offset


async def test_invalid_segment_name_gets_error_message(client):
    """An invalid name is answered with ErrorMessage (illegal argument)."""
    for name in ["", "a//b", "/abs", "x" * 3000, "bad\x00name"]:
        reply = await client.request(c.CreateSegment(rid(), name, 0, 0, ""))
        assert isinstance(reply, c.ErrorMessage) and reply.error_code == 0, reply


async def park_tail_read(reader, segment, suggested_length):
    """Sends a ReadSegment at the tail and returns its reply's future once the server has taken the read.

    A request sent after it on the same connection is answered: the server dispatches a connection's
    frames in arrival order and never lets a waiting read block later ones, so by then the read is
    being handled (instead of sleeping and hoping it is)."""
    request_id = rid()
    read = reader.expect(request_id)
    reader.send(c.ReadSegment(segment, 0, suggested_length, "", request_id))
    info = await reader.request(c.GetStreamSegmentInfo(rid(), segment, ""))
    assert isinstance(info, c.StreamSegmentInfo) and info.write_offset == 0, info
    return read


async def test_tail_read_waits_for_data(client, store):
    """A read at the tail is held until an append arrives, then answered with the new bytes."""
    await create(client)
    reader = await WireConnection.connect("127.0.0.1", store.port)
    try:
        read = await park_tail_read(reader, SEGMENT, 1 << 20)
        assert not read.done()  # and an early answer could not carry the data checked below
        await append_events(client, SEGMENT, [b"late"])
        reply = await asyncio.wait_for(read, 5)
        assert bytes(reply.data) == envelope(b"late") and reply.at_tail
    finally:
        await reader.close()


async def test_tail_read_is_answered_when_the_segment_is_sealed(client, store):
    """A parked tail read gets SegmentIsSealed when the segment is sealed under it."""
    await create(client)
    reader = await WireConnection.connect("127.0.0.1", store.port)
    try:
        read = await park_tail_read(reader, SEGMENT, 100)
        assert isinstance(await client.request(c.SealSegment(rid(), SEGMENT, "")), c.SegmentSealed)
        reply = await asyncio.wait_for(read, 5)
        assert isinstance(reply, c.SegmentIsSealed) and reply.offset == 0
    finally:
        await reader.close()


async def test_seal_then_appends_fail_and_reads_end(client):
    """After a seal: SegmentIsSealed for appends (offset = event number) and for a second seal;
    a read at the end reports endOfSegment; a read beyond it SegmentIsSealed."""
    await create(client)
    await append_events(client, SEGMENT, [b"a"])
    assert isinstance(await client.request(c.SealSegment(rid(), SEGMENT, "")), c.SegmentSealed)
    again = await client.request(c.SealSegment(rid(), SEGMENT, ""))
    assert isinstance(again, c.SegmentIsSealed) and again.offset == -1
    rejected = await append_events(client, SEGMENT, [b"b"], first_event_number=7)
    assert isinstance(rejected, c.SegmentIsSealed) and rejected.offset == 7
    length = len(envelope(b"a"))
    whole = await client.request(c.ReadSegment(SEGMENT, 0, 100, "", rid()))
    assert whole.end_of_segment and not whole.at_tail and bytes(whole.data) == envelope(b"a")
    end = await client.request(c.ReadSegment(SEGMENT, length, 100, "", rid()))
    assert end.end_of_segment and len(end.data) == 0
    beyond = await client.request(c.ReadSegment(SEGMENT, length + 5, 100, "", rid()))
    assert isinstance(beyond, c.SegmentIsSealed)


async def test_truncate(client):
    """Truncation raises the start offset; reads below it get SegmentIsTruncated; bad offsets are refused."""
    await create(client)
    await append_events(client, SEGMENT, [b"x" * 10, b"y" * 10])
    assert isinstance(await client.request(c.TruncateSegment(rid(), SEGMENT, 18, "")), c.SegmentTruncated)
    info = await client.request(c.GetStreamSegmentInfo(rid(), SEGMENT, ""))
    assert info.start_offset == 18
    below = await client.request(c.ReadSegment(SEGMENT, 0, 100, "", rid()))
    assert isinstance(below, c.SegmentIsTruncated) and below.start_offset == 18 and below.offset == 0
    read = await client.request(c.ReadSegment(SEGMENT, 18, 100, "", rid()))
    assert bytes(read.data) == envelope(b"y" * 10)
    for bad in (17, 1000):
        reply = await client.request(c.TruncateSegment(rid(), SEGMENT, bad, ""))
        assert isinstance(reply, c.SegmentIsTruncated) and reply.offset == bad and reply.start_offset == 18


async def test_attributes_compare_and_set(client):
    """Get/UpdateSegmentAttribute: unset reads MIN; CAS succeeds only on the expected value."""
    await create(client)
    attribute = uuid.uuid4()
    assert (await client.request(c.GetSegmentAttribute(rid(), SEGMENT, attribute, ""))).value == NULL_ATTRIBUTE_VALUE
    ok = await client.request(c.UpdateSegmentAttribute(rid(), SEGMENT, attribute, 5, NULL_ATTRIBUTE_VALUE, ""))
    assert ok == c.SegmentAttributeUpdated(ok.request_id, True)
    stale = await client.request(c.UpdateSegmentAttribute(rid(), SEGMENT, attribute, 6, NULL_ATTRIBUTE_VALUE, ""))
    assert stale.success is False
    assert (await client.request(c.GetSegmentAttribute(rid(), SEGMENT, attribute, ""))).value == 5


async def test_writer_dedup_and_setup_returns_last_event_number(client, store):
    """SetupAppend returns the writer's last stored event number; a zombie writer on a second
    connection gets InvalidEventNumber and is disconnected."""
    await create(client)
    writer = uuid.uuid4()
    await append_events(client, SEGMENT, [b"1", b"2", b"3"], writer=writer)
    other = await WireConnection.connect("127.0.0.1", store.port)
    try:
        setup = await other.request(c.SetupAppend(rid(), writer, SEGMENT, ""))
        assert setup.last_event_number == 3
        # The first connection's writer state still believes the last event is 3: appending event 4
        # from both makes the second one a zombie.
        ack = await append_events(other, SEGMENT, [b"4"], writer=writer, first_event_number=4)
        assert isinstance(ack, c.DataAppended) and ack.previous_event_number == 3
        request_id = rid()
        future = client.expect(request_id)
        client.send(c.AppendBlockEnd(writer, 9, envelope(b"Z"), 1, 4, request_id))
        zombie = await asyncio.wait_for(future, 5)
        assert isinstance(zombie, c.InvalidEventNumber) and zombie.event_number == 4
    finally:
        await other.close()
    read = await _read_all(store, SEGMENT)
    assert read == envelope_all([b"1", b"2", b"3", b"4"])


async def _read_all(store, segment) -> bytes:
    connection = await WireConnection.connect("127.0.0.1", store.port)
    try:
        info = await connection.request(c.GetStreamSegmentInfo(rid(), segment, ""))
        data, offset = b"", info.start_offset
        while offset < info.write_offset:
            reply = await connection.request(c.ReadSegment(segment, offset, 1 << 21, "", rid()))
            data += bytes(reply.data)
            offset += len(reply.data)
        return data
    finally:
        await connection.close()


async def test_conditional_block_end(client):
    """ConditionalBlockEnd appends only at the expected offset; a mismatch gets ConditionalCheckFailed
    and the connection stays usable."""
    await create(client)
    writer = uuid.uuid4()
    await client.request(c.SetupAppend(rid(), writer, SEGMENT, ""))
    for event_number, expected, data, reply_type in [(0, 0, b"abc", c.DataAppended), (1, 0, b"zz", c.ConditionalCheckFailed),
                                                      (1, 3, b"de", c.DataAppended)]:
        request_id = rid()
        future = client.expect(request_id)
        client.send(c.ConditionalBlockEnd(writer, event_number, expected, data, request_id))
        reply = await asyncio.wait_for(future, 5)
        assert isinstance(reply, reply_type), reply
    assert await _read_all_via(client, SEGMENT) == b"abcde"


async def _read_all_via(client, segment) -> bytes:
    reply = await client.request(c.ReadSegment(segment, 0, 1 << 20, "", rid()))
    return bytes(reply.data)


async def test_conditional_append_appends_the_envelope(client):
    """ConditionalAppend (Java clients) appends the event with its 8-byte header."""
    await create(client)
    writer = uuid.uuid4()
    await client.request(c.SetupAppend(rid(), writer, SEGMENT, ""))
    request_id = rid()
    future = client.expect(request_id)
    client.send(c.ConditionalAppend(writer, 1, 0, b"event", request_id))
    assert isinstance(await asyncio.wait_for(future, 5), c.DataAppended)
    assert await _read_all_via(client, SEGMENT) == envelope(b"event")


async def test_append_without_setup_closes_only_that_connection(client, store):
    """An append from an unknown writer closes its connection; other connections keep working."""
    await create(client)
    bad = await WireConnection.connect("127.0.0.1", store.port)
    future = bad.expect(5)
    bad.send(c.AppendBlockEnd(uuid.uuid4(), 9, envelope(b"x"), 1, 1, 5))
    with pytest.raises(Exception):
        await asyncio.wait_for(future, 5)
    assert bad.closed
    info = await client.request(c.GetStreamSegmentInfo(rid(), SEGMENT, ""))
    assert info.write_offset == 0


async def test_merge_segments_and_retry(client):
    """A transaction segment merges into its parent atomically; EVENT_COUNT adds up; a retried merge
    answers success; the source is gone."""
    await create(client)
    txn = SEGMENT + "#transaction." + "0" * 31 + "1"
    await create(client, txn)
    await append_events(client, SEGMENT, [b"p"])
    await append_events(client, txn, [b"t1", b"t2"])
    merged = await client.request(c.MergeSegments(rid(), SEGMENT, txn, ""))
    expected = envelope_all([b"p", b"t1", b"t2"])
    assert isinstance(merged, c.SegmentsMerged) and merged.new_target_write_offset == len(expected)
    assert await _read_all_via(client, SEGMENT) == expected
    retry = await client.request(c.MergeSegments(rid(), SEGMENT, txn, ""))
    assert isinstance(retry, c.SegmentsMerged) and retry.new_target_write_offset == len(expected)
    gone = await client.request(c.GetStreamSegmentInfo(rid(), txn, ""))
    assert isinstance(gone, c.NoSuchSegment)
    from server.containers.attributes import EVENT_COUNT
    count = await client.request(c.GetSegmentAttribute(rid(), SEGMENT, EVENT_COUNT, ""))
    assert count.value == 3


async def test_merge_into_sealed_target_and_missing_source(client):
    """Merge errors name the source: target sealed -> SegmentIsSealed, missing -> NoSuchSegment."""
    await create(client)
    source = SEGMENT + "#transaction." + "0" * 31 + "2"
    await create(client, source)
    await client.request(c.SealSegment(rid(), SEGMENT, ""))
    sealed = await client.request(c.MergeSegments(rid(), SEGMENT, source, ""))
    assert isinstance(sealed, c.SegmentIsSealed) and sealed.segment == source
    missing = await client.request(c.MergeSegments(rid(), SEGMENT, "scope/stream/77.#epoch.0", ""))
    assert isinstance(missing, c.NoSuchSegment) and missing.segment == "scope/stream/77.#epoch.0"


async def test_merge_with_failed_attribute_condition(client):
    """A merge whose target attribute condition fails merges nothing: SegmentAttributeUpdated(false)."""
    await create(client)
    source = SEGMENT + "#transaction." + "0" * 31 + "3"
    await create(client, source)
    condition = c.ConditionalAttributeUpdate(uuid.uuid4(), 4, 1, 12345)
    reply = await client.request(c.MergeSegments(rid(), SEGMENT, source, "", (condition,)))
    assert reply == c.SegmentAttributeUpdated(reply.request_id, False)
    assert isinstance(await client.request(c.GetStreamSegmentInfo(rid(), source, "")), c.StreamSegmentInfo)


async def test_merge_segments_batch(client):
    """MergeSegmentsBatch merges in order and reports each source's resulting target length."""
    await create(client)
    sources = [SEGMENT + "#transaction." + f"{n:032x}" for n in (10, 11)]
    for index, source in enumerate(sources):
        await create(client, source)
        await append_events(client, source, [bytes([65 + index]) * 3])
    reply = await client.request(c.MergeSegmentsBatch(rid(), SEGMENT, sources + ["scope/stream/99.#epoch.0"], ""))
    assert isinstance(reply, c.SegmentsBatchMerged)
    assert [m.new_target_write_offset for m in reply.merged] == [11, 22, 22]
    assert await _read_all_via(client, SEGMENT) == envelope(b"AAA") + envelope(b"BBB")


async def test_transient_segment_large_event_flow(client):
    """The Rust large-event flow: CreateTransientSegment, SetupAppend (MIN), ConditionalBlockEnd chunks
    at explicit offsets, then MergeSegments: the parent gets one ordinary event."""
    await create(client)
    writer = uuid.uuid4()
    created = await client.request(c.CreateTransientSegment(rid(), writer, SEGMENT, ""))
    assert isinstance(created, c.SegmentCreated) and created.segment.startswith(SEGMENT + "#transient.")
    transient = created.segment
    setup = await client.request(c.SetupAppend(rid(), writer, transient, ""))
    assert setup.last_event_number == NULL_ATTRIBUTE_VALUE
    event = envelope(bytes(range(256)) * 1000)
    chunk = 100_000
    for number, start in enumerate(range(0, len(event), chunk)):
        request_id = rid()
        future = client.expect(request_id)
        client.send(c.ConditionalBlockEnd(writer, number, start, event[start:start + chunk], request_id))
        assert isinstance(await asyncio.wait_for(future, 5), c.DataAppended)
    merged = await client.request(c.MergeSegments(rid(), SEGMENT, transient, ""))
    assert merged.new_target_write_offset == len(event)
    assert await _read_all_via(client, SEGMENT) == event


async def test_merge_with_header(client):
    """Tributary's MergeSegmentsWithHeader writes the header right before the source's bytes, atomically."""
    await create(client)
    created = await client.request(c.CreateTransientSegment(rid(), uuid.uuid4(), SEGMENT, ""))
    writer = uuid.uuid4()
    await client.request(c.SetupAppend(rid(), writer, created.segment, ""))
    request_id = rid()
    future = client.expect(request_id)
    payload = b"P" * 5000
    client.send(c.ConditionalBlockEnd(writer, 0, 0, payload, request_id))
    await asyncio.wait_for(future, 5)
    header = envelope(payload)[:8]
    merged = await client.request(c.MergeSegmentsWithHeader(rid(), SEGMENT, created.segment, header, ""))
    assert merged.new_target_write_offset == 8 + len(payload)
    assert await _read_all_via(client, SEGMENT) == envelope(payload)


async def test_transient_segments_vanish_when_their_connection_closes(store, client):
    """Unmerged transient segments created on a connection are deleted when it closes."""
    await create(client)
    other = await WireConnection.connect("127.0.0.1", store.port)
    created = await other.request(c.CreateTransientSegment(rid(), uuid.uuid4(), SEGMENT, ""))
    await other.close()
    async def gone() -> bool:
        return isinstance(await client.request(c.GetStreamSegmentInfo(rid(), created.segment, "")), c.NoSuchSegment)

    await eventually(gone, "the transient segment to be deleted", timeout=2.5, interval=0.05)


async def test_update_segment_policy_and_delete(client):
    """UpdateSegmentPolicy answers SegmentPolicyUpdated; delete removes the segment."""
    await create(client)
    assert isinstance(await client.request(c.UpdateSegmentPolicy(rid(), SEGMENT, 100, 1, "")),
                      c.SegmentPolicyUpdated)
    assert isinstance(await client.request(c.DeleteSegment(rid(), SEGMENT, "")), c.SegmentDeleted)
    assert isinstance(await client.request(c.UpdateSegmentPolicy(rid(), SEGMENT, 100, 1, "")), c.NoSuchSegment)


async def test_admin_and_v17_requests(client):
    """FlushToStorage, ListStorageChunks and LocateOffset are answered; LocateOffset gives the first
    event boundary at or after the target (not the segment's length), NoSuchSegment for a missing one."""
    await create(client)
    await append_events(client, SEGMENT, [b"abc", b"defgh"])  # events at 0 and 11; length 24
    assert isinstance(await client.request(c.FlushToStorage(0, "", rid())), c.StorageFlushed)
    assert isinstance(await client.request(c.FlushToStorage(4096, "", rid())), c.WrongHost)  # not one of ours
    assert isinstance(await client.request(c.ListStorageChunks(SEGMENT, "", rid())), c.StorageChunksListed)
    located = {}
    for target in (-3, 0, 1, 5, 10, 11, 12, 23, 24, 99):
        reply = await client.request(c.LocateOffset(rid(), SEGMENT, target, ""))
        assert isinstance(reply, c.OffsetLocated) and reply.segment == SEGMENT, reply
        located[target] = reply.offset
    assert located == {-3: 0, 0: 0, 1: 11, 5: 11, 10: 11, 11: 11, 12: 24, 23: 24, 24: 24, 99: 24}
    missing = await client.request(c.LocateOffset(rid(), "scope/stream/9.#epoch.0", 5, ""))
    assert isinstance(missing, c.NoSuchSegment), missing


# ---------------------------------------------------------------- table segments


async def test_a_creation_raced_by_another_answers_exists_only_once_readable(store):
    """Two connections create the same segments at once: one gets Created, the other AlreadyExists, and
    whoever was told either can read the segment at once (the "exists" waits for the winner's creation
    to be durable)."""
    first, second = [await WireConnection.connect("127.0.0.1", store.port) for _ in range(2)]
    try:
        for number in range(50):
            for name, make in ((f"scope/race/{number}.#epoch.0", lambda name: c.CreateSegment(rid(), name, 0, 0, "")),
                               (f"scope/race{number}_kvtable/0.#epoch.0",
                                lambda name: c.CreateTableSegment(rid(), name, ""))):
                async def create_then_read(connection):
                    created = await connection.request(make(name))
                    return created, await connection.request(c.GetStreamSegmentInfo(rid(), name, ""))

                results = await asyncio.gather(create_then_read(first), create_then_read(second))
                assert sorted(type(created).__name__ for created, _ in results) == ["SegmentAlreadyExists",
                                                                                  "SegmentCreated"]
                assert all(isinstance(info, c.StreamSegmentInfo) and info.exists for _, info in results), results
    finally:
        await first.close()
        await second.close()


async def test_table_segment_lifecycle_and_versions(client):
    """Versions are byte offsets: an empty table given k -> v answers [0] and grows to 19 bytes;
    conditional updates check versions; reads return current versions; deletes honour mustBeEmpty."""
    assert isinstance(await client.request(c.CreateTableSegment(rid(), TABLE, "")), c.SegmentCreated)
    assert isinstance(await client.request(c.CreateTableSegment(rid(), TABLE, "")), c.SegmentAlreadyExists)
    updated = await client.request(c.UpdateTableEntries(rid(), TABLE, "", [c.TableEntry(b"k", NOT_EXISTS, b"v")]))
    assert updated.updated_versions == (0,)
    info = await client.request(c.GetTableSegmentInfo(rid(), TABLE, ""))
    assert (info.length, info.entry_count) == (19, 1)
    exists = await client.request(c.UpdateTableEntries(rid(), TABLE, "", [c.TableEntry(b"k", NOT_EXISTS, b"w")]))
    assert isinstance(exists, c.TableKeyBadVersion)
    missing = await client.request(c.UpdateTableEntries(rid(), TABLE, "", [c.TableEntry(b"m", 5, b"w")]))
    assert isinstance(missing, c.TableKeyDoesNotExist)
    second = await client.request(c.UpdateTableEntries(rid(), TABLE, "", [c.TableEntry(b"k", 0, b"v2"),
                                                                          c.TableEntry(b"j", NO_VERSION, b"x")]))
    assert second.updated_versions == (19, 39)
    read = await client.request(c.ReadTable(rid(), TABLE, "", [c.TableKey(b"k", NO_VERSION),
                                                                c.TableKey(b"nope", NO_VERSION)]))
    assert [(bytes(e.key), e.version, bytes(e.value)) for e in read.entries] == [(b"k", 19, b"v2"),
                                                                                 (b"nope", -1, b"")]
    not_empty = await client.request(c.DeleteTableSegment(rid(), TABLE, True, ""))
    assert isinstance(not_empty, c.TableSegmentNotEmpty)
    removed = await client.request(c.RemoveTableKeys(rid(), TABLE, "", [c.TableKey(b"k", 19), c.TableKey(b"j", NO_VERSION)]))
    assert isinstance(removed, c.TableKeysRemoved)
    assert isinstance(await client.request(c.DeleteTableSegment(rid(), TABLE, True, "")), c.SegmentDeleted)
    gone = await client.request(c.DeleteTableSegment(rid(), TABLE, False, ""))
    assert isinstance(gone, c.NoSuchSegment)


async def test_table_offset_condition(client):
    """tableSegmentOffset must equal the table length, else SegmentIsTruncated(length, offset)."""
    await client.request(c.CreateTableSegment(rid(), TABLE, ""))
    wrong = await client.request(c.UpdateTableEntries(rid(), TABLE, "", [c.TableEntry(b"a", NO_VERSION, b"1")], 7))
    assert isinstance(wrong, c.SegmentIsTruncated) and (wrong.start_offset, wrong.offset) == (0, 7)
    right = await client.request(c.UpdateTableEntries(rid(), TABLE, "", [c.TableEntry(b"a", NO_VERSION, b"1")], 0))
    assert right.updated_versions == (0,)


async def test_table_iteration_with_continuation_tokens(client):
    """ReadTableKeys/ReadTableEntries page through every live key exactly once, then an empty page."""
    await client.request(c.CreateTableSegment(rid(), TABLE, ""))
    keys = [f"key-{n}".encode() for n in range(57)]
    await client.request(c.UpdateTableEntries(rid(), TABLE, "", [c.TableEntry(k, NO_VERSION, k * 2) for k in keys]))
    await client.request(c.RemoveTableKeys(rid(), TABLE, "", [c.TableKey(keys[0], NO_VERSION)]))
    for request_type, reply_field in [(c.ReadTableKeys, "keys"), (c.ReadTableEntries, "entries")]:
        seen, token = [], b""
        while True:
            page = await client.request(request_type(rid(), TABLE, "", 10, token))
            items = getattr(page, reply_field)
            if not items:
                assert bytes(page.continuation_token) == b""
                break
            assert len(items) <= 10
            seen += [bytes(item.key) for item in items]
            token = bytes(page.continuation_token)
        assert sorted(seen) == sorted(keys[1:])


async def test_table_delta_reads(client):
    """ReadTableEntriesDelta follows the change log: latest version per key, removals not reported,
    paged by suggestedEntryCount, lastPosition resumes."""
    await client.request(c.CreateTableSegment(rid(), TABLE, ""))
    await client.request(c.UpdateTableEntries(rid(), TABLE, "", [c.TableEntry(b"a", NO_VERSION, b"1")]))
    await client.request(c.UpdateTableEntries(rid(), TABLE, "", [c.TableEntry(b"b", NO_VERSION, b"2")]))
    await client.request(c.UpdateTableEntries(rid(), TABLE, "", [c.TableEntry(b"a", NO_VERSION, b"3")]))
    await client.request(c.RemoveTableKeys(rid(), TABLE, "", [c.TableKey(b"b", NO_VERSION)]))
    page = await client.request(c.ReadTableEntriesDelta(rid(), TABLE, "", 0, 10))
    # Records are 17 + key + value bytes: a@0, b@19, a@38, then b's removal (18 bytes) ends at 75.
    assert [(bytes(e.key), bytes(e.value), e.version) for e in page.entries] == [(b"a", b"3", 38)]
    assert page.reached_end and page.last_position == 75
    small = await client.request(c.ReadTableEntriesDelta(rid(), TABLE, "", 0, 1))
    assert len(small.entries) == 1 and small.last_position == 19 and not small.reached_end
    empty = await client.request(c.ReadTableEntriesDelta(rid(), TABLE, "", 75, 10))
    assert (list(empty.entries), empty.last_position, empty.reached_end) == ([], 0, True)
    beyond = await client.request(c.ReadTableEntriesDelta(rid(), TABLE, "", 500, 10))
    assert isinstance(beyond, c.ErrorMessage)


async def test_table_requests_on_missing_table(client):
    """Table requests on a missing table get NoSuchSegment."""
    for request in [c.ReadTable(rid(), TABLE, "", [c.TableKey(b"k", NO_VERSION)]),
                    c.UpdateTableEntries(rid(), TABLE, "", [c.TableEntry(b"k", NO_VERSION, b"v")]),
                    c.ReadTableEntriesDelta(rid(), TABLE, "", 0, 10),
                    c.GetTableSegmentInfo(rid(), TABLE, "")]:
        assert isinstance(await client.request(request), c.NoSuchSegment), request


async def test_duplicate_appends_are_acknowledged_without_being_written_twice(client, store):
    """A block resent after a lost ack (same or lower event numbers), on the same connection or after
    reconnecting, is acknowledged and not appended again."""
    await create(client)
    writer = uuid.uuid4()
    await append_events(client, SEGMENT, [b"1", b"2", b"3"], writer=writer)
    resend = envelope_all([b"2", b"3"])
    request_id = rid()
    future = client.expect(request_id)
    client.send(c.AppendBlockEnd(writer, len(resend), resend, 2, 3, request_id))
    ack = await asyncio.wait_for(future, 5)
    assert isinstance(ack, c.DataAppended) and ack.event_number == 3
    other = await WireConnection.connect("127.0.0.1", store.port)
    try:
        assert (await other.request(c.SetupAppend(rid(), writer, SEGMENT, ""))).last_event_number == 3
        again = await other.request(c.AppendBlockEnd(writer, 9, envelope(b"1"), 1, 1, rid()))
        assert isinstance(again, c.DataAppended) and again.event_number == 1
        fresh = await other.request(c.AppendBlockEnd(writer, 9, envelope(b"4"), 1, 4, rid()))
        assert isinstance(fresh, c.DataAppended) and fresh.previous_event_number == 3
    finally:
        await other.close()
    assert await _read_all(store, SEGMENT) == envelope_all([b"1", b"2", b"3", b"4"])
