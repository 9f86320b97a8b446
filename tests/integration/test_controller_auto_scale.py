"""Auto-scaling driven by load reports (spec §6.10), end to end in one process: a real segment store
whose containers meter their segments (windows of a second or two) and a real controller that tails the
report segments. A hot events/s segment is split (the new ranges tile [0, 1]); once the writes stop, the
idle segments are reported and merge back. A fixed stream is left alone. Cold marks outlive the controller
that wrote them. A disabled auto-scaler changes nothing."""

from __future__ import annotations

import asyncio
import time
import uuid

import pytest
from prometheus_client import REGISTRY

from clients.connection import WireConnection, next_request_id
from controller_api import controller_pb2 as pb
from controller.service.auto_scale_settings import AutoScaleSettings
from controller.service.context import ServiceSettings
from controller.store import layout
from controller.store.records import ColdSegmentsRecord, WorkflowIntentRecord, WorkflowKind
from controller.store.records.cold import SILENT_EXPIRY
from server.containers import LoadSettings
from tests.support.controller_harness import info, make_stream, running_cluster
from tests.support.waiting import eventually
from wire import commands as c
from wire import naming
from wire.envelope import envelope_all

SCOPE = "autoscale"
LOAD = LoadSettings(tick_seconds=0.1, short_window_seconds=0.5, medium_window_seconds=1.0, long_window_seconds=1.5,
                    idle_window_seconds=2.0, cooldown_seconds=0.5, mute_seconds=1.0, report_interval_seconds=0.2)
SETTINGS = ServiceSettings(redrive_interval_seconds=3600,
                           auto_scale=AutoScaleSettings(cold_mark_seconds=10, retry_seconds=0.2, batch_seconds=0.3,
                                                        missing_segment_wait_seconds=0.2))
TARGET = 10  # events/s
SCALE_FACTOR = 3


def reports_counted(direction: str) -> float:
    """The controller metric of load reports read (this process's registry: the controller runs here)."""
    return REGISTRY.get_sample_value("tributary_controller_load_reports_total", {"direction": direction}) or 0.0


def auto_scaling(data_dir, settings: ServiceSettings = SETTINGS, load: LoadSettings = LOAD):
    """A segment store metering with ``load`` and a controller acting with ``settings``; stopped afterwards."""
    return running_cluster(data_dir, settings, store_config={"load": load})


async def create_rate_stream(stub, stream: str, target: int = TARGET, segments: int = 1, minimum: int = 1) -> None:
    reply = await stub.createStream(pb.StreamConfig(
        streamInfo=info(SCOPE, stream),
        scalingPolicy=pb.ScalingPolicy(scaleType=pb.ScalingPolicy.BY_RATE_IN_EVENTS_PER_SEC, targetRate=target,
                                       scaleFactor=SCALE_FACTOR, minNumSegments=max(minimum, segments))))
    assert reply.status == pb.CreateStreamStatus.SUCCESS, reply
    if segments > minimum:  # created with `segments`, then allowed to merge down to `minimum`
        await stub.updateStream(pb.StreamConfig(
            streamInfo=info(SCOPE, stream),
            scalingPolicy=pb.ScalingPolicy(scaleType=pb.ScalingPolicy.BY_RATE_IN_EVENTS_PER_SEC, targetRate=target,
                                           scaleFactor=SCALE_FACTOR, minNumSegments=minimum)))


async def write_until_sealed(store_port: int, segment: str, stop: asyncio.Event, events_per_block: int = 20,
                             pause: float = 0.02) -> int:
    """Appends blocks of ``events_per_block`` events until the segment is sealed or ``stop`` is set.
    Returns how many events were stored."""
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
    assert all(first[1] == second[0] for first, second in zip(ranges, ranges[1:], strict=False)), ranges


async def wait_for_ranges(stub, stream: str, predicate, timeout: float) -> list[tuple[float, float]]:
    deadline = time.monotonic() + timeout
    while True:
        ranges = await current_ranges(stub, stream)
        if predicate(ranges) or time.monotonic() > deadline:
            return ranges
        await asyncio.sleep(0.05)


async def cold_marks(stream) -> dict[int, int]:
    """The cold marks persisted in the stream's record (none before the first)."""
    (found,) = await stream.find_records((layout.COLD_SEGMENTS, ColdSegmentsRecord))
    return found[0].marks if found is not None else {}


async def marked(stream, count: int) -> bool:
    return len(await cold_marks(stream)) >= count


@pytest.mark.slow
async def test_hot_segment_splits_then_idle_segments_merge_back(tmp_path):
    """~1,000 events/s into the one segment of a stream targeting 10 events/s: the store reports it hot
    and the controller splits it into scaleFactor (3) ranges tiling [0, 1]. With no more writes the three
    go idle, are reported (silently) cold and merge back into one segment [0, 1]. The fixed stream written
    at the same rate keeps its one segment."""
    reports_before = {direction: reports_counted(direction) for direction in ("up", "down")}
    async with auto_scaling(tmp_path / "data") as cluster:
        stub = cluster.stub
        await stub.createScope(pb.ScopeInfo(scope=SCOPE))
        await create_rate_stream(stub, "hot")
        await make_stream(stub, SCOPE, "fixed", 1)
        assert await current_ranges(stub, "hot") == [(0.0, 1.0)]

        stop = asyncio.Event()
        port = cluster.store.port
        hot_writer = asyncio.create_task(write_until_sealed(port, naming.stream_segment_name(SCOPE, "hot", 0), stop))
        fixed_writer = asyncio.create_task(write_until_sealed(port, naming.stream_segment_name(SCOPE, "fixed", 0),
                                                              stop))
        try:
            split = await wait_for_ranges(stub, "hot", lambda ranges: len(ranges) > 1, timeout=10)
        finally:
            stop.set()
            hot_written = await hot_writer
            await fixed_writer
        assert len(split) == SCALE_FACTOR, split
        assert_tiles_key_space(split)
        assert hot_written > 5 * TARGET  # the segment saw the load before it was sealed
        assert await current_ranges(stub, "fixed") == [(0.0, 1.0)]

        merged = await wait_for_ranges(stub, "hot", lambda ranges: len(ranges) == 1, timeout=15)
        assert merged == [(0.0, 1.0)]
        assert reports_counted("up") > reports_before["up"]  # the metrics saw the reports that drove it
        assert reports_counted("down") >= reports_before["down"] + SCALE_FACTOR
        epochs = await stub.getEpochSegments(pb.GetEpochSegmentsRequest(streamInfo=info(SCOPE, "hot"), epoch=2))
        assert len(epochs.segmentRanges) == 1  # epoch 1 was the split, epoch 2 the merge


@pytest.mark.slow
async def test_cold_marks_outlive_the_controller_that_wrote_them(tmp_path):
    """Of two segments, one is idle (reported silently cold: marked) and one kept warm (~30 events/s
    against 40: neither hot nor cold). The controller is restarted after the idle report has expired
    (cold marks last 1 s here), so only the persisted mark remembers it; when the warm one goes idle
    too, the new controller merges the two."""
    settings = ServiceSettings(redrive_interval_seconds=3600,
                               auto_scale=AutoScaleSettings(cold_mark_seconds=1, retry_seconds=0.2, batch_seconds=0.3,
                                                            missing_segment_wait_seconds=0.2))
    async with auto_scaling(tmp_path / "data", settings) as cluster:
        stub = cluster.stub
        await stub.createScope(pb.ScopeInfo(scope=SCOPE))
        await create_rate_stream(stub, "pair", target=40, segments=2, minimum=1)
        stop = asyncio.Event()
        warm = asyncio.create_task(write_until_sealed(cluster.store.port, naming.stream_segment_name(SCOPE, "pair", 1),
                                                      stop, events_per_block=3, pause=0.1))
        try:
            stream = cluster.app.context.store.stream(SCOPE, "pair")
            await eventually(lambda: marked(stream, 1), "the idle segment's cold mark", timeout=10, interval=0.1)
            assert await cold_marks(stream) == {0: SILENT_EXPIRY}
            await asyncio.sleep(1.5)  # the idle report is older than the cold-mark period now
            await cluster.restart_controller(settings=settings)
            assert await current_ranges(cluster.stub, "pair") == [(0.0, 0.5), (0.5, 1.0)]
        finally:
            stop.set()
            await warm
        merged = await wait_for_ranges(cluster.stub, "pair", lambda ranges: len(ranges) == 1, timeout=10)
        assert merged == [(0.0, 1.0)]


async def test_disabled_auto_scaler_leaves_hot_streams_alone(tmp_path):
    """With ``enabled=False`` the controller does not tail the reports: the same load changes nothing."""
    settings = ServiceSettings(redrive_interval_seconds=3600, auto_scale=AutoScaleSettings(enabled=False))
    async with auto_scaling(tmp_path / "data", settings) as cluster:
        stub = cluster.stub
        await stub.createScope(pb.ScopeInfo(scope=SCOPE))
        await create_rate_stream(stub, "hot", target=1)
        stop = asyncio.Event()
        writer = asyncio.create_task(write_until_sealed(cluster.store.port,
                                                        naming.stream_segment_name(SCOPE, "hot", 0), stop))
        await asyncio.sleep(2.0)  # about what an enabled scaler takes to split it: only time shows nothing happens
        stop.set()
        assert await writer > 0
        assert await current_ranges(stub, "hot") == [(0.0, 1.0)]
        assert cluster.app.services is not None and cluster.app.services.auto_scaler.reports_received == 0


@pytest.mark.slow
async def test_report_segments_are_truncated_behind_expired_reports(tmp_path):
    """Two idle segments of a stream that cannot merge (minNumSegments 2) are reported silently cold once;
    with cold marks of 1 s and a truncation check every 0.2 s, the controller truncates each report segment
    up to its end once those reports are older than a second, and keeps the marks in the stream's record."""
    settings = ServiceSettings(redrive_interval_seconds=3600, auto_scale=AutoScaleSettings(
        cold_mark_seconds=1, retry_seconds=0.2, batch_seconds=0.3, truncate_interval_seconds=0.2,
        missing_segment_wait_seconds=0.2))
    async with auto_scaling(tmp_path / "data", settings) as cluster:
        await cluster.stub.createScope(pb.ScopeInfo(scope=SCOPE))
        await create_rate_stream(cluster.stub, "idle", segments=2, minimum=2)
        client = cluster.app.client
        assert client is not None
        names = [naming.load_report_segment_name(container) for container in range(4)]

        async def truncated_to_their_ends() -> bool:
            infos = [await client.segment_info(name) for name in names]
            written = [info for info in infos if info.write_offset > 0]
            return bool(written) and all(info.start_offset == info.write_offset for info in written)

        await eventually(truncated_to_their_ends, "the report segments to be truncated to their ends", timeout=15,
                         interval=0.2)
        (found,) = await cluster.app.context.store.stream(SCOPE, "idle").find_records(
            (layout.COLD_SEGMENTS, ColdSegmentsRecord))
        assert found is not None and found[0].marks == {0: SILENT_EXPIRY, 1: SILENT_EXPIRY}
        assert await current_ranges(cluster.stub, "idle") == [(0.0, 0.5), (0.5, 1.0)]


@pytest.mark.slow
async def test_cold_segments_of_a_busy_stream_merge_once_it_is_free(tmp_path):
    """Both segments of a stream go idle while another workflow holds the stream: the silent reports (the
    only ones they will ever send) become marks, and once the workflow ends the controller looks at the
    stream again by itself and merges the two."""
    async with auto_scaling(tmp_path / "data") as cluster:
        await cluster.stub.createScope(pb.ScopeInfo(scope=SCOPE))
        await create_rate_stream(cluster.stub, "busy", segments=2, minimum=1)
        services, context = cluster.app.services, cluster.app.context
        assert services is not None and context is not None
        stream = context.store.stream(SCOPE, "busy")
        release = asyncio.Event()
        holding = asyncio.create_task(services.runner.run(
            stream, WorkflowIntentRecord(WorkflowKind.UPDATE, context.now_ms()), release.wait))
        try:
            await eventually(lambda: marked(stream, 2), "both segments' cold marks", timeout=10, interval=0.1)
            assert await cold_marks(stream) == {0: SILENT_EXPIRY, 1: SILENT_EXPIRY}
            await asyncio.sleep(0.5)  # no merge while the workflow holds the stream: only time can show it
            assert await current_ranges(cluster.stub, "busy") == [(0.0, 0.5), (0.5, 1.0)]
        finally:
            release.set()
            await holding
        merged = await wait_for_ranges(cluster.stub, "busy", lambda ranges: len(ranges) == 1, timeout=5)
        assert merged == [(0.0, 1.0)]
