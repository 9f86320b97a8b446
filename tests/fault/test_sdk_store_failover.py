"""A paused segment store costs an SDK writer and reader about session timeout + rebalance grace + recovery,
however long the pause (issue 28). Before, the SDK waited for the store for as long as it was away (its
keep-alive gave up after 30 s, and the cached endpoint sent it back to the paused store): 30-41 s for a 45 s
pause.

Real processes (tests/support/cluster.py): ZooKeeper, three log stores, two segment stores in cluster mode,
one controller. The store serving the stream's segments is SIGSTOPped for PAUSE seconds while the writer
and a reader go on; every acknowledged event is read once afterwards.
"""

from __future__ import annotations

import asyncio
import time

import pytest

from clients.model import ScalingPolicy, StreamConfiguration
from clients.reader.reader_group import ReaderGroupConfig
from tests.support.cluster import Cluster
from tests.support.continuous_writer import ContinuousWriter, assert_all_acknowledged_read_once, longest_gap
from tests.support.sdk import parse_event, read_all, sdk
from tests.support.waiting import eventually

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]

PAUSE = 15.0  # seconds the store stays stopped: several times the failover (about 3 s) it must not wait for
SLACK = 2.0  # the allowance over session timeout + grace + recovery
FAST_GROUP = ReaderGroupConfig(reader_timeout_ms=3000, refresh_ms=200)




async def test_a_paused_store_stalls_the_sdk_for_the_failover_not_the_pause(tmp_path, zookeeper):
    with Cluster(tmp_path, zookeeper=zookeeper, segment_stores=2, controllers=1) as cluster:
        async with sdk.connect(cluster.controllers[0].uri) as client:
            await client.create_scope("paused")
            await client.create_stream("paused", "s", StreamConfiguration(ScalingPolicy.fixed(4)))
            writer = ContinuousWriter(client, "paused", "s")
            writing = asyncio.ensure_future(writer.run())
            read_times: list[float] = []
            read_numbers: list[int] = []
            stop_reading = asyncio.Event()

            async def read() -> None:
                group = await client.create_reader_group("paused", "tail", ["s"], config=FAST_GROUP)
                async with group.create_reader("r") as reader:
                    while not stop_reading.is_set():
                        event = await reader.read_next(0.2)
                        if event is not None:
                            read_numbers.append(parse_event(event.data)[1])
                            read_times.append(time.monotonic())

            reading = asyncio.ensure_future(read())
            await eventually(lambda: writer.acknowledged and read_times or writing.done() or reading.done(),
                             "the writer's and the reader's first events", timeout=30)
            victim = cluster.segment_stores[0]
            victim_id = cluster.store_id(victim)
            assert victim_id in set(cluster.owners().values())
            await asyncio.sleep(1.0)

            paused_at = time.monotonic()
            cluster.pause(victim.process)
            try:
                moved = await asyncio.to_thread(cluster.wait_until_served, 60.0, victim_id)
                served_at = paused_at + moved
                print(f"containers served elsewhere {moved:.1f} s after the pause")
                await asyncio.sleep(max(0.0, paused_at + PAUSE - time.monotonic()))
                during = time.monotonic()
                write_stall = longest_gap(writer.ack_times, paused_at, during)
                read_stall = longest_gap(read_times, paused_at, during)
            finally:
                cluster.resume(victim.process)
            bound = moved + SLACK  # session timeout + grace + recovery, as measured, + the allowance
            print(f"paused {PAUSE:.0f} s: longest writer stall {write_stall:.1f} s, reader {read_stall:.1f} s "
                  f"(bound {bound:.1f} s)")
            assert write_stall <= bound and read_stall <= bound
            assert [moment for moment in writer.ack_times if moment > served_at + SLACK], \
                "the writer did not carry on at the new owner"

            await asyncio.sleep(2.0)  # the resumed zombie finds itself fenced; nothing it did may show
            writer.stop.set()
            stop_reading.set()
            await asyncio.wait_for(asyncio.gather(writing, reading), 60)
            (events,) = await read_all(client, "paused", "s", "check")
            assert_all_acknowledged_read_once(writer.acknowledged, events)
            assert set(read_numbers) <= {parse_event(event.data)[1] for event in events}
