"""Reading a stream into Spark: one input partition per segment slice, rows as Arrow record batches.

Batch reads and micro-batches plan the same way: the planner (a driver-side worker) turns two
stream cuts into :class:`SlicePartition`s -- one per segment with data between them, following
scalings, and a segment's slice longer than ``max_partition_bytes`` cut at event boundaries
(the store's LocateOffset) into several, so one large segment is read by many tasks -- and each
executor task reads its slice through the process's bridge with the SDK's
batch client, one Arrow record batch per segment read (up to 2 MiB of events). The columns are
the Pravega connector's: ``event binary, scope string, stream string, segment_id long,
offset long``, ``offset`` being where the event's envelope starts in its segment.
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
from array import array
from collections.abc import Iterator

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql.datasource import DataSourceReader, InputPartition

from clients.batch import EventBatch, SegmentSlice
from clients.client import Client
from clients.model import Segment
from clients.stream_cut import StreamCut

from .access import ServerAccess
from .bridge import Bridge
from .options import EARLIEST, LATEST, UNBOUNDED, ReadOptions, StreamOptions

READ_SCHEMA = "event binary, scope string, stream string, segment_id long, offset long"
ARROW_READ_SCHEMA = pa.schema([("event", pa.binary()), ("scope", pa.string()), ("stream", pa.string()),
                               ("segment_id", pa.int64()), ("offset", pa.int64())])


@dataclasses.dataclass
class SlicePartition(InputPartition):
    """One segment's bytes ``[start, end)`` (plain data: it is pickled to the executor)."""

    access: ServerAccess
    scope: str
    stream: str
    segment_id: int
    start: int
    end: int


def partitions_of(access: ServerAccess, slices: list[SegmentSlice]) -> list[SlicePartition]:
    return [SlicePartition(access, piece.segment.scope, piece.segment.stream, piece.segment.segment_id,
                           piece.start_offset, piece.end_offset) for piece in slices]


async def split_slices(client: Client, slices: list[SegmentSlice], max_bytes: int) -> list[SegmentSlice]:
    """``slices`` with each one longer than ``max_bytes`` cut at event boundaries into pieces of about
    that size (``max_partition_bytes``), so one large segment is read by many tasks at once. Order is
    kept: a segment's pieces follow one another, predecessors before successors."""
    batch = client.create_batch_client()
    pieces = await asyncio.gather(*(batch.split(piece, max_bytes) for piece in slices))
    return [piece for split in pieces for piece in split]


def read_partition(partition: SlicePartition) -> Iterator[pa.RecordBatch]:
    """The rows of one slice (on an executor)."""
    bridge = Bridge.get()
    client = bridge.client(partition.access)
    batch_client = bridge.cached(("batch", partition.access), client.create_batch_client)
    piece = SegmentSlice(Segment(partition.scope, partition.stream, partition.segment_id),
                         partition.start, partition.end)
    scope = pa.scalar(partition.scope, pa.string())
    stream = pa.scalar(partition.stream, pa.string())
    segment_id = pa.scalar(partition.segment_id, pa.int64())
    for chunk in bridge.iterate(batch_client.read(piece)):
        yield record_batch(chunk, scope, stream, segment_id)


def record_batch(chunk: EventBatch, scope: pa.Scalar, stream: pa.Scalar, segment_id: pa.Scalar) -> pa.RecordBatch:
    """The rows of one read. The bytes read, cut at the chunk's bounds, are an Arrow array of envelope
    headers and payloads taking turns (no copy); the payloads are taken out of it in one C++ step."""
    count = len(chunk)
    pieces = pa.LargeBinaryArray.from_buffers(pa.large_binary(), 2 * count,
                                              [None, pa.py_buffer(chunk.bounds), pa.py_buffer(chunk.data)])
    events = pieces.take(_odd_indices(count)).cast(pa.binary())
    headers = pa.Array.from_buffers(pa.int64(), count, [None, pa.py_buffer(chunk.bounds[0:2 * count:2])])
    return pa.RecordBatch.from_arrays(
        [events, pa.repeat(scope, count), pa.repeat(stream, count), pa.repeat(segment_id, count),
         pc.add(headers, chunk.base)], schema=ARROW_READ_SCHEMA)


@functools.lru_cache(maxsize=16)
def _odd_indices(count: int) -> pa.Array:
    """1, 3, 5, ... 2 * count - 1: where the payloads are among headers and payloads."""
    return pa.Array.from_buffers(pa.int64(), count, [None, pa.py_buffer(array("q", range(1, 2 * count, 2)))])


async def ensure_stream(client: Client, target: StreamOptions) -> None:
    """Creates the scope and the stream where the options allow it (as the Pravega connector does).

    Raises:
        ValueError: the scope or stream does not exist and may not be created.
    """
    if target.allow_create_scope:
        await client.create_scope(target.scope)
    elif not await client.scope_exists(target.scope):
        raise ValueError(f"scope {target.scope} does not exist (and allow_create_scope is false)")
    if target.allow_create_stream:
        await client.create_stream(target.scope, target.stream, target.configuration)
    elif not await client.stream_exists(target.scope, target.stream):
        raise ValueError(f"stream {target.scope}/{target.stream} does not exist (and allow_create_stream is false)")


async def resolve_cut(client: Client, target: StreamOptions, value: str) -> StreamCut | None:
    """The cut an option names: ``earliest`` (the head now), ``latest`` (the tail now), ``unbounded``
    (None), or a stream cut's text form (which must be of the target stream)."""
    if value == UNBOUNDED:
        return None
    if value == EARLIEST:
        return await client.head_cut(target.scope, target.stream)
    if value == LATEST:
        return await client.tail_cut(target.scope, target.stream)
    cut = StreamCut.from_text(value)
    if (cut.scope, cut.stream) != (target.scope, target.stream):
        raise ValueError(f"the stream cut {value!r} is of {cut.scoped_stream}, not {target.scope}/{target.stream}")
    return cut


class BatchReader(DataSourceReader):
    """``spark.read.format("tributary")``: the events between ``start_stream_cut`` and
    ``end_stream_cut``, both resolved once, when the query is planned."""

    def __init__(self, options: ReadOptions):
        self.options = options

    def partitions(self) -> list[SlicePartition]:
        target = self.options.target
        bridge = Bridge.get()
        client = bridge.client(target.access)

        async def plan():
            await ensure_stream(client, target)
            start = await resolve_cut(client, target, self.options.start_cut)
            end = await resolve_cut(client, target, self.options.end_cut)
            slices = await client.create_batch_client().slices(target.scope, target.stream, start, end)
            return await split_slices(client, slices, self.options.max_partition_bytes)

        return partitions_of(target.access, bridge.run(plan()))

    def read(self, partition: SlicePartition) -> Iterator[pa.RecordBatch]:  # type: ignore[override]  # gets our partitions

        return read_partition(partition)


__all__ = [
    "ARROW_READ_SCHEMA",
    "READ_SCHEMA",
    "BatchReader",
    "SlicePartition",
    "ensure_stream",
    "partitions_of",
    "read_partition",
    "split_slices",
    "resolve_cut",
]
