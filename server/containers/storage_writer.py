"""The storage writer of one container: moves what Tier-1 made durable into Tier-2 (design §1.3).

Theory of operation.

* **What to do** is told by ``ContainerState.apply`` (this writer is its observer), in
  commit order, with sequence numbers: appended bytes, seals, merges, truncations and
  deletions. Each segment gets a queue of work items; consecutive appends coalesce into
  one data item. Nothing is read back from the log: unflushed bytes are pinned in the
  segment's read index until this writer has written them.
* **Flushing.** A data item is written when its segment has ``flush_size`` bytes waiting,
  when it is older than ``flush_interval``, when a seal/merge/truncate/delete waits behind
  it, when the cache is half full, when the log holds too much since its first
  checkpoint (a trickling segment must not pin the log), or when FlushToStorage asks. Bytes go to Tier-2 in
  writes of up to ``max_write_size``, straight from the cached views. Barriers then apply in
  order: a merge flushes the source's bytes, seals it in Tier-2 and concatenates it
  (metadata only); the target's redirect to the source ends there.
* **Reconciliation.** Before touching a segment the writer asks Tier-2 for its length and
  seal state, and skips what is already there. That is what makes replayed operations after
  a crash harmless (design §7.2 item 6): a restart re-derives everything from Tier-2.
* **Log truncation.** The lowest sequence number of any unfinished item bounds what Tier-1
  still needs; the container truncates its log before the newest checkpoint below it.
* **Failures.** Tier-2 errors and timeouts are retried with a growing delay while appends
  keep being acknowledged from Tier-1 (until the cache is full: then connections are
  throttled). Losing ownership (StorageNotPrimary) or an inconsistency stops the container.
"""

from __future__ import annotations

import asyncio
import dataclasses
import enum
import logging
import time
from collections import deque
from collections.abc import Awaitable, Callable
from typing import Protocol

from coordination.retry import Backoff

from .. import errors
from ..background import cancel_and_wait
from ..tier2 import errors as storage_errors
from ..tier2.chunk_storage import ChunkStorageUnavailable, WriteData
from ..tier2.metadata_store import MetadataStoreUnavailable
from ..tier2.records import StorageSegmentInfo
from .cache import CacheManager
from .metadata import SegmentMetadata
from .state import InconsistentState, StateObserver

log = logging.getLogger("tributary.storagewriter")

TIER2_TRANSIENT_ERRORS = (ChunkStorageUnavailable, MetadataStoreUnavailable, asyncio.TimeoutError, OSError)


class SegmentStorage(Protocol):
    """What the storage writer needs of Tier-2: SLTS (``ChunkedSegmentStorage``) in the segment store."""

    async def create(self, name: str, rolling_length: int = 0) -> None: ...
    async def get_info(self, name: str) -> StorageSegmentInfo: ...
    async def write(self, name: str, offset: int, data: WriteData) -> None: ...
    async def seal(self, name: str) -> None: ...
    async def concat(self, target: str, offset: int, source: str) -> int: ...
    async def truncate(self, name: str, offset: int) -> None: ...
    async def delete(self, name: str) -> None: ...


@dataclasses.dataclass
class StorageWriterConfig:
    flush_size: int = 4 * 1024 * 1024  # a segment with this many bytes waiting is flushed at once
    flush_interval: float = 2.0  # seconds: older waiting bytes are flushed however few they are
    max_write_size: int = 128 * 1024 * 1024  # bytes per Tier-2 write (one fsync each)
    # Table segments' Tier-2 chunks roll over at this size (at most the storage's chunk size), so that the head
    # chunks a compaction truncates are freed: the bytes a table keeps in Tier-2 follow its live entries.
    table_chunk_size: int = 4 * 1024 * 1024
    concurrency: int = 4  # segments flushed at the same time
    operation_timeout: float = 60.0  # a Tier-2 call slower than this counts as failed
    # Pauses between failed passes (Tier-2 down): no bound on attempts, appends go on meanwhile.
    retry: Backoff = Backoff(initial_seconds=0.05, multiplier=2.0, max_delay_seconds=5.0, attempts=None)


class _Kind(enum.Enum):
    DATA = "data"
    SEAL = "seal"
    MERGE = "merge"
    TRUNCATE = "truncate"
    DELETE = "delete"


class _Item:
    __slots__ = ("kind", "sequence", "end", "offset", "source", "created", "bytes", "closed")

    def __init__(self, kind: _Kind, sequence: int, *, end: int = 0, offset: int = 0, source=None):
        self.kind = kind
        self.sequence = sequence
        self.end = end  # DATA: bytes up to here are to be written; MERGE: the source's last byte in the target
        self.offset = offset  # TRUNCATE: the new start; MERGE: where the source lands in the target
        self.source = source  # MERGE: the source's _Work
        self.created = time.monotonic()
        self.bytes = 0  # DATA: bytes appended into this item
        self.closed = False  # DATA: being written; later appends start a new item

    def __repr__(self) -> str:
        return f"<{self.kind.value} #{self.sequence} end={self.end} offset={self.offset}>"


class _Work:
    """What Tier-2 still has to do for one segment, and what Tier-2 is known to hold of it."""

    __slots__ = ("name", "data", "items", "known", "exists", "storage_length", "sealed", "merged", "finished",
                 "lock", "waiting_bytes", "predecessor", "rolling_length")

    def __init__(self, segment: SegmentMetadata, rolling_length: int = 0):
        self.name = segment.name
        self.data = segment.data
        self.rolling_length = rolling_length  # its Tier-2 chunk size if not the storage's (0)
        self.items: deque[_Item] = deque()
        self.known = False  # whether exists / storage_length / sealed were read from Tier-2
        self.exists = False
        self.storage_length = 0
        self.sealed = False
        self.merged = False  # a merge source: processed through its target's merge item
        self.finished = False  # deleted, or merged and concatenated: forgotten at the end of a pass
        self.predecessor: _Work | None = None  # a deleted segment of the same name that Tier-2 must see go first
        self.lock = asyncio.Lock()
        self.waiting_bytes = 0

    def __repr__(self) -> str:
        return f"<Work {self.name!r} items={list(self.items)} stored={self.storage_length}>"


class StorageWriter(StateObserver):
    def __init__(self, container_id: int, storage: SegmentStorage, cache: CacheManager | None, *,
                 config: StorageWriterConfig | None = None,
                 truncate_log: Callable[[int | None], Awaitable[None]] | None = None,
                 on_fatal: Callable[[BaseException], None] | None = None,
                 log_pressure: Callable[[], bool] = lambda: False,
                 maintain: Callable[[], Awaitable[None]] | None = None):
        self.container_id = container_id
        self.storage = storage
        self.cache = cache
        self.config = config or StorageWriterConfig()
        self._truncate_log = truncate_log
        self._on_fatal = on_fatal
        self._log_pressure = log_pressure
        self._maintain = maintain  # run after every pass (the container compacts its storage metadata)
        self._works: dict[int, _Work] = {}  # by segment id
        self._by_name: dict[str, _Work] = {}  # the newest work of each name
        self._wake = asyncio.Event()
        self._task: asyncio.Task | None = None
        self._stopping = False
        self._flush_waiters: list[tuple[int, asyncio.Future]] = []
        self.bytes_flushed = 0
        self.failures = 0
        if cache is not None:
            cache.on_pressure(self.wake)

    def __repr__(self) -> str:
        return f"<StorageWriter container={self.container_id} works={len(self._works)}>"

    def has_work(self, segment_id: int) -> bool:
        """Whether Tier-2 has yet to follow something of this segment (or has just followed it, this pass)."""
        return segment_id in self._works

    # ------------------------------------------------------------------ observer of the container state

    def _work(self, segment: SegmentMetadata) -> _Work:
        work = self._works.get(segment.segment_id)
        if work is None:
            work = self._works[segment.segment_id] = _Work(
                segment, self.config.table_chunk_size if segment.table is not None else 0)
            previous = self._by_name.get(work.name)
            if previous is not None and not previous.finished:  # a re-created name waits for the old one's
                work.predecessor = previous  # deletion in Tier-2
            self._by_name[work.name] = work
        return work

    def appended(self, segment: SegmentMetadata, offset: int, length: int, sequence: int) -> None:
        work = self._work(segment)
        items = work.items
        if items and items[-1].kind is _Kind.DATA and not items[-1].closed:
            item = items[-1]
            item.end = offset + length
        else:
            item = _Item(_Kind.DATA, sequence, end=offset + length)
            items.append(item)
        item.bytes += length
        work.waiting_bytes += length
        if work.waiting_bytes >= self.config.flush_size:
            self._wake.set()

    def sealed(self, segment: SegmentMetadata, sequence: int) -> None:
        self._barrier(segment, _Item(_Kind.SEAL, sequence))

    def merged(self, target: SegmentMetadata, source: SegmentMetadata, sequence: int) -> None:
        source_work = self._work(source)
        source_work.merged = True
        length = source.length
        self._barrier(target, _Item(_Kind.MERGE, sequence, end=target.length, offset=target.length - length,
                                    source=source_work))

    def truncated(self, segment: SegmentMetadata, offset: int, sequence: int) -> None:
        self._barrier(segment, _Item(_Kind.TRUNCATE, sequence, offset=offset))

    def deleted(self, segment: SegmentMetadata, sequence: int) -> None:
        work = self._work(segment)
        if not any(item.kind is _Kind.MERGE for item in work.items):  # bytes of a deleted segment need not
            work.items = deque(item for item in work.items if item.closed)  # reach Tier-2 (unless being written)
            work.waiting_bytes = sum(item.bytes for item in work.items)
        self._barrier(segment, _Item(_Kind.DELETE, sequence))

    def _barrier(self, segment: SegmentMetadata, item: _Item) -> None:
        self._work(segment).items.append(item)
        self._wake.set()

    # ------------------------------------------------------------------ control

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run())

    async def stop(self) -> None:
        self._stopping = True
        task, self._task = self._task, None
        await cancel_and_wait(task)
        self._fail_flush_waiters(errors.ContainerUnavailable("", f"container {self.container_id} is stopping"))

    def _fail_flush_waiters(self, error: BaseException) -> None:
        waiters, self._flush_waiters = self._flush_waiters, []
        for _, waiter in waiters:
            if not waiter.done():
                waiter.set_exception(error)

    def wake(self) -> None:
        self._wake.set()

    async def flush(self, through_sequence: int) -> None:
        """Returns once every operation up to ``through_sequence`` has reached Tier-2."""
        if not self._finished_through(through_sequence):
            if self._task is None or self._task.done():
                raise errors.ContainerUnavailable("", f"the storage writer of container {self.container_id} "
                                                      "is not running")
            waiter = asyncio.get_running_loop().create_future()
            self._flush_waiters.append((through_sequence, waiter))
            self._wake.set()
            await waiter

    def _finished_through(self, sequence: int) -> bool:
        lowest = self.lowest_pending_sequence()
        return lowest is None or lowest > sequence

    def lowest_pending_sequence(self) -> int | None:
        """The sequence number of the oldest operation Tier-2 has not finished; None if there is none."""
        pending = [work.items[0].sequence for work in self._works.values() if work.items]
        return min(pending) if pending else None

    # ------------------------------------------------------------------ the loop

    async def _run(self) -> None:
        delays = self.config.retry.delays()
        while not self._stopping:
            try:  # asyncio.timeout, not wait_for: on 3.11 wait_for can swallow a cancellation (stop would hang)
                async with asyncio.timeout(self.config.flush_interval / 2):
                    await self._wake.wait()
            except TimeoutError:
                pass
            self._wake.clear()
            try:
                await self._pass()
                delays = self.config.retry.delays()
            except TIER2_TRANSIENT_ERRORS as error:
                self.failures += 1
                delay = next(delays)
                log.warning("tier-2 operation failed; will retry",
                            extra={"container": self.container_id, "error": repr(error), "delay": delay})
                for work in self._works.values():
                    work.known = False
                await asyncio.sleep(delay)
                self._wake.set()
            except asyncio.CancelledError:
                raise
            except Exception as error:  # ownership lost, inconsistency, or a bug: the container stops
                log.exception("storage writer failed", extra={"container": self.container_id})
                self._fail_flush_waiters(errors.ContainerUnavailable("", f"the storage writer failed: {error!r}"))
                if self._on_fatal is not None:
                    self._on_fatal(error)
                return

    async def _pass(self) -> None:
        force = (bool(self._flush_waiters) or self._log_pressure()
                 or (self.cache is not None and self.cache.size > self.cache.budget // 2))
        semaphore = asyncio.Semaphore(self.config.concurrency)

        async def one(work: _Work):
            async with semaphore:
                await self._process(work, force)

        works = [work for work in self._works.values() if work.items and not work.merged]
        results = await asyncio.gather(*(one(work) for work in works), return_exceptions=True)
        for result in results:
            if isinstance(result, BaseException):
                raise result
        for segment_id in [sid for sid, work in self._works.items()
                           if work.finished or (not work.items and not work.merged)]:
            work = self._works.pop(segment_id)
            if self._by_name.get(work.name) is work:
                del self._by_name[work.name]
        if self.cache is not None:
            self.cache.evict()
        if self._maintain is not None:
            await self._maintain()
        if self._truncate_log is not None:
            await self._truncate_log(self.lowest_pending_sequence())
        waiters, self._flush_waiters = self._flush_waiters, []
        for through, waiter in waiters:
            if waiter.done():
                continue
            if self._finished_through(through):
                waiter.set_result(None)
            else:
                self._flush_waiters.append((through, waiter))
        if self._flush_waiters:
            self._wake.set()

    async def _process(self, work: _Work, force: bool) -> None:
        """Does the segment's items that exist now (later ones wait for the next pass: a pass must end)."""
        async with work.lock:
            if not work.items:
                return
            if work.predecessor is not None:
                if not work.predecessor.finished:
                    self._wake.set()  # try again next pass
                    return
                work.predecessor = None
            if work.items[-1].kind is _Kind.DELETE and await self._gone(work):
                await self._skip_to_delete(work)
            last = work.items[-1]
            while work.items:
                item = work.items[0]
                if item.kind is _Kind.DATA and not (
                        force or len(work.items) > 1 or work.waiting_bytes >= self.config.flush_size
                        or time.monotonic() - item.created >= self.config.flush_interval):
                    return
                await self._step(work, item)
                if work.items and work.items[0] is item:
                    work.items.popleft()
                if item is last:
                    return

    async def _step(self, work: _Work, item: _Item) -> None:
        if item.kind is _Kind.DATA:
            item.closed = True
            await self._flush_data(work, item.end)
            work.waiting_bytes -= item.bytes
        elif item.kind is _Kind.SEAL:
            await self._seal(work)
        elif item.kind is _Kind.MERGE:
            await self._merge(work, item)
        elif item.kind is _Kind.TRUNCATE:
            await self._truncate(work, item.offset)
        else:
            await self._delete(work)

    # ------------------------------------------------------------------ one step each

    async def _call(self, coroutine):
        async with asyncio.timeout(self.config.operation_timeout):
            return await coroutine

    async def _know(self, work: _Work) -> None:
        if work.known:
            return
        try:
            info = await self._call(self.storage.get_info(work.name))
        except storage_errors.SegmentNotFound:
            work.exists, work.storage_length, work.sealed = False, 0, False
        else:
            work.exists, work.storage_length, work.sealed = True, info.length, info.sealed
        if work.storage_length < work.data.storage_length:
            raise InconsistentState(f"tier-2 holds {work.storage_length} bytes of {work.name!r}, "
                                    f"the container expects at least {work.data.storage_length}")
        work.data.storage_length = max(work.data.storage_length, work.storage_length)
        work.known = True

    async def _create(self, work: _Work) -> None:
        try:
            await self._call(self.storage.create(work.name, work.rolling_length))
        except storage_errors.SegmentExists:
            pass
        work.exists = True

    async def _flush_data(self, work: _Work, end: int) -> None:
        await self._know(work)
        if work.storage_length >= end:
            return
        if not work.exists:
            await self._create(work)
        while work.storage_length < end:
            offset = work.storage_length
            size = min(end - offset, self.config.max_write_size)
            parts = work.data.read(offset, size)
            if sum(map(len, parts)) != size:
                raise InconsistentState(f"bytes [{offset}, {offset + size}) of {work.name!r} are neither in the "
                                        "cache nor in tier-2")
            await self._call(self.storage.write(work.name, offset, parts))
            work.storage_length = offset + size
            work.data.storage_length = max(work.data.storage_length, work.storage_length)
            self.bytes_flushed += size

    async def _seal(self, work: _Work) -> None:
        await self._know(work)
        if not work.exists:
            await self._create(work)
        if not work.sealed:
            await self._call(self.storage.seal(work.name))
            work.sealed = True

    async def _merge(self, target: _Work, item: _Item) -> None:
        source = item.source
        await self._know(target)
        async with source.lock:
            if target.storage_length >= item.end:
                # Concatenated before a restart replayed the merge: the source is gone from Tier-2 and
                # its own operations (replayed too) are moot.
                source.items.clear()
                source.waiting_bytes = 0
            else:
                while source.items:  # the source's own operations first (the merge was its last)
                    await self._step(source, source.items[0])
                    source.items.popleft()
                await self._know(source)
        length = item.end - item.offset
        if target.storage_length < item.end:
            if target.storage_length != item.offset:
                raise InconsistentState(f"merge of {source.name!r} at {item.offset} into {target.name!r}, "
                                        f"whose tier-2 length is {target.storage_length}")
            if source.exists:
                if source.storage_length != length:
                    raise InconsistentState(f"tier-2 holds {source.storage_length} bytes of merge source "
                                            f"{source.name!r}, expected {length}")
                if not target.exists:
                    await self._create(target)
                if not source.sealed:
                    await self._call(self.storage.seal(source.name))
                    source.sealed = True
                await self._call(self.storage.concat(target.name, item.offset, source.name))
            elif length:
                raise InconsistentState(f"merge source {source.name!r} is missing from tier-2")
            target.storage_length = item.end
        target.data.storage_length = max(target.data.storage_length, target.storage_length)
        target.data.redirects[:] = [r for r in target.data.redirects if r.source != source.name]
        source.data.release()
        source.finished = True

    async def _truncate(self, work: _Work, offset: int) -> None:
        await self._know(work)
        if work.exists and offset > 0:
            await self._call(self.storage.truncate(work.name, min(offset, work.storage_length)))
        work.data.drop_below(min(work.data.start_offset, work.storage_length))

    async def _gone(self, work: _Work) -> bool:
        """Whether Tier-2 does not hold the segment (now, or as this writer last knew it)."""
        if work.known:
            return not work.exists
        try:
            await self._call(self.storage.get_info(work.name))
        except storage_errors.SegmentNotFound:
            return True
        return False

    async def _skip_to_delete(self, work: _Work) -> None:
        """A segment whose deletion waits but that Tier-2 does not hold: what comes before the deletion is moot.
        Either Tier-2 deleted it before a restart replayed its operations (their bytes, which the container's
        checkpoint says Tier-2 held, are gone with it: writing them would be an inconsistency), or none of its
        bytes ever reached Tier-2. A merge source's bytes are deleted instead of concatenated (gone already in
        the first case)."""
        while work.items[0].kind is not _Kind.DELETE:
            item = work.items.popleft()
            if item.kind is not _Kind.MERGE:
                continue
            source = item.source
            async with source.lock:
                source.items.clear()
                source.waiting_bytes = 0
                await self._delete(source)
        work.waiting_bytes = 0

    async def _delete(self, work: _Work) -> None:
        try:
            await self._call(self.storage.delete(work.name))
        except storage_errors.SegmentNotFound:
            pass
        work.data.release()
        work.finished = True
