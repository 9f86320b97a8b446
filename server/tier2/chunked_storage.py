"""ChunkedSegmentStorage (SLTS, PDP-34 "Simplified Tier-2"): segments made of chunks (design §5).

Theory of operation
-------------------
A segment is a record (length, start offset, first and last chunk, owner epoch, flags) and a
singly linked list of chunk records, each naming a chunk in the ChunkStorage and how many of its
bytes belong to the segment. The records live in the container's MetadataStore, a table segment
logged in Tier-1, so every commit is fenced by Tier-1: a zombie owner can write chunks but can
never make them part of a segment (invariant F2). Chunks are never shared between writers: a
chunk is written only by the epoch named in it, and a new owner starts new chunks.

Every operation on a segment runs under that segment's lock (a concat locks both names, in
order) as one metadata transaction (``metadata_transaction``): it reads records (through a
write-through cache), does its chunk I/O, and commits every changed record in one conditional
multi-key write. Data goes to chunks before the commit, and the metadata length is the only
truth about what a chunk holds, so a failed operation leaves metadata unchanged and at most
some unreferenced chunks, which the garbage collector (``garbage``) deletes: every chunk is
registered with it before it is created. The segment container retries failed operations; a
retried write at the same offset starts a new chunk past any partial bytes (``write_operation``).

* write: appends at the length, rolling over into new chunks (``write_operation``);
* read: finds the chunk through an in-memory offset index, reads across chunks (``read_operation``);
* concat: splices the sealed source's chunk list onto the target, metadata only, optionally
  stitching small chunks at the junction (``concat_operation``, ``defragment``);
* truncate: raises the start offset, unlinks whole head chunks (``truncate_operation``);
* delete: removes the segment record and marks its chunks inactive; the collector deletes them.

Truncations that free chunks and deletions are logged at info (container, segment, chunks and
bytes released); the collector logs what it deleted once per pass.

System segments (the container's storage-metadata table segment and friends) are the storage
of the MetadataStore itself, so their records are pinned in memory and made durable by the
system journal in Tier-2 (``journal``), which ``bootstrap`` replays without touching the
MetadataStore. ``finish_bootstrap`` then starts the collector, which sweeps, in the background,
chunks of owned segments that no active record references (their delete tasks died with a crash).

Errors: see ``errors``. Transient failures propagate unchanged; StorageFenced becomes
StorageNotPrimary.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import time
from collections.abc import Callable, Iterator, Sequence

from . import chunk_index, chunk_names, concat_operation, read_operation, truncate_operation, write_operation
from .chunk_storage import ChunkRegion, ChunkStorage, WriteData
from .config import StorageConfig
from .errors import SegmentExists, StorageNotPrimary
from .garbage import GarbageCollector
from .journal import SystemJournal
from .keyed_locks import KeyedLocks
from .metadata_cache import MetadataCache
from .metadata_store import MetadataStore, StorageFenced
from .metadata_transaction import MetadataTransaction
from .operation_context import OperationContext, check_owner, load_segment, stamped
from .read_index import ReadIndex
from .records import ChunkFlags, ChunkLayout, SegmentFlags, SegmentRecord, StorageSegmentInfo

log = logging.getLogger("tributary.tier2")


class ChunkedSegmentStorage:
    def __init__(self, container_id: int, chunks: ChunkStorage, metadata: MetadataStore, *,
                 config: StorageConfig | None = None, system_segments: Sequence[str] = (),
                 owns_segment: Callable[[str], bool] = lambda name: True, clock: Callable[[], float] | None = None):
        """``owns_segment`` must say exactly which segments belong to this container when several
        containers share one ChunkStorage: the orphan sweep deletes chunks of owned segments that
        this container's metadata does not reference. ``clock`` (seconds) times the collector."""
        config = config or StorageConfig()
        self._container_id = container_id
        self._system_segments = frozenset(system_segments)
        self._owns_segment = owns_segment
        self._cache = MetadataCache(metadata, config.metadata_cache_records_max)
        self._locks = KeyedLocks()
        clock = clock or time.monotonic  # looked up now: a patched clock (the simulation) counts
        collector = GarbageCollector(chunks, self._begin_for_chunk, self._confirm_owner, config, clock,
                                     container_id=container_id)
        self._journal = SystemJournal(container_id, chunks, config, system_segments, collector.schedule)
        self._context = OperationContext(chunks, config, collector, ReadIndex(config.read_index_segments_max),
                                         self._begin)

    @property
    def epoch(self) -> int:
        """This owner's epoch (from Tier-1), set by ``bootstrap``."""
        return self._context.epoch

    async def bootstrap(self, epoch: int) -> None:
        """Takes over as owner ``epoch``: rebuilds the system segments' layout from the journal in Tier-2.

        Uses no MetadataStore (it is stored in the system segments). Raises StorageNotPrimary (a
        newer epoch wrote the journal), StorageCorrupted, ChunkStorageUnavailable.
        """
        self._context.epoch = epoch
        await self._journal.bootstrap(epoch)

    async def finish_bootstrap(self) -> None:
        """Once the MetadataStore works: starts the collector, which sweeps for orphan chunks of owned segments in
        the background."""
        self._context.collector.start(lambda name: name in self._system_segments or self._owns_segment(name))

    async def close(self) -> None:
        """Stops the collector (queued tasks are dropped; the next start's sweep finds them). Idempotent."""
        await self._context.collector.stop()

    async def create(self, name: str, rolling_length: int = 0) -> None:
        """Creates ``name``, its chunks rolling over at ``rolling_length`` bytes if that is positive and below the
        configured chunk size (system segments: always the configured size).

        Raises SegmentExists, StorageNotPrimary; transient errors."""
        async with self._serialized(name):
            transaction = self._begin(name)
            if await transaction.segment(name) is not None:
                raise SegmentExists(name)
            system = name in self._system_segments
            flags = SegmentFlags.ACTIVE | (SegmentFlags.SYSTEM if system else 0)
            rolling = self._context.config.max_chunk_size
            if rolling_length > 0 and not system:
                rolling = min(rolling, rolling_length)
            transaction.put(stamped(SegmentRecord(name, max_rolling_length=rolling,
                                                  owner_epoch=self.epoch, flags=flags)))
            await transaction.commit()

    async def exists(self, name: str) -> bool:
        return await self._begin(name).segment(name) is not None

    async def get_info(self, name: str) -> StorageSegmentInfo:
        """Raises SegmentNotFound."""
        segment = await load_segment(self._begin(name), name)
        return StorageSegmentInfo(name, segment.length, segment.start_offset, segment.sealed, segment.owner_epoch,
                                  segment.chunk_count)

    async def write(self, name: str, offset: int, data: WriteData) -> None:
        """Appends ``data`` (bytes-like, or a list of parts) at ``offset``, which must equal the length.

        Raises SegmentNotFound, SegmentSealed, StorageNotPrimary, BadOffset; transient errors.
        """
        async with self._serialized(name):
            await write_operation.write(self._context, name, offset, data)

    async def read(self, name: str, offset: int, length: int) -> bytes:
        """Exactly ``min(length, segment length - offset)`` bytes.

        Raises SegmentNotFound, SegmentTruncated, BadOffset (offset beyond the length).
        """
        return await read_operation.read(self._context, name, offset, length)

    @property
    def serves_regions(self) -> bool:
        """Whether ``read_region`` can be used: the chunk storage lends file descriptors."""
        return self._context.chunks.supports_regions

    async def read_region(self, name: str, offset: int, length: int) -> ChunkRegion | None:
        """Up to ``length`` bytes from ``offset``, cut at the end of the chunk holding ``offset``, as a
        file region to send without reading (release it when done); None at the segment's end.

        Only when ``serves_regions``. Raises as ``read`` does.
        """
        return await read_operation.region(self._context, name, offset, length)

    async def seal(self, name: str) -> None:
        """Idempotent. Raises SegmentNotFound, StorageNotPrimary; transient errors."""
        async with self._serialized(name):
            transaction = self._begin(name)
            segment = await load_segment(transaction, name)
            if segment.sealed:
                return
            check_owner(segment, self.epoch)
            transaction.put(stamped(dataclasses.replace(segment, flags=segment.flags | SegmentFlags.SEALED)))
            await transaction.commit()

    async def concat(self, target: str, offset: int, source: str) -> int:
        """Appends sealed ``source`` to ``target`` at ``offset`` (metadata only); returns the new length.

        Raises SegmentNotFound, SegmentSealed, SegmentNotSealed, SegmentTruncated, BadOffset,
        StorageNotPrimary; transient errors. System segments cannot take part (ValueError).
        """
        if {target, source} & self._system_segments:
            raise ValueError(f"concat of system segments is not supported: {source} -> {target}")
        async with self._serialized(target, source):
            return await concat_operation.concat(self._context, target, offset, source)

    async def truncate(self, name: str, offset: int) -> None:
        """Raises SegmentNotFound, StorageNotPrimary, BadOffset; transient errors."""
        async with self._serialized(name):
            chunks, freed = await truncate_operation.truncate(self._context, name, offset)
        if chunks:
            log.info("tier-2 segment truncated", extra={"container": self._container_id, "segment": name,
                                                         "start_offset": offset, "chunks_released": chunks,
                                                         "bytes_released": freed,
                                                         "gc_delay_seconds": self._context.config.gc_delay_seconds})

    async def delete(self, name: str) -> None:
        """Removes the segment; the collector deletes its chunks later.

        Raises SegmentNotFound (also when already deleted: callers treat it as done),
        StorageNotPrimary; transient errors.
        """
        async with self._serialized(name):
            transaction = self._begin(name)
            segment = await load_segment(transaction, name)
            check_owner(segment, self.epoch)
            chain = await transaction.chain(segment)
            for chunk in chain:
                transaction.put(dataclasses.replace(chunk, flags=ChunkFlags(0)))
            await chunk_index.remove_hints(transaction, segment)
            transaction.remove(name)
            await transaction.commit()
        self._context.read_index.forget(name)
        self._context.collector.schedule(chunk.name for chunk in chain)
        log.info("tier-2 segment deleted", extra={"container": self._container_id, "segment": name,
                                                   "chunks_released": len(chain),
                                                   "bytes_released": sum(chunk.length for chunk in chain),
                                                   "gc_delay_seconds": self._context.config.gc_delay_seconds})

    async def list_chunks(self, name: str) -> list[ChunkLayout]:
        """The segment's chunks, first to last, and whether each exists in the ChunkStorage. Raises SegmentNotFound."""
        transaction = self._begin(name)
        segment = await load_segment(transaction, name)
        layout, start_offset = [], segment.first_chunk_start_offset
        for chunk in await transaction.chain(segment):
            layout.append(ChunkLayout(chunk.name, start_offset, chunk.length,
                                      await self._context.chunks.exists(chunk.name)))
            start_offset += chunk.length
        return layout

    async def collect_garbage(self) -> int:
        """Runs every queued garbage task now, ignoring delays; returns the chunks deleted (for tests and tools)."""
        return await self._context.collector.collect(everything=True)

    @contextlib.asynccontextmanager
    async def _serialized(self, *names: str):
        async with self._locks.hold(*names):
            with _fenced_as_not_primary(names[0]):
                yield

    def _begin(self, segment: str) -> MetadataTransaction:
        return MetadataTransaction(self._journal if segment in self._system_segments else self._cache)

    def _begin_for_chunk(self, chunk: str) -> MetadataTransaction:
        parsed = chunk_names.parse_segment_chunk(chunk)
        return self._begin(parsed.segment if parsed is not None else chunk)

    async def _confirm_owner(self, chunk: str) -> None:
        """Before the collector deletes a system segment's chunk: pinned records are not fenced, the journal is."""
        parsed = chunk_names.parse_segment_chunk(chunk)
        if parsed is not None and parsed.segment in self._system_segments:
            await self._journal.check_current()


@contextlib.contextmanager
def _fenced_as_not_primary(name: str) -> Iterator[None]:
    try:
        yield
    except StorageFenced as error:
        raise StorageNotPrimary(name, f"{name}: the metadata store is fenced: a newer owner took over") from error
