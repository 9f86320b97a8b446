"""Scope and stream RPCs of our controller over gRPC, against an in-process segment store: every
status the spec lists (§4.1, §4.2), the gRPC codes of malformed requests, paging, tags, and the
segment-store side effects (segments created, sealed, deleted)."""

from __future__ import annotations

import grpc
import pytest

from clients.errors import NoSuchSegment
from controller_api import controller_pb2 as pb
from controller.service.context import ServiceSettings
from tests.support.controller_harness import fixed_config, info, make_stream, running_cluster


@pytest.fixture
async def cluster(tmp_path):
    async with running_cluster(tmp_path / "data", ServiceSettings(listing_page_max=2)) as running:
        yield running


async def segment_state(cluster, scope, stream, segment_id):
    """(exists, sealed) of a stream segment on the segment store."""
    try:
        return True, (await cluster.segment_info(scope, stream, segment_id)).is_sealed
    except NoSuchSegment:
        return False, False


async def list_all(call, request_factory) -> tuple[list, int]:
    """Pages through a listing; returns (items, pages). Every reply must carry a token."""
    items, token, pages = [], "", 0
    while True:
        reply = await call(request_factory(pb.ContinuationToken(token=token)))
        assert reply.HasField("continuationToken")
        page = list(reply.scopes) if hasattr(reply, "scopes") else [s.stream for s in reply.streams]
        pages += 1
        if not page:
            return items, pages
        items += page
        token = reply.continuationToken.token


async def test_create_scope_statuses(cluster):
    """SUCCESS, then SCOPE_EXISTS; bad and empty names are INVALID_SCOPE_NAME; exists checks agree."""
    stub = cluster.stub
    S = pb.CreateScopeStatus
    assert (await stub.createScope(pb.ScopeInfo(scope="a"))).status == S.SUCCESS
    assert (await stub.createScope(pb.ScopeInfo(scope="a"))).status == S.SCOPE_EXISTS
    assert (await stub.createScope(pb.ScopeInfo(scope="bad scope"))).status == S.INVALID_SCOPE_NAME
    assert (await stub.createScope(pb.ScopeInfo(scope=""))).status == S.INVALID_SCOPE_NAME
    assert (await stub.createScope(pb.ScopeInfo(scope="x" * 256))).status == S.INVALID_SCOPE_NAME
    assert (await stub.checkScopeExists(pb.ScopeInfo(scope="a"))).exists
    assert not (await stub.checkScopeExists(pb.ScopeInfo(scope="b"))).exists


async def test_list_scopes_pages_with_a_token_every_time(cluster):
    """Five scopes at two per page: every reply has a token; an empty page ends the listing."""
    names = [f"scope-{number}" for number in range(5)]
    for name in names:
        await cluster.stub.createScope(pb.ScopeInfo(scope=name))
    listed, pages = await list_all(cluster.stub.listScopes, lambda token: pb.ScopesRequest(continuationToken=token))
    assert sorted(listed) == names
    assert pages == 4  # 2 + 2 + 1 + the empty end


async def test_delete_scope_statuses(cluster):
    """SCOPE_NOT_FOUND, SCOPE_NOT_EMPTY while a stream is listed, then SUCCESS once it is deleted."""
    stub = cluster.stub
    S = pb.DeleteScopeStatus
    assert (await stub.deleteScope(pb.ScopeInfo(scope="missing"))).status == S.SCOPE_NOT_FOUND
    await make_stream(stub, "full", "s", 1)
    assert (await stub.deleteScope(pb.ScopeInfo(scope="full"))).status == S.SCOPE_NOT_EMPTY
    await stub.sealStream(info("full", "s"))
    await stub.deleteStream(info("full", "s"))
    assert (await stub.deleteScope(pb.ScopeInfo(scope="full"))).status == S.SUCCESS
    assert not (await stub.checkScopeExists(pb.ScopeInfo(scope="full"))).exists


async def test_delete_scope_recursive_removes_everything(cluster):
    """Streams (sealed or not) and reader groups go, then the scope; a missing scope is SUCCESS."""
    stub = cluster.stub
    await make_stream(stub, "tree", "one", 2)
    await stub.createStream(fixed_config("tree", "two", 1))
    await stub.createReaderGroup(pb.ReaderGroupConfiguration(scope="tree", readerGroupName="group"))
    assert (await stub.deleteScopeRecursive(pb.ScopeInfo(scope="tree"))).status == pb.DeleteScopeStatus.SUCCESS
    assert not (await stub.checkScopeExists(pb.ScopeInfo(scope="tree"))).exists
    assert (await segment_state(cluster, "tree", "one", 0)) == (False, False)
    assert (await stub.deleteScopeRecursive(pb.ScopeInfo(scope="tree"))).status == pb.DeleteScopeStatus.SUCCESS


async def test_create_stream_statuses_and_segments(cluster):
    """SUCCESS creates the segments; STREAM_EXISTS; INVALID_STREAM_NAME; SCOPE_NOT_FOUND; no segments is
    INVALID_ARGUMENT (final for the client)."""
    stub = cluster.stub
    S = pb.CreateStreamStatus
    await stub.createScope(pb.ScopeInfo(scope="sc"))
    assert (await stub.createStream(fixed_config("sc", "s", 3))).status == S.SUCCESS
    assert (await stub.createStream(fixed_config("sc", "s", 5))).status == S.STREAM_EXISTS
    assert (await stub.createStream(fixed_config("sc", "bad/name", 1))).status == S.INVALID_STREAM_NAME
    assert (await stub.createStream(fixed_config("nope", "s", 1))).status == S.SCOPE_NOT_FOUND
    with pytest.raises(grpc.aio.AioRpcError) as raised:
        await stub.createStream(fixed_config("sc", "empty", 0))
    assert raised.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    for number in range(3):
        assert await segment_state(cluster, "sc", "s", number) == (True, False)
    assert (await stub.checkStreamExists(info("sc", "s"))).exists
    assert not (await stub.checkStreamExists(info("sc", "empty"))).exists


async def test_key_ranges_tile_exactly_to_one_for_awkward_counts(cluster):
    """49 segments: n * (1/n) != 1.0 in doubles, yet the ranges are contiguous and end at exactly 1.0."""
    await make_stream(cluster.stub, "sc", "awkward", 49)
    ranges = (await cluster.stub.getCurrentSegments(info("sc", "awkward"))).segmentRanges
    assert len(ranges) == 49
    assert ranges[0].minKey == 0.0 and ranges[-1].maxKey == 1.0
    assert all(first.maxKey == second.minKey for first, second in zip(ranges, ranges[1:]))


async def test_stream_configuration_round_trip(cluster):
    """Policies, tags (deduplicated, always set) and limits come back as stored; no retention stays unset."""
    stub = cluster.stub
    await stub.createScope(pb.ScopeInfo(scope="sc"))
    config = pb.StreamConfig(streamInfo=info("sc", "rated"),
                             scalingPolicy=pb.ScalingPolicy(scaleType=2, targetRate=50, scaleFactor=3, minNumSegments=2),
                             retentionPolicy=pb.RetentionPolicy(retentionType=2, retentionParam=1000,
                                                                retentionMax=2 ** 63 - 1),
                             tags=pb.Tags(tag=["x", "y", "x"]), rolloverSizeBytes=1 << 20)
    assert (await stub.createStream(config)).status == pb.CreateStreamStatus.SUCCESS
    stored = await stub.getStreamConfiguration(info("sc", "rated"))
    assert (stored.streamInfo.scope, stored.streamInfo.stream) == ("sc", "rated")
    assert stored.scalingPolicy == config.scalingPolicy and stored.retentionPolicy == config.retentionPolicy
    assert list(stored.tags.tag) == ["x", "y"] and stored.rolloverSizeBytes == 1 << 20
    await stub.createStream(pb.StreamConfig(streamInfo=info("sc", "plain"),
                                            scalingPolicy=pb.ScalingPolicy(minNumSegments=1),
                                            retentionPolicy=pb.RetentionPolicy(retentionType=0,
                                                                               retentionMax=2 ** 63 - 1)))
    plain = await stub.getStreamConfiguration(info("sc", "plain"))
    assert plain.HasField("tags") and list(plain.tags.tag) == []
    assert not plain.HasField("retentionPolicy")
    with pytest.raises(grpc.aio.AioRpcError) as raised:
        await stub.getStreamConfiguration(info("sc", "missing"))
    assert raised.value.code() == grpc.StatusCode.NOT_FOUND


async def test_update_stream_statuses_and_rescale(cluster):
    """SUCCESS applies policies and tags and rescales a fixed stream; STREAM_NOT_FOUND; STREAM_SEALED."""
    stub = cluster.stub
    S = pb.UpdateStreamStatus
    await make_stream(stub, "sc", "s", 2, tags=["old"])
    update = fixed_config("sc", "s", 3, tags=["new"])
    assert (await stub.updateStream(update)).status == S.SUCCESS
    ranges = (await stub.getCurrentSegments(info("sc", "s"))).segmentRanges
    assert [(r.minKey, r.maxKey) for r in ranges][-1][1] == 1.0 and len(ranges) == 3
    assert list((await stub.getStreamConfiguration(info("sc", "s"))).tags.tag) == ["new"]
    for number in (0, 1):  # the old segments were sealed
        assert await segment_state(cluster, "sc", "s", number) == (True, True)
    rated = pb.StreamConfig(streamInfo=info("sc", "s"),
                            scalingPolicy=pb.ScalingPolicy(scaleType=1, targetRate=10, scaleFactor=2,
                                                           minNumSegments=1))
    assert (await stub.updateStream(rated)).status == S.SUCCESS
    assert len((await stub.getCurrentSegments(info("sc", "s"))).segmentRanges) == 3  # >= minimum: kept
    assert (await stub.updateStream(fixed_config("sc", "missing", 1))).status == S.STREAM_NOT_FOUND
    await stub.sealStream(info("sc", "s"))
    assert (await stub.updateStream(fixed_config("sc", "s", 1))).status == S.STREAM_SEALED


async def test_seal_stream_statuses(cluster):
    """SUCCESS seals every active segment (twice is fine); STREAM_NOT_FOUND; the tail is then empty."""
    stub = cluster.stub
    S = pb.UpdateStreamStatus
    await make_stream(stub, "sc", "s", 2)
    assert (await stub.sealStream(info("sc", "s"))).status == S.SUCCESS
    assert (await stub.sealStream(info("sc", "s"))).status == S.SUCCESS
    assert (await stub.sealStream(info("sc", "missing"))).status == S.STREAM_NOT_FOUND
    assert await segment_state(cluster, "sc", "s", 0) == (True, True)
    assert list((await stub.getCurrentSegments(info("sc", "s"))).segmentRanges) == []


async def test_delete_stream_statuses_and_renumbering(cluster):
    """STREAM_NOT_SEALED, SUCCESS (segments gone), STREAM_NOT_FOUND; a re-created stream numbers its
    segments above the deleted ones."""
    stub = cluster.stub
    S = pb.DeleteStreamStatus
    await make_stream(stub, "sc", "s", 2)
    assert (await stub.deleteStream(info("sc", "s"))).status == S.STREAM_NOT_SEALED
    await stub.sealStream(info("sc", "s"))
    assert (await stub.deleteStream(info("sc", "s"))).status == S.SUCCESS
    assert (await stub.deleteStream(info("sc", "s"))).status == S.STREAM_NOT_FOUND
    assert await segment_state(cluster, "sc", "s", 0) == (False, False)
    assert (await stub.createStream(fixed_config("sc", "s", 1))).status == pb.CreateStreamStatus.SUCCESS
    ranges = (await stub.getCurrentSegments(info("sc", "s"))).segmentRanges
    assert [r.segmentId.segmentId for r in ranges] == [2]


async def test_list_streams_and_streams_for_tag(cluster):
    """Paged stream listing; the tag listing skips pages without a match; a missing scope is SCOPE_NOT_FOUND."""
    stub = cluster.stub
    await stub.createScope(pb.ScopeInfo(scope="sc"))
    for number in range(6):
        tags = ["blue"] if number in (1, 4) else ["red"]
        await stub.createStream(fixed_config("sc", f"s{number}", 1, tags=tags))
    listed, _ = await list_all(stub.listStreamsInScope, lambda token: pb.StreamsInScopeRequest(
        scope=pb.ScopeInfo(scope="sc"), continuationToken=token))
    # each stream's mark stream is listed too, as Java lists it (the SDK leaves internal streams out)
    assert sorted(listed) == sorted([f"s{number}" for number in range(6)] + [f"_MARKs{number}" for number in range(6)])
    blue, _ = await list_all(stub.listStreamsInScopeForTag, lambda token: pb.StreamsInScopeWithTagRequest(
        scope=pb.ScopeInfo(scope="sc"), tag="blue", continuationToken=token))
    assert sorted(blue) == ["s1", "s4"]
    none, pages = await list_all(stub.listStreamsInScopeForTag, lambda token: pb.StreamsInScopeWithTagRequest(
        scope=pb.ScopeInfo(scope="sc"), tag="green", continuationToken=token))
    assert none == [] and pages == 1
    missing = await stub.listStreamsInScope(pb.StreamsInScopeRequest(scope=pb.ScopeInfo(scope="nope")))
    assert missing.status == pb.StreamsInScopeResponse.SCOPE_NOT_FOUND and missing.HasField("continuationToken")
    with pytest.raises(grpc.aio.AioRpcError) as raised:
        await stub.listScopes(pb.ScopesRequest(continuationToken=pb.ContinuationToken(token="not-hex")))
    assert raised.value.code() == grpc.StatusCode.INVALID_ARGUMENT
