"""Load reports written by a real segment store (server/containers/load_reporter.py): a hot events/s
segment is reported UP in its container's report segment, an idle one silently DOWN, a fixed-policy
segment never; a policy update starts metering; a restarted store meters its segments again. Windows
of a second or two; every report is read back over the wire and decoded with wire.load_reports."""

from __future__ import annotations

import asyncio
import time
import uuid

import pytest

from clients.connection import WireConnection, next_request_id
from clients.segment_store_client import SegmentStoreClient
from server.containers import LoadSettings
from tests.support.segment_store import running_segment_store
from wire import commands as c
from wire import naming
from wire.envelope import envelope_all
from wire.load_reports import Direction, LoadReport, split_reports

SETTINGS = LoadSettings(tick_seconds=0.1, short_window_seconds=0.5, medium_window_seconds=1.0,
                        long_window_seconds=1.5, idle_window_seconds=2.0, cooldown_seconds=0.5, mute_seconds=1.0,
                        report_interval_seconds=0.2)
EVENTS, KBYTES = 2, 1
CONTAINERS = 2


def name(stream: str, number: int = 0) -> str:
    return naming.stream_segment_name("scope", stream, number)


async def reports(client: SegmentStoreClient) -> list[LoadReport]:
    """Every report in the store's report segments so far (decoded from the bytes read)."""
    found: list[LoadReport] = []
    for container in range(CONTAINERS):
        segment = naming.load_report_segment_name(container)
        try:
            info = await client.segment_info(segment)
        except Exception:  # noqa: BLE001 - not created yet: no report so far
            continue
        offset, data = info.start_offset, b""
        while offset < info.write_offset:
            read = await client.call(
                segment, lambda rid, at=offset, name=segment: c.ReadSegment(name, at, 1 << 20, "", rid), c.SegmentRead)
            data += read.data
            offset += len(read.data)
        decoded, consumed = split_reports(data)
        assert consumed == len(data)
        found += decoded
    return found


async def write_events(port: int, segment: str, per_block: int, seconds: float) -> int:
    """Appends blocks of ``per_block`` events every 10 ms for ``seconds``. Returns the events written."""
    connection = await WireConnection.connect("127.0.0.1", port)
    try:
        writer = uuid.uuid4()
        setup = await connection.request(c.SetupAppend(next_request_id(), writer, segment, ""))
        assert isinstance(setup, c.AppendSetup), setup
        data = envelope_all([b"x" * 20] * per_block)
        written, deadline = 0, time.monotonic() + seconds
        while time.monotonic() < deadline:
            request_id = next_request_id()
            future = connection.expect(request_id)
            connection.send(c.AppendBlockEnd(writer, len(data), data, per_block, written + per_block, request_id))
            reply = await asyncio.wait_for(future, 10)
            assert isinstance(reply, c.DataAppended), reply
            written += per_block
            await asyncio.sleep(0.01)
        return written
    finally:
        await connection.close()


async def wait_for(client: SegmentStoreClient, predicate, timeout: float = 10.0) -> list[LoadReport]:
    deadline = time.monotonic() + timeout
    while True:
        found = await reports(client)
        if predicate(found) or time.monotonic() > deadline:
            return found
        await asyncio.sleep(0.1)


async def test_hot_idle_and_fixed_segments_are_reported_as_their_rules_say(tmp_path):
    """~2,000 events/s against a target of 100: an UP report naming the segment, asking for at least 2
    pieces; a rate-policy segment never written: one silent DOWN; a fixed-policy one: nothing."""
    async with running_segment_store(tmp_path, container_count=CONTAINERS, load=SETTINGS) as store:
        client = SegmentStoreClient(("127.0.0.1", store.port))
        try:
            await client.create_segment(name("hot"), EVENTS, 100)
            await client.create_segment(name("idle"), EVENTS, 100)
            await client.create_segment(name("fixed"), 0, 0)
            await asyncio.gather(write_events(store.port, name("hot"), 20, 2.0),
                                 write_events(store.port, name("fixed"), 20, 2.0))
            found = await wait_for(client, lambda found: any(report.stream == "idle" for report in found))
        finally:
            await client.close()
    ups = [report for report in found if report.direction == Direction.UP]
    assert ups and all(report.stream == "hot" and report.segment_id == 0 for report in ups)
    assert ups[0].splits >= 2
    idle = [report for report in found if report.stream == "idle"]
    assert [(report.direction, report.silent) for report in idle] == [(Direction.DOWN, True)]
    assert not any(report.stream == "fixed" for report in found)


@pytest.mark.slow
async def test_policy_update_starts_metering_and_a_restart_meters_again(tmp_path):
    """A segment created with a fixed policy and updated to events/s is metered (it goes idle: a silent
    DOWN). After a restart of the store the meter, in memory only, tracks it afresh: a second silent DOWN."""
    async with running_segment_store(tmp_path, container_count=CONTAINERS, load=SETTINGS) as store:
        client = SegmentStoreClient(("127.0.0.1", store.port))
        try:
            await client.create_segment(name("later"), 0, 0)
            await asyncio.sleep(0.3)
            assert await reports(client) == []
            await client.update_segment_policy(name("later"), KBYTES, 10)
            found = await wait_for(client, lambda found: len(found) >= 1)
            assert [(report.stream, report.silent) for report in found] == [("later", True)]
        finally:
            await client.close()
    async with running_segment_store(tmp_path, container_count=CONTAINERS, load=SETTINGS) as store:
        client = SegmentStoreClient(("127.0.0.1", store.port))
        try:
            found = await wait_for(client, lambda found: len(found) >= 2)
        finally:
            await client.close()
    assert [(report.stream, report.silent) for report in found] == [("later", True), ("later", True)]
