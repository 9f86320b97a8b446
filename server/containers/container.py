"""A segment container: the owner of a set of segments, their operation log and their state.

The container wires its parts together and owns their lifecycle; each part is its own module:

* ``pipeline.py`` — every mutation: decide (``pending.py``) -> frame -> Tier-1 log -> apply
  (``state.py``), checkpoints, recovery by replay, log truncation.
* ``segment_reader.py`` — every read: the read index (``read_index.py``), Tier-2 misses, prefetch.
* ``tier2_link.py`` — SLTS and the storage writer, tied to the log (truncation, backlog) and state.
* ``table_maintenance.py`` — table index rebuild after recovery, and table compaction.
* ``load_reporter.py`` — load rates of rate-policy segments (``load_meter.py``) and the reports of hot and
  cold segments, appended to the container's report segment for the controller's auto-scaler.
* ``writer_attributes.py`` — the writers set up on connections, and the expiry of idle writers' attributes.

Its methods are the package's public surface: purpose-named, they return values
(``views.py``) or raise ``server.errors``; nothing hands out live state. Those that read are
``queries.py``'s (``ContainerQueries``), those that change segments ``mutations.py``'s
(``ContainerMutations``), both bases of this class; here are its parts, their lifecycle and Tier-2.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Callable

from ..tier1 import DurableDataLog
from ..tier2.chunked_storage import ChunkedSegmentStorage
from ..tier2.records import ChunkLayout
from . import table_maintenance
from .dormancy import Dormancy
from .load_meter import LoadSettings
from .load_reporter import LoadReporter
from .metadata import SegmentType
from .mutations import ContainerMutations
from .pipeline import OperationPipeline
from .segment_reader import SegmentReader
from .state import ContainerState
from .storage_metadata import storage_metadata_segment
from .storage_writer import StorageWriter
from .tier2_link import Tier2Link, Tier2Settings
from .views import ContainerStatus
from .writer_attributes import WriterAttributes, WriterClaim

log = logging.getLogger("tributary.container")


class SegmentContainer(ContainerMutations):
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
        self.writers = WriterAttributes(container_id, self._state, self._pipeline, wall_clock_ms=wall_clock_ms,
                                        retention_ms=int(writer_retention_seconds * 1000))
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
        """Opens the log (fencing older owners), recovers by replay, and starts accepting requests.

        A start that fails (or is cancelled) stops the container, closing the log: left open, it kept its owner
        lock, and every later start of the container in this process met a log "held by a live owner" for good
        (found by the simulation: a full disk failed the container, and its restart met Tier-2 unavailable)."""
        self._pipeline.status = ContainerStatus.RECOVERING
        try:
            self.epoch = await self._log.open()
            found_checkpoint = await self._pipeline.replay(has_tier2=self._tier2 is not None)
            if self._tier2 is not None:
                await self._tier2.recover(self.epoch)
            self._pipeline.open()
            if not found_checkpoint:
                await self._pipeline.write_checkpoint()
            if self._tier2 is not None:
                await self._tier2.start(lambda: self.create_segment(self.storage_metadata_name, SegmentType.TABLE))
        except BaseException:
            try:
                await self.stop()
            except Exception:  # noqa: BLE001 - the start's own error is the one to report
                log.warning("container did not stop cleanly after a failed start",
                            extra={"container": self.container_id})
            raise
        self.load.start(dict(self._state.policy_candidates()))
        log.info("container started", extra={"container": self.container_id, "epoch": self.epoch,
                                             "segments": self._state.counted_segments})

    async def stop(self) -> None:
        """Waits for frames in flight, stops the storage writer, then closes the log. Later requests fail.

        The log is closed whatever the steps before it raise: its close releases the log's owner lock, which a
        container left holding kept every store from opening the log for as long as this process's session lived."""
        try:
            await self.dormancy.stop()
            await self.load.stop()
            if self._tier2 is not None:
                await self._tier2.stop()
            await self._pipeline.close()  # lets the frames in flight commit, if it was running
        finally:
            self._pipeline.status = ContainerStatus.STOPPED
            await self._log.close()

    def fail(self, error: BaseException) -> None:
        """Stops serving at once, as if the log had failed with ``error``: what is in flight fails, later requests
        are refused, ``on_failure`` is told. For an owner that can no longer vouch for the log (a clustered store
        cut off from ZooKeeper); ``stop()`` still has to be called."""
        self._fail(error)

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

    # ------------------------------------------------------------------ writer attributes (writer_attributes.py)

    def claim_writer(self, name: str, writer_id: uuid.UUID) -> WriterClaim:
        return self.writers.claims.claim(name, writer_id)

    def release_writer(self, claim: WriterClaim) -> None:
        self.writers.claims.release(claim)

    def writer_attribute_count(self) -> int:
        return self.writers.count()

    async def expire_writers(self, now_ms: int | None = None, limit: int = 100_000) -> int:
        return await self.writers.expire(now_ms, limit)
