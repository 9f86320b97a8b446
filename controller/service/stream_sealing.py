"""sealStream (spec §4.2, §6.7): SEALING, abort open transactions and wait for committing ones,
seal every active segment, SEALED.

No sealed-epoch records are written, so successor queries of the last segments answer with an
empty list, which clients read as "the stream is sealed".
"""

from __future__ import annotations

from ..store import State, StreamStore
from ..store import retention as store_retention
from ..store.records import WorkflowIntentRecord, WorkflowKind
from .context import ControllerContext
from .errors import StreamNotReady
from .segment_calls import SegmentCalls
from .stream_access import move_state, require_state
from .transactions.sealing import Abort, abort_and_drain
from .workflows import WorkflowRunner


class StreamSealing:
    def __init__(self, context: ControllerContext, runner: WorkflowRunner, abort: Abort):
        self._context = context
        self._runner = runner
        self._abort = abort  # the transaction service's abort of an open transaction
        runner.register(WorkflowKind.SEAL, self._redrive)

    async def seal_stream(self, scope: str, stream: str) -> None:
        """Seals the stream and waits until it is sealed (idempotent).

        Raises:
            StreamNotFound / StreamNotReady: no such stream, or it is still being created.
            WorkflowTimeout / ConcurrentWorkflow: not done within the completion timeout.
        """
        handle = self._context.store.stream(scope, stream)
        state = await require_state(handle)
        if state == State.SEALED:
            return
        if state == State.CREATING:
            raise StreamNotReady(f"stream {scope}/{stream} is being created")
        intent = WorkflowIntentRecord(WorkflowKind.SEAL, self._context.now_ms())
        await self._runner.run_with_timeout(handle, intent, lambda: self._seal(handle))

    async def _seal(self, handle: StreamStore) -> None:
        if await require_state(handle) == State.SEALED:
            return
        await move_state(self._context, handle, State.SEALING)
        self._context.fault_points.reach("seal.state_sealing")
        await abort_and_drain(self._context, handle, self._abort)
        current, _ = await handle.get_current_epoch()
        sizes = await SegmentCalls(self._context, handle.scope, handle.name).seal(current.segment_ids)
        await store_retention.record_sealed_sizes(handle, sizes)
        self._context.fault_points.reach("seal.segments_sealed")
        await move_state(self._context, handle, State.SEALED, expected=State.SEALING)

    async def _redrive(self, handle: StreamStore, intent: WorkflowIntentRecord) -> None:
        await self._seal(handle)
