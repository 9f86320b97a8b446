"""A segment container: the owner of a set of segments, their operation log and their state.

The container wires its parts together and owns their lifecycle; each part is its own module:

* ``pipeline.py`` — every mutation: decide (``pending.py``) -> frame -> Tier-1 log -> apply
  (``state.py``), checkpoints, recovery by replay, log truncation.
* ``segment_reader.py`` — every read: the read index (``read_index.py``), Tier-2 misses, prefetch.
* ``tier2_link.py`` — SLTS and the storage writer, tied to the log (truncation, backlog) and state.
* ``table_maintenance.py`` — table index rebuild after recovery, and table compaction.
* ``load_reporter.py`` — load rates of rate-policy segments (``load_meter.py``) and the reports of hot and
  cold segments, appended to the container's report segment for the controller's auto-scaler.

Its methods are the package's public surface: purpose-named, they return values
(``views.py``) or raise ``server.errors``; nothing hands out live state.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import time
import uuid
from collections.abc import Callable, Coroutine, Iterable, Mapping, Sequence
from typing import Any, overload

from wire import naming
from wire.constants import MAX_READ_SIZE, NULL_ATTRIBUTE_VALUE
from wire.fields import BytesLike

from .. import errors, metrics
from ..tier1 import DurableDataLog
from ..tier2.chunked_storage import ChunkedSegmentStorage
from ..tier2.records import ChunkLayout
from . import attributes as attrs
from . import table as table_format
from . import table_maintenance
from .dormancy import Dormancy
from .load_meter import LoadSettings
from .load_reporter import LoadReporter
from .metadata import SegmentMetadata, SegmentType
from .pending import Decision, PendingState
from .pipeline import OperationPipeline
from .recovery_progress import RecoveryProgress
from .segment_reader import SegmentReader
from .state import ContainerState
from .storage_metadata import storage_metadata_segment
from .storage_writer import StorageWriter
from .tier2_link import Tier2Link, Tier2Settings
from .views import ContainerStatus, ReadResult, SegmentInfo, TableDelta, TableEntry

log = logging.getLogger("tributary.container")
_POLICY = (attrs.SCALE_POLICY_TYPE, attrs.SCALE_POLICY_RATE)  # attributes whose update may start or stop load metering


class SegmentContainer:
    """Owns the segments that hash to ``container_id``."""

    def __init__(self, container_id: int, durable_log: DurableDataLog, *,
                 checkpoint_every_operations: int = 50_000,
                 checkpoint_every_bytes: int = 64 * 1024 * 1024,
                 tier2: Tier2Settings | None = None,
                 checkpoint_interval_seconds: float = 60.0,
                 table_compaction_threshold: int = 1024 * 1024,
                 wall_clock_ms: Callable[[], int] = lambda: int(time.time() * 1000),
                 on_failure: Callable[[SegmentContainer, BaseException], None] | None = None,
                 load: LoadSettings | None = None,
                 writer_retention_seconds: float = 86_400.0,
                 max_segments: int | None = None,
                 segment_idle_seconds: float = 300.0,
                 segment_working_set: int = 100_000):
        self.container_id = container_id
        self.epoch = 0
        self.storage_metadata_name = storage_metadata_segment(container_id)
        self._log = durable_log
        self._wall_clock_ms = wall_clock_ms
        self._on_failure = on_failure
        self.failure: BaseException | None = None  # why the container failed, if it did
        self._state = ContainerState(tier2.cache if tier2 is not None else None)
        self._pipeline = OperationPipeline(
            container_id, durable_log, self._state, checkpoint_every_operations=checkpoint_every_operations,
            checkpoint_every_bytes=checkpoint_every_bytes, wall_clock_ms=wall_clock_ms, on_failure=self._fail,
            # Every segment's metadata stays in memory (a dormant one's packed): this bounds what they cost. The
            # container's and the controller's own segments (the _system scope) are not counted, nor refused.
            segment_limit=max_segments)
        self._limit_logged_at = 0.0
        # Table compactions: on request, and of bloated tables after each storage-writer pass (with a Tier-2).
        self._tables = table_maintenance.TableCompactor(container_id, self._pipeline, self._state,
                                                        table_compaction_threshold, first=self.storage_metadata_name)
        self._tier2: Tier2Link | None = None
        if tier2 is not None:
            # The storage writer flushes everything when the log holds more than this since its first checkpoint.
            self._tier2 = Tier2Link(self, tier2, self._state, self._pipeline,
                                    log_backlog_target=2 * checkpoint_every_bytes,
                                    tables=self._tables,
                                    checkpoint_interval=checkpoint_interval_seconds, on_fatal=self._fail)
            self._state.observer = self._tier2.writer
            self._pipeline.on_checkpoint_logged = self._tier2.checkpoint_logged
        self.storage: ChunkedSegmentStorage | None = self._tier2.storage if self._tier2 else None  # SLTS
        self.writer: StorageWriter | None = self._tier2.writer if self._tier2 else None
        self._reader = SegmentReader(container_id, self._state, self.storage, self._segment, self._fail)
        # Load measurement for auto-scaling (off unless ``load`` says otherwise); ``_record_load`` is its append hook.
        self.load = LoadReporter(container_id, load or LoadSettings(enabled=False), wall_clock_ms,
                                 self.append, self.create_segment)
        self._record_load = self.load.meter.record
        # Writer attributes idle this long, of writers set up on no connection, are removed (0: never).
        self.writer_retention_ms = int(writer_retention_seconds * 1000)
        self._attached_writers: dict[tuple[str, uuid.UUID], int] = {}  # (segment, writer id) -> connections
        self.dormancy = Dormancy(container_id, self._state, idle_seconds=segment_idle_seconds,
                                 working_set=segment_working_set, wall_clock_ms=wall_clock_ms,
                                 running=lambda: self._pipeline.status is ContainerStatus.RUNNING,
                                 has_pending=self._pipeline.has_pending,
                                 has_work=self.writer.has_work if self.writer is not None else None)

    @property
    def status(self) -> ContainerStatus:
        return self._pipeline.status

    def __repr__(self) -> str:
        return (f"<SegmentContainer {self.container_id} {self.status.value} epoch={self.epoch} "
                f"segments={self._state.segment_count}>")

    # ------------------------------------------------------------------ lifecycle

    async def start(self) -> None:
        """Opens the log (fencing older owners), recovers by replay, and starts accepting requests."""
        self._pipeline.status = ContainerStatus.RECOVERING
        self.epoch = await self._log.open()
        found_checkpoint = await self._pipeline.replay(has_tier2=self._tier2 is not None)
        if self._tier2 is not None:
            await self._tier2.recover(self.epoch)
        self._pipeline.open()
        if not found_checkpoint:
            await self._pipeline.write_checkpoint()
        if self._tier2 is not None:
            await self._tier2.start(lambda: self.create_segment(self.storage_metadata_name, SegmentType.TABLE))
        self.load.start(dict(self._state.policy_candidates()))
        log.info("container started", extra={"container": self.container_id, "epoch": self.epoch,
                                             "segments": self._state.counted_segments})

    async def stop(self) -> None:
        """Waits for frames in flight, stops the storage writer, then closes the log. Later requests fail."""
        await self.dormancy.stop()
        await self.load.stop()
        if self._tier2 is not None:
            await self._tier2.stop()
        await self._pipeline.close()  # lets the frames in flight commit, if it was running
        self._pipeline.status = ContainerStatus.STOPPED
        await self._log.close()

    def _fail(self, error: BaseException) -> None:
        if self.failure is not None:
            return
        self.failure = error
        log.error("container failed", extra={"container": self.container_id, "error": repr(error)})
        self._pipeline.fail(error)
        if self._on_failure is not None:
            self._on_failure(self, error)

    # ------------------------------------------------------------------ tier-2

    async def flush_to_storage(self) -> None:
        """Returns once everything acknowledged so far is in Tier-2."""
        self._check_running()
        if self._tier2 is not None:
            await self._tier2.flush()

    async def storage_chunks(self, name: str) -> list[ChunkLayout]:
        """The Tier-2 chunks of ``name`` (empty before its first flush or without Tier-2)."""
        self._segment(name)
        return [] if self._tier2 is None else await self._tier2.chunks(name)

    # ------------------------------------------------------------------ mutations

    async def create_segment(self, name: str, segment_type: SegmentType = SegmentType.STREAM,
                             attributes: Mapping[uuid.UUID, int] | None = None) -> None:
        values = dict(attributes or {})
        values.setdefault(attrs.CREATION_TIME, self._wall_clock_ms())
        values[attrs.SEGMENT_TYPE] = int(segment_type)

        def decide(pending: PendingState) -> Decision:
            return pending.create(name, segment_type, values)
        try:
            await self._pipeline.submit(decide)
        except errors.TooManySegments as error:
            self._segment_limit_reached(error)
            raise
        except errors.SegmentAlreadyExists:
            if self._committed(name) is not None:
                raise
            # Another creation of the name is accepted but not yet durable: "exists" is answered only once
            # it is (a caller told so may read the segment at once), and if it failed this one goes ahead.
            await self._pipeline.settled()
            await self._pipeline.submit(decide)
        if segment_type == SegmentType.STREAM:
            self.load.policy_known(name, values)
        self.dormancy.check()

    def _segment_limit_reached(self, error: errors.TooManySegments) -> None:
        metrics.SEGMENT_LIMIT_REJECTIONS.inc()
        now = time.monotonic()
        if now - self._limit_logged_at >= 60.0:  # one line a minute at most
            self._limit_logged_at = now
            log.warning("segment creation refused: the container holds its limit of segments",
                        extra={"container": self.container_id, "limit": error.limit,
                               "segments": self._state.segment_count})

    def segment_count(self) -> int:
        """Segments this container holds that count towards its limit (those outside the _system scope)."""
        return self._state.counted_segments

    async def create_transient_segment(self, parent: str, writer_id: uuid.UUID) -> str:
        name = naming.transient_segment_name(parent, writer_id, uuid.uuid4())
        await self.create_segment(name, SegmentType.TRANSIENT, {attrs.CREATION_EPOCH: self.epoch})
        return name

    def submit_event_append(self, name: str, data: BytesLike, writer_id: uuid.UUID, event_number: int,
                            previous_event_number: int, event_count: int,
                            expected_offset: int | None = None) -> asyncio.Future[int]:
        """Decides a writer's append now; returns a future of the offset it lands at, once durable.

        The writer's attribute moves from ``previous_event_number`` to ``event_number`` atomically
        with the append (BadAttributeUpdate if another owner moved it: a zombie writer), and
        EVENT_COUNT grows by ``event_count``. BadOffset if ``expected_offset`` is not the length.
        """
        updates = (attrs.AttributeUpdate(writer_id, attrs.REPLACE_IF_EQUALS, event_number, previous_event_number),
                   attrs.AttributeUpdate(attrs.EVENT_COUNT, attrs.ACCUMULATE, event_count))
        self._record_load(name, len(data), event_count)
        return self._pipeline.submit(lambda pending: pending.append(name, data, updates, expected_offset))

    def flush_if_idle(self) -> None:
        """Hands the decided mutations to the log now unless it is busy (then they go at the turn's end)."""
        self._pipeline.flush_if_idle()

    def delete_soon(self, name: str) -> asyncio.Future[None]:
        """Decides the deletion of ``name`` now; returns a future of its outcome (for cleanups nobody awaits)."""
        return self._pipeline.submit(lambda pending: pending.delete(name))

    async def append(self, name: str, data: BytesLike, attribute_updates: Iterable[attrs.AttributeUpdate] = (),
                     expected_offset: int | None = None) -> int:
        """Appends ``data``; returns the segment length after it."""
        offset: int = await self._pipeline.submit(
            lambda pending: pending.append(name, data, attribute_updates, expected_offset))
        return offset + len(data)

    async def seal(self, name: str) -> int:
        length: int = await self._pipeline.submit(lambda pending: pending.seal(name))
        self.load.forget(name)
        return length

    async def truncate(self, name: str, offset: int) -> None:
        await self._pipeline.submit(lambda pending: pending.truncate(name, offset))

    async def delete(self, name: str) -> None:
        await self._pipeline.submit(lambda pending: pending.delete(name))
        self.load.forget(name)

    async def update_attributes(self, name: str, attribute_updates: Iterable[attrs.AttributeUpdate]) -> None:
        attribute_updates = tuple(attribute_updates)
        await self._pipeline.submit(lambda pending: pending.update_attributes(name, attribute_updates))
        segment = self._state.get(name)
        if (segment is not None and segment.segment_type == SegmentType.STREAM and not segment.sealed
                and any(update.attribute_id in _POLICY for update in attribute_updates)):
            self.load.policy_known(name, segment.attributes)

    async def merge(self, target: str, source: str, attribute_updates: Iterable[attrs.AttributeUpdate] = (),
                    header: BytesLike = b"") -> int:
        """Merges ``source`` (sealing it) after ``header`` into ``target``; returns the target's new length.

        A retried merge whose source was already merged into ``target`` answers the target's length.
        """
        if not self._state.exists(source) and self._state.merged_sources.get(source) == target:
            return self.get_info(target).length
        merged = self._state.get(source)
        length: int = await self._pipeline.submit(
            lambda pending: pending.merge(target, source, attribute_updates, header))
        self.load.forget(source)
        if merged is not None:
            self.load.merged(target, merged.length, merged.attributes)
        return length

    @overload
    async def update_table(self, name: str, entries: Sequence[tuple[BytesLike, int, BytesLike]],
                           table_offset: int = -1) -> list[int]: ...

    @overload
    async def update_table(self, name: str, entries: Sequence[table_format.TableUpdate],
                           table_offset: int = -1) -> list[int | None]: ...

    async def update_table(self, name: str, entries: Sequence[table_format.TableUpdate],
                           table_offset: int = -1) -> list[int] | list[int | None]:
        """Updates (key, expected version, value) entries atomically; returns new versions (None: removed)."""
        return await self._pipeline.submit(lambda pending: pending.table_update(name, entries, table_offset))

    async def remove_table_keys(self, name: str, keys: Sequence[table_format.TableRemoval],
                                table_offset: int = -1) -> None:
        """Removes (key, expected version) keys atomically."""
        await self._pipeline.submit(lambda pending: pending.table_remove(name, keys, table_offset))

    async def compact_table(self, name: str) -> None:
        """Re-writes the table's live entries at its end (versions kept) and truncates everything before."""
        await self._tables.compact(self._segment(name))

    # ------------------------------------------------------------------ writer attributes

    def writer_attached(self, name: str, writer_id: uuid.UUID) -> None:
        """A connection set ``writer_id`` up on ``name``: its attribute does not expire until it is detached."""
        key = (name, writer_id)
        self._attached_writers[key] = self._attached_writers.get(key, 0) + 1

    def writer_detached(self, name: str, writer_id: uuid.UUID) -> None:
        key = (name, writer_id)
        count = self._attached_writers.get(key, 0) - 1
        if count > 0:
            self._attached_writers[key] = count
        else:
            self._attached_writers.pop(key, None)

    def writer_attribute_count(self) -> int:
        """Writer attributes this container keeps (those of deleted segments until the expiry passes them)."""
        return len(self._state.writers)

    async def expire_writers(self, now_ms: int | None = None, limit: int = 100_000) -> int:
        """Removes the attributes of writers that have not appended for the retention and are set up on no
        connection of this store; returns how many (at most ``limit`` looked at per call).

        A writer's attribute is its last event number, what deduplicates a writer that sets up again after a
        lost connection and resends what it has not seen acknowledged. One that comes back after the retention
        starts afresh (a resend of an event acknowledged before would be written again), so the retention is
        the longest a writer may stay away with appends in doubt. Without expiry every writer id that ever
        appended stays in memory and in every checkpoint (the SDK makes one per segment writer). The removal
        is logged (an attribute update to NULL), conditional on the value the expiry saw."""
        if self.writer_retention_ms <= 0 or self.status is not ContainerStatus.RUNNING:
            return 0
        cutoff = (self._wall_clock_ms() if now_ms is None else now_ms) - self.writer_retention_ms
        state, attached, writers = self._state, self._attached_writers, self._state.writers
        due: dict[int, dict[uuid.UUID, int]] = {}
        stale = []
        for looked, ((segment_id, attribute_number), last_used) in enumerate(writers.items()):
            if last_used > cutoff or looked >= limit:
                break
            segment = state.get_by_id(segment_id)  # (made live if dormant: its attribute is about to change)
            attribute_id = uuid.UUID(int=attribute_number)
            value = None if segment is None else segment.attributes.get(attribute_id)
            if segment is None or value is None:
                stale.append((segment_id, attribute_number))
            elif (segment.name, attribute_id) not in attached:
                due.setdefault(segment_id, {})[attribute_id] = value
        for key in stale:
            del writers[key]
        submitted = []
        per_operation = max(1, (self._pipeline.max_operation_bytes - 64) // 24)  # 24 bytes per attribute logged
        for segment_id, expected in due.items():
            name = state.by_id[segment_id].name
            items = list(expected.items())
            for start in range(0, len(items), per_operation):
                submitted.append(self._pipeline.submit(
                    functools.partial(PendingState.expire_attributes, name=name,
                                      expected=dict(items[start:start + per_operation]))))
        expired = 0
        for future in submitted:
            try:
                expired += await future
            except errors.SegmentStoreError:
                pass  # changed or deleted meanwhile, or the container stopped
        if expired:
            metrics.WRITERS_EXPIRED.inc(expired)
            log.info("idle writers' attributes expired", extra={"container": self.container_id, "count": expired})
        return expired

    # ------------------------------------------------------------------ dormant segments

    def dormant_segment_count(self) -> int:
        return len(self._state.dormant)

    # ------------------------------------------------------------------ queries

    def _check_running(self) -> None:
        status = self._pipeline.status
        if status is not ContainerStatus.RUNNING:
            raise errors.ContainerUnavailable("", f"container {self.container_id} is {status.value}")

    def _segment(self, name: str) -> SegmentMetadata:
        """The live segment ``name``; every read comes here, so the running check is one attribute test."""
        if self._pipeline.status is not ContainerStatus.RUNNING:
            self._check_running()
        segment = self._state.by_name.get(name)
        if segment is None:
            if (segment := self._state.get(name)) is None:
                raise errors.NoSuchSegment(name)
            self.dormancy.check()  # woken: the working set grew
        segment.used = True
        return segment

    def _table(self, name: str, operation: str) -> table_format.TableIndex:
        table = self._segment(name).table
        if table is None:
            raise errors.OperationUnsupported(name, operation)
        return table

    def _committed(self, name: str) -> SegmentMetadata | None:
        """The committed state of ``name`` whatever the container's status (for its own storage metadata)."""
        return self._state.get(name)

    def get_info(self, name: str) -> SegmentInfo:
        return SegmentInfo(self._segment(name))

    def get_attribute(self, name: str, attribute_id: uuid.UUID) -> int:
        return self._segment(name).attributes.get(attribute_id, NULL_ATTRIBUTE_VALUE)

    def get_table_info(self, name: str) -> SegmentInfo:
        self._table(name, "getTableSegmentInfo")
        return self.get_info(name)

    def read_table(self, name: str, keys: Iterable[BytesLike]) -> list[TableEntry | None]:
        """The latest entry of each key (None for a key the table does not hold).

        Raises IllegalArgument: a key of another length than a fixed-key-length table's."""
        index = self._table(name, "readTable")
        keys = list(keys)
        for key in keys:
            table_format.check_fixed_length(index.key_length, key)
        return index.lookup(keys)

    def read_table_page(self, name: str, token: BytesLike, max_count: int, max_bytes: int, prefix: BytesLike = b"",
                        from_key: BytesLike = b"", to_key: BytesLike = b"") -> tuple[list[TableEntry], bytes]:
        """Entries after ``token`` in the table's iteration order (only those starting with ``prefix``, and in
        a fixed-key-length table from ``from_key`` to ``to_key``), and the token of the next page."""
        return self._table(name, "readTableEntries").page(token, max_count, max_bytes, prefix, from_key, to_key)

    def table_key_length(self, name: str) -> int:
        """The fixed key length of table segment ``name`` (0: a hash table)."""
        return self._table(name, "getTableSegmentInfo").key_length

    async def read_table_delta(self, name: str, from_position: int, max_count: int, max_bytes: int) -> TableDelta:
        """The table's changes from ``from_position``: the latest entry of each key changed, a page at a time."""
        self._table(name, "readTableEntriesDelta")
        return await self._reader.read_table_delta(name, from_position, max_count, max_bytes)

    def segment_names(self) -> list[str]:
        return self._state.names()

    def replay_backlog(self) -> tuple[int, int]:
        """(bytes, operations) a recovery of this container would replay from its log now."""
        return self._pipeline.logged_since_first_checkpoint(), self._pipeline.operations_since_first_checkpoint()

    def recovery_progress(self) -> RecoveryProgress | None:
        """How far this container's replay has come (None before it started)."""
        return self._pipeline.recovery

    def unflushed_bytes(self) -> int:
        """Bytes of this container's segments that only Tier-1 holds (not yet in Tier-2): its flush lag."""
        return sum(max(0, segment.length - segment.data.storage_length) for segment in self._state.by_id.values())

    def transients_to_expire(self, now_ms: int, idle_ms: int) -> list[str]:
        """Transient segments idle for ``idle_ms``, or created under an earlier owner (epoch) of this container."""
        return [segment.name for segment in self._state.by_id.values()
                if segment.segment_type == SegmentType.TRANSIENT
                and (segment.attributes.get(attrs.CREATION_EPOCH, 0) < self.epoch
                     or now_ms - segment.last_modified >= idle_ms)]

    def read(self, name: str, offset: int, max_length: int = MAX_READ_SIZE,
             wait_timeout: float | None = None, lend_files: bool = False) -> Coroutine[Any, Any, ReadResult]:
        """Reads from ``offset``, long-polling at the tail (SegmentReader.read's coroutine: no extra frame).

        ``lend_files``: Tier-2 bytes may come as a file region to send and release (see ReadResult).
        """
        return self._reader.read(name, offset, max_length, wait_timeout, lend_files)

    async def locate_offset(self, name: str, target: int) -> int:
        """The first event boundary of ``name`` at or after ``target`` (LocateOffset; see ``boundaries.py``).

        Raises NoSuchSegment, or SegmentIsTruncated if truncated meanwhile.
        """
        return await self._reader.locate_offset(name, target)
