"""The garbage collector of SLTS: deletes chunks that committed metadata does not reference (design §5.8).

A task names a chunk and a due time. When it is due, the collector looks the chunk's record up:

* active: the chunk is live; the task is dropped;
* inactive (truncated away, deleted, replaced by defragmentation): the record is removed, then
  the chunk;
* absent (its creating transaction never committed, or a journal file): the chunk is deleted.
  "Not found" counts as done.

Safety (invariant G1): a chunk is deleted only if committed metadata marks it inactive or does
not have it, and committed metadata never links an inactive or unknown chunk again (chunk names
are unique). The record goes before the chunk, so a crash between the two leaves a chunk without
a record, which the orphan sweep finds; the reverse order would leave a record nobody looks for.

Liveness: every chunk is registered *before* it is created (``NewChunks``), so a chunk whose
transaction fails is collected without anyone remembering it. While its operation is still
running, the chunk is "in flight" and its task waits, however long the operation takes. The
queue lives in memory: after a crash ``sweep`` lists the chunks of the segments this container
owns and queues every one without an active record.

Zombies: a fenced metadata store, or ``confirm_owner`` finding a newer owner, means a newer
owner exists; the task is dropped and that owner's sweep takes over. ``confirm_owner`` matters
for system segments, whose records are pinned in memory and not fenced by the metadata store:
an old owner's pinned layout may call a chunk garbage that the new owner's layout still uses.

Transient failures put a task back (up to ``gc_attempts_max`` attempts).
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import logging
from collections.abc import Awaitable, Callable, Iterable

from ..background import cancel_and_wait
from . import chunk_names
from .chunk_storage import ChunkNotFound, ChunkStorage, ChunkStorageUnavailable
from .config import StorageConfig
from .errors import StorageNotPrimary
from .metadata_store import MetadataStoreUnavailable, StorageFenced, VersionMismatch
from .metadata_transaction import MetadataTransaction

log = logging.getLogger("tributary.tier2")

_WAIT_SECONDS_MIN = 0.05  # the background loop never spins faster than this
_TRANSIENT = (ChunkStorageUnavailable, MetadataStoreUnavailable, VersionMismatch)


class NewChunks:
    """The chunks an operation creates: registered with the collector before creation, in flight until exit."""

    def __init__(self, collector: GarbageCollector):
        self._collector = collector
        self._names: list[str] = []

    def add(self, name: str) -> None:
        """Call before creating the chunk ``name``."""
        self._collector._in_flight.add(name)
        self._names.append(name)
        self._collector.schedule([name])

    def __enter__(self) -> NewChunks:
        return self

    def __exit__(self, *exc_info) -> None:
        self._collector._in_flight.difference_update(self._names)


class GarbageCollector:
    def __init__(self, chunks: ChunkStorage, begin: Callable[[str], MetadataTransaction],
                 confirm_owner: Callable[[str], Awaitable[None]], config: StorageConfig, clock: Callable[[], float],
                 *, container_id: int | None = None):
        """``begin(chunk)`` starts a transaction on the record source holding that chunk's record;
        ``confirm_owner(chunk)`` raises StorageNotPrimary if this owner may no longer delete it;
        ``container_id`` names the owner in logs."""
        self._container_id = container_id
        self._chunks = chunks
        self._begin = begin
        self._confirm_owner = confirm_owner
        self._config = config
        self._clock = clock
        self._queue: list[tuple[float, int, str, int]] = []  # (due, tie-breaker, chunk, failed attempts)
        self._queued: set[str] = set()
        self._in_flight: set[str] = set()
        self._sequence = itertools.count()
        self._pass_lock = asyncio.Lock()
        self._wakeup = asyncio.Event()
        self._task: asyncio.Task | None = None
        self._sweep_task: asyncio.Task | None = None
        self.dropped = 0  # tasks given up (queue full or too many failures); the next sweep recovers them

    def new_chunks(self) -> NewChunks:
        return NewChunks(self)

    def schedule(self, chunks: Iterable[str], attempts: int = 0) -> None:
        """Queues ``chunks`` for deletion after the configured delay (a chunk already queued keeps its task)."""
        due = self._clock() + self._config.gc_delay_seconds
        for name in chunks:
            if name in self._queued:
                continue
            if len(self._queued) >= self._config.gc_queue_tasks_max:
                self.dropped += 1
                continue
            self._queued.add(name)
            heapq.heappush(self._queue, (due, next(self._sequence), name, attempts))
        self._wakeup.set()

    async def collect(self, *, everything: bool = False) -> int:
        """Runs the tasks that are due (all of them with ``everything``, once the start-up sweep has queued the
        orphans it finds); returns the chunks deleted."""
        if everything and self._sweep_task is not None:
            await asyncio.shield(self._sweep_task)
        async with self._pass_lock:
            now = self._clock()
            batch = []
            while self._queue and (everything or self._queue[0][0] <= now):
                _, _, name, attempts = heapq.heappop(self._queue)
                self._queued.discard(name)
                batch.append((name, attempts))
            deleted = freed = 0
            for name, attempts in batch:
                chunks, chunk_bytes = await self._run_task(name, attempts)
                deleted, freed = deleted + chunks, freed + chunk_bytes
            if deleted:
                log.info("tier-2 garbage chunks deleted", extra={"container": self._container_id, "chunks": deleted,
                                                                 "bytes": freed})
            return deleted

    async def sweep(self, owns_segment: Callable[[str], bool]) -> int:
        """Queues every chunk of an owned segment that has no active record; returns how many."""
        orphans = []
        for name in await self._chunks.list():
            parsed = chunk_names.parse_segment_chunk(name)
            if parsed is not None and owns_segment(parsed.segment) and not await self._is_live(name):
                orphans.append(name)
        self.schedule(orphans)
        return len(orphans)

    def start(self, owns_segment: Callable[[str], bool] | None = None) -> None:
        """Starts collecting; with ``owns_segment``, also sweeps Tier-2 for orphans in the background.

        The sweep lists every chunk of the storage, so it runs beside the container's work instead of before it
        (start-up time must not grow with the chunks ever written). That is safe: the collector checks each
        chunk again when it is due (a live or in-flight chunk is left alone)."""
        loop = asyncio.get_running_loop()
        if self._task is None:
            self._task = loop.create_task(self._run(), name="slts-garbage-collector")
        if owns_segment is not None and self._sweep_task is None:
            self._sweep_task = loop.create_task(self._sweep_in_background(owns_segment), name="slts-orphan-sweep")

    async def _sweep_in_background(self, owns_segment: Callable[[str], bool]) -> None:
        started = self._clock()
        try:
            orphans = await self.sweep(owns_segment)
        except asyncio.CancelledError:
            raise
        except Exception as error:  # noqa: BLE001 - the next start sweeps again; chunks are freed, never lost
            log.warning("tier-2 orphan sweep failed", extra={"container": self._container_id, "error": repr(error)})
            return
        log.info("tier-2 orphan sweep done", extra={"container": self._container_id, "orphans": orphans,
                                                    "seconds": round(self._clock() - started, 3)})

    async def stop(self) -> None:
        sweep, self._sweep_task = self._sweep_task, None
        await cancel_and_wait(sweep)
        task, self._task = self._task, None
        await cancel_and_wait(task)

    async def _run(self) -> None:
        while True:
            try:
                await self.collect()
            except Exception:
                log.exception("garbage collection pass failed")
            self._wakeup.clear()
            timeout = None
            if self._queue:
                timeout = max(self._queue[0][0] - self._clock(), _WAIT_SECONDS_MIN)
            try:  # not asyncio.wait_for: in 3.11 it swallows a cancel that meets a set event
                async with asyncio.timeout(timeout):
                    await self._wakeup.wait()
            except TimeoutError:
                pass

    async def _run_task(self, name: str, attempts: int) -> tuple[int, int]:
        """Runs one task. Returns (1, the chunk's committed length) if it deleted the chunk, else (0, 0)."""
        if name in self._in_flight:
            self.schedule([name], attempts)
            return 0, 0
        try:
            return await self._delete_if_garbage(name)
        except _TRANSIENT as error:
            if attempts + 1 < self._config.gc_attempts_max:
                self.schedule([name], attempts + 1)
            else:
                self.dropped += 1
                log.warning("garbage chunk %s: giving up after %d attempts: %s", name, attempts + 1, error)
        except (StorageFenced, StorageNotPrimary):
            log.info("garbage chunk %s: a newer owner exists, leaving it to that owner", name)
        return 0, 0

    async def _delete_if_garbage(self, name: str) -> tuple[int, int]:
        length = 0  # what its record says it holds (a chunk without a record: unknown, counted as 0)
        if chunk_names.parse_segment_chunk(name) is not None:
            transaction = self._begin(name)
            record = await transaction.chunk(name)
            if record is not None and record.active:
                return 0, 0
            await self._confirm_owner(name)
            if record is not None:
                length = record.length
                transaction.remove(name)
                await transaction.commit()
        try:
            await self._chunks.delete(name)
        except ChunkNotFound:
            return 0, 0
        return 1, length

    async def _is_live(self, name: str) -> bool:
        record = await self._begin(name).chunk(name)
        return record is not None and record.active
