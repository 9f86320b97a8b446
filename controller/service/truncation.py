"""truncateStream (spec §4.2, §6.6): move the head of the stream to a stream cut.

Steps (the intent's payload is the cut):

1. plan: the cut's span, the segments wholly between the old head and the cut (to delete) and
   the bytes before the cut; store it as the truncation record with ``updating`` set. From here
   on the head (getSegments) is the new cut;
2. ACTIVE -> TRUNCATING, TruncateSegment for every segment of the cut, DeleteSegment for every
   segment wholly before it;
3. clear ``updating``, TRUNCATING -> ACTIVE.
"""

from __future__ import annotations

import logging

from wire.naming import epoch_of

from ..store import NotFound, State, StreamStore
from ..store import queries as store_queries
from ..store import retention as store_retention
from ..store.records import SegmentRecord, TruncationRecord, WorkflowIntentRecord, WorkflowKind
from . import payloads
from .context import ControllerContext
from .errors import ConcurrentWorkflow, InvalidStreamCut, StreamSealed
from .segment_calls import SegmentCalls
from .stream_access import SEALED_STATES, move_state, require_usable
from .stream_cut_rules import cut_error, is_equal_or_after
from .workflows import WorkflowRunner

log = logging.getLogger("tributary.controller")


async def segments_of_cut(stream: StreamStore, cut: dict[int, int]) -> dict[int, SegmentRecord]:
    """The record of every segment a cut names, from their creation epochs (one read per epoch).

    Raises:
        InvalidStreamCut: a segment is not one of the stream's.
    """
    found: dict[int, SegmentRecord] = {}
    for epoch in sorted({epoch_of(segment_id) for segment_id in cut}):
        try:
            record = await stream.get_epoch(epoch)
        except NotFound:
            raise InvalidStreamCut(f"{stream}: no epoch {epoch}") from None
        found.update({segment.segment_id: segment for segment in record.segments if segment.segment_id in cut})
    missing = set(cut) - set(found)
    if missing:
        raise InvalidStreamCut(f"{stream}: segments {sorted(missing)} are not in the stream")
    return found


async def check_cut(stream: StreamStore, cut: dict[int, int]) -> dict[int, SegmentRecord]:
    """The cut's segment records, if the cut is well formed for the stream.

    Raises:
        InvalidStreamCut: it is not.
    """
    segments = await segments_of_cut(stream, cut) if cut else {}
    error = cut_error(cut, segments)
    if error is not None:
        raise InvalidStreamCut(f"{stream}: {error}")
    return segments


class Truncation:
    def __init__(self, context: ControllerContext, runner: WorkflowRunner):
        self._context = context
        self._runner = runner
        runner.register(WorkflowKind.TRUNCATE, self._redrive)

    async def truncate_stream(self, scope: str, stream: str, cut: dict[int, int]) -> None:
        """Truncates the stream at ``cut`` and waits until done.

        Raises:
            StreamNotFound / StreamNotReady: no such stream, or it is still being created.
            StreamSealed: the stream is sealing or sealed.
            InvalidStreamCut: the cut is malformed or behind the current head.
            ConcurrentWorkflow: another truncation is running.
            WorkflowTimeout: not done within the completion timeout.
        """
        handle = self._context.store.stream(scope, stream)
        if await require_usable(handle) in SEALED_STATES:
            raise StreamSealed(f"stream {scope}/{stream} is sealed")
        segments = await check_cut(handle, cut)
        current, _ = await store_retention.get_truncation(handle)
        if current.stream_cut != cut:
            if current.updating:
                raise ConcurrentWorkflow(f"{handle}: another truncation is running")
            previous = {segment.segment_id: segment for segment in current.span}
            if not current.is_empty and not is_equal_or_after(cut, segments, current.stream_cut, previous):
                raise InvalidStreamCut(f"{handle}: the cut is behind the current truncation point")
        intent = WorkflowIntentRecord(WorkflowKind.TRUNCATE, self._context.now_ms(),
                                      payload=payloads.encode_truncate(cut))
        await self._runner.run_with_timeout(handle, intent, lambda: self._truncate(handle, cut))

    async def _truncate(self, handle: StreamStore, cut: dict[int, int]) -> None:
        record, _ = await store_retention.get_truncation(handle)
        if record.stream_cut != cut:
            record = await self.plan(handle, cut, record)
            await store_retention.start_truncation(handle, record)
        elif record.updating is False:
            await self._finish_state(handle)
            return
        self._context.fault_points.reach("truncate.record_written")
        await move_state(self._context, handle, State.TRUNCATING)
        segments = SegmentCalls(self._context, handle.scope, handle.name)
        await segments.truncate({segment_id: offset for segment_id, offset in cut.items() if offset > 0})
        await segments.delete(record.to_delete)
        self._context.fault_points.reach("truncate.segments_truncated")
        await store_retention.complete_truncation(handle)
        await self._finish_state(handle)
        log.info("stream truncated", extra={"stream": f"{handle.scope}/{handle.name}", "cut": dict(cut),
                                            "segments_deleted": len(record.to_delete),
                                            "bytes_before_head": record.size_till})

    async def _finish_state(self, handle: StreamStore) -> None:
        state, _ = await handle.get_state()
        if state == State.TRUNCATING:
            await handle.transition_state(State.ACTIVE, expected=State.TRUNCATING)

    async def plan(self, handle: StreamStore, cut: dict[int, int], previous: TruncationRecord) -> TruncationRecord:
        """The truncation record for ``cut`` after ``previous`` (spec §6.6 steps 2-4)."""
        span = await store_queries.stream_cut_span(handle, cut)
        between = await store_queries.segments_between_cuts(handle, {}, cut)
        to_delete = frozenset(segment.segment_id for segment in between) - set(cut)
        previous_cut = previous.stream_cut
        sizes = await store_retention.get_sealed_sizes(handle, to_delete)
        added = sum(max(0, sizes.get(segment_id, 0) - previous_cut.get(segment_id, 0)) for segment_id in to_delete)
        added += sum(max(0, offset - previous_cut.get(segment_id, 0)) for segment_id, offset in cut.items())
        return TruncationRecord(dict(cut), span, to_delete, previous.size_till + added, updating=True)

    async def _redrive(self, handle: StreamStore, intent: WorkflowIntentRecord) -> None:
        await self._truncate(handle, payloads.decode_truncate(intent.payload))
