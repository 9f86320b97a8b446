"""The replicated Tier-1 under real faults: ZooKeeper, three `tributary logstore` processes and a segment store
(the standalone, with ``--tier1 replicated``), all real processes on loopback, stopped by PID.

* A log store SIGKILLed while the SDK writes: no acknowledged event is lost, the longest gap between
  acknowledgements stays under 5 s, and once the store is back the logs' next ledgers use it again.
  Then the segment store itself is SIGKILLed and restarted: it recovers everything from the replicas.
* ZooKeeper restarted while the SDK writes: writes go on (or stall and continue), nothing is lost.
* A zombie owner: segment store A is SIGSTOPped, segment store B takes its containers over (after A's
  ZooKeeper session expired), then A is SIGCONTed with appends queued: none of them is acknowledged or
  ever visible, and B's data is intact.
"""

from __future__ import annotations

import asyncio
import os
import signal
import time
import uuid

import pytest

from clients.connection import WireConnection, next_request_id
from clients.errors import ConnectionFailed
from clients.model import ScalingPolicy, StreamConfiguration
from tests.support.processes import ServerProcess, kill_process
from tests.support.continuous_writer import assert_all_acknowledged_read_once, run_writer_through
from tests.support.replicated_processes import LogStores
from tests.support.sdk import read_all, sdk
from tests.support.standalone import StandaloneProcess
from tests.support.waiting import eventually
from wire import commands as c
from wire.envelope import envelope_all, split_events

pytestmark = [pytest.mark.slow, pytest.mark.timeout(240)]
STALL_LIMIT = 5.0


@pytest.fixture
def log_stores(tmp_path, zk_hosts):
    stores = LogStores(tmp_path, zk_hosts).start()
    yield stores
    stores.stop_all()


def replicated_standalone(tmp_path, zk_hosts, *extra) -> StandaloneProcess:
    return StandaloneProcess(tmp_path / "standalone", log_path=tmp_path / "standalone.log", container_count=2,
                             extra_args=["--tier1", "replicated", "--zk", zk_hosts, "--zk-session-timeout", "2",
                                         "--log-level", "info", *extra])


async def test_a_log_store_killed_under_load_loses_nothing_and_comes_back(tmp_path, zk_hosts, log_stores):
    standalone = replicated_standalone(tmp_path, zk_hosts).start()
    try:
        async with sdk.connect(standalone.controller_uri) as client:
            killed_at = 0.0

            async def kill_then_restart() -> None:
                nonlocal killed_at
                killed_at = time.monotonic()
                log_stores.kill(0)
                await asyncio.sleep(3.0)
                log_stores.restart(0)

            writer = await run_writer_through(client, "kill", "s", kill_then_restart, seconds=4.0)
            stall = writer.longest_stall(after=killed_at - 1.0)
            print(f"acknowledged {len(writer.acknowledged)} events; longest gap between acks around the kill: "
                  f"{stall * 1000:.0f} ms")
            assert stall < STALL_LIMIT
            assert [t for t in writer.ack_times if t > killed_at + 3.5], "no acknowledgement after the restart"
            (events,) = await read_all(client, "kill", "s", "g1")
            assert_all_acknowledged_read_once(writer.acknowledged, events)

        restarted = log_stores.replica_id(0)
        # every log rolls back onto the restarted store once it is healthy again
        await eventually(lambda: all(restarted in chain.ledgers[-1].ensemble for chain in log_stores.chains().values()),
                         "the newest ledgers to use the restarted store", timeout=15, interval=0.2)

        standalone.kill()  # and the segment store recovers everything from the replicas
        standalone.start(timeout=60)
        async with sdk.connect(standalone.controller_uri) as client:
            (events,) = await read_all(client, "kill", "s", "g2")
            assert_all_acknowledged_read_once(writer.acknowledged, events)
    finally:
        standalone.kill()


async def test_zookeeper_restarted_under_load_loses_nothing(tmp_path, zookeeper, zk_hosts, log_stores):
    standalone = replicated_standalone(tmp_path, zk_hosts).start()
    try:
        async with sdk.connect(standalone.controller_uri) as client:
            restarted_at = 0.0

            async def restart_zookeeper() -> None:
                nonlocal restarted_at
                restarted_at = time.monotonic()
                await asyncio.get_running_loop().run_in_executor(None, zookeeper.restart, 1.0)

            writer = await run_writer_through(client, "zk", "s", restart_zookeeper, seconds=3.0)
            print(f"acknowledged {len(writer.acknowledged)} events; longest gap between acks around the restart: "
                  f"{writer.longest_stall(after=restarted_at - 1.0) * 1000:.0f} ms")
            assert [t for t in writer.ack_times if t > time.monotonic() - 2.5], "writes did not continue"
            (events,) = await read_all(client, "zk", "s", "g1")
            assert_all_acknowledged_read_once(writer.acknowledged, events)
        log_stores.wait_registered(3)  # the stores' registrations survive (or are made again)
    finally:
        standalone.kill()


SEGMENT = "zombie/stream/0.#epoch.0"


def segment_store(tmp_path, name: str, zk_hosts: str) -> ServerProcess:
    return ServerProcess("segmentstore", tmp_path / name, log_path=tmp_path / f"{name}.log", extra_args=[
        "--tier1", "replicated", "--zk", zk_hosts, "--zk-session-timeout", "2", "--containers", "1",
        "--tier2", "none", "--log-level", "info"])


def event(writer: str, number: int) -> bytes:
    return f"{writer}:{number:06d}".encode()


async def append_block(connection: WireConnection, writer_id: uuid.UUID, name: str, numbers: list[int]):
    """Sends one block of events; returns the future of its reply."""
    data = envelope_all([event(name, n) for n in numbers])
    request_id = next_request_id()
    future = connection.expect(request_id)
    connection.send(c.AppendBlockEnd(writer_id, len(data), data, len(numbers), numbers[-1], request_id))
    return future


async def segment_events(port: int) -> list[bytes]:
    connection = await WireConnection.connect("127.0.0.1", port)
    try:
        info = await connection.request(c.GetStreamSegmentInfo(next_request_id(), SEGMENT, ""))
        data, offset = bytearray(), 0
        while offset < info.write_offset:
            reply = await connection.request(c.ReadSegment(SEGMENT, offset, 1 << 20, "", next_request_id()))
            data += reply.data
            offset += len(reply.data)
        events, consumed = split_events(bytes(data))
        assert consumed == len(data)
        return [bytes(e) for e in events]
    finally:
        await connection.close()


async def test_a_zombie_owner_is_fenced_and_nothing_it_does_becomes_visible(tmp_path, zk_hosts, log_stores):
    old = segment_store(tmp_path, "old", zk_hosts).start()
    new = segment_store(tmp_path, "new", zk_hosts)
    try:
        connection = await WireConnection.connect("127.0.0.1", old.port)
        await connection.request(c.CreateSegment(next_request_id(), SEGMENT, 0, 0, "", 0))
        old_writer = uuid.uuid4()
        await connection.request(c.SetupAppend(next_request_id(), old_writer, SEGMENT, ""))
        acknowledged_before = []
        for first in range(0, 200, 10):
            reply = await (await append_block(connection, old_writer, "old", list(range(first, first + 10))))
            assert isinstance(reply, c.DataAppended)
            acknowledged_before += range(first, first + 10)

        os.kill(old.process.pid, signal.SIGSTOP)
        late = [await append_block(connection, old_writer, "old", list(range(first, first + 10)))
                for first in range(1000, 1200, 10)]  # queued in the paused process's socket
        new.start(timeout=60)  # waits out the old owner's session, then fences and recovers the container
        new_connection = await WireConnection.connect("127.0.0.1", new.port)
        new_writer = uuid.uuid4()
        await new_connection.request(c.SetupAppend(next_request_id(), new_writer, SEGMENT, ""))
        for first in range(0, 100, 10):
            reply = await (await append_block(new_connection, new_writer, "new", list(range(first, first + 10))))
            assert isinstance(reply, c.DataAppended)
        expected = await segment_events(new.port)

        os.kill(old.process.pid, signal.SIGCONT)
        outcomes = await asyncio.gather(*(asyncio.wait_for(future, 15) for future in late), return_exceptions=True)
        acknowledged_late = [o for o in outcomes if isinstance(o, c.DataAppended)]
        assert not acknowledged_late, f"the zombie acknowledged {len(acknowledged_late)} blocks"
        print("the zombie's answers:", sorted({type(o).__name__ for o in outcomes}))
        assert all(isinstance(o, (c.SegmentIsSealed, c.WrongHost, c.OperationUnsupported, ConnectionFailed,
                                  TimeoutError)) for o in outcomes), outcomes
        await asyncio.sleep(2.0)  # time for anything the zombie might still do: only time can show it does nothing

        seen = await segment_events(new.port)
        assert seen == expected, "the zombie changed what the new owner serves"
        olds = [int(e.split(b":")[1]) for e in seen if e.startswith(b"old:")]
        news = [int(e.split(b":")[1]) for e in seen if e.startswith(b"new:")]
        assert olds[:len(acknowledged_before)] == acknowledged_before and all(n < 1000 for n in olds)
        assert news == list(range(100))
        await new_connection.close()
        await connection.close()

        new.kill()  # and a third owner recovers the same: the zombie wrote nothing to the replicas that counts
        kill_process(old.process)
        third = segment_store(tmp_path, "third", zk_hosts).start(timeout=60)
        try:
            assert await segment_events(third.port) == expected
        finally:
            third.kill()
    finally:
        if old.process is not None and old.process.poll() is None:
            os.kill(old.process.pid, signal.SIGCONT)
        old.kill()
        new.kill()
