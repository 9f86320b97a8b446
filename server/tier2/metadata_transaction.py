"""Metadata transactions of SLTS: snapshot reads, buffered changes, one atomic commit (design §5.3).

A transaction reads records from one ``RecordSource`` and remembers the version of each record
it read. Its changes stay in the transaction until ``commit``, which hands every changed key to
the source in one call, each conditional on the version read (``NOT_EXISTS`` for keys that
were absent or never read, i.e. new chunks). A transaction that is abandoned (an error before
commit) changed nothing.

There are two sources:

* ``MetadataCache`` for ordinary segments: the commit is one conditional multi-key write to the
  MetadataStore (a table segment, fenced by Tier-1).
* ``SystemJournal`` for the pinned records of system segments: the commit is a journal batch in
  Tier-2, and the pinned layout changes only after the batch is durable.

A failed commit drops every key the transaction touched from the source's cache and re-raises:
after a VersionMismatch the caller's retry works from the committed state.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Protocol

from .errors import StorageCorrupted
from .metadata_cache import Entry
from .metadata_store import NOT_EXISTS
from .records import ChunkRecord, Record, SegmentRecord


class RecordSource(Protocol):
    async def get(self, key: str) -> Entry: ...

    async def commit(self, changes: Mapping[str, tuple[Record | None, int]]) -> None: ...

    def invalidate(self, keys: Iterable[str]) -> None: ...


class MetadataTransaction:
    def __init__(self, source: RecordSource):
        self._source = source
        self._read: dict[str, Entry] = {}
        self._changes: dict[str, Record | None] = {}

    async def get(self, key: str) -> Record | None:
        """The record as this transaction sees it: its own change, else the snapshot."""
        if key in self._changes:
            return self._changes[key]
        entry = self._read.get(key)
        if entry is None:
            entry = self._read[key] = await self._source.get(key)
        return entry.record

    async def segment(self, name: str) -> SegmentRecord | None:
        """The active segment record of ``name``, or None. Raises StorageCorrupted for a chunk's key."""
        record = await self.get(name)
        if record is not None and not isinstance(record, SegmentRecord):
            raise StorageCorrupted(f"{name} names a chunk record, not a segment")
        return record if record is not None and record.active else None

    async def chunk(self, name: str) -> ChunkRecord | None:
        """The chunk record of ``name`` (active or not), or None. Raises StorageCorrupted for a segment's key."""
        record = await self.get(name)
        if record is not None and not isinstance(record, ChunkRecord):
            raise StorageCorrupted(f"{name} names a segment record, not a chunk")
        return record

    async def linked_chunk(self, name: str) -> ChunkRecord:
        """The record of a chunk that committed metadata links to. Raises StorageCorrupted if absent."""
        record = await self.chunk(name)
        if record is None:
            raise StorageCorrupted(f"chunk record {name} is missing from a segment's chunk list")
        return record

    async def chain(self, segment: SegmentRecord) -> list[ChunkRecord]:
        """Every chunk record of ``segment``, first to last. Raises StorageCorrupted for a broken list."""
        chain: list[ChunkRecord] = []
        name = segment.first_chunk
        while name is not None:
            if len(chain) == segment.chunk_count:
                raise StorageCorrupted(f"segment {segment.name} has more than its {segment.chunk_count} chunks")
            chain.append(await self.linked_chunk(name))
            name = chain[-1].next_chunk
        return chain

    def put(self, record: Record) -> None:
        """Creates or replaces ``record`` (keyed by its name) at commit. Raises StorageCorrupted for a
        segment record that breaks its invariants (a bug: nothing is committed)."""
        if isinstance(record, SegmentRecord):
            record.check_invariants()
        self._changes[record.name] = record

    def remove(self, key: str) -> None:
        self._changes[key] = None

    async def commit(self) -> None:
        """Applies every change atomically (nothing to do without changes).

        Raises what the source raises (VersionMismatch, StorageFenced, MetadataStoreUnavailable,
        ChunkStorageUnavailable for the journal); then nothing changed, or the outcome is unknown
        and the cache no longer holds the keys.
        """
        if not self._changes:
            return
        expected = {key: self._read[key].version if key in self._read else NOT_EXISTS for key in self._changes}
        try:
            await self._source.commit({key: (record, expected[key]) for key, record in self._changes.items()})
        except BaseException:
            self._source.invalidate(self._read.keys() | self._changes.keys())
            raise
