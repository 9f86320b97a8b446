"""Java-client features of our controller over gRPC: controller-managed reader groups and their
subscriptions (spec §4.7), writer marks (§4.8) and key-value tables (§4.9), with every status."""

from __future__ import annotations

import uuid

import grpc
import pytest

from clients.errors import NoSuchSegment
from controller_api import controller_pb2 as pb
from tests.support.controller_harness import info, make_stream, running_cluster
from wire import naming

SCOPE, STREAM = "groups", "s"
NIL = str(uuid.UUID(int=0))


@pytest.fixture
async def cluster(tmp_path):
    async with running_cluster(tmp_path / "data") as running:
        await make_stream(running.stub, SCOPE, STREAM, 2)
        yield running


def group_config(name: str, retention: int = 0, generation: int = 0, group_id: str = NIL,
                 cut: dict | None = None) -> pb.ReaderGroupConfiguration:
    return pb.ReaderGroupConfiguration(
        scope=SCOPE, readerGroupName=name, groupRefreshTimeMillis=3000, automaticCheckpointIntervalMillis=30000,
        maxOutstandingCheckpointRequest=3, retentionType=retention, generation=generation, readerGroupId=group_id,
        startingStreamCuts=[pb.StreamCut(streamInfo=info(SCOPE, STREAM), cut=cut if cut is not None else {0: 0, 1: 0})])


async def subscribers(stub) -> list[str]:
    reply = await stub.listSubscribers(info(SCOPE, STREAM))
    assert reply.status == pb.SubscribersResponse.SUCCESS
    return sorted(reply.subscribers)


async def test_reader_group_life_cycle(cluster):
    """Create assigns an id and generation 0 (a second create returns the stored config), updates
    bump the generation and fix subscriptions, delete removes the group and its _RG stream."""
    stub = cluster.stub
    created = await stub.createReaderGroup(group_config("rg", retention=1))
    assert created.status == pb.CreateReaderGroupResponse.SUCCESS
    group_id = created.config.readerGroupId
    assert group_id != NIL and created.config.generation == 0
    again = await stub.createReaderGroup(group_config("rg", retention=0))
    assert again.config.readerGroupId == group_id and again.config.retentionType == 1
    streams = await stub.listStreamsInScope(pb.StreamsInScopeRequest(scope=pb.ScopeInfo(scope=SCOPE)))
    assert "_RGrg" in [s.stream for s in streams.streams]
    assert await subscribers(stub) == [f"{SCOPE}/rg"]

    fetched = await stub.getReaderGroupConfig(pb.ReaderGroupInfo(scope=SCOPE, readerGroup="rg"))
    assert fetched.status == pb.ReaderGroupConfigResponse.SUCCESS and fetched.config == created.config
    missing = await stub.getReaderGroupConfig(pb.ReaderGroupInfo(scope=SCOPE, readerGroup="nope"))
    assert missing.status == pb.ReaderGroupConfigResponse.RG_NOT_FOUND

    U = pb.UpdateReaderGroupResponse
    stale = await stub.updateReaderGroup(group_config("rg", retention=0, generation=5, group_id=group_id))
    assert stale.status == U.INVALID_CONFIG
    wrong_id = await stub.updateReaderGroup(group_config("rg", generation=0, group_id=str(uuid.uuid4())))
    assert wrong_id.status == U.INVALID_CONFIG
    updated = await stub.updateReaderGroup(group_config("rg", retention=0, generation=0, group_id=group_id))
    assert (updated.status, updated.generation) == (U.SUCCESS, 1)
    assert await subscribers(stub) == []  # retention NONE: no subscription
    assert (await stub.updateReaderGroup(group_config("nope"))).status == U.RG_NOT_FOUND

    D = pb.DeleteReaderGroupStatus
    wrong = await stub.deleteReaderGroup(pb.ReaderGroupInfo(scope=SCOPE, readerGroup="rg",
                                                            readerGroupId=str(uuid.uuid4())))
    assert wrong.status == D.RG_NOT_FOUND
    deleted = await stub.deleteReaderGroup(pb.ReaderGroupInfo(scope=SCOPE, readerGroup="rg", readerGroupId=group_id))
    assert deleted.status == D.SUCCESS
    assert not (await stub.checkStreamExists(info(SCOPE, "_RGrg"))).exists


async def test_create_reader_group_statuses(cluster):
    C = pb.CreateReaderGroupResponse
    assert (await cluster.stub.createReaderGroup(group_config("bad name"))).status == C.INVALID_RG_NAME
    missing_scope = group_config("rg")
    missing_scope.scope = "nope"
    assert (await cluster.stub.createReaderGroup(missing_scope)).status == C.SCOPE_NOT_FOUND


async def test_subscriber_stream_cuts(cluster):
    """updateSubscriberStreamCut: SUCCESS moving forward; STREAM_CUT_NOT_VALID for a malformed or
    backward cut; GENERATION_MISMATCH; SUBSCRIBER_NOT_FOUND for another group id; STREAM_NOT_FOUND."""
    stub = cluster.stub
    created = await stub.createReaderGroup(group_config("sub", retention=2))
    group_id = created.config.readerGroupId
    S = pb.UpdateSubscriberStatus

    async def update(cut, generation=0, subscriber=f"{SCOPE}/sub", stream=STREAM, reader_group_id=group_id):
        return (await stub.updateSubscriberStreamCut(pb.SubscriberStreamCut(
            subscriber=subscriber, generation=generation, readerGroupId=reader_group_id,
            streamCut=pb.StreamCut(streamInfo=info(SCOPE, stream), cut=cut)))).status

    assert await update({0: 10, 1: 10}) == S.SUCCESS
    assert await update({0: 5, 1: 10}) == S.STREAM_CUT_NOT_VALID
    assert await update({0: 10}) == S.STREAM_CUT_NOT_VALID
    assert await update({0: 20, 1: 20}, generation=3) == S.GENERATION_MISMATCH
    assert await update({0: 20, 1: 20}, reader_group_id=str(uuid.uuid4())) == S.SUBSCRIBER_NOT_FOUND
    assert await update({0: 20, 1: 20}, subscriber=f"{SCOPE}/other") == S.SUBSCRIBER_NOT_FOUND
    assert await update({0: 20, 1: 20}, stream="missing") == S.STREAM_NOT_FOUND
    missing = await stub.listSubscribers(info(SCOPE, "missing"))
    assert missing.status == pb.SubscribersResponse.STREAM_NOT_FOUND


async def test_writer_marks(cluster):
    """noteTimestampFromWriter refuses time and position going back; removeWriter knows its writers."""
    stub = cluster.stub
    T = pb.TimestampResponse

    async def note(writer, timestamp, cut):
        return (await stub.noteTimestampFromWriter(pb.TimestampFromWriter(
            writer=writer, timestamp=timestamp,
            position=pb.StreamCut(streamInfo=info(SCOPE, STREAM), cut=cut)))).result

    assert await note("w1", 100, {0: 10, 1: 10}) == T.SUCCESS
    assert await note("w1", 200, {0: 20, 1: 10}) == T.SUCCESS
    assert await note("w1", 150, {0: 30, 1: 30}) == T.INVALID_TIME
    assert await note("w1", 300, {0: 5, 1: 30}) == T.INVALID_POSITION
    assert await note("w1", 300, {0: 1, 1: 1}) == T.INVALID_POSITION
    R = pb.RemoveWriterResponse
    assert (await stub.removeWriter(pb.RemoveWriterRequest(writer="w1", stream=info(SCOPE, STREAM)))).result == R.SUCCESS
    assert (await stub.removeWriter(pb.RemoveWriterRequest(writer="w9",
                                                           stream=info(SCOPE, STREAM)))).result == R.UNKNOWN_WRITER


async def test_key_value_tables(cluster):
    """Create (partitions tile [0, 1]), exists, list, configuration, delete, and their statuses."""
    stub = cluster.stub
    C = pb.CreateKeyValueTableStatus
    config = pb.KeyValueTableConfig(scope=SCOPE, kvtName="table", partitionCount=3, primaryKeyLength=8,
                                    secondaryKeyLength=4)
    assert (await stub.createKeyValueTable(config)).status == C.SUCCESS
    assert (await stub.createKeyValueTable(config)).status == C.TABLE_EXISTS
    bad = pb.KeyValueTableConfig(scope=SCOPE, kvtName="bad name", partitionCount=1, primaryKeyLength=1)
    assert (await stub.createKeyValueTable(bad)).status == C.INVALID_TABLE_NAME
    nowhere = pb.KeyValueTableConfig(scope="nope", kvtName="t", partitionCount=1, primaryKeyLength=1)
    assert (await stub.createKeyValueTable(nowhere)).status == C.SCOPE_NOT_FOUND
    with pytest.raises(grpc.aio.AioRpcError) as raised:
        await stub.createKeyValueTable(pb.KeyValueTableConfig(scope=SCOPE, kvtName="t", partitionCount=0,
                                                              primaryKeyLength=1))
    assert raised.value.code() == grpc.StatusCode.INVALID_ARGUMENT

    ranges = (await stub.getCurrentSegmentsKeyValueTable(pb.KeyValueTableInfo(scope=SCOPE, kvtName="table")))
    assert [(r.segmentId.segmentId, r.segmentId.streamInfo.stream) for r in ranges.segmentRanges] == [
        (0, "table"), (1, "table"), (2, "table")]
    assert ranges.segmentRanges[-1].maxKey == 1.0
    listed = await stub.listKeyValueTablesInScope(pb.KVTablesInScopeRequest(scope=pb.ScopeInfo(scope=SCOPE)))
    assert [t.kvtName for t in listed.kvtables] == ["table"] and listed.HasField("continuationToken")
    fetched = await stub.getKeyValueTableConfiguration(pb.KeyValueTableInfo(scope=SCOPE, kvtName="table"))
    assert fetched.config.partitionCount == 3 and fetched.config.secondaryKeyLength == 4
    partitions = [naming.table_segment_name(SCOPE, "table", number) for number in range(3)]
    for name in partitions:  # each partition is a fixed-key-length table segment of primary + secondary bytes
        assert (await cluster.table_info(name)).key_length == 12
    D = pb.DeleteKVTableStatus
    assert (await stub.deleteKeyValueTable(pb.KeyValueTableInfo(scope=SCOPE, kvtName="table"))).status == D.SUCCESS
    for name in partitions:
        with pytest.raises(NoSuchSegment):
            await cluster.table_info(name)
    assert (await stub.deleteKeyValueTable(pb.KeyValueTableInfo(scope=SCOPE, kvtName="table"))).status == \
        D.TABLE_NOT_FOUND
    missing = await stub.getKeyValueTableConfiguration(pb.KeyValueTableInfo(scope=SCOPE, kvtName="table"))
    assert missing.status == pb.KeyValueTableConfigResponse.TABLE_NOT_FOUND


async def test_scope_with_a_table_is_not_empty(cluster):
    stub = cluster.stub
    await stub.createScope(pb.ScopeInfo(scope="kv"))
    await stub.createKeyValueTable(pb.KeyValueTableConfig(scope="kv", kvtName="t", partitionCount=1,
                                                          primaryKeyLength=4))
    assert (await stub.deleteScope(pb.ScopeInfo(scope="kv"))).status == pb.DeleteScopeStatus.SCOPE_NOT_EMPTY
    await stub.deleteKeyValueTable(pb.KeyValueTableInfo(scope="kv", kvtName="t"))
    assert (await stub.deleteScope(pb.ScopeInfo(scope="kv"))).status == pb.DeleteScopeStatus.SUCCESS
