"""The periodic watermarking job (Pravega's ``PeriodicWatermarking``): writer marks -> watermarks in
each stream's mark stream.

Theory of operation. Every ``watermark_period_seconds`` (10 s, as Java), for each user stream this
controller owns (``Coordination.owns``) that has writer marks, a round:

1. loads the stream's *watermark state* if this controller has none: the newest watermark in the
   mark segment (the current one of ``_MARK<stream>``) and the segment's length after it. Reading starts at the
   offset named by the segment's ``NEWEST_MARK`` attribute (a hint written after each append;
   without it, at the segment's start) and goes to its end, so a restarted controller, or one
   that takes a stream over, reads only the newest watermarks. A stream created before mark
   streams existed gets its mark stream here;
2. applies ``watermark_rules.decide`` to the stored marks (with ``writer_timeout_ms``: the
   stream's ``timestampAggregationTimeout``, or six periods when it is 0): removes inactive
   writers (each only if its mark is unchanged since it was listed), and, if the round emits,
   builds the watermark's cut (the writers' positions with their key ranges, over the previous
   cut, completed from the highest epoch);
3. appends the watermark to the mark segment *conditionally* on the length it expects, so two
   controllers can never interleave or go back: if the length differs, the cached state is
   dropped and the next round reads the segment again.

State kept in memory per stream: the newest watermark, the expected length, each non-participating
writer's first-seen time (the timeout clock; a new owner starts its clocks afresh, as Java's do),
the key ranges of segments seen, and the append writer id. Time is an argument (``run_once(now)``);
only ``run_forever`` reads the context's clock.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import uuid

from clients import errors as client_errors
from clients.mark_segment import mark_segment, marks_between, segment_bounds
from wire import naming
from wire.watermark import SegmentWithRange, Watermark, encode_watermark, is_internal_stream, mark_stream

from .. import metrics
from ..store import NotFound, StreamStore, WriteConflict
from ..store import readers as store_readers
from ..store.records import SegmentRecord, WriterMarkRecord
from . import watermark_rules as rules
from .context import ControllerContext
from .errors import ServiceError, StreamSealed
from .paging import owned_streams
from .stream_access import SEALED_STATES, state_or_none
from .stream_creation import StreamCreation

log = logging.getLogger("tributary.controller")

NEWEST_MARK = uuid.UUID("9d4a3c5e-57a1-4f0e-8c1b-6d2e0f7a4b31")  # mark segment attribute: newest watermark's offset


@dataclasses.dataclass
class StreamWatermarks:
    """What this controller knows of one stream's watermarks (see the module docstring)."""

    segment: str  # the mark segment
    previous: Watermark | None
    length: int
    not_participating_since: dict[str, int] = dataclasses.field(default_factory=dict)
    ranges: dict[int, SegmentWithRange] = dataclasses.field(default_factory=dict)
    writer_id: uuid.UUID = dataclasses.field(default_factory=uuid.uuid4)

    @property
    def previous_lower(self) -> int | None:
        return None if self.previous is None else self.previous.lower_time_bound


def with_range(segment: SegmentRecord) -> SegmentWithRange:
    return SegmentWithRange(segment.segment_id, segment.key_start, segment.key_end)


class Watermarking:
    def __init__(self, context: ControllerContext, creation: StreamCreation):
        self._context = context
        self._creation = creation
        self._streams: dict[tuple[str, str], StreamWatermarks] = {}

    def known(self, scope: str, stream: str) -> StreamWatermarks | None:
        """The cached state of a stream (None until a round loaded it)."""
        return self._streams.get((scope, stream))

    async def run_once(self, now: int) -> int:
        """One round over every owned user stream. Returns how many watermarks were written."""
        written = 0
        owned = await owned_streams(self._context.store, self._context.coordination.owns)
        for scope, stream in owned:
            if scope == naming.INTERNAL_SCOPE or is_internal_stream(stream):
                continue
            try:
                written += await self.watermark(scope, stream, now) is not None
            except (ServiceError, NotFound, client_errors.TributaryError) as error:
                self._streams.pop((scope, stream), None)
                log.info("watermarking skipped a stream", extra={"stream": f"{scope}/{stream}", "error": repr(error)})
        for key in set(self._streams) - set(owned):  # deleted, or now another controller's
            del self._streams[key]
        return written

    async def watermark(self, scope: str, stream: str, now: int) -> Watermark | None:
        """One round for one stream. Returns the watermark written, if any."""
        handle = self._context.store.stream(scope, stream)
        marks = await self._marks(handle)
        if not marks and (scope, stream) not in self._streams:
            return None
        state = await self._state(scope, stream)
        stored, _ = await handle.get_configuration()
        records = {writer: record for writer, (record, _) in marks.items()}
        timeout_ms = rules.writer_timeout_ms(stored.configuration.timestamp_aggregation_timeout_ms,
                                             self._context.settings.watermark_period_seconds)
        decision = rules.decide(records, state.previous_lower, state.not_participating_since, now, timeout_ms)
        for writer in decision.inactive:
            await self._remove(handle, writer, marks[writer][1])
        if decision.bounds is None:
            return None
        positions = [await self._with_ranges(handle, state, records[writer].position) for writer in decision.active]
        cut = rules.upper_bound(positions, state.previous.stream_cut if state.previous is not None else {})
        rules.complete_cut(cut, await self._epoch_of(handle, rules.highest_epoch(cut)))
        watermark = Watermark(decision.bounds[0], decision.bounds[1], cut)
        return await self._append(scope, stream, state, watermark)

    async def _marks(self, handle: StreamStore) -> dict[str, tuple[WriterMarkRecord, int]]:
        marks: dict[str, tuple[WriterMarkRecord, int]] = {}
        token = b""
        while True:
            page, token = await store_readers.list_writer_marks_versioned(handle, token)
            marks.update(page)
            if not page or not token:
                return marks

    async def _remove(self, handle: StreamStore, writer: str, version: int) -> None:
        try:
            await store_readers.remove_writer_mark(handle, writer, version)
        except (WriteConflict, NotFound):
            pass  # it reported again meanwhile (or is gone): the next round looks again

    # ------------------------------------------------------------------ the mark segment

    async def _state(self, scope: str, stream: str) -> StreamWatermarks:
        """The cached state, or one loaded from the mark segment (created if missing)."""
        state = self._streams.get((scope, stream))
        if state is not None:
            return state
        mark = self._context.store.stream(scope, mark_stream(stream))
        try:
            current, _ = await mark.get_current_epoch()
        except NotFound:
            if await state_or_none(self._context.store.stream(scope, stream)) in (None, *SEALED_STATES):
                raise StreamSealed(f"{scope}/{stream} is gone or sealed: no mark stream made for it") from None
            await self._creation.ensure_mark_stream(scope, stream)
            current, _ = await mark.get_current_epoch()
        (segment_id,) = current.segment_ids
        segment = mark_segment(scope, stream, segment_id)
        start, length = await segment_bounds(self._context.segments, segment)
        hint = await self._context.segments.get_attribute(segment, NEWEST_MARK)
        offset = hint if start <= hint < length else start
        previous = None
        async for _, _, watermark in marks_between(self._context.segments, segment, offset, length):
            previous = watermark
        state = self._streams[(scope, stream)] = StreamWatermarks(segment, previous, length)
        return state

    async def _append(self, scope: str, stream: str, state: StreamWatermarks,
                      watermark: Watermark) -> Watermark | None:
        segment = state.segment
        offset = state.length
        length = await self._context.segments.append_conditionally(segment, state.writer_id, offset,
                                                                   encode_watermark(watermark))
        if length is None:  # another controller wrote meanwhile: read the segment again next round
            self._streams.pop((scope, stream), None)
            log.info("mark segment changed under this controller", extra={"stream": f"{scope}/{stream}"})
            return None
        state.previous, state.length = watermark, length
        metrics.WATERMARKS.inc()
        hint = await self._context.segments.get_attribute(segment, NEWEST_MARK)
        await self._context.segments.update_attribute(segment, NEWEST_MARK, offset, hint)  # a lost race is fine
        return watermark

    # ------------------------------------------------------------------ key ranges

    async def _with_ranges(self, handle: StreamStore, state: StreamWatermarks,
                           position: dict[int, int]) -> dict[SegmentWithRange, int]:
        """A writer's position with each segment's key range (segments the stream does not know are left out)."""
        result = {}
        for segment_id, offset in position.items():
            if segment_id not in state.ranges:
                try:
                    record = (await handle.get_epoch(segment_id >> 32)).segment(segment_id)
                except NotFound:
                    record = None
                if record is None:
                    continue
                state.ranges[segment_id] = with_range(record)
            result[state.ranges[segment_id]] = offset
        return result

    async def _epoch_of(self, handle: StreamStore, epoch: int | None) -> list[SegmentWithRange]:
        """The segments of ``epoch`` (None: the current one)."""
        record = (await handle.get_current_epoch())[0] if epoch is None else await handle.get_epoch(epoch)
        return [with_range(segment) for segment in record.segments]

    async def run_forever(self) -> None:
        """A round every ``watermark_period_seconds`` (the clock is read here only)."""
        while True:
            await asyncio.sleep(self._context.settings.watermark_period_seconds)
            try:
                await self.run_once(self._context.now_ms())
            except Exception as error:  # noqa: BLE001 - the next round tries again
                log.warning("watermarking round failed", extra={"error": repr(error)})


__all__ = ["NEWEST_MARK", "StreamWatermarks", "Watermarking"]
