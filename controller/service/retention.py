"""Time-, size- and consumption-based retention (spec §6.9, PDP-19): periodic stream cuts, then truncation.

Theory of operation. For every stream whose configuration carries a retention policy, each round:

1. *record a cut* if the newest recorded one is at least ``retention_period_seconds`` old: the
   write offsets of the active segments, with the stream's size up to them (bytes before the
   cut over the stream's whole life), stored as a ``StreamCutRecord`` and appended to the
   retention set;
2. *bound by subscribers*: the cuts reported by the reader groups subscribed to the stream
   (consumption-based retention) are reduced to their lower bound, clamped to the current head;
3. *pick* the truncation point with ``retention_bounds.truncation_cut``: the policy's minimum
   (``retentionParam``) and maximum (``retentionMax``) against the recorded cuts and the
   subscribers' lower bound (see that module);
4. *truncate* there through the ordinary truncation workflow (``Truncation``) if it is ahead of
   the current head, then drop the recorded cuts at or before it.

Time is an argument (``run_once(now)``); only ``run_forever`` reads the context's clock.
Streams are the ones this controller owns (``paging.owned_streams``).
"""

from __future__ import annotations

import asyncio
import functools
import logging

from wire.naming import epoch_of

from .. import metrics
from ..store import NotFound, State, StreamStore
from ..store import readers as store_readers
from ..store import retention as store_retention
from ..store.records import SegmentRecord, StreamCutRecord, TruncationRecord
from .context import ControllerContext
from .errors import ServiceError
from .paging import owned_streams
from .retention_bounds import (
    Compare,
    Comparison,
    Cut,
    RecordedCut,
    bound_cuts,
    compare_cuts,
    subscribers_lower_bound,
    truncation_cut,
)
from .segment_calls import SegmentCalls
from .truncation import Truncation, segments_of_cut

log = logging.getLogger("tributary.controller")


class Retention:
    def __init__(self, context: ControllerContext, truncation: Truncation):
        self._context = context
        self._truncation = truncation

    async def run_once(self, now: int) -> int:
        """One round over every stream with a retention policy. Returns how many streams were truncated."""
        truncated = 0
        for scope, stream in await owned_streams(self._context.store, self._context.coordination.owns):
            try:
                truncated += await self.apply(self._context.store.stream(scope, stream), now)
            except (ServiceError, NotFound) as error:
                log.info("retention skipped a stream", extra={"stream": f"{scope}/{stream}", "error": repr(error)})
        return truncated

    async def apply(self, stream: StreamStore, now: int) -> bool:
        """Records a cut if due, then truncates where the policy and the subscribers allow. True if it truncated."""
        stored, _ = await stream.get_configuration()
        policy = stored.configuration.retention
        if policy is None or (await stream.get_state())[0] != State.ACTIVE:
            return False
        retention_set, _ = await store_retention.get_retention_set(stream)
        period_ms = int(self._context.settings.retention_period_seconds * 1000)
        if not retention_set.records or now - retention_set.records[-1][0] >= period_ms:
            await self._record_cut(stream, now)
            retention_set, _ = await store_retention.get_retention_set(stream)
        current, _ = await store_retention.get_truncation(stream)
        reported = await self._subscriber_cuts(stream)
        rows = [RecordedCut(time, size, {}) for time, size in retention_set.records]
        if not reported:  # the min cut it is: read only that one
            _, minimum = bound_cuts(policy, now, rows)
            rows = [minimum] if minimum is not None else []
        records = await self._recorded_cuts(stream, rows)
        segments = await self._segments(stream, [current.stream_cut, *reported, *(r.cut for r in records)])
        compare: Compare = functools.partial(compare_cuts, segments=segments)
        if reported:
            lower_bound = subscribers_lower_bound(reported, segments)
            if current.stream_cut and compare(lower_bound, current.stream_cut) != Comparison.EQUAL_OR_AFTER:
                lower_bound = dict(current.stream_cut)  # a subscriber behind the head holds back nothing more
            lower_bound_size = (await self._truncation.plan(stream, lower_bound, current)).size_till
            chosen = truncation_cut(policy, now, records, lower_bound, lower_bound_size, compare)
        else:
            lower_bound, chosen = {}, (records[0].cut if records else None)
        if chosen is None or not self._ahead(chosen, current, compare):
            return False
        await self._truncation.truncate_stream(stream.scope, stream.name, chosen)
        metrics.RETENTION_TRUNCATIONS.inc()
        log.info("stream truncated by its retention policy",
                 extra={"stream": f"{stream.scope}/{stream.name}", "cut": dict(chosen),
                        "policy": policy.retention_type.name, "subscribers": len(reported),
                        "bounded_by_subscribers": chosen == lower_bound})
        passed = [record.time for record in records if compare(chosen, record.cut) == Comparison.EQUAL_OR_AFTER]
        if passed:
            await store_retention.remove_stream_cuts_through(stream, max(passed))
        return True

    @staticmethod
    def _ahead(chosen: Cut, current: TruncationRecord, compare: Compare) -> bool:
        """True if ``chosen`` moves the head: strictly after the current truncation point (or, never
        truncated yet, past the start: an offset above 0 or a segment created after the first epoch)."""
        if not current.stream_cut:
            return any(offset > 0 or epoch_of(segment_id) > 0 for segment_id, offset in chosen.items())
        return (compare(chosen, current.stream_cut) == Comparison.EQUAL_OR_AFTER
                and compare(current.stream_cut, chosen) != Comparison.EQUAL_OR_AFTER)

    async def _subscriber_cuts(self, stream: StreamStore) -> list[Cut]:
        """The cuts the stream's subscribers reported (subscribers that have not reported yet are left out)."""
        cuts = []
        for name in await store_readers.list_subscribers(stream):
            try:
                record, _ = await store_readers.get_subscriber(stream, name)
            except NotFound:
                continue  # unsubscribed meanwhile
            if record.stream_cut:
                cuts.append(dict(record.stream_cut))
        return cuts

    @staticmethod
    async def _recorded_cuts(stream: StreamStore, rows: list[RecordedCut]) -> list[RecordedCut]:
        """``rows`` with their stream cuts read (a cut removed meanwhile is left out)."""
        records = []
        for row in rows:
            try:
                record = await store_retention.get_stream_cut(stream, row.time)
            except NotFound:
                continue
            records.append(RecordedCut(row.time, row.size, dict(record.stream_cut)))
        return records

    @staticmethod
    async def _segments(stream: StreamStore, cuts: list[Cut]) -> dict[int, SegmentRecord]:
        segments: dict[int, SegmentRecord] = {}
        wanted = {segment_id for cut in cuts for segment_id in cut}
        if wanted:
            segments.update(await segments_of_cut(stream, dict.fromkeys(wanted, 0)))
        return segments

    async def _record_cut(self, stream: StreamStore, now: int) -> None:
        current, _ = await stream.get_current_epoch()
        cut = await SegmentCalls(self._context, stream.scope, stream.name).write_offsets(current.segment_ids)
        truncation, _ = await store_retention.get_truncation(stream)
        size = (await self._truncation.plan(stream, cut, truncation)).size_till
        await store_retention.add_stream_cut(stream, StreamCutRecord(now, size, cut))

    async def run_forever(self) -> None:
        """A round every ``retention_interval_seconds`` (default: the period); the clock is read here only."""
        settings = self._context.settings
        interval = settings.retention_interval_seconds or settings.retention_period_seconds
        while True:
            await asyncio.sleep(interval)
            try:
                await self.run_once(self._context.now_ms())
            except Exception as error:  # noqa: BLE001 - the next round tries again
                log.warning("retention round failed", extra={"error": repr(error)})
