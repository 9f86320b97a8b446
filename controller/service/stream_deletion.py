"""deleteStream (spec §4.2, §6.7): every segment from the head to the current epoch is deleted on
the segment stores, then the stream's mark stream (``_MARK<stream>``, whatever its state), then
the stream's metadata (its last segment number is kept, so a stream re-created under the name
numbers its segments above the old ones). The metadata goes last, so an interrupted delete is
re-driven from a stream that still reads as SEALED."""

from __future__ import annotations

import logging

from wire.watermark import is_internal_stream, mark_stream

from ..store import IllegalStateTransition, State, StreamStore, layout
from ..store.queries import fetch_epochs
from ..store.records import SegmentRecord, TruncationRecord, WorkflowIntentRecord, WorkflowKind
from ..store.states import DELETABLE_STATES
from ..store.stream_cuts import is_truncated
from .context import ControllerContext
from .errors import StreamNotSealed
from .segment_calls import SegmentCalls
from .stream_access import state_or_none
from .workflows import WorkflowRunner

log = logging.getLogger("tributary.controller")


async def live_segment_ids(stream: StreamStore) -> set[int]:
    """Every segment of the stream that truncation has not already removed (txn duplicates included)."""
    current, _ = await stream.get_current_epoch()
    truncation, _ = await stream.read(layout.TRUNCATION, TruncationRecord)
    first = 0 if truncation.is_empty else min(truncation.span.values())
    segments: set[SegmentRecord] = set()
    for epoch in await fetch_epochs(stream, first, current.epoch):
        segments.update(segment for segment in epoch.segments if not is_truncated(segment, truncation))
    return {segment.segment_id for segment in segments}


async def _exists_and_deletable(stream: StreamStore) -> bool:
    """False if the stream does not exist.

    Raises:
        StreamNotSealed: it exists but is neither SEALED nor a leftover CREATING one.
    """
    try:
        return await stream.check_deletable() is not None
    except IllegalStateTransition as error:
        raise StreamNotSealed(f"stream {stream.scope}/{stream.name} is {error.current.name}, not sealed") from None


class StreamDeletion:
    def __init__(self, context: ControllerContext, runner: WorkflowRunner):
        self._context = context
        self._runner = runner
        runner.register(WorkflowKind.DELETE, self._redrive)

    async def delete_stream(self, scope: str, stream: str) -> bool:
        """Deletes a sealed stream. Returns False if it does not exist.

        Raises:
            StreamNotSealed: the stream is not sealed (nor a leftover CREATING one).
            WorkflowTimeout / ConcurrentWorkflow: not done within the completion timeout.
        """
        handle = self._context.store.stream(scope, stream)
        if not await _exists_and_deletable(handle):
            return False
        intent = WorkflowIntentRecord(WorkflowKind.DELETE, self._context.now_ms())
        return await self._runner.run_with_timeout(handle, intent, lambda: self._delete(handle))

    async def _delete(self, handle: StreamStore) -> bool:
        if not await _exists_and_deletable(handle):
            return False
        segments = await live_segment_ids(handle)
        await SegmentCalls(self._context, handle.scope, handle.name).delete(segments)
        self._context.fault_points.reach("delete.segments_deleted")
        if not is_internal_stream(handle.name):
            await self._delete_mark_stream(handle.scope, handle.name)
        await self._context.store.delete_stream(handle.scope, handle.name)
        log.info("stream deleted", extra={"stream": f"{handle.scope}/{handle.name}", "segments_deleted": len(segments)})
        return True

    async def _delete_mark_stream(self, scope: str, stream: str) -> None:
        """Deletes ``stream``'s mark stream if it exists (it is sealed first: nobody else seals it)."""
        mark = self._context.store.stream(scope, mark_stream(stream))
        state = await state_or_none(mark)
        if state is None:
            return
        if state not in DELETABLE_STATES:
            await mark.transition_state(State.SEALED)
        await SegmentCalls(self._context, scope, mark.name).delete(await live_segment_ids(mark))
        await self._context.store.delete_stream(scope, mark.name)

    async def _redrive(self, handle: StreamStore, intent: WorkflowIntentRecord) -> None:
        await self._delete(handle)
