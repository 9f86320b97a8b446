"""Writer marks for watermarking (spec §4.8): Java writers report (time, position) and say goodbye.

Marks never go back: a later report with an earlier time, or a position that is not at or ahead
of the stored one, is refused. "Ahead" is the cheap check Java makes: among the segments of both
positions, the new highest segment id is not below the old one, and no shared segment's offset
decreases. The watermarking job (``watermarks``) turns the stored marks into watermarks and removes
writers that are gone: shut down here, or silent past the stream's timestampAggregationTimeout.
"""

from __future__ import annotations

from coordination.retry import retry

from ..store import NotFound
from ..store import readers as store_readers
from ..store.records import WriterMarkRecord
from .context import ControllerContext
from .errors import WriterNotFound, WriterPositionWentBack, WriterTimeWentBack
from .retries import WRITER_MARK_UPDATE, is_lost_race
from .stream_access import require_state


def position_is_ahead(new: dict[int, int], old: dict[int, int]) -> bool:
    if new and old and max(new) < max(old):
        return False
    return all(offset >= old[segment_id] for segment_id, offset in new.items() if segment_id in old)


class WriterMarks:
    def __init__(self, context: ControllerContext):
        self._context = context

    async def note_timestamp(self, scope: str, stream: str, writer: str, timestamp: int,
                             position: dict[int, int]) -> None:
        """Records a writer's mark.

        Raises:
            StreamNotFound: no such stream.
            WriterTimeWentBack / WriterPositionWentBack: the time or the position goes back.
            WriteConflict: concurrent reports of the same writer kept winning.
        """
        handle = self._context.store.stream(scope, stream)
        await require_state(handle)

        def check_position(stored: WriterMarkRecord) -> None:
            if not position_is_ahead(position, stored.position):
                raise WriterPositionWentBack(f"writer {writer!r} reported a position behind its last one")

        mark = WriterMarkRecord(timestamp, position)

        async def note() -> None:
            if not await store_readers.note_writer_mark(handle, writer, mark, check_position):
                raise WriterTimeWentBack(f"writer {writer!r} already reported a later time")

        await retry(note, WRITER_MARK_UPDATE, retriable=is_lost_race)

    async def remove_writer(self, scope: str, stream: str, writer: str) -> None:
        """Marks the writer as shut down.

        Raises:
            WriterNotFound: the writer never reported (or the stream does not exist).
        """
        handle = self._context.store.stream(scope, stream)
        try:
            await store_readers.shut_down_writer(handle, writer)
        except NotFound:
            raise WriterNotFound(f"writer {writer!r} has no mark on {scope}/{stream}") from None
