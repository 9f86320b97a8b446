"""Time- and size-based retention (spec §6.9, PDP-19): periodic stream cuts, then truncation.

Theory of operation. For every stream whose configuration carries a retention policy, each round:

1. *record a cut* if the newest recorded one is at least ``retention_period_seconds`` old: the
   write offsets of the active segments, with the stream's size up to them (bytes before the
   cut over the stream's whole life), stored as a ``StreamCutRecord`` and appended to the
   retention set;
2. *pick* the truncation point: for every recorded cut, ``v`` is what truncating there would keep
   (TIME: now - its recording time; SIZE: newest size - its size). The chosen cut is the one with
   the smallest ``v`` that is still >= ``retentionParam`` -- the newest cut that keeps at least
   the minimum. Consumption-based bounds (subscribers) are not applied yet;
3. *truncate* there through the ordinary truncation workflow (``Truncation``), then drop the
   recorded cuts at or before it.

Time is an argument (``run_once(now)``); only ``run_forever`` reads the context's clock.
Streams are found by listing every scope: fine for the stream counts of one controller; a
bucketed index as in Java is the follow-up for large deployments.
"""

from __future__ import annotations

import asyncio
import logging

from .. import metrics
from ..store import NotFound, State, StreamStore
from ..store import retention as store_retention
from ..store.records import RetentionPolicy, RetentionType, StreamCutRecord
from .context import ControllerContext
from .errors import ServiceError
from .paging import owned_streams
from .segment_calls import SegmentCalls
from .truncation import Truncation

log = logging.getLogger("tributary.controller")


def retained(policy: RetentionPolicy, now: int, newest_size: int, recording_time: int, recording_size: int) -> int:
    """What truncating at a cut recorded at (time, size) would keep, in the policy's unit."""
    if policy.retention_type == RetentionType.TIME:
        return now - recording_time
    return newest_size - recording_size


def choose_cut(policy: RetentionPolicy, now: int, records: tuple[tuple[int, int], ...]) -> tuple[int, int] | None:
    """The (time, size) of the newest recorded cut that still keeps at least ``retentionParam``, or None."""
    if not records:
        return None
    newest_size = records[-1][1]
    kept = [(retained(policy, now, newest_size, time, size), time, size) for time, size in records]
    eligible = [row for row in kept if row[0] >= policy.retention_param]
    if not eligible:
        return None
    _, time, size = min(eligible)
    return time, size


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
        """Records a cut if due, then truncates at the chosen one. Returns True if it truncated."""
        configuration, _ = await stream.get_configuration()
        policy = configuration.retention
        if policy is None or (await stream.get_state())[0] != State.ACTIVE:
            return False
        retention_set, _ = await store_retention.get_retention_set(stream)
        period_ms = int(self._context.settings.retention_period_seconds * 1000)
        if not retention_set.records or now - retention_set.records[-1][0] >= period_ms:
            await self._record_cut(stream, now)
            retention_set, _ = await store_retention.get_retention_set(stream)
        chosen = choose_cut(policy, now, retention_set.records)
        if chosen is None:
            return False
        cut = await store_retention.get_stream_cut(stream, chosen[0])
        truncation, _ = await store_retention.get_truncation(stream)
        done = truncation.stream_cut == cut.stream_cut
        if not done:
            await self._truncation.truncate_stream(stream.scope, stream.name, cut.stream_cut)
            metrics.RETENTION_TRUNCATIONS.inc()
            log.info("stream truncated by its retention policy",
                     extra={"stream": f"{stream.scope}/{stream.name}", "cut": dict(cut.stream_cut)})
        await store_retention.remove_stream_cuts_through(stream, chosen[0])
        return not done

    async def _record_cut(self, stream: StreamStore, now: int) -> None:
        current, _ = await stream.get_current_epoch()
        cut = await SegmentCalls(self._context, stream.scope, stream.name).write_offsets(current.segment_ids)
        truncation, _ = await store_retention.get_truncation(stream)
        size = (await self._truncation.plan(stream, cut, truncation)).size_till
        await store_retention.add_stream_cut(stream, StreamCutRecord(now, size, cut))

    async def run_forever(self) -> None:
        """A round every ``retention_period_seconds`` (the clock is read here only)."""
        while True:
            await asyncio.sleep(self._context.settings.retention_period_seconds)
            try:
                await self.run_once(self._context.now_ms())
            except Exception as error:  # noqa: BLE001 - the next round tries again
                log.warning("retention round failed", extra={"error": repr(error)})
