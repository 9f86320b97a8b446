"""``spark.readStream.format("tributary")``: micro-batches between stream cuts.

Each micro-batch is the data between two stream cuts, kept by Spark as offsets
(:mod:`spark_io.offsets`). Spark plans a batch by asking :meth:`StreamReader.latestOffset` for
the end cut from the previous end:

1. *Scalings.* A segment of the start cut that is sealed and read to its end is replaced by its
   successors (from offset 0), but a successor only once every one of its predecessors is read
   to its end, so one key's events are never read out of order across a scale (the Pravega
   connector documents that it does not keep this order). A sealed stream's last segments
   simply stay at their ends.
2. *The tail.* Every segment of the cut ends at its current length, or where a bound stops it:
   ``end_stream_cut`` (bounded streaming) and, for ``trigger(availableNow=True)``, the tail as it
   was when the trigger started. Segments created after a bound are not read.
3. *The limit.* ``approx_bytes_per_trigger`` shares a byte budget among the segments in
   proportion to their backlog and moves each to the first event boundary at or after its share
   (the segment store's LocateOffset); ``max_events_per_trigger`` shares an event budget the
   same way and counts events to find each end. Every batch makes progress (at least one event)
   while data is available.

The input partitions of a batch are the slices between its two cuts (the batch read's), so a
restart from a checkpoint re-plans exactly the batch Spark recorded: neither skips nor repeats.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Iterator
from typing import NamedTuple

import pyarrow as pa
from pyspark.sql.datasource import DataSourceStreamReader
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxBytes,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
)

from clients.batch import SegmentSlice
from clients.client import Client
from clients.errors import NoSuchSegment
from clients.model import Segment
from clients.stream_cut import StreamCut

from .bridge import Bridge
from .offsets import cut_of, offset_of
from .options import ReadOptions
from .reading import SlicePartition, ensure_stream, partitions_of, read_partition, resolve_cut, split_slices
from .subscription import Subscription

log = logging.getLogger("tributary.spark")


class _Bound:
    """A cut the reading must not pass: its segments stop at its offsets; segments created after it
    (not between the head and it) are not read."""

    def __init__(self, cut: StreamCut, segment_ids: set[int]):
        self.cut = cut
        self.segment_ids = segment_ids

    @classmethod
    async def of(cls, client: Client, cut: StreamCut) -> _Bound:
        between = await client.segments_between(StreamCut.UNBOUNDED, cut)
        return cls(cut, {segment.segment_id for segment in between} | set(cut.positions))

    def allows(self, segment_id: int) -> bool:
        return segment_id in self.segment_ids

    def cap(self, segment_id: int, offset: int) -> int:
        return min(offset, self.cut.positions.get(segment_id, offset))


class StreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Micro-batches of one stream; lives in one driver-side process per query run."""

    def __init__(self, options: ReadOptions):
        self.options = options
        self._end: _Bound | None = None  # end_stream_cut, resolved once per run
        self._end_resolved = False
        self._frozen: _Bound | None = None  # availableNow's target
        self._latest: dict | None = None  # the unlimited tail seen last (for progress reports)
        target = options.target
        self._subscription = (None if options.subscriber is None
                              else Subscription(target.scope, target.stream, options.subscriber))

    # ------------------------------------------------------------------ Spark's calls

    def initialOffset(self) -> dict:
        target = self.options.target
        bridge = Bridge.get()
        client = bridge.client(target.access)

        async def initial():
            await ensure_stream(client, target)
            start = await resolve_cut(client, target, self.options.start_cut)
            assert start is not None  # read_options turns an unbounded start into earliest
            if self._subscription is not None:
                await self._subscription.join(client, start)
            return start

        return offset_of(bridge.run(initial()))

    def getDefaultReadLimit(self) -> ReadLimit:
        if self.options.approx_bytes_per_trigger is not None:
            return ReadMaxBytes(self.options.approx_bytes_per_trigger)
        if self.options.max_events_per_trigger is not None:
            return ReadMaxRows(self.options.max_events_per_trigger)
        return ReadAllAvailable()

    def prepareForTriggerAvailableNow(self) -> None:
        bridge = Bridge.get()
        target = self.options.target
        client = bridge.client(target.access)

        async def freeze():
            return await _Bound.of(client, await client.tail_cut(target.scope, target.stream))

        self._frozen = bridge.run(freeze())

    def latestOffset(self, start: dict, limit: ReadLimit) -> dict:
        bridge = Bridge.get()
        client = bridge.client(self.options.target.access)
        end = bridge.run(self._latest_cut(client, cut_of(start), limit))
        return offset_of(end)

    def reportLatestOffset(self) -> dict | None:
        return self._latest

    def partitions(self, start: dict, end: dict) -> list[SlicePartition]:
        bridge = Bridge.get()
        client = bridge.client(self.options.target.access)
        slices = slices_between(cut_of(start), cut_of(end))
        return partitions_of(self.options.target.access,
                             bridge.run(split_slices(client, slices, self.options.max_partition_bytes)))

    def read(self, partition: SlicePartition) -> Iterator[pa.RecordBatch]:  # type: ignore[override]  # gets our partitions
        return read_partition(partition)

    def commit(self, end: dict) -> None:
        """Spark committed the micro-batch ending at ``end``: with option ``subscriber``, retention may now drop
        what is before it (:mod:`spark_io.subscription`); without, nothing to do."""
        if self._subscription is not None:
            bridge = Bridge.get()
            bridge.run(self._subscription.release(bridge.client(self.options.target.access), cut_of(end)))

    # ------------------------------------------------------------------ planning a batch

    async def _bounds(self, client: Client) -> list[_Bound]:
        if not self._end_resolved:
            end = await resolve_cut(client, self.options.target, self.options.end_cut)
            self._end = None if end is None else await _Bound.of(client, end)
            self._end_resolved = True
        return [bound for bound in (self._end, self._frozen) if bound is not None]

    async def _latest_cut(self, client: Client, start: StreamCut, limit: ReadLimit) -> StreamCut:
        bounds = await self._bounds(client)
        positions, infos = await _past_sealed(client, start, bounds)
        tail = {}
        for segment_id, info in infos.items():
            end = info.write_offset
            for bound in bounds:
                end = bound.cap(segment_id, end)
            tail[segment_id] = max(end, positions[segment_id])
        self._latest = offset_of(StreamCut(start.scope, start.stream, tail))
        if isinstance(limit, ReadMaxBytes):
            tail = await _limit_bytes(client, start, positions, tail, limit.max_bytes)
        elif isinstance(limit, ReadMaxRows):
            tail = await _limit_events(client, start, positions, tail, limit.max_rows)
        return StreamCut(start.scope, start.stream, tail)


def slices_between(start: StreamCut, end: StreamCut) -> list[SegmentSlice]:
    """The segment slices from ``start`` to ``end`` (segments new in ``end`` from offset 0)."""
    starts = start.positions
    return [SegmentSlice(Segment(end.scope, end.stream, segment_id), starts.get(segment_id, 0), offset)
            for segment_id, offset in sorted(end.positions.items()) if offset > starts.get(segment_id, 0)]


class _Gone(NamedTuple):
    """What a segment deleted meanwhile (retention removes sealed segments) counts as: sealed and
    empty, so its successors take over."""

    is_sealed: bool = True
    write_offset: int = 0


async def _infos(client: Client, scope: str, stream: str, segment_ids) -> dict:
    store = client.segment_store

    async def info(segment_id: int):
        name = Segment(scope, stream, segment_id).qualified_name
        try:
            return await store.segment_info(name)
        except NoSuchSegment:
            log.warning("a segment of the query's cut no longer exists; going on with its successors",
                        extra={"segment": name})
            return _Gone()

    ids = list(segment_ids)
    return dict(zip(ids, await asyncio.gather(*(info(i) for i in ids)), strict=True))


async def _past_sealed(client: Client, start: StreamCut, bounds: list[_Bound]) -> tuple[dict[int, int], dict]:
    """The start positions with finished segments replaced by their successors (step 1 of the module
    docstring), and every remaining segment's info."""
    scope, stream = start.scope, start.stream
    positions = start.positions
    infos = await _infos(client, scope, stream, positions)
    while True:
        before = dict(positions)
        finished = {i for i, offset in positions.items() if infos[i].is_sealed and offset >= infos[i].write_offset}
        for segment_id in sorted(finished):
            successors = (await client.get_successors(Segment(scope, stream, segment_id))).successors
            taken = []
            for segment_range, predecessors in successors:
                successor = segment_range.segment.segment_id
                if successor in positions:
                    taken.append(successor)
                elif (all(bound.allows(successor) for bound in bounds)
                      and all(p not in positions or p in finished for p in predecessors)):
                    positions[successor] = 0
                    taken.append(successor)
            if successors and len(taken) == len(successors):
                del positions[segment_id]
        if positions == before:
            break
        infos.update(await _infos(client, scope, stream, [i for i in positions if i not in infos]))
    return positions, {i: infos[i] for i in positions}


def _shares(budget: int, backlog: dict[int, int]) -> dict[int, int]:
    """``budget`` shared in proportion to each segment's backlog; at least 1 for the largest."""
    total = sum(backlog.values())
    shares = {i: budget * amount // total for i, amount in backlog.items() if amount > 0}
    if not any(shares.values()):
        largest = max(backlog, key=backlog.__getitem__)

        shares[largest] = 1
    return shares


async def _limit_bytes(client: Client, start: StreamCut, positions: dict[int, int], tail: dict[int, int],
                       budget: int) -> dict[int, int]:
    backlog = {i: tail[i] - positions[i] for i in tail}
    if sum(backlog.values()) <= budget:
        return tail
    store = client.segment_store
    shares = _shares(budget, backlog)
    ends = dict(positions)

    async def locate(segment_id: int, share: int) -> None:
        name = Segment(start.scope, start.stream, segment_id).qualified_name
        ends[segment_id] = min(await store.locate_offset(name, positions[segment_id] + share), tail[segment_id])

    await asyncio.gather(*(locate(i, share) for i, share in shares.items() if share))
    return ends


async def _limit_events(client: Client, start: StreamCut, positions: dict[int, int], tail: dict[int, int],
                        budget: int) -> dict[int, int]:
    backlog = {i: tail[i] - positions[i] for i in tail}
    if not any(backlog.values()):
        return tail
    batch = client.create_batch_client()
    shares = _shares(budget, backlog)
    ends = dict(positions)

    async def count(segment_id: int, events: int) -> None:
        piece = SegmentSlice(Segment(start.scope, start.stream, segment_id), positions[segment_id], tail[segment_id])
        ends[segment_id] = tail[segment_id]
        async with contextlib.aclosing(batch.read(piece)) as chunks:
            async for chunk in chunks:
                if events < len(chunk):
                    ends[segment_id] = chunk.offsets[events]
                    return
                events -= len(chunk)

    await asyncio.gather(*(count(i, share) for i, share in shares.items() if share))
    return ends


__all__ = ["StreamReader", "slices_between"]
