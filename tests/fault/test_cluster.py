"""Cluster mode under real faults (docs/cluster.md): one ZooKeeper, three log stores, segment stores in
cluster mode over a shared Tier-2 directory and controllers, all real processes on loopback, stopped by PID.

* A segment store SIGKILLed while the SDK and the real ``pravega`` client write: its containers move to the
  other store within 10 s, the SDK carries on at once, the Rust client once the killed store is restarted
  (it retries the address it resolved until that answers), and every acknowledged event is read exactly once.
* A zombie segment store (SIGSTOPped until its containers moved, then SIGCONTed with appends queued): none
  of its appends is acknowledged or ever visible; it drops its containers; the new owner's data is intact.
* A third segment store joins while the SDK writes: some containers move to it, the writer sees no error.
* A controller SIGKILLed in the middle of a scale, and in the middle of a transaction commit (it stops
  itself at a fault point first): the other controller completes both.
"""

from __future__ import annotations

import asyncio
import json
import time
import uuid

import grpc
import pytest

from clients.connection import WireConnection, next_request_id
from clients.errors import ConnectionFailed
from controller_api import controller_pb2 as pb
from controller_api import controller_pb2_grpc as pb_grpc
from clients.model import ScalingPolicy, StreamConfiguration
from tests.support.cluster import Cluster
from tests.support.continuous_writer import ContinuousWriter, assert_all_acknowledged_read_once
from tests.support.pravega_driver import Scenario
from tests.support.sdk import check_each_once_in_key_order, read_all, sdk
from tests.support.waiting import eventually
from wire import commands as c
from wire import naming
from wire.envelope import envelope_all

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]
FAILOVER_LIMIT = 10.0


@pytest.fixture
def cluster(tmp_path, zookeeper):
    with Cluster(tmp_path, zookeeper=zookeeper) as running:
        yield running


async def create_stream(client, scope: str, stream: str, segments: int) -> None:
    await client.create_scope(scope)
    await client.create_stream(scope, stream, StreamConfiguration(ScalingPolicy.fixed(segments)))


async def start_writing(client, scope: str, stream: str, segments: int = 4) -> tuple[ContinuousWriter, asyncio.Task]:
    await create_stream(client, scope, stream, segments)
    writer = ContinuousWriter(client, scope, stream)
    task = asyncio.ensure_future(writer.run())
    await eventually(lambda: writer.acknowledged or task.done(), "the writer's first acknowledgement", timeout=30)
    assert writer.acknowledged, "the writer acknowledged nothing"
    return writer, task


async def stop_writing(writer: ContinuousWriter, task: asyncio.Task) -> None:
    writer.stop.set()
    await asyncio.wait_for(task, 120)  # raises whatever failed the writer


async def test_a_killed_segment_store_fails_over_while_both_clients_write(cluster, tmp_path):
    victim = cluster.segment_stores[0]
    victim_id = cluster.store_id(victim)
    assert set(cluster.owners().values()) == {victim_id, cluster.store_id(cluster.segment_stores[1])}
    count, keys = 4000, 8
    rust = Scenario("write", cluster.controllers[1].uri,
                    {"scope": "failover", "stream": "rust", "create": True, "segments": 4, "count": count,
                     "keys": keys, "pause_every": 200, "pause_seconds": 0.25}, tmp_path / "rust.out")
    try:
        async with sdk.connect(cluster.controllers[0].uri) as client:
            writer, task = await start_writing(client, "failover", "sdk")
            await asyncio.sleep(1.5)
            killed_at = time.monotonic()
            victim.kill()
            failover = await asyncio.to_thread(cluster.wait_until_served, 60.0, victim_id)
            print(f"containers served again {time.monotonic() - killed_at:.1f} s after the kill")
            assert time.monotonic() - killed_at < FAILOVER_LIMIT, f"failover took {failover:.1f} s"
            assert set(cluster.owners().values()) == {cluster.store_id(cluster.segment_stores[1])}
            await eventually(lambda: [t for t in writer.ack_times if t > killed_at + failover],
                             "the SDK writer to carry on after the failover", timeout=2.0)
            # The Rust client retries the address it resolved until something answers there (it asks getURI
            # again only after a reply such as WrongHost): its supervisor restarts the killed store, which
            # answers WrongHost or takes some containers back.
            await asyncio.to_thread(victim.start, 60)
            await asyncio.to_thread(cluster.wait_until_served, 60.0)
            served_at = time.monotonic()
            await eventually(lambda: writer.ack_times[-1] > served_at,
                             "an acknowledgement once the restarted store is served", timeout=30)
            acknowledged_before_stop = len(writer.acknowledged)
            await stop_writing(writer, task)
            print(f"SDK: {len(writer.acknowledged)} events acknowledged ({acknowledged_before_stop} before stopping); "
                  f"longest gap {writer.longest_stall(killed_at - 1) * 1000:.0f} ms")
            result = await asyncio.to_thread(rust.result, 180)
            assert result["written"] == count
            (events,) = await read_all(client, "failover", "sdk", "check-sdk")
            assert_all_acknowledged_read_once(writer.acknowledged, events)
            (events,) = await read_all(client, "failover", "rust", "check-rust")
            check_each_once_in_key_order([event.data for event in events], count, keys)
    finally:
        rust.kill()


def segment_of_container(container: int, count: int, scope: str, stream: str, segments: int) -> str:
    for number in range(segments):
        name = naming.stream_segment_name(scope, stream, number)
        if naming.container_of(name, count) == container:
            return name
    raise AssertionError(f"no segment of {scope}/{stream} lives in container {container}")


def fenced_containers(log_path) -> set[int]:
    """The containers a segment store's log says failed because a newer owner fenced their log."""
    fenced = set()
    for line in log_path.read_text(errors="replace").splitlines():
        if line.startswith("{") and '"container failed"' in line and "LogFenced" in line:
            fenced.add(json.loads(line)["container"])
    return fenced


async def test_a_zombie_segment_store_changes_nothing_and_drops_its_containers(cluster):
    zombie = cluster.segment_stores[0]
    zombie_id = cluster.store_id(zombie)
    async with sdk.connect(cluster.controllers[0].uri) as client:
        await create_stream(client, "zombie", "s", 8)
        owned_before = {container for container, owner in cluster.owners().items() if owner == zombie_id}
        container = min(owned_before)
        segment = segment_of_container(container, cluster.containers, "zombie", "s", 8)
        connection = await WireConnection.connect("127.0.0.1", zombie.port)
        writer_id = uuid.uuid4()
        setup = await connection.request(c.SetupAppend(next_request_id(), writer_id, segment, ""))
        assert isinstance(setup, c.AppendSetup)
        async with client.create_writer("zombie", "s") as writer:
            before = [await writer.write(f"k0:{number}".encode(), f"key-{number}") for number in range(200)]
            await asyncio.gather(*before)

            cluster.pause(zombie.process)
            try:
                await asyncio.to_thread(cluster.wait_until_served, 60.0, zombie_id)
                data = envelope_all([b"zombie:%d" % number for number in range(10)])
                request_id = next_request_id()
                reply = connection.expect(request_id)
                connection.send(c.AppendBlockEnd(writer_id, len(data), data, 10, 9, request_id))
                after = [await writer.write(f"k0:{number}".encode(), f"key-{number}") for number in range(200, 400)]
                await asyncio.gather(*after)
            finally:
                cluster.resume(zombie.process)
            try:
                answer = await asyncio.wait_for(reply, 30)
            except ConnectionFailed:
                answer = None  # the zombie closed the connection: also a refusal
            assert not isinstance(answer, c.DataAppended), f"the zombie acknowledged an append: {answer}"
            await connection.close()

        # Back to life, the zombie finds its logs fenced and stops its containers (then, registered again, it
        # is a store like any other: the leader may give it containers, which it recovers at a newer epoch).
        await eventually(lambda: owned_before <= fenced_containers(zombie.log_path),
                         f"the zombie to stop all of {owned_before}", timeout=30, interval=0.2)
        await asyncio.to_thread(cluster.wait_until_served, 60.0)

        (events,) = await read_all(client, "zombie", "s", "check")
        read = [bytes(event.data) for event in events]
        assert sorted(read) == sorted(f"k0:{number}".encode() for number in range(400))
        assert not [data for data in read if data.startswith(b"zombie")]


async def test_a_joining_segment_store_takes_containers_without_client_errors(cluster):
    async with sdk.connect(cluster.controllers[1].uri) as client:
        writer, task = await start_writing(client, "join", "s")
        newcomer = await asyncio.to_thread(cluster.add_segment_store)
        newcomer_id = cluster.store_id(newcomer)
        await eventually(lambda: newcomer_id in cluster.owners().values(), "the new segment store to get a container",
                         timeout=30, interval=0.2)
        joined_at = time.monotonic()
        await asyncio.sleep(2.0)  # writing through the handover: only time shows that no write fails meanwhile
        await stop_writing(writer, task)  # raises if any write failed
        assert [t for t in writer.ack_times if t > joined_at], "no acknowledgement after the join"
        owners = cluster.owners()
        assert sorted(owners) == list(range(cluster.containers)) and len(set(owners.values())) == 3
        (events,) = await read_all(client, "join", "s", "check")
        assert_all_acknowledged_read_once(writer.acknowledged, events)


async def current_segments(channel: grpc.aio.Channel, scope: str, stream: str) -> list[int]:
    stub = pb_grpc.ControllerServiceStub(channel)
    reply = await stub.getCurrentSegments(pb.StreamInfo(scope=scope, stream=stream))
    return sorted(entry.segmentId.segmentId for entry in reply.segmentRanges)


async def test_a_controller_killed_in_a_scale_is_completed_by_the_other(tmp_path, zookeeper):
    with Cluster(tmp_path, zookeeper=zookeeper, controllers=1) as cluster:
        doomed = cluster.add_controller(env={"TRIBUTARY_FAULT_STOP": "scale.epoch_written"})
        async with sdk.connect(cluster.controllers[0].uri) as client:
            await create_stream(client, "scaling", "s", 2)
            async with client.create_writer("scaling", "s") as writer:
                await asyncio.gather(*[await writer.write(b"before", f"key-{n}") for n in range(50)])
        async with grpc.aio.insecure_channel(doomed.endpoint) as channel:
            stub = pb_grpc.ControllerServiceStub(channel)
            request = pb.ScaleRequest(streamInfo=pb.StreamInfo(scope="scaling", stream="s"), sealedSegments=[0],
                                      newKeyRanges=[pb.ScaleRequest.KeyRangeEntry(start=0.0, end=0.25),
                                                    pb.ScaleRequest.KeyRangeEntry(start=0.25, end=0.5)])
            call = asyncio.ensure_future(stub.scale(request, timeout=120))
            await asyncio.to_thread(cluster.wait_stopped, doomed.process)
            doomed.kill()
            call.cancel()
        async with grpc.aio.insecure_channel(cluster.controllers[0].endpoint) as channel:
            async def scaled() -> bool:
                return await current_segments(channel, "scaling", "s") != [0, 1]

            await eventually(scaled, "the other controller to complete the scale", timeout=60, interval=0.25)
            segments = await current_segments(channel, "scaling", "s")
            assert len(segments) == 3 and 0 not in segments and 1 in segments
        async with sdk.connect(cluster.controllers[0].uri) as client:
            async with client.create_writer("scaling", "s") as writer:
                await asyncio.gather(*[await writer.write(b"after", f"key-{n}") for n in range(50)])
            (events,) = await read_all(client, "scaling", "s", "check")
            assert sorted(bytes(event.data) for event in events) == [b"after"] * 50 + [b"before"] * 50


async def test_a_controller_killed_in_a_commit_is_completed_by_the_other(tmp_path, zookeeper):
    with Cluster(tmp_path, zookeeper=zookeeper, controllers=1) as cluster:
        doomed = cluster.add_controller(env={"TRIBUTARY_FAULT_STOP": "commit.merge"})
        async with sdk.connect(cluster.controllers[0].uri) as client:
            await create_stream(client, "txn", "s", 2)
        doomed_client = sdk.connect(doomed.uri)
        try:
            transactional = doomed_client.create_transactional_writer("txn", "s")
            transaction = await transactional.begin()
            for number in range(100):
                await transaction.write(f"k{number % 4}:{number // 4}".encode(), f"key-{number % 4}")
            await transaction.commit()  # COMMITTING; the doomed controller's worker stops at the merge
            await asyncio.to_thread(cluster.wait_stopped, doomed.process)
            doomed.kill()
        finally:
            doomed_client_close = asyncio.ensure_future(doomed_client.close())
            await asyncio.wait([doomed_client_close], timeout=10)
        async with sdk.connect(cluster.controllers[0].uri) as client:
            writer = client.create_transactional_writer("txn", "s")
            await writer.commit_transaction(transaction.id, wait=True, timeout_seconds=60)
            (events,) = await read_all(client, "txn", "s", "check")
            check_each_once_in_key_order([event.data for event in events], 100, 4)


async def test_a_controller_paused_past_its_session_comes_back_and_serves(cluster):
    """A controller SIGSTOPped longer than its session: the other takes its buckets (and leads, if it led);
    SIGCONTed, it registers again under a new session, restarts its work and serves requests."""
    paused = cluster.controllers[0]
    cluster.pause(paused.process)
    try:
        await eventually(lambda: len(cluster.status()[1]["controllers"]) == 1,
                         "the paused controller's registration to go", timeout=30, interval=0.2)
        async with sdk.connect(cluster.controllers[1].uri) as client:  # the other serves meanwhile
            await client.create_scope("paused")
            await client.create_stream("paused", "during", StreamConfiguration(ScalingPolicy.fixed(2)))
    finally:
        cluster.resume(paused.process)
    await eventually(lambda: len(cluster.status()[1]["controllers"]) == 2
                     and "controller work restarted under a new ZooKeeper session" in paused.log_path.read_text(),
                     "the resumed controller to register again and restart its work", timeout=30, interval=0.2)
    async with sdk.connect(paused.uri) as client:
        await client.create_stream("paused", "after", StreamConfiguration(ScalingPolicy.fixed(2)))
        async with client.create_writer("paused", "after") as writer:
            await asyncio.gather(*[await writer.write(b"event", f"key-{n}") for n in range(20)])
        (events,) = await read_all(client, "paused", "after", "check")
        assert len(events) == 20
        assert sorted([name async for name in client.list_streams("paused")]) == ["after", "during"]
