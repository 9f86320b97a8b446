"""A segment container: the owner of a set of segments, their operation log and their state.

Theory of operation.

* **Mutations** are decided synchronously by :class:`PendingState` (the
  container's serialization point; no await between validation, sequence
  numbering and framing). The decided operation joins the *current frame*.
* **Frames.** All operations decided in one event-loop turn share one frame:
  the first decision schedules a flush for the end of the turn. The flush
  encodes the frame and hands it to the Tier-1 log without waiting, so several
  frames can be in flight and the log group-commits them.
* **Commit.** Frames complete in order. When a frame is durable its operations
  are applied to the committed state (the same ``apply`` recovery uses), their
  overlays released, parked readers woken, and only then the callers' futures
  resolved: every acknowledged mutation is already visible to reads.
* **Failure is fail-stop.** If a log write fails, every operation in flight
  fails and the container stops; a new container instance recovers from the log.
* **Checkpoints.** After enough operations (or logged bytes) the container holds
  new mutations (in arrival order), lets the frames in flight commit, and logs a
  Checkpoint holding a snapshot of the metadata, then decides the held mutations;
  a fresh log starts with one. Recovery skips to the first checkpoint, loads it,
  replays the rest, and checks each later checkpoint against the replayed state.
* **Tier-2** (when configured). The storage writer (``storage_writer.py``) follows
  every applied operation into Tier-2 (SLTS, ``server/tier2``), whose metadata is
  kept in this container's storage metadata table segment. Once every operation
  before a checkpoint is in Tier-2 the log is truncated just before that
  checkpoint. Reads of bytes no longer cached come from Tier-2. On start, after
  replay, SLTS replays its system journal, and table segments whose bytes lie in
  Tier-2 get their key index rebuilt from there.
"""

from __future__ import annotations

import asyncio
import dataclasses
import enum
import logging
import time
import uuid
from collections import deque
from types import MappingProxyType
from typing import Callable

from wire import naming
from wire.constants import MAX_READ_SIZE, NULL_ATTRIBUTE_VALUE

from .. import errors
from ..tier1 import DurableDataLog, LogAddress, LogError
from ..tier2 import errors as storage_errors
from ..tier2.chunk_storage import ChunkStorage
from ..tier2.chunked_storage import ChunkedSegmentStorage
from ..tier2.config import StorageConfig
from . import attributes as attrs
from . import boundaries
from . import operations as ops
from . import table as table_format
from .cache import CacheManager
from .metadata import SegmentMetadata, SegmentType
from .pending import Decision, PendingState
from .state import ContainerState, InconsistentState, wake_readers
from .storage_metadata import TableMetadataStore, storage_metadata_segment
from .storage_writer import TIER2_TRANSIENT_ERRORS, StorageWriter, StorageWriterConfig

log = logging.getLogger("tributary.container")
_FRAME_HEADROOM = 4096  # frame and operation headers, attribute updates
_READ_AHEAD = 8 * 1024 * 1024  # Tier-2 reads fetch aligned blocks of this size
_READ_AHEAD_BLOCKS = 4  # a read of Tier-2 bytes starts fetching this many following blocks
_REBUILD_READ_SIZE = 16 * 1024 * 1024
_REBUILD_PROGRESS_BYTES = 256 * 1024 * 1024  # a table index rebuild logs its progress this often
_STORAGE_READ_ATTEMPTS = 8  # a read retries a failing Tier-2 this many times (with growing pauses) before failing
_NOT_CACHED = object()


@dataclasses.dataclass
class Tier2Settings:
    """What a container needs to use Tier-2; without it, every byte stays in memory and the log is never truncated."""

    chunks: ChunkStorage
    cache: CacheManager
    storage: StorageConfig = dataclasses.field(default_factory=StorageConfig)
    writer: StorageWriterConfig = dataclasses.field(default_factory=StorageWriterConfig)
    owns_segment: Callable[[str], bool] = lambda name: True


class ContainerStatus(enum.Enum):
    NEW = "new"
    RECOVERING = "recovering"
    RUNNING = "running"
    FAILED = "failed"
    STOPPED = "stopped"


class ReadResult:
    """The answer to a read: views of the data plus the tail flags of SegmentRead."""

    __slots__ = ("parts", "length", "at_tail", "end_of_segment")

    def __init__(self, parts: list, at_tail: bool, end_of_segment: bool):
        self.parts = parts
        self.length = sum(map(len, parts))
        self.at_tail = at_tail
        self.end_of_segment = end_of_segment

    def data(self):
        """The data as one buffer (a view if it lies in one block, otherwise one copy)."""
        if len(self.parts) == 1:
            return self.parts[0]
        return b"".join(self.parts)


class SegmentInfo:
    __slots__ = ("name", "segment_type", "start_offset", "length", "sealed", "last_modified", "attributes",
                 "table_entry_count")

    def __init__(self, segment: SegmentMetadata):
        self.name = segment.name
        self.segment_type = segment.segment_type
        self.start_offset = segment.start_offset
        self.length = segment.length
        self.sealed = segment.sealed
        self.last_modified = segment.last_modified
        self.attributes = MappingProxyType(segment.attributes)  # read-only view: no copy per info request
        self.table_entry_count = segment.table.entry_count if segment.table is not None else 0


class _Frame:
    __slots__ = ("decisions", "futures", "size", "done", "timestamp_ms", "first_sequence")

    def __init__(self):
        self.decisions: list[Decision] = []
        self.futures: list[asyncio.Future] = []
        self.size = 0
        self.done = False
        self.timestamp_ms = 0
        self.first_sequence = 0


class SegmentContainer:
    """Owns the segments that hash to ``container_id``."""

    def __init__(self, container_id: int, durable_log: DurableDataLog, *,
                 checkpoint_every_operations: int = 50_000,
                 checkpoint_every_bytes: int = 64 * 1024 * 1024,
                 tier2: Tier2Settings | None = None,
                 table_compaction_threshold: int = 16 * 1024 * 1024,
                 wall_clock_ms: Callable[[], int] = lambda: int(time.time() * 1000),
                 on_failure: Callable[["SegmentContainer", BaseException], None] | None = None):
        self.container_id = container_id
        self.epoch = 0
        self.status = ContainerStatus.NEW
        self._log = durable_log
        self.storage: ChunkedSegmentStorage | None = None
        self.writer: StorageWriter | None = None
        self.storage_metadata_name = storage_metadata_segment(container_id)
        self._table_compaction_threshold = table_compaction_threshold
        if tier2 is not None:
            self.storage = ChunkedSegmentStorage(
                container_id, tier2.chunks, TableMetadataStore(self, self.storage_metadata_name),
                config=tier2.storage, system_segments=(self.storage_metadata_name,), owns_segment=tier2.owns_segment)
            self.writer = StorageWriter(container_id, self.storage, tier2.cache, config=tier2.writer,
                                        truncate_log=self._truncate_log, on_fatal=self._fail,
                                        log_pressure=self._log_pressure, maintain=self._compact_storage_metadata)
        self._state = ContainerState(tier2.cache if tier2 is not None else None, self.writer)
        self._pending = PendingState(self._state, durable_log.max_append_size - 2 * _FRAME_HEADROOM)
        self._wall_clock_ms = wall_clock_ms
        self._on_failure = on_failure
        self._checkpoint_every = checkpoint_every_operations
        self._checkpoint_every_bytes = checkpoint_every_bytes
        self._operations_since_checkpoint = 0
        self._logged_bytes = 0  # bytes of every frame so far (replayed ones included)
        self._logged_bytes_at_checkpoint = 0
        # (sequence, address, logged bytes before it) of each checkpoint still in the log
        self._checkpoints: deque[tuple[int, LogAddress, int]] = deque()
        # The storage writer flushes everything when the log holds more than this since its first checkpoint.
        self._log_backlog_target = 2 * checkpoint_every_bytes
        self._in_flight_reads: dict[tuple[str, int], asyncio.Future] = {}
        self._prefetches: set[asyncio.Task] = set()
        self._frame: _Frame | None = None
        self._in_flight: deque[_Frame] = deque()  # frames handed to the log, in order
        self._next_sequence = 1  # of the first operation of the next frame
        self._held: deque | None = None  # mutations waiting for a checkpoint, when one is due
        self._checkpoint_started = False
        self._failure: BaseException | None = None
        self._max_frame_bytes = durable_log.max_append_size - _FRAME_HEADROOM

    def __repr__(self) -> str:
        return (f"<SegmentContainer {self.container_id} {self.status.value} epoch={self.epoch} "
                f"segments={len(self._state.by_id)}>")

    # ------------------------------------------------------------------ lifecycle

    async def start(self) -> None:
        """Opens the log (fencing older owners), recovers by replay, and starts accepting requests."""
        self.status = ContainerStatus.RECOVERING
        self.epoch = await self._log.open()
        found_checkpoint = await self._recover()
        if self.storage is not None:
            await self.storage.bootstrap(self.epoch)
            await self._rebuild_tables()
        self._next_sequence = self._state.last_sequence + 1
        self._pending = PendingState(self._state, self._log.max_append_size - 2 * _FRAME_HEADROOM)
        self.status = ContainerStatus.RUNNING
        if not found_checkpoint:
            await self._write_checkpoint()
        if self.storage is not None:
            if self.storage_metadata_name not in self._state.by_name:
                await self.create_segment(self.storage_metadata_name, SegmentType.TABLE)
            await self.storage.finish_bootstrap()
            self.writer.start()
        log.info("container started", extra={"container": self.container_id, "epoch": self.epoch,
                                             "segments": len(self._state.by_id)})

    async def stop(self) -> None:
        """Waits for frames in flight, stops the storage writer, then closes the log. Later requests fail."""
        if self.writer is not None:
            await self.writer.stop()
        if self.storage is not None:
            await self.storage.close()
        if self.status == ContainerStatus.RUNNING:
            self.status = ContainerStatus.STOPPED
            if self._frame is not None:
                self._flush()
            in_flight = [future for frame in self._in_flight for future in frame.futures]
            if in_flight:
                await asyncio.gather(*in_flight, return_exceptions=True)
        self.status = ContainerStatus.STOPPED
        await self._log.close()

    async def _recover(self) -> bool:
        """Replays the log into the committed state. Returns whether a checkpoint was found."""
        started, records, operations_replayed = time.monotonic(), 0, 0
        found_checkpoint = False
        async for address, record in self._log.read():
            records += 1
            timestamp_ms, first_sequence, operations = ops.decode_frame(record)
            for index, operation in enumerate(operations):
                if isinstance(operation, ops.Checkpoint):
                    found_checkpoint = self._recover_checkpoint(operation, found_checkpoint)
                    self._checkpoints.append((first_sequence + index, address, self._logged_bytes))
                elif found_checkpoint:
                    self._state.apply(operation, timestamp_ms, first_sequence + index)
                    operations_replayed += 1
                self._state.last_sequence = first_sequence + index
            self._logged_bytes += len(record)
            if records % 10_000 == 0:
                log.info("recovery progress", extra={"container": self.container_id, "records": records,
                                                      "operations": operations_replayed})
        log.info("recovery done", extra={"container": self.container_id, "records": records,
                                          "operations": operations_replayed,
                                          "seconds": round(time.monotonic() - started, 3)})
        return found_checkpoint

    def _recover_checkpoint(self, checkpoint: ops.Checkpoint, found_before: bool) -> bool:
        if not found_before:
            self._state.restore(checkpoint.snapshot)
            if self.storage is None and any(segment.length != segment.start_offset
                                            for segment in self._state.by_id.values()):
                raise InconsistentState("the log begins with a checkpoint whose bytes are in Tier-2, "
                                        "but no Tier-2 is configured")
        elif self._state.describe() != self._state.describe_snapshot(checkpoint.snapshot):
            raise InconsistentState("replayed state differs from a checkpoint in the log")
        return True

    @property
    def failure(self) -> BaseException | None:
        """Why the container failed, if it did."""
        return self._failure

    def _fail(self, error: BaseException) -> None:
        if self._failure is not None:
            return
        self._failure = error
        self.status = ContainerStatus.FAILED
        log.error("container failed", extra={"container": self.container_id, "error": repr(error)})
        frames = list(self._in_flight) + ([self._frame] if self._frame is not None else [])
        self._in_flight, self._frame = deque(), None
        for frame in frames:
            for future in frame.futures:
                if not future.done():
                    future.set_exception(errors.ContainerUnavailable("", f"container failed: {error!r}"))
        held, self._held = self._held or (), None
        for _, future in held:
            future.set_exception(errors.ContainerUnavailable("", f"container failed: {error!r}"))
        for segment in self._state.by_id.values():
            wake_readers(segment)
        if self._on_failure is not None:
            self._on_failure(self, error)

    # ------------------------------------------------------------------ the operation pipeline

    def submit(self, decide: Callable[[PendingState], Decision]) -> asyncio.Future:
        """Decides a mutation now (or, while a checkpoint is due, in arrival order after it).

        Returns a future resolved with the decision's result once the operation is
        durable and applied, or failed with the operating error that rejected it.
        """
        future = asyncio.get_running_loop().create_future()
        if self.status != ContainerStatus.RUNNING:
            future.set_exception(errors.ContainerUnavailable("", f"container {self.container_id} is "
                                                                 f"{self.status.value}"))
        elif self._held is not None:
            self._held.append((decide, future))
        else:
            self._decide(decide, future)
        return future

    def _decide(self, decide: Callable[[PendingState], Decision], future: asyncio.Future) -> None:
        try:
            decision = decide(self._pending)
        except errors.SegmentStoreError as error:
            future.set_exception(error)
            return
        self._add_to_frame(decision, future)

    async def _execute(self, decide: Callable[[PendingState], Decision]):
        return await self.submit(decide)

    def _check_running(self) -> None:
        if self.status != ContainerStatus.RUNNING:
            raise errors.ContainerUnavailable("", f"container {self.container_id} is {self.status.value}")

    def _add_to_frame(self, decision: Decision, future: asyncio.Future) -> None:
        size = _operation_size(decision.operation)
        frame = self._frame
        if frame is not None and frame.size + size > self._max_frame_bytes:
            self._flush()
            frame = None
        if frame is None:
            frame = self._frame = _Frame()
            asyncio.get_running_loop().call_soon(self._flush_if, frame)
        frame.decisions.append(decision)
        frame.futures.append(future)
        frame.size += size

    def _flush_if(self, frame: _Frame) -> None:
        if self._frame is frame:
            self._flush()

    def _flush(self) -> None:
        frame, self._frame = self._frame, None
        if frame is None or self._failure is not None:
            return
        frame.timestamp_ms = self._wall_clock_ms()
        frame.first_sequence = self._next_sequence
        self._next_sequence += len(frame.decisions)
        parts = ops.encode_frame(frame.timestamp_ms, frame.first_sequence,
                                 [decision.operation for decision in frame.decisions])
        self._in_flight.append(frame)
        asyncio.get_running_loop().create_task(self._write(frame, parts))

    async def _write(self, frame: _Frame, parts: list) -> None:
        try:
            address = await self._log.append(parts)
        except (LogError, OSError) as error:
            self._fail(error)
            return
        frame.done = True
        if isinstance(frame.decisions[0].operation, ops.Checkpoint):
            self._checkpoints.append((frame.first_sequence, address, self._logged_bytes))
            if self.writer is not None and self._log_pressure():
                self.writer.wake()
        try:
            self._commit_ready_frames()
        except InconsistentState as error:
            self._fail(error)

    def _commit_ready_frames(self) -> None:
        """Applies durable frames in order (a frame never commits before the ones ahead of it)."""
        while self._in_flight and self._in_flight[0].done:
            frame = self._in_flight.popleft()
            woken = set()
            for index, decision in enumerate(frame.decisions):
                segment = self._state.apply(decision.operation, frame.timestamp_ms, frame.first_sequence + index)
                self._pending.release(decision)
                if segment is not None:
                    woken.add(segment)
            for segment in woken:
                wake_readers(segment)
            for decision, future in zip(frame.decisions, frame.futures):
                if not future.done():
                    future.set_result(decision.result)
            self._operations_since_checkpoint += len(frame.decisions)
            self._logged_bytes += frame.size
        if ((self._operations_since_checkpoint >= self._checkpoint_every
             or self._logged_bytes - self._logged_bytes_at_checkpoint >= self._checkpoint_every_bytes)
                and self._held is None):
            self._held = deque()
            if self._frame is not None:
                self._flush()
        if self._held is not None and not self._checkpoint_started and not self._in_flight and self._frame is None:
            self._checkpoint_started = True
            asyncio.get_running_loop().create_task(self._checkpoint_then_release())

    async def _checkpoint_then_release(self) -> None:
        """Runs once every frame before the checkpoint is durable; then decides the held mutations."""
        try:
            await self._write_checkpoint()
        except errors.ContainerUnavailable:
            return
        held, self._held = self._held, None
        self._checkpoint_started = False
        for decide, future in held or ():
            if self.status == ContainerStatus.RUNNING:
                self._decide(decide, future)
            else:
                future.set_exception(errors.ContainerUnavailable("", "container stopped"))

    async def _write_checkpoint(self) -> None:
        self._operations_since_checkpoint = 0
        self._logged_bytes_at_checkpoint = self._logged_bytes
        snapshot = self._state.snapshot()
        if len(snapshot) + _FRAME_HEADROOM > self._max_frame_bytes:
            # Skipping one loses nothing (replay starts at the log's first checkpoint, and the log is
            # only ever truncated before one that was written), but the log cannot be truncated past
            # here until a checkpoint fits again: snapshots are not split across records yet.
            log.warning("checkpoint too large for one log record; skipped",
                        extra={"container": self.container_id, "bytes": len(snapshot)})
            return
        decision = Decision(ops.Checkpoint(snapshot), ())
        future = asyncio.get_running_loop().create_future()
        self._add_to_frame(decision, future)
        self._flush()
        await future

    # ------------------------------------------------------------------ tier-2

    def _log_pressure(self) -> bool:
        """Whether the log holds so much since its first checkpoint that Tier-2 should catch up now."""
        return bool(self._checkpoints) and self._logged_bytes - self._checkpoints[0][2] > self._log_backlog_target

    async def _truncate_log(self, lowest_pending: int | None) -> None:
        """Truncates the log before the newest checkpoint that every unfinished Tier-2 operation follows."""
        bound = self._state.last_sequence + 1 if lowest_pending is None else lowest_pending
        checkpoints, chosen = self._checkpoints, None
        while len(checkpoints) > 1 and checkpoints[1][0] < bound:
            checkpoints.popleft()
            chosen = checkpoints[0]
        if chosen is not None and self.status == ContainerStatus.RUNNING:
            await self._log.truncate(LogAddress(chosen[1].sequence - 1))

    async def _rebuild_tables(self) -> None:
        """Rebuilds the key index of table segments whose bytes lie partly in Tier-2 (the storage metadata first).

        The bytes are parsed as they stream in (Tier-2, then the cached tail the log replayed),
        so a table larger than the cache budget is rebuilt all the same.
        """
        incomplete = [segment for segment in self._state.by_id.values() if segment.table_incomplete]
        incomplete.sort(key=lambda segment: segment.name != self.storage_metadata_name)
        for segment in incomplete:
            index, leftover, base = table_format.TableIndex(), b"", segment.start_offset
            stored = min(segment.data.storage_length, segment.length)
            offset = segment.start_offset
            while offset < segment.length:
                if offset < stored:
                    piece = await self.storage.read(segment.name, offset, min(_REBUILD_READ_SIZE, stored - offset))
                else:
                    piece = b"".join(segment.data.read(offset, segment.length - offset))
                    if not piece:
                        raise InconsistentState(f"bytes at {offset} of table {segment.name!r} are missing")
                offset += len(piece)
                if offset // _REBUILD_PROGRESS_BYTES != (offset - len(piece)) // _REBUILD_PROGRESS_BYTES:
                    log.info("rebuilding table index", extra={"container": self.container_id, "table": segment.name,
                                                              "bytes": offset - segment.start_offset,
                                                              "of": segment.length - segment.start_offset})
                buffer = leftover + piece if leftover else piece
                whole = table_format.complete_length(buffer)
                index.index_batch(memoryview(buffer)[:whole], base)
                leftover, base = bytes(memoryview(buffer)[whole:]), base + whole
            if leftover:
                raise InconsistentState(f"table {segment.name!r} ends inside a record")
            segment.table = index
            segment.table_incomplete = False
        if incomplete:
            log.info("table indexes rebuilt from tier-2", extra={"container": self.container_id,
                                                                 "tables": len(incomplete)})

    async def compact_table(self, name: str) -> None:
        """Re-writes the table's live entries at its end (versions kept) and truncates everything before.

        Both decisions are made in one turn, so they share a frame: after a crash either both
        are in the log or neither is (and the re-written records alone would be harmless).
        """
        segment = self._segment(name)
        if segment.table is None or segment.table_incomplete:
            raise errors.OperationUnsupported(name, "compactTable")
        upto = segment.length  # committed: any change in flight lies above it
        rewrite = self.submit(lambda pending: pending.table_rewrite(name)) if segment.table.entry_count else None
        truncate = self.submit(lambda pending: pending.truncate(name, upto))
        if rewrite is not None:
            await rewrite
        await truncate

    async def _compact_storage_metadata(self) -> None:
        """Compacts the storage metadata table once its dead records outweigh its live ones (and a threshold)."""
        segment = self._state.by_name.get(self.storage_metadata_name)
        if segment is None or segment.table_incomplete or self.status != ContainerStatus.RUNNING:
            return
        dead = segment.length - segment.start_offset - segment.table.live_bytes
        if dead > max(self._table_compaction_threshold, segment.table.live_bytes):
            try:
                await self.compact_table(self.storage_metadata_name)
            except errors.ContainerUnavailable:
                return  # stopping or failed: the next owner compacts
            except errors.IllegalArgument as error:  # the live entries no longer fit in one operation
                log.warning("storage metadata table not compacted",
                            extra={"container": self.container_id, "error": str(error)})

    async def locate_offset(self, name: str, target: int) -> int:
        """The first event boundary of ``name`` at or after ``target`` (LocateOffset; see ``boundaries.py``).

        Walks envelope headers from the nearest known boundary through the ordinary read path
        (cache or Tier-2). Raises NoSuchSegment, or SegmentIsTruncated if truncated meanwhile.
        """
        segment = self._segment(name)

        async def read(offset: int, size: int):
            return (await self.read(name, offset, size)).data()

        return await boundaries.locate(self._state.boundaries.index_of(segment), segment.start_offset,
                                       segment.length, target, read)

    async def read_range(self, name: str, start: int, end: int) -> bytes:
        """The bytes ``[start, end)`` of ``name`` (below its length), wherever they are."""
        parts, offset = [], start
        while offset < end:
            result = await self.read(name, offset, end - offset)
            if not result.length:
                break
            parts.extend(result.parts)
            offset += result.length
        return b"".join(parts)

    def committed_segment(self, name: str) -> SegmentMetadata | None:
        """The committed state of ``name`` whatever the container's status (for its own storage metadata)."""
        return self._state.by_name.get(name)

    async def flush_to_storage(self) -> None:
        """Returns once everything acknowledged so far is in Tier-2."""
        self._check_running()
        if self.writer is not None:
            await self.writer.flush(self._state.last_sequence)

    async def storage_chunks(self, name: str) -> list:
        """The Tier-2 chunks of ``name`` (empty before its first flush or without Tier-2)."""
        self._segment(name)
        if self.storage is None:
            return []
        try:
            return await self.storage.list_chunks(name)
        except storage_errors.SegmentNotFound:
            return []

    # ------------------------------------------------------------------ mutations

    async def create_segment(self, name: str, segment_type: SegmentType = SegmentType.STREAM,
                             attributes: dict | None = None) -> None:
        attributes = dict(attributes or {})
        attributes.setdefault(attrs.CREATION_TIME, self._wall_clock_ms())
        attributes[attrs.SEGMENT_TYPE] = int(segment_type)

        def decide(pending: PendingState) -> Decision:
            return pending.create(name, segment_type, attributes)

        try:
            await self._execute(decide)
        except errors.SegmentAlreadyExists:
            if self.committed_segment(name) is not None:
                raise
            # Another creation of the name is accepted but not yet durable: "exists" is answered only once
            # it is (a caller told so may read the segment at once), and if it failed this one goes ahead.
            await self._settled()
            await self._execute(decide)

    async def _settled(self) -> None:
        """Waits until every operation decided so far is durable and applied (or failed)."""
        frame = self._frame if self._frame is not None else (self._in_flight[-1] if self._in_flight else None)
        if frame is not None and frame.futures:
            await asyncio.wait(frame.futures)  # frames commit in order: the newest one is the last

    async def create_transient_segment(self, parent: str, writer_id: uuid.UUID) -> str:
        name = naming.transient_segment_name(parent, writer_id, uuid.uuid4())
        await self.create_segment(name, SegmentType.TRANSIENT, {attrs.CREATION_EPOCH: self.epoch})
        return name

    def submit_event_append(self, name: str, data, writer_id: uuid.UUID, event_number: int,
                            previous_event_number: int, event_count: int,
                            expected_offset: int | None = None) -> asyncio.Future:
        """Decides a writer's append now; returns a future of the offset it lands at, once durable.

        The writer's attribute moves from ``previous_event_number`` to ``event_number`` atomically
        with the append (BadAttributeUpdate if another owner moved it: a zombie writer), and
        EVENT_COUNT grows by ``event_count``. BadOffset if ``expected_offset`` is not the length.
        """
        updates = (attrs.AttributeUpdate(writer_id, attrs.REPLACE_IF_EQUALS, event_number, previous_event_number),
                   attrs.AttributeUpdate(attrs.EVENT_COUNT, attrs.ACCUMULATE, event_count))
        return self.submit(lambda pending: pending.append(name, data, updates, expected_offset))

    def delete_soon(self, name: str) -> asyncio.Future:
        """Decides the deletion of ``name`` now; returns a future of its outcome (for cleanups nobody awaits)."""
        return self.submit(lambda pending: pending.delete(name))

    async def append(self, name: str, data, attribute_updates=(), expected_offset: int | None = None) -> int:
        """Appends ``data``; returns the segment length after it."""
        offset = await self._execute(lambda pending: pending.append(name, data, attribute_updates, expected_offset))
        return offset + len(data)

    async def seal(self, name: str) -> int:
        return await self._execute(lambda pending: pending.seal(name))

    async def truncate(self, name: str, offset: int) -> None:
        await self._execute(lambda pending: pending.truncate(name, offset))

    async def delete(self, name: str) -> None:
        await self._execute(lambda pending: pending.delete(name))

    async def update_attributes(self, name: str, attribute_updates) -> None:
        await self._execute(lambda pending: pending.update_attributes(name, attribute_updates))

    async def merge(self, target: str, source: str, attribute_updates=(), header=b"") -> int:
        """Merges ``source`` (sealing it) after ``header`` into ``target``; returns the target's new length.

        A retried merge whose source was already merged into ``target`` answers the target's length.
        """
        if source not in self._state.by_name and self._state.merged_sources.get(source) == target:
            return self.get_info(target).length
        return await self._execute(lambda pending: pending.merge(target, source, attribute_updates, header))

    async def update_table(self, name: str, entries, table_offset: int = -1) -> list[int]:
        """Updates (key, version, value) entries atomically; returns their new versions."""
        return await self._execute(lambda pending: pending.table_update(name, entries, table_offset))

    async def remove_table_keys(self, name: str, keys, table_offset: int = -1) -> None:
        await self._execute(lambda pending: pending.table_remove(name, keys, table_offset))

    # ------------------------------------------------------------------ reads

    def _segment(self, name: str) -> SegmentMetadata:
        self._check_running()
        segment = self._state.by_name.get(name)
        if segment is None:
            raise errors.NoSuchSegment(name)
        return segment

    def get_info(self, name: str) -> SegmentInfo:
        return SegmentInfo(self._segment(name))

    def get_attribute(self, name: str, attribute_id: uuid.UUID) -> int:
        return self._segment(name).attributes.get(attribute_id, NULL_ATTRIBUTE_VALUE)

    def table(self, name: str):
        segment = self._segment(name)
        if segment.table is None:
            raise errors.OperationUnsupported(name, "readTable")
        return segment

    def segment_names(self):
        return list(self._state.by_name)

    def transients_to_expire(self, now_ms: int, idle_ms: int) -> list[str]:
        """Transient segments idle for ``idle_ms``, or created under an earlier owner (epoch) of this container."""
        return [segment.name for segment in self._state.by_id.values()
                if segment.segment_type == SegmentType.TRANSIENT
                and (segment.attributes.get(attrs.CREATION_EPOCH, 0) < self.epoch
                     or now_ms - segment.last_modified >= idle_ms)]

    async def read(self, name: str, offset: int, max_length: int = MAX_READ_SIZE,
                   wait_timeout: float | None = None) -> ReadResult:
        """Reads from ``offset``; at the tail of an unsealed segment waits for data (long-poll).

        Raises NoSuchSegment, SegmentIsTruncated, SegmentIsSealed (past the end of a sealed
        segment, or sealed while waiting below ``offset``), asyncio.TimeoutError after
        ``wait_timeout`` seconds without data.
        """
        read_size = min(MAX_READ_SIZE, max(8, max_length))
        deadline = None if wait_timeout is None else asyncio.get_running_loop().time() + wait_timeout
        waited = False
        while True:
            segment = self._segment(name)
            if waited and segment.sealed and offset >= segment.length:
                raise errors.SegmentIsSealed(name)  # Java fails reads parked at the tail on seal
            result = _read_now(segment, offset, read_size)
            if result is _NOT_CACHED:
                result = await self._read_from_storage(segment, offset, read_size)
            if result is not None:
                if offset < segment.data.storage_length and self.storage is not None:
                    self._read_ahead(segment, offset)
                return result
            waiter = asyncio.get_running_loop().create_future()
            segment.waiters.append(waiter)
            timeout = None if deadline is None else max(0.0, deadline - asyncio.get_running_loop().time())
            try:
                await asyncio.wait_for(waiter, timeout)
            finally:
                if waiter in segment.waiters:
                    segment.waiters.remove(waiter)
            waited = True


    async def _read_from_storage(self, segment: SegmentMetadata, offset: int, read_size: int) -> ReadResult:
        """Reads bytes that are not cached: from Tier-2, or from a merged source not yet concatenated."""
        data = segment.data
        for attempt in range(_STORAGE_READ_ATTEMPTS):
            try:
                if offset < data.storage_length:
                    block = offset - offset % _READ_AHEAD
                    fetched, start = await self._fetch_block(segment, block)
                    view = memoryview(fetched)[offset - start:offset - start + read_size]
                    return _result(segment, offset, read_size, [view])
                redirect = data.redirect_at(offset)
                if redirect is None or self.storage is None:
                    raise InconsistentState(f"bytes at {offset} of {segment.name!r} are neither cached nor in tier-2")
                size = min(read_size, redirect.end - offset)
                fetched = await self.storage.read(redirect.source, offset - redirect.start, size)
                return _result(segment, offset, read_size, [fetched])
            except storage_errors.SegmentNotFound:
                continue  # the merge was concatenated meanwhile: the target holds the bytes now
            except TIER2_TRANSIENT_ERRORS as error:
                log.warning("tier-2 read failed", extra={"container": self.container_id, "segment": segment.name,
                                                         "error": repr(error)})
                await asyncio.sleep(min(2.0, 0.05 * 2 ** attempt))
            except InconsistentState as error:
                self._fail(error)
                raise errors.ContainerUnavailable(segment.name, str(error)) from error
        raise errors.ContainerUnavailable(segment.name, "tier-2 is not answering reads")

    async def _fetch_block(self, segment: SegmentMetadata, block: int):
        """Reads one read-ahead block from Tier-2 (concurrent readers share one read) and caches it."""
        key = (segment.name, block)
        pending = self._in_flight_reads.get(key)
        if pending is None:
            pending = self._in_flight_reads[key] = asyncio.get_running_loop().create_future()
            try:
                data = segment.data
                start = max(block, data.start_offset)
                end = min(data.storage_length, block + _READ_AHEAD)
                fetched = await self.storage.read(segment.name, start, end - start)
                if self._state.by_id.get(segment.segment_id) is segment and not (data.cache and data.cache.throttled):
                    data.insert(start, fetched)
                pending.set_result((fetched, start))
            except BaseException as error:
                pending.set_exception(error)
                pending.exception()  # retrieved: a lone failed prefetch must not log "never retrieved"
                raise
            finally:
                del self._in_flight_reads[key]
            return fetched, start
        return await asyncio.shield(pending)

    def _read_ahead(self, segment: SegmentMetadata, offset: int) -> None:
        """Starts fetching the next blocks after ``offset`` that Tier-2 holds and the cache does not."""
        block = offset - offset % _READ_AHEAD
        for ahead in range(1, _READ_AHEAD_BLOCKS + 1):
            start = block + ahead * _READ_AHEAD
            if start >= segment.data.storage_length:
                return
            self._prefetch(segment, start)

    def _prefetch(self, segment: SegmentMetadata, block: int) -> None:
        if (segment.name, block) in self._in_flight_reads or segment.data.is_cached(block):
            return

        async def prefetch():
            try:
                await self._fetch_block(segment, block)
            except Exception:  # a failed prefetch costs nothing: the read itself will retry
                pass

        task = asyncio.get_running_loop().create_task(prefetch())
        self._prefetches.add(task)
        task.add_done_callback(self._prefetches.discard)

def _read_now(segment: SegmentMetadata, offset: int, read_size: int):
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


def _result(segment: SegmentMetadata, offset: int, read_size: int, parts: list) -> ReadResult:
    result = ReadResult(parts, at_tail=False, end_of_segment=False)
    if result.length < read_size and offset + result.length == segment.length:  # a short read up to the end
        result.at_tail, result.end_of_segment = not segment.sealed, segment.sealed
    return result


def _operation_size(operation) -> int:
    if isinstance(operation, ops.Append):
        return len(operation.data) + 64 + 24 * len(operation.attributes)
    if isinstance(operation, ops.Checkpoint):
        return len(operation.snapshot) + 16
    if isinstance(operation, ops.Merge):
        return len(operation.header) + 96 + 24 * len(operation.attributes)
    if isinstance(operation, ops.CreateSegment):
        return len(operation.name) * 3 + 64 + 24 * len(operation.attributes)
    return 32
