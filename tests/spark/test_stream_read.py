"""Micro-batch reads with format ``tributary``: availableNow, limits, restarts, scaling, live ingest."""

from __future__ import annotations

import asyncio
import json
import threading
import time

import pytest

import clients.client as sdk
from tests.spark.support import create_stream, number_of, write_events

pytestmark = pytest.mark.spark


class Collector:
    """A foreachBatch sink that keeps every row's payload and each batch's size (on the driver)."""

    def __init__(self):
        self.events: list[bytes] = []
        self.batches: list[tuple[int, int]] = []
        self.segments: list[set[int]] = []  # the segments each batch read from
        self.partitions: list[int] = []  # each batch's input partitions
        self._lock = threading.Lock()

    def __call__(self, frame, batch_id):
        rows = frame.collect()
        partitions = frame.rdd.getNumPartitions()
        with self._lock:
            self.partitions.append(partitions)
            self.events.extend(bytes(row.event) for row in rows)
            self.batches.append((batch_id, len(rows)))
            self.segments.append({row.segment_id for row in rows})


def stream_query(spark, standalone, scope, checkpoint, collector, *, trigger=None, **options):
    reader = (spark.readStream.format("tributary").option("controller", standalone.controller_uri)
              .option("scope", scope).option("stream", "s").option("start_stream_cut", "earliest"))
    for name, value in options.items():
        reader = reader.option(name, str(value))
    writer = reader.load().writeStream.foreachBatch(collector).option("checkpointLocation", str(checkpoint))
    return writer.trigger(**(trigger or {"availableNow": True})).start()


def offsets_of(checkpoint) -> list[dict]:
    """The source offsets Spark recorded, in batch order."""
    files = sorted((checkpoint / "offsets").glob("[0-9]*"), key=lambda path: int(path.name))
    return [json.loads(path.read_text().splitlines()[-1]) for path in files]


def test_available_now_picks_up_new_events_and_restarts_exactly(spark, standalone, scope_name, tmp_path):
    controller = standalone.controller_uri
    create_stream(controller, scope_name, "s", 3)
    collector = Collector()
    write_events(controller, scope_name, "s", range(0, 3000))
    stream_query(spark, standalone, scope_name, tmp_path, collector).awaitTermination(120)
    assert sorted(map(number_of, collector.events)) == list(range(3000))
    write_events(controller, scope_name, "s", range(3000, 5000))
    stream_query(spark, standalone, scope_name, tmp_path, collector).awaitTermination(120)
    assert sorted(map(number_of, collector.events)) == list(range(5000))  # nothing skipped, nothing repeated
    stream_query(spark, standalone, scope_name, tmp_path, collector).awaitTermination(120)
    assert len(collector.events) == 5000
    recorded = offsets_of(tmp_path)
    assert recorded[-1]["scope"] == scope_name and recorded[-1]["v"] == 1
    for offset in recorded:  # canonical: sorted keys, so the same cut is the same text
        assert json.dumps(offset, sort_keys=True) == json.dumps(offset)


def test_a_micro_batch_of_one_large_segment_is_read_by_several_partitions(spark, standalone, scope_name, tmp_path):
    """max_partition_bytes splits a micro-batch's slices too, and a restart re-plans the same batches."""
    controller = standalone.controller_uri
    create_stream(controller, scope_name, "s", 1)
    write_events(controller, scope_name, "s", range(0, 10_000), size=100)  # ~1.1 MB
    collector = Collector()
    stream_query(spark, standalone, scope_name, tmp_path, collector, max_partition_bytes=300_000).awaitTermination(120)
    write_events(controller, scope_name, "s", range(10_000, 11_000), size=100)
    stream_query(spark, standalone, scope_name, tmp_path, collector, max_partition_bytes=300_000).awaitTermination(120)
    assert sorted(map(number_of, collector.events)) == list(range(11_000))
    assert collector.partitions == [4, 1], collector.partitions


@pytest.mark.parametrize("limit, bound", [("approx_bytes_per_trigger", 20_000), ("max_events_per_trigger", 700)])
def test_a_limit_cuts_the_backlog_into_several_batches(spark, standalone, scope_name, tmp_path, limit, bound):
    """Event sizes vary, so the byte limit's cuts must fall on real event boundaries (LocateOffset): every
    event is read once; the event limit is never exceeded."""
    controller = standalone.controller_uri
    create_stream(controller, scope_name, "s", 2)

    async def write():
        async with sdk.connect(controller) as client, client.create_writer(scope_name, "s") as writer:
            for number in range(4000):
                key = number % 16
                await writer.write(f"k{key}:{number // 16}".encode() + b"." * (number * 7 % 50), f"key-{key}")
    asyncio.run(write())
    collector = Collector()
    stream_query(spark, standalone, scope_name, tmp_path, collector, **{limit: bound}).awaitTermination(180)
    assert sorted(map(number_of, collector.events)) == list(range(4000))
    sizes = [size for _, size in collector.batches]
    assert len(sizes) >= 4, sizes
    if limit == "max_events_per_trigger":
        assert max(sizes) <= bound
    else:
        assert max(sizes) < 4000 / 2


def test_a_scale_during_the_query_is_followed_in_key_order(spark, standalone, scope_name, tmp_path):
    """Segments sealed by a scale are read to their end and then their successors, never out of key order."""
    controller = standalone.controller_uri
    create_stream(controller, scope_name, "s", 2)
    collector = Collector()
    write_events(controller, scope_name, "s", range(0, 2000), keys=32)
    stream_query(spark, standalone, scope_name, tmp_path, collector).awaitTermination(120)

    async def scale():
        async with sdk.connect(controller) as client:
            segments = await client.get_segments(scope_name, "s")
            await client.scale_stream(scope_name, "s", [s.segment for s in segments], [(0.0, 0.3), (0.3, 1.0)])
    write_events(controller, scope_name, "s", range(2000, 3000), keys=32)
    asyncio.run(scale())
    write_events(controller, scope_name, "s", range(3000, 5000), keys=32)
    stream_query(spark, standalone, scope_name, tmp_path, collector).awaitTermination(120)
    stream_query(spark, standalone, scope_name, tmp_path, collector).awaitTermination(120)
    assert sorted(number_of(event, keys=32) for event in collector.events) == list(range(5000))
    for segments in collector.segments:  # never a predecessor (epoch 0) and a successor (epoch 1) at once
        assert len({segment >> 32 for segment in segments}) <= 1, collector.segments
    assert any(segment >> 32 == 1 for segments in collector.segments for segment in segments)
    # Batches arrive in order, each with its segments' events in offset order, and a successor is read
    # only in a batch after its predecessors' ends: so each key's events arrive in write order.
    last: dict[int, int] = {}
    for event in collector.events:
        number = number_of(event, keys=32)
        assert number > last.get(number % 32, -1), f"key {number % 32}: {number} after {last[number % 32]}"
        last[number % 32] = number


def test_live_ingest_with_a_processing_time_trigger(spark, standalone, scope_name, tmp_path):
    controller = standalone.controller_uri
    create_stream(controller, scope_name, "s", 2)
    collector = Collector()
    query = stream_query(spark, standalone, scope_name, tmp_path, collector,
                         trigger={"processingTime": "200 milliseconds"})
    try:
        for round_number in range(5):
            write_events(controller, scope_name, "s", range(round_number * 500, (round_number + 1) * 500))
            time.sleep(0.3)
            if round_number == 0:  # the live query picks up the first round alone, however slow the machine
                deadline = time.monotonic() + 60
                while len(collector.events) < 500 and time.monotonic() < deadline:
                    time.sleep(0.1)
        deadline = time.monotonic() + 60
        while len(collector.events) < 2500 and time.monotonic() < deadline:
            time.sleep(0.2)
    finally:
        query.stop()
    assert sorted(map(number_of, collector.events)) == list(range(2500))
    assert len([size for _, size in collector.batches if size]) >= 2
