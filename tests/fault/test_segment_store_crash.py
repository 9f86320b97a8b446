"""Crash test: a writer appends with acknowledgements while the segment store process is SIGKILLed
at random moments; after every restart on the same data dir each acknowledged event is present
exactly once, in order, and the writer's stored event number says exactly which events survived."""

from __future__ import annotations

import asyncio
import random
import uuid

import pytest

from clients.connection import WireConnection, next_request_id
from clients.errors import ConnectionFailed
from tests.support.processes import ServerProcess
from tests.support.replicated_processes import tier1_options
from wire import commands as c
from wire.constants import NULL_ATTRIBUTE_VALUE
from wire.envelope import envelope_all, split_events

SEGMENT = "crash/stream/0.#epoch.0"
CYCLES = 20
pytestmark = [pytest.mark.slow, pytest.mark.process]


def payload(number: int, padding: int = 0) -> bytes:
    return f"event-{number:08d}-".encode() + bytes([number % 251]) * (number % 300 + padding)


async def write_until_killed(port: int, writer: uuid.UUID, acked: list[int], stop_after: float, killed: asyncio.Event,
                             padding: int = 0) -> None:
    """Resumes after the writer's stored event number and appends blocks, several in flight, until the
    connection fails; a failure before ``killed`` is set (the test's SIGKILL), or of any other kind (an
    error reply, a timeout), is the test's failure."""
    connection: WireConnection | None = None
    in_flight: list[asyncio.Future] = []
    deadline = asyncio.get_running_loop().time() + stop_after
    try:  # the kill may land while connecting or setting up (a loaded machine): that is no failure either
        connection = await WireConnection.connect("127.0.0.1", port)
        setup = await connection.request(c.SetupAppend(next_request_id(), writer, SEGMENT, ""))
        next_number = 1 if setup.last_event_number == NULL_ATTRIBUTE_VALUE else setup.last_event_number + 1
        while asyncio.get_running_loop().time() < deadline:
            count = random.randint(1, 20)
            numbers = list(range(next_number, next_number + count))
            data = envelope_all([payload(n, padding) for n in numbers])
            request_id = next_request_id()
            future = connection.expect(request_id)
            connection.send(c.AppendBlockEnd(writer, len(data), data, count, numbers[-1], request_id))
            next_number += count
            in_flight.append(future)
            while len(in_flight) >= 4 or (in_flight and in_flight[0].done()):
                reply = await in_flight.pop(0)
                assert isinstance(reply, c.DataAppended), reply
                acked.append(reply.event_number)
            await asyncio.sleep(0)
        await asyncio.sleep(10)  # keep writing state until the kill lands
    except ConnectionFailed:
        if not killed.is_set():
            raise  # the connection failed, but not because the server was killed
    finally:
        if connection is not None:
            await connection.close()


async def read_everything(port: int) -> tuple[bytes, int]:
    connection = await WireConnection.connect("127.0.0.1", port)
    try:
        info = await connection.request(c.GetStreamSegmentInfo(next_request_id(), SEGMENT, ""))
        data, offset = bytearray(), 0
        while offset < info.write_offset:
            reply = await connection.request(c.ReadSegment(SEGMENT, offset, 1 << 21, "", next_request_id()))
            data += reply.data
            offset += len(reply.data)
        return bytes(data), info.write_offset
    finally:
        await connection.close()


async def stored_event_number(port: int, writer: uuid.UUID) -> int:
    connection = await WireConnection.connect("127.0.0.1", port)
    try:
        reply = await connection.request(c.GetSegmentAttribute(next_request_id(), SEGMENT, writer, ""))
        return reply.value
    finally:
        await connection.close()


@pytest.fixture(params=["local", "replicated"])
def tier1(request, tmp_path):
    """The segment store's options for each tier-1: its local log, or three log stores and ZooKeeper."""
    with tier1_options(request.param, tmp_path, request) as options:
        yield request.param, options


@pytest.mark.parametrize("padding, cycles", [(0, CYCLES), (48 * 1024, 10)], ids=["small-events", "tier2-active"])
async def test_acknowledged_events_survive_repeated_sigkill(tmp_path, tier1, padding, cycles):
    """Cycles of write-then-SIGKILL-then-restart; after each, the segment is exactly events 1..K in order
    with no duplicates, K = the writer's stored event number >= every acknowledged one. With ~48 KiB
    events the kills land while the storage writer flushes to Tier-2 and the log is being truncated.
    On the replicated tier-1 each restart also waits out the killed owner's ZooKeeper session (1 s),
    then fences and recovers its ledgers, so it runs fewer cycles."""
    seed = random.randrange(1 << 30)
    random.seed(seed)
    kind, tier1_args = tier1
    cycles = cycles if kind == "local" else cycles // 2
    server = ServerProcess("segmentstore", tmp_path / "data", log_path=tmp_path / "server.log",
                           extra_args=["--containers", "2", "--log-file-size", "16", *tier1_args]).start()
    writer = uuid.uuid4()
    acked: list[int] = []
    try:
        connection = await WireConnection.connect("127.0.0.1", server.port)
        await connection.request(c.CreateSegment(next_request_id(), SEGMENT, 0, 0, ""))
        await connection.close()
        for cycle in range(cycles):
            killed = asyncio.Event()
            writing = asyncio.ensure_future(write_until_killed(server.port, writer, acked, 5, killed, padding))
            await asyncio.sleep(random.uniform(0.05, 0.5))
            killed.set()
            server.kill()
            await asyncio.wait_for(writing, 30)
            server.start()
            data, length = await read_everything(server.port)
            events, consumed = split_events(data)
            assert consumed == len(data) == length, f"seed {seed} cycle {cycle}: partial event in the segment"
            stored = await stored_event_number(server.port, writer)
            assert [bytes(e) for e in events] == [payload(n, padding) for n in range(1, len(events) + 1)], \
                f"seed {seed} cycle {cycle}: events missing, duplicated or out of order"
            assert stored == len(events) or (stored == NULL_ATTRIBUTE_VALUE and not events), f"seed {seed}"
            assert max(acked, default=0) <= len(events), f"seed {seed} cycle {cycle}: acknowledged events lost"
        assert len(acked) > cycles, f"seed {seed}: the writer barely wrote anything"
        if padding:
            tier2 = sum(path.stat().st_size for path in (tmp_path / "data" / "tier2").rglob("*") if path.is_file())
            assert tier2 > 16 * 1024 * 1024, f"seed {seed}: Tier-2 holds only {tier2} bytes: nothing was flushed"
    finally:
        server.kill()
