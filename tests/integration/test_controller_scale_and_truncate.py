"""Manual scale and truncation through our controller's gRPC API (spec §4.4, §6.4, §6.6): every
scale status, checkScale's answers, new segments numbered by ascending key, an identical pending
scale answered STARTED, and truncation moving the head, truncating the cut's segments and
deleting the ones wholly before it on the segment store."""

from __future__ import annotations

import grpc
import pytest

from clients.errors import NoSuchSegment
from controller_api import controller_pb2 as pb
from controller.service.context import ServiceSettings
from controller.service.fault_points import FaultPoints
from tests.support.controller_harness import (append_to_segment, fixed_config, info, key_ranges, make_stream,
                                              running_cluster, scale_and_wait)
from wire import naming

SCOPE, STREAM = "scaling", "s"


@pytest.fixture
async def cluster(tmp_path):
    async with running_cluster(tmp_path / "data", ServiceSettings(redrive_interval_seconds=3600)) as running:
        await make_stream(running.stub, SCOPE, STREAM, 2)
        yield running


def scale_request(sealed, *ranges, stream=STREAM) -> pb.ScaleRequest:
    return pb.ScaleRequest(streamInfo=info(SCOPE, stream), sealedSegments=sealed, newKeyRanges=key_ranges(*ranges))


async def check(stub, epoch: int, stream: str = STREAM) -> int:
    return (await stub.checkScale(pb.ScaleStatusRequest(streamInfo=info(SCOPE, stream), epoch=epoch))).status


async def test_scale_started_numbers_new_segments_by_key(cluster):
    """Ranges given out of order are numbered in ascending start order; checkScale goes to SUCCESS."""
    reply = await scale_and_wait(cluster.stub, SCOPE, STREAM, [1], [(0.75, 1.0), (0.5, 0.75)])
    assert reply.epoch == 0
    assert [(r.segmentId.segmentId, r.minKey, r.maxKey) for r in reply.segments] == [
        (naming.segment_id(2, 1), 0.5, 0.75), (naming.segment_id(3, 1), 0.75, 1.0)]
    assert all(r.segmentId.streamInfo == info(SCOPE, STREAM) for r in reply.segments)
    assert await check(cluster.stub, 0) == pb.ScaleStatusResponse.SUCCESS
    assert await check(cluster.stub, 5) == pb.ScaleStatusResponse.INVALID_INPUT
    assert await check(cluster.stub, 0, stream="missing") == pb.ScaleStatusResponse.INVALID_INPUT


async def test_scale_rejections(cluster):
    """Inactive segments and too few segments: PRECONDITION_FAILED; ranges that do not replace the
    sealed ones exactly, or a sealed stream: FAILURE; a missing stream: NOT_FOUND."""
    stub = cluster.stub
    R = pb.ScaleResponse
    assert (await stub.scale(scale_request([7], (0.0, 0.5)))).status == R.PRECONDITION_FAILED
    assert (await stub.scale(scale_request([0], (0.0, 0.4)))).status == R.FAILURE
    assert (await stub.scale(scale_request([0], (0.0, 0.3), (0.2, 0.5)))).status == R.FAILURE
    assert (await stub.scale(scale_request([0], (0.3, 0.3), (0.0, 0.5)))).status == R.FAILURE
    await stub.createStream(fixed_config(SCOPE, "two", 2))
    assert (await stub.scale(scale_request([0, 1], (0.0, 1.0), stream="two"))).status == R.PRECONDITION_FAILED
    await stub.sealStream(info(SCOPE, "two"))
    assert (await stub.scale(scale_request([0], (0.0, 0.5), stream="two"))).status == R.FAILURE
    with pytest.raises(grpc.aio.AioRpcError) as raised:
        await stub.scale(scale_request([0], (0.0, 0.5), stream="missing"))
    assert raised.value.code() == grpc.StatusCode.NOT_FOUND


async def test_pending_scale_identical_is_started_different_is_failure(tmp_path):
    """While a scale is pending (its controller died half way), the same request is STARTED with the
    same new segments and a different one is FAILURE."""
    faults = FaultPoints()
    async with running_cluster(tmp_path / "data", ServiceSettings(redrive_interval_seconds=3600), faults) as cluster:
        await make_stream(cluster.stub, SCOPE, STREAM, 2)
        faults.arm("scale.segments_created")
        first = await cluster.stub.scale(scale_request([0], (0.0, 0.25), (0.25, 0.5)))
        again = await cluster.stub.scale(scale_request([0], (0.0, 0.25), (0.25, 0.5)))
        assert again.status == pb.ScaleResponse.STARTED and list(again.segments) == list(first.segments)
        other = await cluster.stub.scale(scale_request([1], (0.5, 0.75), (0.75, 1.0)))
        assert other.status == pb.ScaleResponse.FAILURE
        assert await check(cluster.stub, 0) == pb.ScaleStatusResponse.IN_PROGRESS


async def stream_segment(cluster, segment_id: int):
    return await cluster.segment_info(SCOPE, STREAM, segment_id)


async def test_truncation_moves_head_truncates_and_deletes(cluster):
    """After a split of segment 0, truncating at {successor: 6 bytes, ..., 1: 12 bytes} deletes segment 0,
    truncates the cut's segments at their offsets and makes the cut the new head."""
    stub = cluster.stub
    store_port = cluster.store.port
    await append_to_segment(store_port, naming.stream_segment_name(SCOPE, STREAM, 0), [b"zero"] * 3)
    one_length = await append_to_segment(store_port, naming.stream_segment_name(SCOPE, STREAM, 1), [b"one"] * 4)
    await scale_and_wait(stub, SCOPE, STREAM, [0], [(0.0, 0.25), (0.25, 0.5)])
    low, high = naming.segment_id(2, 1), naming.segment_id(3, 1)
    low_length = await append_to_segment(store_port, naming.stream_segment_name(SCOPE, STREAM, low), [b"ab"] * 2)
    cut = {low: low_length, high: 0, 1: one_length}
    reply = await stub.truncateStream(pb.StreamCut(streamInfo=info(SCOPE, STREAM), cut=cut))
    assert reply.status == pb.UpdateStreamStatus.SUCCESS
    head = await stub.getSegments(pb.GetSegmentsRequest(streamInfo=info(SCOPE, STREAM)))
    assert {s.segmentId.segmentId: s.offset for s in head.segments} == cut
    with pytest.raises(NoSuchSegment):
        await stream_segment(cluster, 0)
    assert (await stream_segment(cluster, low)).start_offset == low_length
    assert (await stream_segment(cluster, 1)).start_offset == one_length
    assert not (await stub.isSegmentValid(pb.SegmentId(streamInfo=info(SCOPE, STREAM), segmentId=0))).response
    # The same truncation again is a no-op; going back behind it is refused.
    assert (await stub.truncateStream(pb.StreamCut(streamInfo=info(SCOPE, STREAM), cut=cut))).status == 0
    with pytest.raises(grpc.aio.AioRpcError) as raised:
        await stub.truncateStream(pb.StreamCut(streamInfo=info(SCOPE, STREAM), cut={low: 0, high: 0, 1: 0}))
    assert raised.value.code() == grpc.StatusCode.INVALID_ARGUMENT


async def test_truncation_statuses(cluster):
    """Malformed cut: INVALID_ARGUMENT; missing stream: STREAM_NOT_FOUND; sealed stream: STREAM_SEALED."""
    stub = cluster.stub
    S = pb.UpdateStreamStatus
    with pytest.raises(grpc.aio.AioRpcError) as raised:
        await stub.truncateStream(pb.StreamCut(streamInfo=info(SCOPE, STREAM), cut={0: 0}))
    assert raised.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    missing = await stub.truncateStream(pb.StreamCut(streamInfo=info(SCOPE, "missing"), cut={0: 0}))
    assert missing.status == S.STREAM_NOT_FOUND
    await stub.sealStream(info(SCOPE, STREAM))
    sealed = await stub.truncateStream(pb.StreamCut(streamInfo=info(SCOPE, STREAM), cut={0: 0, 1: 0}))
    assert sealed.status == S.STREAM_SEALED
