"""Time- and size-based retention through our controller (spec §6.9): the retention round records
stream cuts every period and truncates at the newest cut that still keeps the policy's minimum.
Time is passed in by the test (``Retention.run_once(now)``), so no test sleeps."""

from __future__ import annotations

import pytest

from controller_api import controller_pb2 as pb
from controller.service.context import ServiceSettings
from controller.store import retention as store_retention
from tests.support.controller_harness import append_to_segment, info, running_cluster
from wire import naming

SCOPE = "retention"
PERIOD = ServiceSettings(retention_period_seconds=1.0, retention_interval_seconds=3600, redrive_interval_seconds=3600)


@pytest.fixture
async def cluster(tmp_path):
    async with running_cluster(tmp_path / "data", PERIOD) as running:
        await running.stub.createScope(pb.ScopeInfo(scope=SCOPE))
        yield running


async def create(stub, stream: str, retention_type: int, parameter: int) -> None:
    reply = await stub.createStream(pb.StreamConfig(
        streamInfo=info(SCOPE, stream), scalingPolicy=pb.ScalingPolicy(minNumSegments=2),
        retentionPolicy=pb.RetentionPolicy(retentionType=retention_type, retentionParam=parameter,
                                           retentionMax=2 ** 63 - 1)))
    assert reply.status == pb.CreateStreamStatus.SUCCESS


async def write(cluster, stream: str, segment: int, count: int) -> int:
    return await append_to_segment(cluster.store.port, naming.stream_segment_name(SCOPE, stream, segment),
                                   [b"event"] * count)


async def head(stub, stream: str) -> dict[int, int]:
    reply = await stub.getSegments(pb.GetSegmentsRequest(streamInfo=info(SCOPE, stream)))
    return {location.segmentId.segmentId: location.offset for location in reply.segments}


async def test_time_retention_truncates_at_the_newest_old_enough_cut(cluster):
    """Keep 1 s: a cut taken at t=10 s becomes the head at t=11.2 s, not before; others are untouched."""
    stub, retention = cluster.stub, cluster.app.services.retention
    await create(stub, "timed", 1, 1000)
    await stub.createStream(pb.StreamConfig(streamInfo=info(SCOPE, "forever"),
                                            scalingPolicy=pb.ScalingPolicy(minNumSegments=1)))
    first = {0: await write(cluster, "timed", 0, 3), 1: await write(cluster, "timed", 1, 2)}
    await write(cluster, "forever", 0, 4)
    assert await retention.run_once(10_000) == 0  # records cut A; nothing is 1 s old yet
    await write(cluster, "timed", 0, 5)
    assert await retention.run_once(10_500) == 0  # no new cut within the period; A is 0.5 s old
    assert await head(stub, "timed") == {0: 0, 1: 0}
    assert await retention.run_once(11_200) == 1  # records cut B; A is 1.2 s old: truncate at A
    assert await head(stub, "timed") == first
    assert (await cluster.segment_info(SCOPE, "timed", 0)).start_offset == first[0]
    records, _ = await store_retention.get_retention_set(cluster.app.context.store.stream(SCOPE, "timed"))
    assert [time for time, _ in records.records] == [11_200]  # A and older are dropped
    assert await head(stub, "forever") == {0: 0}


async def test_size_retention_keeps_at_least_the_minimum_bytes(cluster):
    """Keep 100 bytes: the stream is truncated at the newest cut followed by at least 100 bytes.

    Cuts at t=1 s (26 bytes so far), t=2 s (52) and t=3 s (182): the first two are followed by 156
    and 130 bytes, both enough, and the newer of them wins."""
    stub, retention = cluster.stub, cluster.app.services.retention
    await create(stub, "sized", 2, 100)
    await write(cluster, "sized", 0, 2)  # 2 events of 13 bytes (envelope included)
    assert await retention.run_once(1_000) == 0
    second = {0: 26, 1: await write(cluster, "sized", 1, 2)}
    assert await retention.run_once(2_000) == 0  # 26 bytes follow the first cut: far below 100
    await write(cluster, "sized", 1, 10)
    assert await retention.run_once(3_000) == 1
    assert await head(stub, "sized") == second


async def test_sealed_streams_are_left_alone(cluster):
    stub, retention = cluster.stub, cluster.app.services.retention
    await create(stub, "sealed", 1, 0)
    await write(cluster, "sealed", 0, 2)
    await stub.sealStream(info(SCOPE, "sealed"))
    assert await retention.run_once(5_000) == 0
    assert await head(stub, "sealed") == {0: 0, 1: 0}
