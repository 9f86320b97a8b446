"""Keeping table segments' key indexes whole and their bytes small: index rebuild and compaction.

* **Rebuild.** After recovery, a table segment whose bytes lie partly in Tier-2 (its
  index was not in the checkpoint) gets its key index rebuilt by parsing its
  records as they stream in from Tier-2 and then from the cached tail the log
  replayed; the storage metadata table first, since SLTS reads go through it.
* **Compaction.** Re-writes the live entries at the table's end (versions kept)
  and truncates everything before, in steps of at most one operation each
  (``PendingState.table_compaction_step``, whose docstring says why changes made
  meanwhile are safe). A small table's steps are decided in one turn, so they
  share a frame; a crash between steps leaves re-written records alone, which are
  harmless (each keeps its key's version and value). ``TableCompactor`` compacts
  every table segment of the container once it is bloated: dead records outweigh
  live ones and a threshold.
"""

from __future__ import annotations

import asyncio
import logging
import math

from .. import errors
from ..tier2.chunked_storage import ChunkedSegmentStorage
from . import table as table_format
from .metadata import SegmentMetadata
from .pending import CompactionStep, Decision, PendingState
from .pipeline import OperationPipeline
from .state import ContainerState, InconsistentState

log = logging.getLogger("tributary.container")
_REBUILD_READ_SIZE = 16 * 1024 * 1024
_REBUILD_PROGRESS_BYTES = 256 * 1024 * 1024  # a table index rebuild logs its progress this often
_PASS_BYTES = 64 * 1024 * 1024  # bytes of live entries re-written by compactions in one storage-writer pass, at most
_PASS_COMPACTIONS = 64  # compactions begun or resumed in one pass, at most (each waits for the log)


async def rebuild_indexes(container_id: int, state: ContainerState, storage: ChunkedSegmentStorage,
                          first: str) -> None:
    """Rebuilds the key index of every table segment whose bytes lie partly in Tier-2 (``first`` first)."""
    incomplete = [segment for segment in state.by_id.values() if segment.table_incomplete]
    incomplete.sort(key=lambda segment: segment.name != first)
    for segment in incomplete:
        segment.table = await _rebuild_index(container_id, segment, storage)
        segment.table_incomplete = False
        state.tables_changed.add(segment.segment_id)  # a compaction candidate (its appends were not noted)
    if incomplete:
        log.info("table indexes rebuilt from tier-2", extra={"container": container_id, "tables": len(incomplete)})


async def _rebuild_index(container_id: int, segment: SegmentMetadata,
                         storage: ChunkedSegmentStorage) -> table_format.TableIndex:
    key_length = segment.table.key_length if segment.table is not None else 0
    index, leftover, base = table_format.TableIndex(key_length), b"", segment.start_offset
    stored = min(segment.data.storage_length, segment.length)
    offset = segment.start_offset
    while offset < segment.length:
        if offset < stored:
            piece = await storage.read(segment.name, offset, min(_REBUILD_READ_SIZE, stored - offset))
        else:
            piece = b"".join(segment.data.read(offset, segment.length - offset))
        if not piece:  # (from Tier-2 too: reading on from the same offset spun for ever, found by the simulation)
            raise InconsistentState(f"bytes at {offset} of table {segment.name!r} are missing")
        offset += len(piece)
        if offset // _REBUILD_PROGRESS_BYTES != (offset - len(piece)) // _REBUILD_PROGRESS_BYTES:
            log.info("rebuilding table index", extra={"container": container_id, "table": segment.name,
                                                      "bytes": offset - segment.start_offset,
                                                      "of": segment.length - segment.start_offset})
        buffer = leftover + piece if leftover else piece
        whole = table_format.complete_length(buffer)
        index.index_batch(memoryview(buffer)[:whole], base)
        leftover, base = bytes(memoryview(buffer)[whole:]), base + whole
    if leftover:
        raise InconsistentState(f"table {segment.name!r} ends inside a record")
    return index


def bloated(segment: SegmentMetadata, threshold: int) -> bool:
    """The rule of compaction: the table's dead records outweigh its live ones and ``threshold`` bytes."""
    if segment.table is None or segment.table_incomplete:
        return False
    live = segment.table.live_bytes
    return segment.length - segment.start_offset - live > max(threshold, live)


class _Compaction:
    """One table's compaction in progress: truncate at ``upto`` once every key of ``keys`` is done."""

    __slots__ = ("segment", "upto", "keys", "position")

    def __init__(self, segment: SegmentMetadata):
        if segment.table is None or segment.table_incomplete:
            raise errors.OperationUnsupported(segment.name, "compactTable")
        self.segment = segment
        self.upto = segment.length  # committed: any change in flight lies above it
        self.keys = [key for key, _, _ in segment.table.items()]
        self.position = 0


def _retrieved(future: asyncio.Future) -> None:
    if not future.cancelled():
        future.exception()  # a failure shows in the step awaited last (steps commit in order)


async def _advance(pipeline: OperationPipeline, job: _Compaction, budget: float) -> tuple[bool, int]:
    """Runs steps of ``job`` until it is over or ``budget`` bytes were re-written; returns (over, bytes).

    A step that filled one operation is durable before the next is decided, so a turn never decides more
    than one operation's worth of a large table; a step that re-wrote the last keys is followed by the
    truncation in the same turn (when decided at once, the usual case), so a small table's re-write and
    truncation share a frame."""
    name, spent = job.segment.name, 0
    while True:
        decided: list[CompactionStep] = []

        def decide(pending: PendingState, start: int = job.position, decided: list = decided) -> Decision:
            decision = pending.table_compaction_step(name, job.keys, start, job.upto)
            decided.append(decision.result)
            return decision

        future = pipeline.submit(decide)
        future.add_done_callback(_retrieved)
        step: CompactionStep = decided[0] if decided else await future  # held behind a checkpoint: decided later
        job.position = step.position
        spent += step.size
        if step.done or spent >= budget or step.position < len(job.keys):
            await future
        if step.done or spent >= budget:
            return step.done, spent


class TableCompactor:
    """The container's table compactions: on request (``compact``), and of its bloated table segments after
    each storage-writer pass (``maintain``). One runs at a time.

    Candidates are the tables appended to since the last look (``ContainerState.tables_changed``, noted as
    updates and removals are applied, and every table whose index was rebuilt at start), so a pass costs
    what changed, not the container's table count. A candidate that is not bloated is dropped until it
    changes again. One pass re-writes at most ``pass_bytes`` and runs at most ``_PASS_COMPACTIONS`` (a larger
    table goes on in the next passes, truncated only once all its live entries are re-written; the other
    candidates wait in the set); ``first`` (the storage metadata table) is looked at before the others.
    """

    def __init__(self, container_id: int, pipeline: OperationPipeline, state: ContainerState, threshold: int,
                 first: str, pass_bytes: int = _PASS_BYTES):
        self._container_id = container_id
        self._pipeline = pipeline
        self._state = state
        self.threshold = threshold
        self._first = first
        self._pass_bytes = pass_bytes
        self._current: _Compaction | None = None
        self._lock = asyncio.Lock()
        self.compactions = 0  # finished, since start

    async def compact(self, segment: SegmentMetadata) -> None:
        """Re-writes the table's live entries at its end (versions kept) and truncates everything before them."""
        async with self._lock:  # after a pass's compaction of it, if one runs: it starts from what that left
            await _advance(self._pipeline, _Compaction(segment), math.inf)
        if self._current is not None and self._current.segment is segment:
            self._current = None  # a pass's compaction of it, paused: done now

    async def maintain(self) -> None:
        """Compacts bloated candidates, re-writing at most ``pass_bytes`` (see the class docstring)."""
        budget = self._pass_bytes
        for _ in range(_PASS_COMPACTIONS):
            if budget <= 0:
                return
            job = self._current if self._current is not None and self._is_live(self._current) else self._next()
            self._current = job
            if job is None:
                return
            name, length, start = job.segment.name, job.segment.length, job.segment.start_offset
            try:
                async with self._lock:
                    over, spent = await _advance(self._pipeline, job, budget)
            except errors.ContainerUnavailable:
                self._current = None
                return  # stopping or failed: the next owner compacts
            except errors.SegmentIsTruncated:  # truncated past ``upto`` meanwhile (by another compaction)
                over, spent = True, 0
            except errors.NoSuchSegment:  # deleted meanwhile
                self._current = None
                continue
            except errors.SegmentStoreError as error:  # sealed meanwhile, an entry that cannot fit...
                self._current = None
                log.warning("table not compacted", extra={"container": self._container_id, "table": name,
                                                          "error": str(error)})
                continue
            budget -= spent
            if over:
                self._current = None
                self.compactions += 1
                log.debug("table compacted", extra={"container": self._container_id, "table": name,
                                                    "bytes_before": length - start,
                                                    "bytes_after": job.segment.length - job.segment.start_offset})

    def _is_live(self, job: _Compaction) -> bool:
        return self._state.by_id.get(job.segment.segment_id) is job.segment

    def _next(self) -> _Compaction | None:
        """The next bloated candidate's compaction (candidates looked at are dropped), or None."""
        changed, threshold = self._state.tables_changed, self.threshold
        first = self._state.by_name.get(self._first)
        if first is not None and first.segment_id in changed:
            changed.discard(first.segment_id)
            if bloated(first, threshold):
                return _Compaction(first)
        while changed:
            segment = self._state.by_id.get(changed.pop())
            if segment is not None and bloated(segment, threshold):
                return _Compaction(segment)
        return None
