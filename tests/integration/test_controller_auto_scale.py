"""Auto-scaling end to end (spec §6.10): a real in-process segment store and controller with
timings shrunk from minutes to seconds. Events written over the wire into the one segment of an
events/s stream make the controller split it (the new ranges still tile [0, 1]); once the
writes stop, the cold segments merge back. A fixed-policy stream under the same load is left alone."""

from __future__ import annotations

import asyncio
import time
import uuid

from clients.connection import WireConnection, next_request_id
from clients.grpc_api import controller_pb2 as pb
from controller.service.auto_scale_settings import AutoScaleSettings
from controller.service.context import ServiceSettings
from tests.support.controller_harness import info, make_stream, running_cluster
from wire import commands as c
from wire import naming
from wire.envelope import envelope_all

SCOPE = "autoscale"
TIMINGS = AutoScaleSettings(sample_interval_seconds=0.1, short_window_seconds=1.0, medium_window_seconds=2.0,
                            long_window_seconds=3.0, idle_window_seconds=3.0, cooldown_seconds=1.0,
                            mute_seconds=1.0)
SETTINGS = ServiceSettings(redrive_interval_seconds=3600, auto_scale=TIMINGS)
TARGET = 10  # events/s
SCALE_FACTOR = 3


async def write_until_sealed(store_port: int, segment: str, stop: asyncio.Event, events_per_block: int = 20,
                             pause: float = 0.02) -> int:
    """Appends blocks of ``events_per_block`` events (EVENT_COUNT grows by that much each) until the
    segment is sealed or ``stop`` is set. Returns how many events were stored."""
    connection = await WireConnection.connect("127.0.0.1", store_port)
    written = 0
    try:
        writer = uuid.uuid4()
        setup = await connection.request(c.SetupAppend(next_request_id(), writer, segment, ""))
        assert isinstance(setup, c.AppendSetup), setup
        data = envelope_all([b"e"] * events_per_block)
        while not stop.is_set():
            request_id = next_request_id()
            future = connection.expect(request_id)
            connection.send(c.AppendBlockEnd(writer, len(data), data, events_per_block,
                                             written + events_per_block, request_id))
            reply = await asyncio.wait_for(future, 10)
            if isinstance(reply, c.SegmentIsSealed):
                return written
            assert isinstance(reply, c.DataAppended), reply
            written += events_per_block
            await asyncio.sleep(pause)
        return written
    finally:
        await connection.close()


async def current_ranges(stub, stream: str) -> list[tuple[float, float]]:
    reply = await stub.getCurrentSegments(info(SCOPE, stream))
    return sorted((segment.minKey, segment.maxKey) for segment in reply.segmentRanges)


def assert_tiles_key_space(ranges: list[tuple[float, float]]) -> None:
    assert ranges[0][0] == 0.0 and ranges[-1][1] == 1.0, ranges
    assert all(first[1] == second[0] for first, second in zip(ranges, ranges[1:])), ranges


async def wait_for_ranges(stub, stream: str, predicate, timeout: float) -> list[tuple[float, float]]:
    deadline = time.monotonic() + timeout
    while True:
        ranges = await current_ranges(stub, stream)
        if predicate(ranges) or time.monotonic() > deadline:
            return ranges
        await asyncio.sleep(0.05)


async def test_hot_segment_splits_then_cold_segments_merge_back(tmp_path):
    """~1,000 events/s into one segment of a stream targeting 10 events/s: after the cooldown the
    short-window rate is far above 5x target, so the segment is split into scaleFactor (3) ranges
    that tile [0, 1]. With no more writes, all three are cold after the idle window and merge back
    into one segment [0, 1]. The fixed stream written at the same rate keeps its one segment."""
    async with running_cluster(tmp_path / "data", SETTINGS) as cluster:
        stub = cluster.stub
        await stub.createScope(pb.ScopeInfo(scope=SCOPE))
        reply = await stub.createStream(pb.StreamConfig(
            streamInfo=info(SCOPE, "hot"),
            scalingPolicy=pb.ScalingPolicy(scaleType=pb.ScalingPolicy.BY_RATE_IN_EVENTS_PER_SEC,
                                           targetRate=TARGET, scaleFactor=SCALE_FACTOR, minNumSegments=1)))
        assert reply.status == pb.CreateStreamStatus.SUCCESS, reply
        await make_stream(stub, SCOPE, "fixed", 1)
        assert await current_ranges(stub, "hot") == [(0.0, 1.0)]

        stop = asyncio.Event()
        port = cluster.store.port
        hot_writer = asyncio.create_task(write_until_sealed(port, naming.stream_segment_name(SCOPE, "hot", 0), stop))
        fixed_writer = asyncio.create_task(write_until_sealed(port, naming.stream_segment_name(SCOPE, "fixed", 0),
                                                              stop))
        try:
            split = await wait_for_ranges(stub, "hot", lambda ranges: len(ranges) > 1, timeout=8)
        finally:
            stop.set()
            hot_written = await hot_writer
            await fixed_writer
        assert len(split) == SCALE_FACTOR, split
        assert_tiles_key_space(split)
        assert hot_written > 5 * TARGET  # the segment saw the load before it was sealed
        assert await current_ranges(stub, "fixed") == [(0.0, 1.0)]

        merged = await wait_for_ranges(stub, "hot", lambda ranges: len(ranges) == 1, timeout=10)
        assert merged == [(0.0, 1.0)]
        epochs = await stub.getEpochSegments(pb.GetEpochSegmentsRequest(streamInfo=info(SCOPE, "hot"), epoch=2))
        assert len(epochs.segmentRanges) == 1  # epoch 1 was the split, epoch 2 the merge


async def test_disabled_auto_scaler_leaves_hot_streams_alone(tmp_path):
    """With ``enabled=False`` the same load changes nothing (the loop never starts)."""
    settings = ServiceSettings(redrive_interval_seconds=3600,
                               auto_scale=AutoScaleSettings(enabled=False, sample_interval_seconds=0.1,
                                                            short_window_seconds=0.5, medium_window_seconds=0.5,
                                                            long_window_seconds=0.5, idle_window_seconds=0.5,
                                                            cooldown_seconds=0.0, mute_seconds=0.0))
    async with running_cluster(tmp_path / "data", settings) as cluster:
        stub = cluster.stub
        await stub.createScope(pb.ScopeInfo(scope=SCOPE))
        await stub.createStream(pb.StreamConfig(
            streamInfo=info(SCOPE, "hot"),
            scalingPolicy=pb.ScalingPolicy(scaleType=pb.ScalingPolicy.BY_RATE_IN_EVENTS_PER_SEC,
                                           targetRate=1, scaleFactor=2, minNumSegments=1)))
        stop = asyncio.Event()
        writer = asyncio.create_task(write_until_sealed(cluster.store.port,
                                                        naming.stream_segment_name(SCOPE, "hot", 0), stop))
        await asyncio.sleep(1.5)
        stop.set()
        assert await writer > 0
        assert await current_ranges(stub, "hot") == [(0.0, 1.0)]
