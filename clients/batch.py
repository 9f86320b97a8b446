"""Batch reads: a stream's data between two cuts as independent segment slices, read in bulk.

Pravega's batch client (``BatchClientFactory``) for jobs that split a stream among
workers (Spark, backfills): ``slices(scope, stream, start, end)`` resolves both cuts
once and answers one :class:`SegmentSlice` per segment between them -- including
the predecessors and successors of scalings that happened between the cuts -- each
with the byte range to read. ``read(slice)`` reads one slice with one read in flight
ahead of the caller, and yields its events a read's worth at a time, each with the
offset of its envelope (which is a valid stream-cut offset for its segment).

Slices need no coordination: no reader group, no checkpoints. Per-key order holds
within a slice; across a scale, a key's events are in the predecessor's slice and
then the successor's, so a job that needs that order must read predecessors first.
"""

from __future__ import annotations

import asyncio
import dataclasses
import itertools
import logging
from array import array
from collections.abc import AsyncGenerator

from wire import commands as wc
from wire.constants import EVENT_TYPE_CODE
from wire.envelope import ENVELOPE_HEADER, envelope_bounds

from .controller_client import Controller
from .errors import InvalidArgument, InvalidEvent
from .model import Segment, check_scope_name, check_stream_name
from .segment_stores import SegmentStores
from .stream_cut import StreamCut
from .stream_manager import current_tail

log = logging.getLogger("tributary.batch")
_LARGEST_EVENT = 2**31 - 1  # a large event (PDP-43) is read whole, however long


@dataclasses.dataclass(frozen=True)
class SegmentSlice:
    """The bytes ``[start_offset, end_offset)`` of one segment; both ends are event boundaries."""

    segment: Segment
    start_offset: int
    end_offset: int

    @property
    def length(self) -> int:
        return self.end_offset - self.start_offset


class EventBatch:
    """Events read from one slice, as the bytes read and where each event lies in them.

    ``payloads[i]`` is event i; its envelope starts at segment offset ``offsets[i]``. Underneath,
    ``bounds`` (an ``array('q')`` of 2n+1 positions in ``data``) alternates the start of each
    envelope and of its payload and ends with the end of the last event, so ``data`` cut at
    ``bounds`` is header, payload, header, payload...: bulk consumers (Arrow) use it without
    making one object per event.
    """

    __slots__ = ("base", "bounds", "data", "segment")

    def __init__(self, segment: Segment, data: bytes, base: int, bounds: array[int]):
        self.segment = segment
        self.data = data
        self.base = base  # the segment offset of data[0]
        self.bounds = bounds

    def __len__(self) -> int:
        return len(self.bounds) // 2

    def __repr__(self) -> str:
        return f"<EventBatch {len(self)} events of {self.segment} from {self.base + self.bounds[0]}>"

    @property
    def payloads(self) -> list[bytes]:
        data, bounds = self.data, self.bounds
        return [data[bounds[i + 1]:bounds[i + 2]] for i in range(0, len(bounds) - 1, 2)]

    @property
    def offsets(self) -> list[int]:
        base = self.base
        return [base + position for position in self.bounds[0:len(self.bounds) - 1:2]]


class BatchClient:
    """Splits streams into slices and reads them; made by ``client.create_batch_client()``."""

    def __init__(self, controller: Controller, stores: SegmentStores, read_size: int):
        self._controller = controller
        self._stores = stores
        self._read_size = read_size

    async def _resolve(self, scope: str, stream: str, cut: StreamCut | None, *, tail: bool) -> StreamCut:
        """``cut`` itself, or for None / the unbounded cut the stream's tail (``tail``) or head now."""
        if cut is not None and not cut.is_unbounded:
            if (cut.scope, cut.stream) != (scope, stream):
                raise InvalidArgument(f"the stream cut names {cut.scoped_stream}, not {scope}/{stream}")
            return cut
        scope, stream = check_scope_name(scope), check_stream_name(stream)
        if tail:
            return await current_tail(self._controller, self._stores, scope, stream)
        return await self._controller.get_head_cut(scope, stream)

    async def slices(self, scope: str, stream: str, start: StreamCut | None = None,
                     end: StreamCut | None = None) -> list[SegmentSlice]:
        """One slice per segment with data between ``start`` (None: the head) and ``end`` (None: the tail
        now), in segment-id order (so predecessors come before their successors).

        Raises:
            InvalidArgument: a cut of another stream, or an end before the start.
            StreamNotFound.
        """
        start = await self._resolve(scope, stream, start, tail=False)
        end = await self._resolve(scope, stream, end, tail=True)
        if start == end:
            return []  # nothing between a cut and itself (the controller refuses the question)
        segments = await self._controller.get_segments_between(scope, stream, start, end)
        starts, ends = start.positions, end.positions
        sealed = [segment for segment in segments if segment.segment_id not in ends]
        infos = await asyncio.gather(*(self._stores.raw.segment_info(s.qualified_name) for s in sealed))
        lengths = {segment.segment_id: info.write_offset for segment, info in zip(sealed, infos, strict=True)}
        result = []
        for segment in sorted(segments, key=lambda s: s.segment_id):
            low = starts.get(segment.segment_id, 0)
            high = ends.get(segment.segment_id)
            if high is None:
                high = lengths[segment.segment_id]  # a segment not in the end cut was sealed before it
            if high < low:
                raise InvalidArgument(f"the end cut is before the start cut in {segment}")
            if high > low:
                result.append(SegmentSlice(segment, low, high))
        return result

    async def split(self, piece: SegmentSlice, max_bytes: int) -> list[SegmentSlice]:
        """``piece`` cut into consecutive slices of about ``max_bytes`` each, at event boundaries.

        The cuts are the first event boundaries at or after ``start + k * max_bytes`` (the segment
        store's LocateOffset), so a slice is longer than ``max_bytes`` only by the rest of the event
        that straddles its end (a whole large event may make it much longer), and every slice holds
        at least one event. Together the slices cover ``piece`` exactly; reading them in parallel
        gives every event once. A piece no longer than ``max_bytes`` comes back as it is.

        Raises:
            InvalidArgument: ``max_bytes`` is not positive.
            NoSuchSegment (and the other typed errors of a segment call).
        """
        if max_bytes <= 0:
            raise InvalidArgument(f"max_bytes must be positive, not {max_bytes}")
        if piece.length <= max_bytes:
            return [piece]
        name = piece.segment.qualified_name
        targets = range(piece.start_offset + max_bytes, piece.end_offset, max_bytes)
        located = await asyncio.gather(*(self._stores.raw.locate_offset(name, target) for target in targets))
        cuts = sorted({offset for offset in located if piece.start_offset < offset < piece.end_offset})
        edges = [piece.start_offset, *cuts, piece.end_offset]
        return [SegmentSlice(piece.segment, low, high) for low, high in itertools.pairwise(edges)]

    async def read(self, piece: SegmentSlice) -> AsyncGenerator[EventBatch, None]:

        """The events of ``piece``, a read's worth (up to ``read_size`` bytes) per batch.

        Data truncated away meanwhile is skipped with a warning (as Pravega's batch
        readers do); a segment that vanished ends the slice early, also with a warning.

        Raises:
            InvalidEvent: the bytes are not events (e.g. a byte stream).
        """
        name = piece.segment.qualified_name
        offset, end = piece.start_offset, piece.end_offset
        pending = b""  # an incomplete event carried over to the next read
        pending_offset = offset
        reading = asyncio.ensure_future(self._read(name, offset, end)) if offset < end else None
        try:
            while reading is not None:
                reply = await reading
                reading = None
                if isinstance(reply, wc.SegmentIsTruncated):
                    log.warning("data truncated away while reading a slice; skipping to the new start",
                                extra={"segment": name, "offset": offset, "start": reply.start_offset})
                    offset = pending_offset = max(reply.start_offset, offset)
                    pending = b""
                elif isinstance(reply, wc.NoSuchSegment) or not reply.data:
                    log.warning("segment ended before its slice did", extra={"segment": name, "offset": offset})
                    break
                else:
                    data = reply.data
                    offset += len(data)
                    if offset < end:  # the next read goes out before this one is parsed
                        reading = asyncio.ensure_future(self._read(name, offset, end))
                    data = pending + data if pending else bytes(data)
                    bounds = array("q")
                    position, _ = envelope_bounds(data, 0, _LARGEST_EVENT, bounds)
                    if len(data) - position >= 8:
                        self._check_envelope(name, data, position, pending_offset)
                    if bounds:
                        bounds.append(position)
                        yield EventBatch(piece.segment, data, pending_offset, bounds)
                    pending, pending_offset = data[position:], pending_offset + position
                if reading is None and offset < end:
                    reading = asyncio.ensure_future(self._read(name, offset, end))
            if pending:
                raise InvalidEvent(f"{name}: {len(pending)} bytes at {pending_offset} are not a whole event")
        finally:
            if reading is not None:
                reading.cancel()

    @staticmethod
    def _check_envelope(name: str, data: bytes, position: int, base: int) -> None:
        type_code, length = ENVELOPE_HEADER.unpack_from(data, position)
        if type_code != EVENT_TYPE_CODE or length < 0:
            raise InvalidEvent(f"{name} at {base + position}: not an event (type {type_code}, length {length})")

    async def _read(self, name: str, offset: int,
                    end: int) -> wc.SegmentRead | wc.SegmentIsTruncated | wc.NoSuchSegment:

        length = min(self._read_size, end - offset)
        token_for = self._stores.token_for
        return await self._stores.raw.call(name, lambda rid: wc.ReadSegment(name, offset, length, token_for(name), rid),
                                           (wc.SegmentRead, wc.SegmentIsTruncated, wc.NoSuchSegment))



__all__ = ["BatchClient", "EventBatch", "SegmentSlice"]
