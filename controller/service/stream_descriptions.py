"""What the admin API shows of a stream beyond its configuration: state, epochs, truncation point,
subscribers, transactions, and the segment store's view of a segment.

Read-only; the REST API (``controller.rest``) reaches the store and the segment stores only through here.
"""

from __future__ import annotations

import dataclasses

from wire import commands as wc
from wire.naming import stream_segment_name

from ..store import NotFound, State, StreamStore
from ..store import readers as store_readers
from ..store import retention as store_retention
from ..store.records import EpochRecord, SubscriberRecord, TransactionRecord, TruncationRecord
from .context import ControllerContext
from .errors import StreamNotFound
from .transactions.jobs import list_all_transactions


@dataclasses.dataclass(frozen=True)
class StreamDescription:
    state: State
    current_epoch: EpochRecord
    truncation: TruncationRecord
    subscribers: tuple[tuple[str, SubscriberRecord], ...]  # (name, its last reported cut)


class StreamDescriptions:
    def __init__(self, context: ControllerContext):
        self._context = context

    def _stream(self, scope: str, stream: str) -> StreamStore:
        return self._context.store.stream(scope, stream)

    async def describe(self, scope: str, stream: str) -> StreamDescription:
        """Raises StreamNotFound."""
        handle = self._stream(scope, stream)
        try:
            state, _ = await handle.get_state()
            current, _ = await handle.get_current_epoch()
            truncation, _ = await store_retention.get_truncation(handle)
        except NotFound:
            raise StreamNotFound(f"stream {scope}/{stream} does not exist") from None
        subscribers = []
        for name in await store_readers.list_subscribers(handle):
            try:
                record, _ = await store_readers.get_subscriber(handle, name)
            except NotFound:
                continue  # unsubscribed meanwhile
            subscribers.append((name, record))
        return StreamDescription(state, current, truncation, tuple(subscribers))

    async def epochs(self, scope: str, stream: str, limit: int) -> tuple[int, list[EpochRecord]]:
        """The current epoch's number and the last ``limit`` epochs, oldest first. Raises StreamNotFound."""
        handle = self._stream(scope, stream)
        try:
            current, _ = await handle.get_current_epoch()
        except NotFound:
            raise StreamNotFound(f"stream {scope}/{stream} does not exist") from None
        epochs = []
        for number in range(max(0, current.epoch - limit + 1), current.epoch + 1):
            try:
                epochs.append(await handle.get_epoch(number))
            except NotFound:
                continue
        return current.epoch, epochs

    async def transactions(self, scope: str, stream: str) -> list[TransactionRecord]:
        """Every transaction record of the stream (open and finished)."""
        return await list_all_transactions(self._stream(scope, stream))

    async def segment_info(self, scope: str, stream: str, segment_id: int) -> wc.StreamSegmentInfo:
        """The segment store's view of the segment. Raises ``clients.errors.ClientError`` when it cannot say."""
        return await self._context.segments.segment_info(stream_segment_name(scope, stream, segment_id))
