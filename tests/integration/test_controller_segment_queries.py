"""Segment-query RPCs of our controller over gRPC (spec §4.3, §1.5): tail, epochs, head, successors
with their predecessors (also under the misspelled name), segments between cuts, validity checks,
getURI without metadata, delegation tokens and the server list."""

from __future__ import annotations

import grpc
import pytest

from controller_api import controller_pb2 as pb
from tests.support.controller_harness import info, make_stream, running_cluster, scale_and_wait
from wire import naming

SCOPE, STREAM = "queries", "s"
S1_0 = naming.segment_id(2, 1)  # segment 2, created in epoch 1
S1_1 = naming.segment_id(3, 1)
S2_0 = naming.segment_id(4, 2)


@pytest.fixture
async def cluster(tmp_path):
    """A stream with two segments, split (0 -> 2, 3) and then merged (2, 3 -> 4): epochs 0, 1, 2."""
    async with running_cluster(tmp_path / "data") as running:
        await make_stream(running.stub, SCOPE, STREAM, 2)
        await scale_and_wait(running.stub, SCOPE, STREAM, [0], [(0.0, 0.25), (0.25, 0.5)])
        await scale_and_wait(running.stub, SCOPE, STREAM, [S1_0, S1_1], [(0.0, 0.5)])
        yield running


def segment_id(value: int) -> pb.SegmentId:
    return pb.SegmentId(streamInfo=info(SCOPE, STREAM), segmentId=value)


def ids(ranges) -> list[int]:
    return [r.segmentId.segmentId for r in ranges]


async def expect_code(call, code: grpc.StatusCode) -> None:
    with pytest.raises(grpc.aio.AioRpcError) as raised:
        await call
    assert raised.value.code() == code


async def test_current_and_epoch_segments(cluster):
    """Every SegmentId carries its streamInfo; ranges are sorted by key; unknown epochs are NOT_FOUND."""
    stub = cluster.stub
    current = await stub.getCurrentSegments(info(SCOPE, STREAM))
    assert ids(current.segmentRanges) == [S2_0, 1]
    assert all(r.segmentId.streamInfo == info(SCOPE, STREAM) for r in current.segmentRanges)
    assert current.delegationToken == ""
    epoch1 = await stub.getEpochSegments(pb.GetEpochSegmentsRequest(streamInfo=info(SCOPE, STREAM), epoch=1))
    assert ids(epoch1.segmentRanges) == [S1_0, S1_1, 1]
    epoch0 = await stub.getEpochSegments(pb.GetEpochSegmentsRequest(streamInfo=info(SCOPE, STREAM), epoch=0))
    assert ids(epoch0.segmentRanges) == [0, 1]
    await expect_code(stub.getEpochSegments(pb.GetEpochSegmentsRequest(streamInfo=info(SCOPE, STREAM), epoch=9)),
                      grpc.StatusCode.NOT_FOUND)
    await expect_code(stub.getEpochSegments(pb.GetEpochSegmentsRequest(streamInfo=info(SCOPE, STREAM), epoch=-1)),
                      grpc.StatusCode.INVALID_ARGUMENT)
    await expect_code(stub.getCurrentSegments(info(SCOPE, "missing")), grpc.StatusCode.NOT_FOUND)


async def test_head_segments(cluster):
    """The head of a never-truncated stream is epoch 0 at offset 0 (the timestamp is ignored)."""
    head = await cluster.stub.getSegments(pb.GetSegmentsRequest(streamInfo=info(SCOPE, STREAM), timestamp=10**15))
    assert [(s.segmentId.segmentId, s.offset) for s in head.segments] == [(0, 0), (1, 0)]
    assert all(s.segmentId.streamInfo == info(SCOPE, STREAM) for s in head.segments)
    await expect_code(cluster.stub.getSegments(pb.GetSegmentsRequest(streamInfo=info(SCOPE, "missing"))),
                      grpc.StatusCode.NOT_FOUND)


async def test_successors_with_predecessors(cluster):
    """A split lists both successors with their one predecessor; a merge lists one successor with
    both predecessors; active segments and the misspelled alias behave the same."""
    stub = cluster.stub
    split = await stub.getSegmentsImmediatelyFollowing(segment_id(0))
    assert [(e.segment.segmentId.segmentId, list(e.value)) for e in split.segments] == [(S1_0, [0]), (S1_1, [0])]
    assert all(e.segment.segmentId.streamInfo == info(SCOPE, STREAM) for e in split.segments)
    assert [(e.segment.minKey, e.segment.maxKey) for e in split.segments] == [(0.0, 0.25), (0.25, 0.5)]
    merged = await stub.getSegmentsImmediatelyFollowing(segment_id(S1_1))
    assert [(e.segment.segmentId.segmentId, sorted(e.value)) for e in merged.segments] == [(S2_0, [S1_0, S1_1])]
    assert list((await stub.getSegmentsImmediatelyFollowing(segment_id(1))).segments) == []
    alias = await stub.getSegmentsImmediatlyFollowing(segment_id(0))
    assert alias == split
    await stub.sealStream(info(SCOPE, STREAM))
    assert list((await stub.getSegmentsImmediatelyFollowing(segment_id(S2_0))).segments) == []


async def test_segments_between_cuts(cluster):
    """From the head to the tail every segment; from a cut to the tail only what follows it."""
    stub = cluster.stub
    everything = await stub.getSegmentsBetween(pb.StreamCutRange(streamInfo=info(SCOPE, STREAM),
                                                                 to={S2_0: 0, 1: 0}))
    assert sorted(s.segmentId for s in everything.segments) == sorted([0, 1, S1_0, S1_1, S2_0])
    later = pb.StreamCutRange(streamInfo=info(SCOPE, STREAM), to={})
    getattr(later, "from").update({S1_0: 0, S1_1: 0, 1: 0})
    after = await stub.getSegmentsBetween(later)
    assert sorted(s.segmentId for s in after.segments) == sorted([1, S1_0, S1_1, S2_0])
    await expect_code(stub.getSegmentsBetween(pb.StreamCutRange(streamInfo=info(SCOPE, STREAM))),
                      grpc.StatusCode.INVALID_ARGUMENT)
    backwards = pb.StreamCutRange(streamInfo=info(SCOPE, STREAM), to={0: 0, 1: 0})
    getattr(backwards, "from").update({S2_0: 0, 1: 0})
    await expect_code(stub.getSegmentsBetween(backwards), grpc.StatusCode.INVALID_ARGUMENT)


async def test_validity_checks(cluster):
    """isSegmentValid is true for active segments only; isStreamCutValid follows spec §6.6."""
    stub = cluster.stub
    assert (await stub.isSegmentValid(segment_id(S2_0))).response
    assert not (await stub.isSegmentValid(segment_id(0))).response

    async def valid(cut: dict) -> bool:
        return (await stub.isStreamCutValid(pb.StreamCut(streamInfo=info(SCOPE, STREAM), cut=cut))).response

    assert await valid({0: 10, 1: 0})
    assert await valid({S1_0: 5, S1_1: 7, 1: 3})
    assert await valid({S1_0: 5, S2_0: -1, 1: 3})  # S1_1 finished, S2_0 waits for S1_0
    assert not await valid({0: 0})  # a gap over [0.5, 1)
    assert not await valid({0: 0, S1_0: 0, 1: 0})  # 0 and S1_0 overlap
    assert not await valid({S2_0: -1, 1: 0})  # a future segment with no unfinished predecessor
    assert not await valid({0: 0, 99: 0})  # not a segment of the stream
    assert not await valid({})


async def test_uri_needs_no_metadata(cluster):
    """getURI answers for any name (a reader group's table, a txn's generalised id) with the store."""
    stub = cluster.stub
    for scope, stream, number in [(SCOPE, STREAM, 0), ("any", "rg_kvtable", 0), ("none", "such", 7 << 32)]:
        uri = await stub.getURI(pb.SegmentId(streamInfo=info(scope, stream), segmentId=number))
        assert (uri.endpoint, uri.port) == ("127.0.0.1", cluster.store.port)


async def test_token_and_server_list(cluster):
    assert (await cluster.stub.getDelegationToken(info(SCOPE, STREAM))).delegationToken == ""
    servers = await cluster.stub.getControllerServerList(pb.ServerRequest())
    assert [(uri.endpoint, uri.port) for uri in servers.nodeURI] == [("127.0.0.1", cluster.app.port)]
