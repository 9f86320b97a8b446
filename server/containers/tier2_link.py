"""A container's link to Tier-2: its SLTS instance, its storage writer, and what ties them to the log.

The storage writer (``storage_writer.py``) follows every applied operation into
Tier-2 (SLTS, ``server/tier2``), whose metadata is kept in the container's storage
metadata table segment (``storage_metadata.py``). Once every operation before a
checkpoint is in Tier-2 the log is truncated just before that checkpoint; when
the log holds too much since its first checkpoint the writer is told to catch up
now. Checkpoints come every so many logged bytes or operations (the pipeline's
rule), and also once the newest one is ``checkpoint_interval`` seconds old with
operations after it (checked after every writer pass, ``checkpoint_due_by_age``):
without that, a container that went quiet would keep everything since its last
checkpoint in the log for good, and replay it at every start. On start, after
replay, SLTS replays its system journal and table segments whose bytes lie in
Tier-2 get their key index rebuilt from there.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Protocol

from .. import metrics
from ..tier1 import LogFenced
from ..tier2 import errors as storage_errors
from ..tier2.chunk_storage import ChunkStorage
from ..tier2.chunked_storage import ChunkedSegmentStorage
from ..tier2.config import StorageConfig
from ..tier2.records import ChunkLayout
from . import table_maintenance
from .cache import CacheManager
from .pipeline import OperationPipeline
from .replay_bound import ReplayBound
from .state import ContainerState
from .storage_metadata import TableMetadataStore, storage_metadata_segment
from .storage_writer import StorageWriter, StorageWriterConfig
from .table import TableUpdate
from .views import ContainerStatus

log = logging.getLogger("tributary.container")


@dataclasses.dataclass
class Tier2Settings:
    """What a container needs to use Tier-2; without it, every byte stays in memory and the log is never truncated."""

    chunks: ChunkStorage
    cache: CacheManager
    storage: StorageConfig = dataclasses.field(default_factory=StorageConfig)
    writer: StorageWriterConfig = dataclasses.field(default_factory=StorageWriterConfig)
    owns_segment: Callable[[str], bool] = lambda name: True
    replay_bound: ReplayBound = dataclasses.field(default_factory=ReplayBound)  # appends wait past it


def checkpoint_due_by_age(now: float, checkpoint_at: float, interval: float, operations_after: int) -> bool:
    """Whether to log a checkpoint because the newest one (logged or asked for at ``checkpoint_at``) is
    ``interval`` seconds old and operations followed it (so that the log can be truncated past them)."""
    return operations_after > 0 and now - checkpoint_at >= interval


class Tier2Source(Protocol):
    """What the link sees of its container (``SegmentContainer`` is one): its id, the table updates SLTS's
    metadata store commits through its log, and the failure that says whether a newer owner fenced it."""

    @property
    def container_id(self) -> int: ...

    @property
    def failure(self) -> BaseException | None: ...

    async def update_table(self, name: str, entries: Sequence[TableUpdate],
                           table_offset: int = -1) -> list[int | None]: ...


class Tier2Link:
    """SLTS and the storage writer of one container, wired to its pipeline and state."""

    def __init__(self, container: Tier2Source, settings: Tier2Settings, state: ContainerState,
                 pipeline: OperationPipeline, *,
                 log_backlog_target: int, tables: table_maintenance.TableCompactor, checkpoint_interval: float,
                 on_fatal: Callable[[BaseException], None], clock: Callable[[], float] | None = None):
        self._container_id = container_id = container.container_id
        self.metadata_name = storage_metadata_segment(container_id)
        self._state = state
        self._pipeline = pipeline
        self._log_backlog_target = log_backlog_target
        self._tables = tables
        self._checkpoint_interval = checkpoint_interval
        self._clock = clock = clock or time.monotonic  # looked up now: a patched clock (the simulation) counts
        self._checkpoint_at = clock()  # when the newest checkpoint was logged or asked for
        self._container = container
        self._cache = settings.cache
        self._replay_bound = settings.replay_bound
        self._holding_since: float | None = None  # when this container began to hold appends (over its bound)
        pipeline.on_log_changed = self._check_replay_backlog
        self.storage = ChunkedSegmentStorage(
            container_id, settings.chunks, self.metadata_store(),
            config=settings.storage, system_segments=(self.metadata_name,), owns_segment=settings.owns_segment)
        self.writer = StorageWriter(container_id, self.storage, settings.cache, config=settings.writer,
                                    truncate_log=pipeline.truncate_log, on_fatal=on_fatal,
                                    log_pressure=self.log_pressure, maintain=self._after_writer_pass)

    def metadata_store(self) -> TableMetadataStore:
        """SLTS's metadata store over this container's storage metadata table."""
        container, name = self._container, self.metadata_name
        return TableMetadataStore(name, index=lambda: getattr(self._state.by_name.get(name), "table", None),
                                  update=lambda entries: container.update_table(name, entries),
                                  fenced=lambda: isinstance(container.failure, LogFenced))

    async def recover(self, epoch: int) -> None:
        """After replay: SLTS replays its journal (fencing older owners), then table indexes are rebuilt."""
        await self.storage.bootstrap(epoch)
        await table_maintenance.rebuild_indexes(self._container_id, self._state, self.storage, self.metadata_name)

    async def start(self, create_metadata_table: Callable[[], Awaitable[None]]) -> None:
        """Once the container accepts mutations: creates the metadata table if new, then starts flushing."""
        if not self._state.exists(self.metadata_name):
            await create_metadata_table()
        await self.storage.finish_bootstrap()
        self.writer.start()

    async def stop(self) -> None:
        self.release_appends()
        await self.writer.stop()
        await self.storage.close()

    def checkpoint_logged(self) -> None:
        self._checkpoint_at = self._clock()
        self.writer.wake()  # a pass now truncates the log before it, if Tier-2 holds what precedes it

    def log_pressure(self) -> bool:
        """Whether the log holds so much since its first checkpoint that Tier-2 should catch up now."""
        return (self._holding_since is not None
                or self._pipeline.logged_since_first_checkpoint() > self._log_backlog_target)

    def _check_replay_backlog(self) -> None:
        """Holds the store's appends while this container's log holds more than its replay bound; meanwhile the
        writer flushes everything and a checkpoint is asked for, so that the next truncation brings it back."""
        pipeline = self._pipeline
        backlog_bytes, backlog_operations = (pipeline.logged_since_first_checkpoint(),
                                             pipeline.operations_since_first_checkpoint())
        holding = self._holding_since is not None
        over = self._replay_bound.over(holding, backlog_bytes, backlog_operations)
        if over == holding:
            return
        details = {"container": self._container_id, "backlog_bytes": backlog_bytes,
                   "backlog_operations": backlog_operations, "bytes_max": self._replay_bound.bytes_max,
                   "operations_max": self._replay_bound.operations_max}
        if over:
            self._holding_since = self._clock()
            metrics.REPLAY_BOUND_HOLDS.inc()
            log.warning("appends wait: the log holds more than its replay bound; Tier-2 catches up", extra=details)
            self._cache.hold_appends(self)
            pipeline.request_checkpoint()
            self.writer.wake()
        else:
            held_for, self._holding_since = self._clock() - (self._holding_since or 0.0), None
            log.info("appends go on: the log is back under its replay bound",
                     extra={**details, "held_seconds": round(held_for, 3)})
            self._cache.release_appends(self)

    def release_appends(self) -> None:
        """Stops holding the store's appends (the container stops or failed: its backlog is no longer ours)."""
        if self._holding_since is not None:
            self._holding_since = None
            self._cache.release_appends(self)

    async def flush(self) -> None:
        """Returns once everything applied so far is in Tier-2."""
        await self.writer.flush(self._state.last_sequence)

    async def chunks(self, name: str) -> list[ChunkLayout]:
        """The Tier-2 chunks of ``name`` (empty before its first flush)."""
        try:
            return await self.storage.list_chunks(name)
        except storage_errors.SegmentNotFound:
            return []

    async def _after_writer_pass(self) -> None:
        """Compacts the container's bloated table segments (``TableCompactor``: dead records outweigh live ones and a
        threshold); asks for a checkpoint once the newest one is old (the pass's log truncation needs one to move)."""
        if self._pipeline.status is not ContainerStatus.RUNNING:
            return
        await self._tables.maintain()
        now = self._clock()
        if checkpoint_due_by_age(now, self._checkpoint_at, self._checkpoint_interval,
                                 self._pipeline.operations_after_checkpoint()):
            self._checkpoint_at = now  # asked for: not again before another interval, even if it is skipped
            self._pipeline.request_checkpoint()
