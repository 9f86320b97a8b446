"""The system journal: where the layout of the system segments is durable (design §5.9).

System segments (the container's storage-metadata table segment and friends) cannot keep their
segment and chunk records in the MetadataStore, because that store *is* their data. Their records
are pinned in memory (``records``) and every committed change is first written to Tier-2 as a
journal batch (``journal_format``): the batch is the commit, and the pinned records change only
after it is durable. Every ``journal_snapshot_every`` batches the whole pinned layout is written
as a snapshot, read back and checked; the snapshot names the first journal file written after it.

Files are named per container and per epoch (``chunk_names``) and each epoch writes only its own.
On appendable storage batches are appended to the current journal file; without append every
batch is a new file. After a failed write (whose batch may or may not be durable) the journal
moves to a new file and writes a snapshot before the next batch, so the outcome of the failed
batch cannot matter: replay starts after it. Snapshot attempts always move to a new file too.

``bootstrap(epoch)`` uses Tier-2 only:

1. List the container's files. A file of a higher epoch means a newer owner: StorageNotPrimary.
2. Load the latest snapshot (highest epoch, then index) that is intact; fall back to older ones.
3. Replay, in index order, the journal files of the snapshot's epoch from the index it names,
   each up to its first torn batch. Files of older epochs written after the snapshot belong to a
   fenced owner (a zombie) and are ignored, as are snapshots and files it writes later.
4. Keep each system segment's chunk list (dropping unreachable records), create missing system
   segments empty, check the invariants, and claim every system segment for the new epoch with
   ``OWNERSHIP_CHANGED`` so that its first write opens a new chunk named with the new epoch.
5. Write a snapshot under the new epoch; every file listed in step 1 is then obsolete and goes to
   the garbage collector (so do journal files and snapshots superseded by later snapshots).
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from collections.abc import Callable, Iterable, Mapping, Sequence

from . import chunk_names
from .chunk_storage import ChunkAlreadyExists, ChunkNotFound, ChunkStorage, ChunkStorageError, ChunkStorageUnavailable
from .config import StorageConfig
from .errors import StorageCorrupted, StorageNotPrimary
from .journal_format import Snapshot, decode_batches, decode_snapshot, encode_batch, encode_snapshot
from .metadata_cache import Entry
from .metadata_store import NOT_EXISTS
from .metadata_transaction import MetadataTransaction
from .records import Record, SegmentFlags, SegmentRecord, check_chain

log = logging.getLogger(__name__)


class SystemJournal:
    """The pinned records of the system segments, made durable by a journal in Tier-2.

    A ``RecordSource`` for metadata transactions on system segments.
    """

    def __init__(self, container_id: int, chunks: ChunkStorage, config: StorageConfig,
                 system_segments: Sequence[str], schedule_garbage: Callable[[Iterable[str]], None]):
        self._container_id = container_id
        self._chunks = chunks
        self._config = config
        self._system_segments = tuple(system_segments)
        self._schedule_garbage = schedule_garbage
        self.records: dict[str, Record] = {}
        self._epoch: int | None = None
        self._lock = asyncio.Lock()  # batches are written and applied one at a time, in commit order
        self._next_file = 0
        self._next_snapshot = 0
        self._current_file: str | None = None  # the appendable journal file, if any
        self._current_length = 0
        self._batches_since_snapshot = 0
        self._snapshot_due = False  # a write failed: snapshot before the next batch
        self._obsolete: list[str] = []  # files the next successful snapshot supersedes

    def _bootstrapped_epoch(self) -> int:
        """The epoch of the bootstrap in effect. Raises RuntimeError before one succeeded."""
        epoch = self._epoch
        if epoch is None:
            raise RuntimeError("the system journal is used before bootstrap")
        return epoch

    async def check_current(self) -> None:
        """Raises StorageNotPrimary if a newer epoch has written journal files (this owner is a zombie)."""
        if self._epoch is None:
            raise StorageNotPrimary(chunk_names.journal_prefix(self._container_id), "the journal is not bootstrapped")
        await self._list_files(self._epoch)

    async def get(self, key: str) -> Entry:
        record = self.records.get(key)
        return Entry(record, 0 if record is not None else NOT_EXISTS)

    def invalidate(self, keys: Iterable[str]) -> None:
        """Nothing to forget: the pinned records are the committed state."""

    async def commit(self, changes: Mapping[str, tuple[Record | None, int]]) -> None:
        """Makes ``changes`` durable as one batch, then applies them to the pinned records.

        Raises ChunkStorageError (typically ChunkStorageUnavailable); nothing was applied then.
        """
        if self._epoch is None:
            raise RuntimeError("the system journal is used before bootstrap")
        async with self._lock:
            if self._snapshot_due:
                await self._write_snapshot()
            after_images = {key: record for key, (record, _) in changes.items()}
            await self._append(encode_batch(after_images))
            self._apply(self.records, after_images)
            self._batches_since_snapshot += 1
            if self._batches_since_snapshot >= self._config.journal_snapshot_every:
                try:
                    await self._write_snapshot()
                except ChunkStorageError as error:
                    log.warning("container %d: system snapshot failed, retrying after the next batch: %s",
                                self._container_id, error)

    async def bootstrap(self, epoch: int) -> None:
        """Rebuilds the pinned records from Tier-2 and writes a snapshot under ``epoch`` (see the module docstring).

        Raises StorageNotPrimary (a newer epoch wrote files), StorageCorrupted, ChunkStorageError.
        """
        async with self._lock:
            try:
                await self._bootstrap(epoch)
            except BaseException:
                self._epoch = None  # commits stay refused until a bootstrap succeeds
                raise

    async def _bootstrap(self, epoch: int) -> None:
        listed = await self._list_files(epoch)
        self._epoch = epoch
        snapshot = await self._latest_snapshot(listed)
        if snapshot is None and any(parsed.kind == "journal" for parsed, _ in listed):
            raise StorageCorrupted(f"container {self._container_id}: journal files but no intact snapshot")
        self.records = dict(snapshot.records) if snapshot else {}
        if snapshot is not None:
            await self._replay(snapshot, listed)
        self.records = await self._settle(epoch)
        self._next_file = 1 + max((p.index for p, _ in listed if p.epoch == epoch and p.kind == "journal"),
                                  default=-1)
        self._next_snapshot = 1 + max((p.index for p, _ in listed if p.epoch == epoch and p.kind == "snapshot"),
                                      default=-1)
        self._obsolete = [name for _, name in listed]
        await self._write_snapshot()

    async def _list_files(self, epoch: int) -> list[tuple[chunk_names.JournalFileName, str]]:
        """This container's journal and snapshot files.

        Raises StorageNotPrimary if an epoch above ``epoch`` wrote one.
        """
        listed = []
        for name in await self._chunks.list(chunk_names.journal_prefix(self._container_id)):
            parsed = chunk_names.parse_journal_file(self._container_id, name)
            if parsed is not None:
                if parsed.epoch > epoch:
                    raise StorageNotPrimary(name, f"{name} was written by a newer owner than epoch {epoch}")
                listed.append((parsed, name))
        return listed

    async def _latest_snapshot(self, listed) -> Snapshot | None:
        candidates = sorted(((p.epoch, p.index), name) for p, name in listed if p.kind == "snapshot")
        for (epoch, index), name in reversed(candidates):
            try:
                snapshot = decode_snapshot(await self._read_whole(name))
            except StorageCorrupted as error:
                log.warning("container %d: skipping snapshot %s: %s", self._container_id, name, error)
                continue
            if (snapshot.epoch, snapshot.index) == (epoch, index):
                return snapshot
            log.warning("container %d: snapshot %s holds epoch %d index %d", self._container_id, name,
                        snapshot.epoch, snapshot.index)
        return None

    async def _replay(self, snapshot: Snapshot, listed) -> None:
        files = sorted((p.index, name) for p, name in listed
                       if p.kind == "journal" and p.epoch == snapshot.epoch and p.index >= snapshot.next_journal_file)
        for _, name in files:
            for batch in decode_batches(await self._read_whole(name)):
                self._apply(self.records, batch)

    async def _settle(self, epoch: int) -> dict[str, Record]:
        """The replayed layout reduced to the system segments' chunk lists, checked and claimed for ``epoch``."""
        reader = MetadataTransaction(self)
        settled: dict[str, Record] = {}
        for name in self._system_segments:
            segment = await reader.segment(name)
            if segment is None:
                segment = SegmentRecord(name, max_rolling_length=self._config.max_chunk_size,
                                        flags=SegmentFlags.ACTIVE | SegmentFlags.SYSTEM)
            segment.check_invariants()
            chain = await reader.chain(segment)
            check_chain(segment, chain)
            settled[name] = dataclasses.replace(segment, owner_epoch=epoch,
                                                flags=segment.flags | SegmentFlags.OWNERSHIP_CHANGED)
            settled.update((chunk.name, chunk) for chunk in chain)
        return settled

    async def _append(self, batch: bytes) -> None:
        try:
            if self._current_file is not None:
                await self._chunks.write(self._current_file, self._current_length, batch)
                self._current_length += len(batch)
                return
            name = chunk_names.journal_file(self._container_id, self._bootstrapped_epoch(), self._next_file)
            self._next_file += 1
            self._obsolete.append(name)
            await self._chunks.create_with_content(name, batch)
            if self._chunks.supports_append:
                self._current_file, self._current_length = name, len(batch)
        except ChunkStorageError:
            self._current_file = None
            self._snapshot_due = True
            raise

    async def _write_snapshot(self) -> None:
        """Writes, reads back and checks a snapshot of the pinned records. Raises ChunkStorageError."""
        self._current_file = None  # whatever happens, later batches go to files this snapshot points at
        epoch = self._bootstrapped_epoch()
        index = self._next_snapshot
        self._next_snapshot += 1
        name = chunk_names.snapshot_file(self._container_id, epoch, index)
        data = encode_snapshot(Snapshot(epoch, index, self._next_file, dict(self.records)))
        try:
            await self._chunks.create_with_content(name, data)
            if await self._chunks.read(name, 0, len(data) + 1) != data:
                raise ChunkStorageUnavailable(name, "the snapshot read back differs from what was written")
        except ChunkStorageError as error:
            if not isinstance(error, ChunkAlreadyExists):  # never delete a file someone else wrote
                self._schedule_garbage([name])
            raise
        self._schedule_garbage(self._obsolete)
        self._obsolete = [name]
        self._batches_since_snapshot = 0
        self._snapshot_due = False

    async def _read_whole(self, name: str) -> bytes:
        """A listed file's bytes. Raises ChunkStorageUnavailable if it vanished: an old owner still
        collecting its obsolete files; bootstrapping again finds the files that replaced it."""
        try:
            return await self._chunks.read(name, 0, (await self._chunks.get_info(name)).length)
        except ChunkNotFound as error:
            raise ChunkStorageUnavailable(name, "deleted while bootstrapping; retry") from error

    @staticmethod
    def _apply(layout: dict[str, Record], changes: Mapping[str, Record | None]) -> None:
        for key, record in changes.items():
            if record is None:
                layout.pop(key, None)
            else:
                layout[key] = record
