"""Segment queries behind the client-facing RPCs (spec §4.3): tail, epochs, head, successors,
segments between cuts, validity checks and segment locations."""

from __future__ import annotations

from ..endpoints import Endpoint
from ..store import NotFound, State, StreamStore
from ..store import queries as store_queries
from ..store.records import SegmentRecord
from .context import ControllerContext
from .errors import EpochNotFound, InvalidArgument, InvalidStreamCut, StreamNotFound, StreamNotReady
from .stream_access import require_state
from .stream_cut_rules import is_equal_or_after
from .truncation import check_cut


class SegmentQueries:
    def __init__(self, context: ControllerContext):
        self._context = context

    def _stream(self, scope: str, stream: str) -> StreamStore:
        return self._context.store.stream(scope, stream)

    async def current_segments(self, scope: str, stream: str) -> tuple[SegmentRecord, ...]:
        """The active epoch's segments by key; empty once the stream is sealed.

        Raises:
            StreamNotFound: no such stream.
            StreamNotReady: the stream is still CREATING.
        """
        found = await self._stream(scope, stream).state_and_current_epoch()
        if found is None:
            raise StreamNotFound(f"stream {scope}/{stream} does not exist")
        state, current = found
        if state == State.CREATING:
            raise StreamNotReady(f"stream {scope}/{stream} is being created")
        if state == State.SEALED:
            return ()
        return current.segments

    async def epoch_segments(self, scope: str, stream: str, epoch: int) -> tuple[SegmentRecord, ...]:
        """The segments of ``epoch`` by key (any epoch that ever existed, in any stream state).

        Raises:
            InvalidArgument: a negative epoch.
            StreamNotFound, EpochNotFound.
        """
        if epoch < 0:
            raise InvalidArgument(f"epoch {epoch} is negative")
        handle = self._stream(scope, stream)
        await require_state(handle)
        try:
            return (await handle.get_epoch(epoch)).segments
        except NotFound:
            raise EpochNotFound(f"stream {scope}/{stream} has no epoch {epoch}") from None

    async def head_segments(self, scope: str, stream: str) -> dict[SegmentRecord, int]:
        """The head of the stream: each segment with its starting offset (the timestamp is ignored, as in Java).

        Raises:
            StreamNotFound: no such stream.
        """
        handle = self._stream(scope, stream)
        await require_state(handle)
        try:
            return await store_queries.segments_at_time(handle, 0)
        except NotFound:
            await require_state(handle)  # deleted meanwhile (its metadata table went first): StreamNotFound
            raise

    async def successors(self, scope: str, stream: str, segment_id: int) -> dict[SegmentRecord, list[int]]:
        """The segments that replaced ``segment_id``, each with all its predecessors; empty when none did.

        Raises:
            StreamNotFound: no such stream.
        """
        handle = self._stream(scope, stream)
        try:
            return await store_queries.successors(handle, segment_id)
        except NotFound:
            await require_state(handle)  # raises StreamNotFound for a missing stream
            return {}

    async def segments_between(self, scope: str, stream: str, from_cut: dict[int, int],
                               to_cut: dict[int, int]) -> set[SegmentRecord]:
        """Every segment with data between two cuts (empty ``from``: the head, empty ``to``: the tail).

        Raises:
            StreamNotFound: no such stream.
            InvalidStreamCut: both cuts empty, a malformed cut, or ``to`` not after ``from``.
        """
        if not from_cut and not to_cut:
            raise InvalidStreamCut("at least one of the two stream cuts must be given")
        handle = self._stream(scope, stream)
        await require_state(handle)
        from_segments = await check_cut(handle, from_cut) if from_cut else {}
        to_segments = await check_cut(handle, to_cut) if to_cut else {}
        if from_cut and to_cut and (from_cut == to_cut or
                                    not is_equal_or_after(to_cut, to_segments, from_cut, from_segments)):
            raise InvalidStreamCut("the end cut must be strictly after the start cut")
        return await store_queries.segments_between_cuts(handle, from_cut, to_cut)

    async def is_segment_valid(self, scope: str, stream: str, segment_id: int) -> bool:
        """True iff the segment is in the current active set of a stream that is not sealed."""
        try:
            segments = await self.current_segments(scope, stream)
        except (StreamNotFound, StreamNotReady):
            return False
        return any(segment.segment_id == segment_id for segment in segments)

    async def is_stream_cut_valid(self, scope: str, stream: str, cut: dict[int, int]) -> bool:
        """True iff ``cut`` is a well-formed stream cut of the stream (spec §6.6 validity).

        Raises:
            StreamNotFound: no such stream.
        """
        handle = self._stream(scope, stream)
        await require_state(handle)
        try:
            await check_cut(handle, cut)
        except InvalidStreamCut:
            return False
        return True

    def uri(self, scope: str, stream: str, segment_id: int) -> Endpoint:
        """The segment store owning the segment's container; no metadata is read (spec §4.3 getURI)."""
        return self._context.locator.endpoint_for_id(scope, stream, segment_id)
