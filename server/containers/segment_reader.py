"""Reads of one container's segments: the read index first, Tier-2 for what it no longer holds.

Theory of operation. A read is answered from the read index (``read_index.py``:
cached blocks of each segment) when it holds the offset. Bytes that are only in
Tier-2 are fetched in aligned blocks of ``READ_AHEAD_BYTES`` (concurrent readers
of one block share one fetch), cached unless the cache is throttled, and the
next ``READ_AHEAD_BLOCKS`` blocks are prefetched, so a reader catching up streams
at Tier-2's speed. A read at the tail of an unsealed segment parks until an
append (or seal) wakes it: the long-poll of SegmentRead. Transient Tier-2
failures are retried with the shared backoff; bytes found nowhere mean the
state is inconsistent and the container stops.
"""

from __future__ import annotations

import asyncio
import enum
import logging
from collections.abc import Callable, Coroutine, Sequence
from typing import TYPE_CHECKING, Any, Literal, Protocol

from coordination.retry import Backoff, retry
from wire.constants import MAX_READ_SIZE

from .. import errors, metrics
from ..tier2 import errors as storage_errors
from . import boundaries
from . import table as table_format
from .metadata import SegmentMetadata
from .state import ContainerState, InconsistentState
from .storage_writer import TIER2_TRANSIENT_ERRORS
from .views import ReadResult, TableDelta

if TYPE_CHECKING:
    from wire.fields import BytesLike

    from ..tier2.chunk_storage import ChunkRegion

log = logging.getLogger("tributary.container")
READ_AHEAD_BYTES = 8 * 1024 * 1024  # Tier-2 reads fetch aligned blocks of this size
READ_AHEAD_BLOCKS = 4  # a read of Tier-2 bytes starts fetching this many following blocks
# A read retries a failing Tier-2 with growing pauses before it fails (a merge concatenated meanwhile retries too).
TIER2_READ_RETRY = Backoff(initial_seconds=0.05, multiplier=2.0, max_delay_seconds=2.0, attempts=8, jitter=0.0)
_RETRIED = (storage_errors.SegmentNotFound, *TIER2_TRANSIENT_ERRORS)  # what such a read retries


class _NotCached(enum.Enum):
    """What ``_read_now`` answers when Tier-2 (not the cache) holds the bytes."""

    NOT_CACHED = "not cached"


_NOT_CACHED = _NotCached.NOT_CACHED


class StoredBytes(Protocol):
    """What reads need of Tier-2: SLTS (``ChunkedSegmentStorage``) in the segment store."""

    @property
    def serves_regions(self) -> bool:
        """Whether ``read_region`` can lend file regions."""
        ...

    async def read(self, name: str, offset: int, length: int) -> bytes:
        """Exactly ``min(length, segment length - offset)`` bytes of segment ``name`` from ``offset``."""
        ...

    async def read_region(self, name: str, offset: int, length: int) -> ChunkRegion | None:
        """Up to ``length`` bytes from ``offset`` (cut at a chunk's end) as a file region to release."""
        ...


class SegmentReader:
    """Answers reads of a container's segments. ``lookup(name)`` returns a live segment or raises."""

    def __init__(self, container_id: int, state: ContainerState, storage: StoredBytes | None,
                 lookup: Callable[[str], SegmentMetadata], on_inconsistency: Callable[[BaseException], None]):
        self._container_id = container_id
        self._state = state
        self._storage = storage
        self._lookup = lookup
        self._on_inconsistency = on_inconsistency
        # (segment, block) -> the future of (bytes, their offset) of a Tier-2 read in progress
        self._in_flight_reads: dict[tuple[str, int], asyncio.Future[tuple[bytes, int]]] = {}
        self._prefetches: set[asyncio.Task[None]] = set()

    async def read(self, name: str, offset: int, max_length: int = MAX_READ_SIZE,
                   wait_timeout: float | None = None, lend_files: bool = False) -> ReadResult:
        """Reads from ``offset``; at the tail of an unsealed segment waits for data (long-poll).

        With ``lend_files``, bytes only Tier-2 holds may come as a file region (``ReadResult.region``)
        when the storage lends them, uncached and unread; the caller must release it.

        Raises NoSuchSegment, SegmentIsTruncated, SegmentIsSealed (past the end of a sealed
        segment, or sealed while waiting below ``offset``), asyncio.TimeoutError after
        ``wait_timeout`` seconds without data.
        """
        read_size = min(MAX_READ_SIZE, max(8, max_length))
        deadline = None if wait_timeout is None else asyncio.get_running_loop().time() + wait_timeout
        waited = False
        while True:
            segment = self._lookup(name)
            if waited and segment.sealed and offset >= segment.length:
                raise errors.SegmentIsSealed(name)  # Java fails reads parked at the tail on seal
            result = _read_now(segment, offset, read_size)
            if metrics.enabled and result is not None:
                (metrics.CACHE_MISS if result is _NOT_CACHED else metrics.CACHE_HIT).inc()
            if result is _NOT_CACHED:
                result = await self._read_from_storage(segment, offset, read_size, lend_files)
            if result is not None:
                if result.region is None and offset < segment.data.storage_length and self._storage is not None:
                    self._read_ahead(segment, offset)
                return result
            loop = asyncio.get_running_loop()
            waiter = loop.create_future()
            segment.waiters.append(waiter)
            timeout = None if deadline is None else max(0.0, deadline - loop.time())
            try:  # not wait_for: 3.11's loses a cancel that meets the waiter's result, and this loop would go on
                async with asyncio.timeout(timeout):
                    await waiter
            finally:
                if waiter in segment.waiters:
                    segment.waiters.remove(waiter)
            waited = True

    async def read_range(self, name: str, start: int, end: int) -> bytes:
        """The bytes ``[start, end)`` of ``name`` (below its length), wherever they are."""
        parts: list[BytesLike] = []
        offset = start
        while offset < end:
            result = await self.read(name, offset, end - offset)
            if not result.length:
                break
            parts.extend(result.parts)
            offset += result.length
        return b"".join(parts)

    async def read_table_delta(self, name: str, from_position: int, max_count: int, max_bytes: int) -> TableDelta:
        """A page of the table's change log from ``from_position`` (whole records; see ``table.delta_page``)."""
        segment = self._lookup(name)
        if not 0 <= from_position <= segment.length:
            raise errors.IllegalArgument(name, f"position {from_position} is beyond the table's length "
                                               f"{segment.length}")
        start = max(from_position, segment.start_offset)
        end = min(segment.length, start + max_bytes + table_format.DELTA_WINDOW_EXTRA)
        return table_format.delta_page(await self.read_range(name, start, end), start, segment.length,
                                       max_count, max_bytes)

    async def locate_offset(self, name: str, target: int) -> int:
        """The first event boundary of ``name`` at or after ``target`` (LocateOffset; see ``boundaries.py``)."""
        segment = self._lookup(name)

        async def read(offset: int, size: int) -> BytesLike:
            return (await self.read(name, offset, size)).data()

        return await boundaries.locate(self._state.boundaries.index_of(segment), segment.start_offset,
                                       segment.length, target, read)

    # ------------------------------------------------------------------ Tier-2

    async def _read_from_storage(self, segment: SegmentMetadata, offset: int, read_size: int,
                                 lend_files: bool) -> ReadResult:
        """Reads bytes that are not cached: from Tier-2, or from a merged source not yet concatenated."""
        try:
            return await retry(lambda: self._read_stored(segment, offset, read_size, lend_files), TIER2_READ_RETRY,
                               retriable=lambda error: isinstance(error, _RETRIED), on_retry=self._log_retry(segment))
        except InconsistentState as error:
            self._on_inconsistency(error)
            raise errors.ContainerUnavailable(segment.name, str(error)) from error
        except _RETRIED as error:
            raise errors.ContainerUnavailable(segment.name, "tier-2 is not answering reads") from error

    async def _read_stored(self, segment: SegmentMetadata, offset: int, read_size: int,
                           lend_files: bool) -> ReadResult:
        data = segment.data
        storage = self._storage
        if lend_files and offset < data.storage_length and storage is not None and storage.serves_regions:
            # Below the storage length: durable in Tier-2. Only whole bytes of the segment as it is now.
            region = await storage.read_region(segment.name, offset, min(read_size, data.storage_length - offset))
            if region is None:
                raise InconsistentState(f"tier-2 of {segment.name!r} ends before its storage length "
                                        f"{data.storage_length}")
            return _result(segment, offset, read_size, [], region)
        if offset < data.storage_length:
            block = offset - offset % READ_AHEAD_BYTES
            fetched, start = await self._fetch_block(segment, block)
            view = memoryview(fetched)[offset - start:offset - start + read_size]
            return _result(segment, offset, read_size, [view])
        redirect = data.redirect_at(offset)
        if redirect is None or self._storage is None:
            raise InconsistentState(f"bytes at {offset} of {segment.name!r} are neither cached nor in tier-2")
        size = min(read_size, redirect.end - offset)
        fetched = await self._storage.read(redirect.source, offset - redirect.start, size)
        return _result(segment, offset, read_size, [fetched])

    def _log_retry(self, segment: SegmentMetadata) -> Callable[[BaseException, float], None]:
        def on_retry(error: BaseException, delay: float) -> None:
            if not isinstance(error, storage_errors.SegmentNotFound):  # a concatenated merge: not a failure
                log.warning("tier-2 read failed", extra={"container": self._container_id, "segment": segment.name,
                                                         "error": repr(error), "delay": round(delay, 3)})
        return on_retry

    async def _fetch_block(self, segment: SegmentMetadata, block: int) -> tuple[bytes, int]:
        """Reads one read-ahead block from Tier-2 (concurrent readers share one read) and caches it.

        Returns the bytes and the offset they start at (the block's, or the segment's start offset if above).
        """
        storage = self._storage
        if storage is None:  # bytes below the Tier-2 length, above the start offset, exist only with Tier-2
            raise InconsistentState(f"bytes at {block} of {segment.name!r} are in tier-2, but there is none")
        key = (segment.name, block)
        pending = self._in_flight_reads.get(key)
        if pending is not None:
            return await asyncio.shield(pending)
        pending = self._in_flight_reads[key] = asyncio.get_running_loop().create_future()
        try:
            data = segment.data
            start = max(block, data.start_offset)
            end = min(data.storage_length, block + READ_AHEAD_BYTES)
            fetched = await storage.read(segment.name, start, end - start)
            if self._state.by_id.get(segment.segment_id) is segment and not (data.cache and data.cache.full):
                data.insert(start, fetched)
            pending.set_result((fetched, start))
        except BaseException as error:
            pending.set_exception(error)
            pending.exception()  # retrieved: a lone failed prefetch must not log "never retrieved"
            raise
        finally:
            del self._in_flight_reads[key]
        return fetched, start

    def _read_ahead(self, segment: SegmentMetadata, offset: int) -> None:
        """Starts fetching the next blocks after ``offset`` that Tier-2 holds and the cache does not."""
        block = offset - offset % READ_AHEAD_BYTES
        for ahead in range(1, READ_AHEAD_BLOCKS + 1):
            start = block + ahead * READ_AHEAD_BYTES
            if start >= segment.data.storage_length:
                return
            if (segment.name, start) not in self._in_flight_reads and not segment.data.is_cached(start):
                self._spawn(self._prefetch(segment, start))

    async def _prefetch(self, segment: SegmentMetadata, block: int) -> None:
        try:
            await self._fetch_block(segment, block)
        except Exception:  # noqa: BLE001 - a failed prefetch costs nothing: the read itself will retry
            pass

    def _spawn(self, work: Coroutine[Any, Any, None]) -> None:
        task = asyncio.get_running_loop().create_task(work)
        self._prefetches.add(task)
        task.add_done_callback(self._prefetches.discard)


def _read_now(segment: SegmentMetadata, offset: int,
              read_size: int) -> ReadResult | Literal[_NotCached.NOT_CACHED] | None:
    """The read's answer from the cache, None if it must wait at the tail, _NOT_CACHED if Tier-2 has it."""
    if offset < segment.start_offset:
        raise errors.SegmentIsTruncated(segment.name, segment.start_offset, offset)
    length = segment.length
    if offset < length:
        parts = segment.data.read(offset, read_size)
        if not parts:
            return _NOT_CACHED
        return _result(segment, offset, read_size, parts)
    if segment.sealed:
        if offset == length:
            return ReadResult([], at_tail=False, end_of_segment=True)
        raise errors.SegmentIsSealed(segment.name)
    return None


def _result(segment: SegmentMetadata, offset: int, read_size: int, parts: Sequence[BytesLike],
            region: ChunkRegion | None = None) -> ReadResult:
    result = ReadResult(parts, at_tail=False, end_of_segment=False, region=region)
    if result.length < read_size and offset + result.length == segment.length:  # a short read up to the end
        result.at_tail, result.end_of_segment = not segment.sealed, segment.sealed
    return result
