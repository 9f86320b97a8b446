"""The writer retention on a running segment store (issue 25): a writer that went away loses its attribute after
the retention; one still set up on a connection keeps it however idle, and its appends go on undisturbed."""

from __future__ import annotations

import asyncio
import time
import uuid

from clients.connection import WireConnection, next_request_id
from tests.support.segment_store import running_segment_store
from tests.support.waiting import eventually
from wire import commands as c
from wire.constants import NULL_ATTRIBUTE_VALUE
from wire.envelope import envelope_all

SEGMENT = "scope/retained/0.#epoch.0"
RETENTION = 0.5


async def append(connection: WireConnection, writer: uuid.UUID, number: int) -> None:
    data = envelope_all([b"event"])
    request_id = next_request_id()
    future = connection.expect(request_id)
    connection.send(c.AppendBlockEnd(writer, len(data), data, 1, number, request_id))
    reply = await asyncio.wait_for(future, 10)
    assert isinstance(reply, c.DataAppended), reply


async def setup(connection: WireConnection, writer: uuid.UUID) -> int:
    reply = await connection.request(c.SetupAppend(next_request_id(), writer, SEGMENT, ""))
    assert isinstance(reply, c.AppendSetup), reply
    return reply.last_event_number


async def attribute(connection: WireConnection, writer: uuid.UUID) -> int:
    reply = await connection.request(c.GetSegmentAttribute(next_request_id(), SEGMENT, writer, ""))
    assert isinstance(reply, c.SegmentAttribute), reply
    return reply.value


async def test_writers_gone_for_the_retention_lose_their_attribute_writers_set_up_keep_it(tmp_path):
    async with running_segment_store(tmp_path, container_count=1, writer_retention_seconds=RETENTION) as service:
        staying = await WireConnection.connect("127.0.0.1", service.port)
        created = await staying.request(c.CreateSegment(next_request_id(), SEGMENT, 0, 0, ""))
        assert isinstance(created, c.SegmentCreated), created
        idle, gone = uuid.uuid4(), uuid.uuid4()
        assert await setup(staying, idle) == NULL_ATTRIBUTE_VALUE
        await append(staying, idle, 1)
        leaving = await WireConnection.connect("127.0.0.1", service.port)
        await setup(leaving, gone)
        await append(leaving, gone, 1)
        await append(leaving, gone, 2)
        assert service.writer_attribute_count() == 2
        await leaving.close()

        async def gone_expired() -> bool:
            return await attribute(staying, gone) == NULL_ATTRIBUTE_VALUE

        await eventually(gone_expired, "the attribute of the writer gone to expire", timeout=20, interval=0.1)
        # More expiry passes, at a clock far past the retention rather than after waiting for one: the writer
        # still set up is left alone.
        far_later = int(time.time() * 1000) + 10 * int(RETENTION * 1000)
        for _ in range(3):
            await service.containers[0].expire_writers(now_ms=far_later)
        assert await attribute(staying, idle) == 1
        await append(staying, idle, 2)  # its event number is still there to compare with: no fencing
        assert service.writer_attribute_count() == 1

        back = await WireConnection.connect("127.0.0.1", service.port)
        assert await setup(back, gone) == NULL_ATTRIBUTE_VALUE  # after the retention a writer starts afresh
        await append(back, gone, 3)
        await back.close()
        await staying.close()
