"""What the Spark tests share: writing and reading streams with the SDK around Spark queries."""

from __future__ import annotations

import asyncio

import clients.client as sdk
from clients.model import ScalingPolicy, StreamConfiguration
from tests.support.sdk import parse_event, write_keyed


def run(coroutine):
    return asyncio.run(coroutine)


def create_stream(controller: str, scope: str, stream: str, segments: int) -> None:
    async def create():
        async with sdk.connect(controller) as client:
            await client.create_scope(scope)
            await client.create_stream(scope, stream, StreamConfiguration(ScalingPolicy.fixed(segments)))
    run(create())


def write_events(controller: str, scope: str, stream: str, numbers: range, keys: int = 16, size: int = 0) -> None:
    """Writes events ``numbers`` as ``tests.support.sdk.write_keyed`` does (a new writer, flushed)."""
    async def write():
        async with sdk.connect(controller) as client, client.create_writer(scope, stream) as writer:
            await write_keyed(writer, len(numbers), keys, numbers.start, size)
    run(write())


def tail_cut(controller: str, scope: str, stream: str):
    async def tail():
        async with sdk.connect(controller) as client:
            return await client.tail_cut(scope, stream)
    return run(tail())


def read_events(controller: str, scope: str, stream: str) -> list[tuple[int, int, bytes]]:
    """(segment id, offset, payload) of every event of the stream, read with the SDK's batch client."""
    async def read():
        async with sdk.connect(controller) as client:
            batch = client.create_batch_client()
            events = []
            for piece in await batch.slices(scope, stream):
                async for chunk in batch.read(piece):
                    events.extend((piece.segment.segment_id, offset, payload)
                                  for offset, payload in zip(chunk.offsets, chunk.payloads))
            return events
    return run(read())


def number_of(payload: bytes, keys: int = 16) -> int:
    """The number ``write_events`` gave an event."""
    key, sequence = parse_event(payload)
    return sequence * keys + int(key[1:])


def open_transactions(store_port: int, scope: str, stream: str) -> list:
    """The stream's transactions that are still OPEN, from the controller's own records (its table
    ``_system/_tables/<scope>/<stream>/transactions`` on the segment store)."""
    from clients.errors import NoSuchSegment
    from clients.segment_store_client import SegmentStoreClient
    from controller.store.records.transactions import TransactionRecord
    from controller.store.states import TransactionStatus

    async def read():
        store = SegmentStoreClient(("127.0.0.1", store_port))
        try:
            records = [TransactionRecord.decode(value) async for _, _, value in
                       store.table_entries(f"_system/_tables/{scope}/{stream}/transactions")]
        except NoSuchSegment:
            return []
        finally:
            await store.close()
        return [record.transaction_id for record in records if record.status == TransactionStatus.OPEN]
    return run(read())


def sink_records(store_port: int, scope: str, stream: str) -> dict[str, dict]:
    """The Spark writers' records of a stream (``spark_io.records``): key -> JSON record."""
    import json

    from clients.segment_store_client import SegmentStoreClient
    from spark_io.records import records_table

    async def read():
        store = SegmentStoreClient(("127.0.0.1", store_port))
        try:
            return {key.decode(): json.loads(value) async for key, _, value in
                    store.table_entries(records_table(scope, stream))}
        finally:
            await store.close()
    return run(read())
